"""The three kinds of path an environment is built by, each a module implementing one interface.

- base.py: PathKind, the interface: the input files and the lock file of the environment
  directory, whether the matrix row can be served, the row's requirements, the default prefix,
  the runtime library folders, activation, and the capabilities that decide how lock, check,
  build, sync and bundle treat it.
- conda_path.py, pip_path.py, system_path.py: the three implementations.
- choice.py: the one place a kind is chosen from its name (`of`); no other module compares the
  names.
"""

from provision.matrix.kinds.base import PathKind, PathName
from provision.matrix.kinds.choice import DEFAULT, KINDS, NAMES, of

__all__ = ["DEFAULT", "KINDS", "NAMES", "PathKind", "PathName", "of"]
