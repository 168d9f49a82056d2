"""Can this host's driver and GPUs serve a release? The driver against the release's CUDA (native,
through minor-version compatibility, or not at all) and each GPU against the build's targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from provision.doctor.version_numbers import driver_version, major_minor, version
from provision.host import Gpu, HostReport
from provision.matrix import Cuda, Release
from provision.payload import targets as gpu_targets

# How a build serves one GPU: its own kernels, PTX the driver compiles, or not at all.
GpuFit = Literal["native", "ptx", "too-old", "too-new", "unknown"]


@dataclass(frozen=True)
class Fit:
    """What the driver or the GPUs rule out (reasons) or limit (notes) for one release."""

    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # only CUDA minor-version compatibility serves the release: PTX JIT is out of reach
    minor_compat: bool = False


def driver_fit(host: HostReport, rel: Release, cuda: Cuda) -> Fit:
    """The driver against the release's CUDA."""
    drv = driver_version(host)
    have = major_minor(host.driver.cuda)
    need = major_minor(cuda.version)
    windows_numbers = host.wsl or host.os == "windows"
    wanted = (
        f"a Windows driver that supports CUDA {cuda.version}"
        if windows_numbers
        else f"driver >= {cuda.driver_min} (>= {cuda.driver_compat_min} through CUDA "
        "minor-version compatibility)"
    )
    if have and need:
        if have[0] < need[0]:
            return Fit(
                reasons=(
                    f"driver {drv} supports CUDA <= {host.driver.cuda}; TensorFlow {rel.tf} needs "
                    f"CUDA {cuda.version}: {wanted}",
                )
            )
        if have < need:
            dv = version(drv)
            floor = version(cuda.driver_compat_min)
            if not windows_numbers and dv and floor and dv < floor:
                return Fit(
                    reasons=(
                        f"driver {drv} is older than CUDA {cuda.major}'s compatibility floor: "
                        f"{wanted}",
                    )
                )
            return Fit(
                notes=(
                    f"driver {drv} supports CUDA {host.driver.cuda}, older than {cuda.version}: "
                    "this runs through CUDA minor-version compatibility, where PTX JIT of newer "
                    f"code fails ('unsupported PTX version'); {wanted.split(' (')[0]} lifts that",
                ),
                minor_compat=True,
            )
        return Fit()
    dv, floor, full = version(drv), version(cuda.driver_compat_min), version(cuda.driver_min)
    if dv is None or floor is None or full is None or windows_numbers:
        return Fit(notes=("the driver's version is unknown here, so it could not be checked",))
    if dv < floor:
        return Fit(reasons=(f"driver {drv} is too old for CUDA {cuda.version}: {wanted}",))
    if dv < full:
        return Fit(
            notes=(
                f"driver {drv} is older than CUDA {cuda.version}'s own {cuda.driver_min}: this "
                "runs through minor-version compatibility, where PTX JIT of newer code fails",
            ),
            minor_compat=True,
        )
    return Fit()


def gpu_fit(rel: Release, gpu: Gpu) -> tuple[GpuFit, str]:
    """How a build serves one GPU (native, ptx, too-old, too-new, unknown) and a sentence why."""
    cc = major_minor(gpu.compute_capability)
    label = f"GPU {gpu.index} ({gpu.name}, compute capability {gpu.compute_capability or '?'})"
    if cc is None:
        return "unknown", f"{label}: its compute capability is unknown, so it could not be checked"
    floor = major_minor(rel.compute_min)
    if floor and cc < floor:
        return (
            "too-old",
            f"{label} is below TensorFlow {rel.tf}'s minimum compute capability {rel.compute_min}",
        )
    parsed = [t for t in map(gpu_targets.parse, rel.compute_targets) if t is not None]
    sass = [t for t in parsed if t.kind == "sm"]
    if not parsed:
        return "native", f"{label}: the matrix lists no build targets for TensorFlow {rel.tf}"
    native = next((t for t in sass if t.native_on(cc)), None)
    if native is not None:
        return "native", f"{label} has native kernels ({native.name})"
    usable = [t for t in parsed if t.jit_on(cc)]
    targets = ", ".join(rel.compute_targets)
    if usable:
        best = max(usable, key=lambda t: t.capability)
        text = (
            f"{label} has no native kernels in TensorFlow {rel.tf} ({targets}): the driver "
            f"JIT-compiles the {best.name} PTX when a program starts (can take "
            "minutes the first time; CUDA_CACHE_MAXSIZE keeps the result)"
        )
        if cc[0] >= 10:
            text += (
                "; Blackwell GPUs have failed here with CUDA_ERROR_INVALID_PTX "
                "(tensorflow/tensorflow#89272)"
            )
        return "ptx", text
    if sass and cc > max(t.capability for t in sass):
        return (
            "too-new",
            f"{label} is newer than TensorFlow {rel.tf}'s build targets ({targets}), which "
            "carry no PTX for it",
        )
    return "too-old", f"{label} has no kernels in TensorFlow {rel.tf}'s build targets ({targets})"


def gpus_fit(host: HostReport, rel: Release, minor_compat: bool) -> Fit:
    """The GPUs against the build's targets: it cannot run when no GPU is usable; a GPU it cannot
    use beside one it can is a note."""
    if not host.gpus:
        if host.has_driver:
            return Fit(
                notes=(
                    "no GPU was listed (NVML and nvidia-smi could not answer), so none could be "
                    "checked",
                )
            )
        return Fit()
    usable: list[str] = []
    unusable: list[str] = []
    notes: list[str] = []
    for g in host.gpus:
        fit, text = gpu_fit(rel, g)
        if fit == "ptx" and minor_compat:
            text += ", but this driver is too old to compile PTX of that CUDA version"
            fit = "too-new"
        if fit in ("native", "ptx", "unknown"):
            usable.append(text)
            if fit != "native":
                notes.append(text)
        else:
            unusable.append(text)
    if not usable:
        return Fit(reasons=tuple(unusable), notes=tuple(notes))
    return Fit(notes=(*notes, *(f"{text}: that GPU cannot be used" for text in unusable)))
