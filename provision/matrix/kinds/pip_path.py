"""The pip path: a venv of the host's Python with TensorFlow's and-cuda wheels, NVIDIA's CUDA
libraries as pip wheels pinned to the matrix's CUDA line, locked by uv."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from provision.matrix.kinds.base import PathKind, PathName, Requirements

if TYPE_CHECKING:
    from provision.matrix import Matrix, Release


class PipPath(PathKind):
    name: ClassVar[PathName] = "pip"
    input_files = ("requirements.in",)
    lock_file = "requirements.lock"
    pins_nvidia_wheels = True

    def refusal(self, matrix: Matrix, release: Release) -> str | None:
        if release.pip_wheels:
            return None
        cuda, cudnn = matrix.cuda_of(release), matrix.cudnn_of(release)
        return (
            f"the pip path cannot serve TensorFlow {release.tf}: NVIDIA publishes no "
            f"CUDA {cuda.version} / cuDNN {cudnn.version} wheels on PyPI; "
            "use --path conda or system"
        )

    def requirements(self, matrix: Matrix, release: Release, python: str) -> Requirements:
        # The and-cuda extra names the same NVIDIA wheels we pin below; where it also pulls
        # TensorRT (which TensorFlow's GPU path does not need and PyPI does not ship for every
        # Python), the plain pin plus those wheels is the equivalent that resolves.
        extra = release.and_cuda and not any(r.startswith("tensorrt") for r in release.and_cuda)
        tf = f"tensorflow[and-cuda]=={release.pin}" if extra else f"tensorflow=={release.pin}"
        # A pre-release's own pre-release dependencies are asked for explicitly, so the resolver
        # allows pre-releases for those packages alone (and the lock's inputs show them).
        pins = (f"{n}=={v}" for n, v in sorted(release.pip_wheels.items()))
        return (), (tf, *release.prerelease_deps, *pins)


KIND = PipPath()
