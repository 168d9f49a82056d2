"""Version numbers as the doctor compares them: an unreadable one is None, never an error."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from provision.host import HostReport


def version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def major_minor(text: str) -> tuple[int, int] | None:
    """(major, minor) of '12.5', '12.5.82' or '13.0'; None when unreadable."""
    v = version(text)
    if v is None:
        return None
    return (v.major, v.minor)


def driver_version(host: HostReport) -> str:
    """The driver's version as the best source says it: NVML / nvidia-smi, else the kernel module,
    else the user-space library's file name."""
    d = host.driver
    return d.version or d.kernel_module or d.user_space
