"""Virtual packages (`__cuda`, `__glibc`, ...) the way conda builds them for a target subdir."""

from __future__ import annotations

import os
import platform as host_platform
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rattler import GenericVirtualPackage

OVERRIDES = ("ARCHSPEC", "CUDA", "GLIBC", "LINUX", "OSX", "WIN")

# name -> (version, build), e.g. {"__cuda": ("12.5", "0"), "__archspec": ("1", "x86_64")}
VirtualPackages = dict[str, tuple[str, str]]


def _host_glibc() -> str | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    return text.split()[-1] if text.startswith("glibc") else None


def _detected_cuda() -> str | None:
    from rattler import VirtualPackage

    try:
        found = VirtualPackage.detect()
    except Exception:  # rattler raises its own DetectVirtualPackageError on odd hosts
        return None
    for pkg in found:
        generic = pkg.into_generic()
        if generic.name.normalized == "__cuda":
            return str(generic.version)
    return None


def virtual_packages(subdir: str, env: Mapping[str, str]) -> VirtualPackages:
    """{name: (version, build)} the way conda builds them for a target subdir.

    CONDA_OVERRIDE_X set to a value replaces the detected one; set to "" removes the package;
    unset means: detect on this host when it is the target, else conda's documented default.
    """
    from rattler import Subdir

    family, _, arch = subdir.partition("-")
    here = subdir == str(Subdir.current())
    archspec = {"64": "x86_64", "aarch64": "aarch64", "arm64": "arm64", "ppc64le": "ppc64le"}
    found: dict[str, tuple[str, str] | None] = {}
    if family == "linux":
        kernel = host_platform.release().split("-")[0] if here else "0"
        found["__unix"] = ("0", "0")
        found["__linux"] = (kernel, "0")
        found["__glibc"] = ((_host_glibc() if here else None) or "2.17", "0")
    elif family == "osx":
        found["__unix"] = ("0", "0")
        found["__osx"] = ((host_platform.mac_ver()[0] if here else "") or "11.0", "0")
    elif family == "win":
        found["__win"] = ("0", "0")
    if family != "noarch":
        found["__archspec"] = ("1", archspec.get(arch, arch))
        cuda = _detected_cuda() if here and "CONDA_OVERRIDE_CUDA" not in env else None
        found["__cuda"] = (cuda, "0") if cuda else None
    for key in OVERRIDES:
        var, name = f"CONDA_OVERRIDE_{key}", f"__{key.lower()}"
        if var not in env or name not in found:  # e.g. __osx means nothing for linux-64
            continue
        value = env[var]
        if not value:
            found[name] = None
        elif key == "ARCHSPEC":
            found[name] = ("1", value)
        else:
            found[name] = (value, "0")
    return {k: v for k, v in sorted(found.items()) if v is not None}


def as_generic(packages: Mapping[str, tuple[str, str]]) -> list[GenericVirtualPackage]:
    from rattler import GenericVirtualPackage, PackageName, Version
    from rattler.package import BuildString

    return [
        GenericVirtualPackage(PackageName(name), Version(version), BuildString.new_unchecked(build))
        for name, (version, build) in packages.items()
    ]
