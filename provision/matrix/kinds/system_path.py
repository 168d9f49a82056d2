"""The system path: NVIDIA's CUDA runfile and cuDNN archive installed on the host (checksummed),
and a venv made by the environment's own install-system.sh, locked by uv."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from provision.matrix.kinds.base import PathKind, PathName, Requirements

if TYPE_CHECKING:
    from provision.matrix import Matrix, Release

# Where templates/system's install script puts its venv when run without --prefix (as root).
SYSTEM_VENVS = Path("/opt/provision/venvs")


class SystemPath(PathKind):
    name: ClassVar[PathName] = "system"
    input_files = ("requirements.in", "system.env")
    lock_file = "requirements.lock"
    owns_prefix = False
    host_toolkit = True

    def refusal(self, matrix: Matrix, release: Release) -> str | None:
        cuda, cudnn = matrix.cuda_of(release), matrix.cudnn_of(release)
        if cudnn.url and cuda.runfile_url:
            return None
        return (
            f"the system path cannot serve TensorFlow {release.tf} yet: the cuDNN "
            f"{cudnn.version} archive and its checksum are not yet cited in the matrix; use "
            "--path pip or conda"
        )

    def requirements(self, matrix: Matrix, release: Release, python: str) -> Requirements:
        return (), (f"tensorflow=={release.pin}", *release.prerelease_deps)

    def default_prefix(self, home: Path, name: str) -> Path:
        return SYSTEM_VENVS / name

    def ptxas_fallback(self) -> str:
        return "toolkit"

    def xla_dir(self, site: str, cuda_major: int, ptxas: str) -> str:
        return ""  # the toolkit's, outside the prefix: its install records PROVISION_CUDA_HOME

    def windows_refusal(self) -> str | None:
        return (
            "native Windows: the system path installs with a Linux shell script; use the conda path"
        )


KIND = SystemPath()
