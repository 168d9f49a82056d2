"""The machine itself: operating system, distribution, kernel, WSL, and the driver's files."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from provision.host.gpu import WSL_LIB, kernel_module, libcuda_versions
from provision.host.model import Probe
from provision.host.root import Context, read_text


@dataclass(frozen=True)
class SystemFacts:
    os: str
    machine: str
    distro: str
    kernel: str
    wsl: bool
    wsl_lib: str
    kernel_module: str  # the loaded NVIDIA kernel module's version
    user_space: str  # the driver version of the libcuda.so.1 the loader picks
    user_space_all: tuple[str, ...]  # every libcuda.so.<version> in the loader's folders
    probes: tuple[Probe, ...]


def os_family(plat: str) -> str:
    if plat.startswith("win") or plat == "cygwin":
        return "windows"
    return "darwin" if plat == "darwin" else "linux"


def probe_system(ctx: Context) -> SystemFacts:
    proc_version = read_text(ctx.at("/proc/version"))
    release = ""
    for line in read_text(ctx.at("/etc/os-release")).splitlines():
        if line.startswith("PRETTY_NAME="):
            release = line.split("=", 1)[1].strip().strip('"')
    kernel = read_text(ctx.at("/proc/sys/kernel/osrelease")).strip()
    if not kernel and proc_version.startswith("Linux version "):
        kernel = proc_version.split()[2]
    module = kernel_module(ctx)
    first, every = libcuda_versions(ctx)
    detail = f"kernel module {module or 'not loaded'}, user-space driver {first or 'not found'}"
    return SystemFacts(
        os="linux" if ctx.stand_in else os_family(sys.platform),
        machine=ctx.machine,
        distro=release,
        kernel=kernel,
        wsl="microsoft" in proc_version.lower(),
        wsl_lib=WSL_LIB if ctx.at(WSL_LIB + "/libcuda.so.1").exists() else "",
        kernel_module=module,
        user_space=first,
        user_space_all=every,
        probes=(Probe("system", "ok", detail),),
    )
