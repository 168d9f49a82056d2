"""The compatibility matrix: TensorFlow releases, their CUDA and cuDNN rows, what each channel
ships, every row with its sources.

Modules: `rows` (the data file read into frozen rows and validated: the schema and its
invariants), `toml_writer` (the one writer of the data file), `spec` (EnvSpec: one release on one
path for one Python), and `kinds` (the conda, pip and system paths). The face re-exports the rows
and `load`, which every command reads the matrix through. Nothing here is heavy: `provision
matrix` must stay as fast as `import click, jinja2`.
"""

from provision.matrix.rows import (
    DATA_FILE,
    SCHEMA,
    CondaForge,
    CondaForgeCudnn,
    Cuda,
    Cudnn,
    Matrix,
    Release,
    Source,
    load,
    parse,
)

__all__ = [
    "DATA_FILE",
    "SCHEMA",
    "CondaForge",
    "CondaForgeCudnn",
    "Cuda",
    "Cudnn",
    "Matrix",
    "Release",
    "Source",
    "load",
    "parse",
]
