"""The conda path: conda-forge's CUDA packages (cudatoolkit for CUDA 11, the split packages for
CUDA 12), TensorFlow from the index in the environment's pip section, locked by conda-lock."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from provision.matrix.kinds.base import PathKind, PathName, Requirements

if TYPE_CHECKING:
    from provision.matrix import Matrix, Release


class CondaPath(PathKind):
    name: ClassVar[PathName] = "conda"
    input_files = ("environment.yml", "virtual-packages.yml")
    lock_file = "conda-lock.yml"
    conda_env = True

    def refusal(self, matrix: Matrix, release: Release) -> str | None:
        cuda, cudnn = matrix.cuda_of(release), matrix.cudnn_of(release)
        if cudnn.conda_forge or cudnn.pip:
            return None
        return (
            f"the conda path cannot serve TensorFlow {release.tf}: conda-forge has no cuDNN "
            f"{cudnn.version} for CUDA {cuda.major} and PyPI has no wheel either; use --path system"
        )

    def requirements(self, matrix: Matrix, release: Release, python: str) -> Requirements:
        cuda, cudnn = matrix.cuda_of(release), matrix.cudnn_of(release)
        conda = [f"python={python}", "pip"]
        pip = [f"tensorflow=={release.pin}", *release.prerelease_deps]
        if cuda.major == 11:
            conda.append(f"cudatoolkit={cuda.conda['cudatoolkit']}")
        else:
            conda.append(f"cuda-version={cuda.conda['cuda_version']}")
            conda.extend(matrix.conda_forge.cuda12_packages)
        if cudnn.conda_forge:
            conda.append(f"cudnn={cudnn.conda_forge}")
        else:
            pip.append(cudnn.pip)
        nvcc = next((f"{n}=={v}" for n, v in release.pip_wheels.items() if "cuda-nvcc" in n), "")
        if cuda.major == 11 and nvcc:
            # conda-forge's cudatoolkit has no ptxas; NVIDIA's wheel of the same CUDA line does.
            pip.append(nvcc)
        return tuple(conda), tuple(pip)

    def template_family(self, cuda_major: int) -> str:
        return f"conda-cuda{cuda_major}"

    def library_folders(self, site: str, nvidia_in_site: bool) -> list[str]:
        return ["lib", *super().library_folders(site, nvidia_in_site)]

    def xla_dir(self, site: str, cuda_major: int, ptxas: str) -> str:
        if cuda_major >= 12:
            return "."  # cuda-nvcc: ptxas in bin/, libdevice in nvvm/libdevice/
        return super().xla_dir(site, cuda_major, ptxas)

    def activation_vars(self, prefix: Path) -> dict[str, str]:
        return {"CONDA_PREFIX": str(prefix), "CONDA_DEFAULT_ENV": str(prefix)}

    def enter_command(self, prefix: str) -> str:
        return f"conda activate {prefix}"


KIND = CondaPath()
