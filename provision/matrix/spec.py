"""EnvSpec: one resolved environment (release x path x Python), the only object templates, lock,
install and verify see. Pure: no I/O beyond loading the matrix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.errors import UnsupportedCombination, UsageError
from provision.matrix import Cuda, Cudnn, Matrix, Release, kinds
from provision.matrix.kinds import PathKind, PathName

_DIGITS = re.compile(r"[0-9]+")
MAX_GPUS = 1024  # GPU indices below this; no host has more
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: more than any GPU holds
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CHANNEL = "conda-forge"
PLATFORMS = ("linux-64",)
JUPYTER_KERNEL = "ipykernel"


@dataclass(frozen=True)
class GpuPolicy:
    """How the environment shares GPUs: memory growth or a hard MiB limit, and visible devices."""

    memory: str | None = None  # None | "growth" | "<MiB>"
    devices: str | None = None  # None | "0,1"

    @property
    def memory_limit_mib(self) -> int | None:
        return int(self.memory) if self.memory and _DIGITS.fullmatch(self.memory) else None


@dataclass(frozen=True)
class EnvSpec:
    name: str
    kind: PathKind
    python: str
    release: Release
    cuda: Cuda
    cudnn: Cudnn
    conda_dependencies: tuple[str, ...]  # conda match specs (conda path only)
    pip_requirements: tuple[str, ...]  # pip part: inside the conda env, or the venv's requirements
    virtual_packages: dict[str, str]  # for locking without a GPU: __cuda, __glibc
    channels: tuple[str, ...] = (CHANNEL,)
    platforms: tuple[str, ...] = PLATFORMS
    gpu: GpuPolicy = field(default_factory=GpuPolicy)
    jupyter: bool = False  # ipykernel is part of the environment (`provision kernel NAME`)

    @property
    def path(self) -> PathName:
        return self.kind.name

    @property
    def tf_version(self) -> str:
        return self.release.pin

    @property
    def nvidia_wheels(self) -> bool:
        """Whether NVIDIA's pip wheels (site-packages/nvidia/*/lib) hold libraries the env needs."""
        return any(
            req.startswith("nvidia-") or "[and-cuda]" in req for req in self.pip_requirements
        )

    @property
    def ptxas_source(self) -> str:
        """Where ptxas/libdevice come from on this path ('' when no source exists)."""
        deps = self.conda_dependencies + self.pip_requirements
        for dep in deps:
            if dep.startswith(("cuda-nvcc", "nvidia-cuda-nvcc")):
                return dep
        return self.kind.ptxas_fallback()


@dataclass(frozen=True)
class EnvRequest:
    """What a user asks for (--tf, --path, --python, --name, --gpu-memory, --gpus, --jupyter,
    --pre), made once by the CLI; `resolve` turns it into the one EnvSpec every step uses.
    (environment.Request is what a rendered directory records of it.)"""

    tf: str
    path: str = kinds.DEFAULT
    python: str | None = None
    name: str | None = None
    gpu: GpuPolicy = field(default_factory=GpuPolicy)
    jupyter: bool = False
    pre: bool = False

    def resolve(self, matrix: Matrix) -> EnvSpec:
        check_pre(matrix.release(self.tf), self.pre)
        return resolve(
            matrix, self.tf, self.path, self.python, self.name, self.gpu, jupyter=self.jupyter
        )


def check_pre(release: Release, pre: bool) -> None:
    """A pre-release row is used only when asked for with --pre; never by default."""
    if release.prerelease and not pre:
        raise UnsupportedCombination(
            f"TensorFlow {release.tf} is only a pre-release in the matrix ({release.pin}); "
            "add --pre to use it"
        )


def default_name(release: Release, path: PathName, python: str | None = None) -> str:
    base = f"tf{release.tf}-{path}"
    return f"{base}-py{python}" if python else base


def resolve(
    matrix: Matrix,
    tf: str,
    path: str = kinds.DEFAULT,
    python: str | None = None,
    name: str | None = None,
    gpu: GpuPolicy | None = None,
    *,
    jupyter: bool = False,
) -> EnvSpec:
    kind = kinds.of(path)
    release = matrix.release(tf)
    if python is not None and python not in release.python:
        raise UnsupportedCombination(
            f"TensorFlow {release.tf} supports Python {', '.join(release.python)}, not {python}"
        )
    why = kind.refusal(matrix, release)
    if why:
        raise UnsupportedCombination(why)
    chosen = python or release.python[-1]
    if name is not None and not name:
        raise UsageError("--name is empty; leave it out for the default name")
    env_name = name or default_name(
        release, kind.name, python if python != release.python[-1] else None
    )
    if not NAME_RE.match(env_name):
        raise UsageError(
            f"environment name {env_name!r} is not usable as a conda environment or shell word; "
            "use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)"
        )
    gpu = gpu or GpuPolicy()
    _check_gpu_policy(gpu)
    cuda, cudnn = matrix.cuda_of(release), matrix.cudnn_of(release)
    conda_deps, pip_reqs = kind.requirements(matrix, release, chosen)
    if jupyter:
        # From the index like TensorFlow, so the lock of every path holds it with its hashes.
        pip_reqs = (*pip_reqs, JUPYTER_KERNEL)
    return EnvSpec(
        name=env_name,
        kind=kind,
        python=chosen,
        release=release,
        cuda=cuda,
        cudnn=cudnn,
        conda_dependencies=conda_deps,
        pip_requirements=pip_reqs,
        virtual_packages=_virtual_packages(cuda, release),
        gpu=gpu,
        jupyter=jupyter,
    )


def _virtual_packages(cuda: Cuda, release: Release) -> dict[str, str]:
    """What a linux-64 host with this release's GPU stack offers the solver (virtual-packages.yml).

    A virtual-packages.yml replaces the solver's defaults entirely, so __unix, __linux and
    __archspec must be listed too: noarch packages depend on __unix/__linux. __linux is "0",
    conda's own value when it cannot read the kernel version: a package that asks for a kernel
    version then fails to solve, visibly, instead of claiming a newer kernel than the target
    host has and letting the solver pick packages that host cannot run.
    """
    return {
        "__archspec": "1 x86_64",
        "__cuda": cuda.version,
        "__glibc": release.glibc_min,
        "__linux": "0",
        "__unix": "0",
    }


def _check_gpu_policy(gpu: GpuPolicy) -> None:
    if gpu.memory not in (None, "growth") and not (
        _DIGITS.fullmatch(gpu.memory) and 0 < int(gpu.memory) <= MAX_GPU_MEMORY_MIB
    ):
        raise UsageError(
            f"--gpu-memory takes 'growth' or a positive number of MiB (at most 16 TiB), "
            f"not {gpu.memory[:40]!r}"
        )
    if gpu.devices is not None:
        indices = gpu.devices.split(",")
        if not all(_DIGITS.fullmatch(i) and int(i) < MAX_GPUS for i in indices):
            raise UsageError(
                f"--gpus takes GPU indices below 1024 like 0,1, not {gpu.devices[:40]!r}"
            )
        if len(set(indices)) != len(indices):
            raise UsageError(f"--gpus names a GPU twice: {gpu.devices!r}")


def all_specs(matrix: Matrix) -> list[EnvSpec]:
    """Every release on every path that can serve it, at its default Python (`render --all`)."""
    return [
        resolve(matrix, rel.tf, kind.name)
        for rel in matrix.finals
        for kind in kinds.KINDS.values()
        if kind.refusal(matrix, rel) is None
    ]


def expected(spec: EnvSpec) -> dict[str, object]:
    """What the smoke test must find in the environment; verify passes it with --expected."""
    return {
        "schema": 1,
        "name": spec.name,
        "path": spec.path,
        "python": spec.python,
        "tf_version": spec.release.pin,
        "cuda": spec.cuda.version,
        "cudnn": spec.cudnn.version,
        "compute_min": spec.release.compute_min,
        "compute_targets": list(spec.release.compute_targets),
        "gpu_memory": spec.gpu.memory,
        "gpus": spec.gpu.devices,
    }
