"""PathKind: what differs between the conda, pip and system paths, asked of the kind itself.

Callers hold a kind (EnvSpec.kind, EnvDir.kind, kinds.of(record.path)) and ask it; they never
compare its name. Operations that live on higher floors (lock, check, build, sync, bundle) choose
their way by the capabilities below, which say what the environment *is*, not which path it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    from provision.matrix import Matrix, Release

PathName = Literal["conda", "system", "pip"]
Requirements = tuple[tuple[str, ...], tuple[str, ...]]  # (conda match specs, pip requirements)


class PathKind(ABC):
    """One way of building an environment. Instances are singletons: compare them with `is`."""

    name: ClassVar[PathName]
    # The reviewed inputs render writes into envs/NAME/, and the lock provision writes there.
    input_files: ClassVar[tuple[str, ...]]
    lock_file: ClassVar[str]
    # The prefix is a conda environment: conda-lock.yml (packages per platform, a pip section),
    # built by a conda solver, conda's spec forms in packages.in, `conda activate`.
    conda_env: ClassVar[bool] = False
    # provision makes and owns the prefix (its marker, its record of files). False: the venv is
    # made by the environment's own install script, which provision only runs.
    owns_prefix: ClassVar[bool] = True
    # The CUDA toolkit and cuDNN are installed on the host (NVIDIA's runfile and archive).
    host_toolkit: ClassVar[bool] = False
    # TensorFlow's NVIDIA wheels are pinned in the lock, and may move within TensorFlow's own
    # and-cuda ranges for another framework (torch, jax) among the user's packages.
    pins_nvidia_wheels: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<{self.name} path>"

    @abstractmethod
    def refusal(self, matrix: Matrix, release: Release) -> str | None:
        """Why this path cannot serve `release`, or None when it can."""

    @abstractmethod
    def requirements(self, matrix: Matrix, release: Release, python: str) -> Requirements:
        """The release's conda match specs and pip requirements on this path."""

    def template_family(self, cuda_major: int) -> str:
        """The templates/ folder its files are rendered from."""
        return self.name

    def default_prefix(self, home: Path, name: str) -> Path:
        """Where `provision install` builds it when no --prefix is given."""
        return home / "envs" / name

    def ptxas_fallback(self) -> str:
        """Where ptxas comes from when no requirement brings it ('' for nowhere)."""
        return ""

    def library_folders(self, site: str, nvidia_in_site: bool) -> list[str]:
        """The prefix's folders (relative) that hold CUDA libraries at run time."""
        return [f"{site}/nvidia/*/lib"] if nvidia_in_site else []

    def xla_dir(self, site: str, cuda_major: int, ptxas: str) -> str:
        """The folder (relative to the prefix) XLA finds ptxas and libdevice under."""
        return f"{site}/nvidia/cuda_nvcc" if ptxas else ""

    def activation_vars(self, prefix: Path) -> dict[str, str]:
        """What activation sets to name the environment, beside PATH."""
        return {"VIRTUAL_ENV": str(prefix)}

    def enter_command(self, prefix: str) -> str:
        """The shell line that activates a built prefix."""
        return f". {prefix}/bin/activate"

    def windows_refusal(self) -> str | None:
        """Why this path cannot build on native Windows when the release itself could."""
        return None
