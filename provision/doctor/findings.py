"""Host-wide findings: what is wrong or worth knowing about a host whatever release runs on it
(reboot due, a module not loaded, two cuDNN copies on the loader's path, libraries newer than the
driver, ...). Computed once per diagnosis, as a HostFindings; every verdict reads that value.
"""

from __future__ import annotations

from dataclasses import dataclass

from provision.doctor.diagnosis import ERROR, KIND_TEXT, NOTE, WARNING, Finding
from provision.doctor.version_numbers import major_minor
from provision.host import HostReport, Library
from provision.host.model import FAILED, TIMEOUT


@dataclass(frozen=True)
class HostFindings:
    findings: tuple[Finding, ...]

    @property
    def fixes(self) -> tuple[str, ...]:
        """The fixes of the errors, in order: whatever a release needs comes after them."""
        return tuple(f.fix for f in self.findings if f.level == ERROR and f.fix)


def host_findings(host: HostReport) -> HostFindings:
    return HostFindings(
        (
            *_driver_findings(host),
            *_wsl_findings(host),
            *_gpu_findings(host),
            *_library_findings(host),
            *_probe_findings(host),
        )
    )


def _driver_findings(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    d = host.driver
    if host.stand_in:
        out.append(Finding(NOTE, "read from a stand-in root, not from this machine (--root)"))
    if not host.has_driver:
        out.append(
            Finding(
                ERROR,
                "no NVIDIA driver: no nvidia-smi, no NVML library, no /proc/driver/nvidia/version; "
                "TensorFlow can only use the CPU here",
                "install the NVIDIA driver from your distribution's packages (the version each "
                "release needs is below), then reboot",
            )
        )
    if d.error:
        out.append(Finding(ERROR, f"the driver does not answer: {d.error}"))
    if d.kernel_module and d.user_space and d.kernel_module != d.user_space:
        out.append(
            Finding(
                ERROR,
                f"kernel module {d.kernel_module} but user-space driver {d.user_space}: the driver "
                "was upgraded without a reboot, so NVML and CUDA fail ('Driver/library version "
                "mismatch'); hold the driver packages to stop unattended upgrades doing this",
                "sudo reboot",
            )
        )
    elif d.user_space and not d.kernel_module and not host.wsl and host.os == "linux":
        out.append(
            Finding(
                ERROR,
                f"user-space driver {d.user_space} is installed but its kernel module is not "
                "loaded",
                "sudo modprobe nvidia  # or reboot; check `dmesg | grep -i nvidia` if it fails",
            )
        )
    if len(d.user_space_all) > 1:
        out.append(
            Finding(
                WARNING,
                f"libraries of several drivers are installed ({', '.join(d.user_space_all)}); "
                f"the loader takes {d.user_space or 'none of them as libcuda.so.1'}",
                "remove the old driver's packages",
            )
        )
    return out


def _wsl_findings(host: HostReport) -> list[Finding]:
    if not host.wsl:
        return []
    out = [
        Finding(
            NOTE,
            "WSL2: the GPU driver is the Windows host's; never install a Linux driver inside WSL",
        )
    ]
    if not host.wsl_lib:
        out.append(
            Finding(
                ERROR,
                "WSL without /usr/lib/wsl/lib/libcuda.so.1: GPU support is not enabled (WSL 1, "
                "or a Windows driver without WSL support)",
                "update the NVIDIA driver on Windows and run `wsl --update` there",
            )
        )
    elif "/usr/lib/wsl/lib" not in (*host.loader_dirs, *host.ld_library_path):
        out.append(
            Finding(
                ERROR,
                "/usr/lib/wsl/lib is not on the loader's path, so libcuda.so.1 is not found",
                "export LD_LIBRARY_PATH=/usr/lib/wsl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
            )
        )
    if host.driver.user_space_all:
        out.append(
            Finding(
                ERROR,
                "a Linux NVIDIA driver is installed inside WSL "
                f"(libcuda.so.{host.driver.user_space_all[0]}); it shadows the Windows driver's "
                "/usr/lib/wsl/lib/libcuda.so.1",
                "sudo apt-get remove --purge 'libnvidia-compute-*'  # the Linux driver's libraries",
            )
        )
    return out


def _gpu_findings(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    for g in host.gpus:
        if g.mig == "enabled":
            out.append(
                Finding(
                    WARNING,
                    f"GPU {g.index} ({g.name}) is in MIG mode: TensorFlow sees one MIG instance "
                    "per process, chosen with CUDA_VISIBLE_DEVICES=MIG-<uuid> (`nvidia-smi -L`)",
                )
            )
        if g.persistence == "disabled" and not host.wsl and host.os == "linux":
            out.append(
                Finding(
                    NOTE,
                    f"GPU {g.index}: persistence mode is off, so each program's first CUDA call "
                    "waits for the driver to start",
                    "sudo nvidia-smi -pm 1",
                )
            )
    return out


def _probe_findings(host: HostReport) -> list[Finding]:
    return [
        Finding(WARNING, f"probe {p.name} {p.status}: {p.detail}")
        for p in host.probes
        if p.status in (FAILED, TIMEOUT)
    ]


def _library_findings(host: HostReport) -> list[Finding]:
    return [*_copies_on_the_path(host), *_versions_side_by_side(host), *_newer_than_driver(host)]


def _copies_on_the_path(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    by_soname: dict[str, list[Library]] = {}
    for lib in host.libraries:
        if lib.loader_rank is not None and lib.soname:
            by_soname.setdefault(lib.soname, []).append(lib)
    for soname, libs in sorted(by_soname.items()):
        if len(libs) < 2:
            continue
        libs.sort(key=lambda lib: lib.loader_rank or 0)
        listed = "; ".join(
            f"{lib.version or '?'} at {lib.path} ({', '.join(lib.found_in)})" for lib in libs
        )
        same = len({lib.version for lib in libs}) == 1
        out.append(
            Finding(
                NOTE if same else WARNING,
                f"{len(libs)} copies of {soname} on the loader's path: {listed}; the loader takes "
                f"{libs[0].path}" + ("" if same else ", whatever each program was built for"),
                ""
                if same
                else "remove the copy you do not want, or put its folder first in LD_LIBRARY_PATH",
            )
        )
    return out


def _versions_side_by_side(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    for kind in ("cudnn", "cudart"):
        for major in sorted(
            {lib.major for lib in host.libraries if lib.kind == kind and lib.major}
        ):
            same_major = [lib for lib in host.libraries if lib.kind == kind and lib.major == major]
            if len(same_major) > 1 and len({lib.version for lib in same_major}) > 1:
                where = "; ".join(f"{lib.version or '?'} at {lib.path}" for lib in same_major)
                out.append(
                    Finding(
                        NOTE,
                        f"{KIND_TEXT[kind]} {major} is installed {len(same_major)} times, in "
                        f"different versions: {where}; each environment uses its own",
                    )
                )
    return out


def _newer_than_driver(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    dc = major_minor(host.driver.cuda)
    if dc is None:
        return out
    for lib in host.libraries:
        mm = major_minor(lib.version)
        if lib.kind == "cudart" and mm and lib.version_from != "soname" and mm > dc:
            if mm[0] > dc[0]:
                out.append(
                    Finding(
                        WARNING,
                        f"{lib.path} is CUDA {lib.version}, newer than this driver supports "
                        f"(CUDA {host.driver.cuda}): programs using it fail with 'CUDA driver "
                        "version is insufficient'",
                        "upgrade the driver, or use a CUDA runtime of the driver's major version",
                    )
                )
            else:
                out.append(
                    Finding(
                        NOTE,
                        f"{lib.path} is CUDA {lib.version}, newer than the driver's CUDA "
                        f"{host.driver.cuda}: it runs through minor-version compatibility, but PTX "
                        "it JIT-compiles may be refused",
                    )
                )
    for ptx in host.ptxas:
        mm = major_minor(ptx.version)
        if mm and mm > dc:
            out.append(
                Finding(
                    WARNING,
                    f"{ptx.path} is from CUDA {ptx.version}, newer than the driver's CUDA "
                    f"{host.driver.cuda}: PTX it writes cannot be loaded by this driver (XLA: "
                    "'unsupported PTX version')",
                    f"put a ptxas of CUDA {host.driver.cuda} or older first on PATH, or upgrade "
                    "the driver",
                )
            )
    return out
