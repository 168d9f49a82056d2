"""What provision-conda is called, where it keeps caches and environments, and its target."""

from __future__ import annotations

import os
from pathlib import Path

PROG = "provision-conda"


def cache_dir() -> Path:
    explicit = os.environ.get("PROVISION_CONDA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision-conda"


def pkgs_dir() -> Path:
    dirs = [d for d in os.environ.get("CONDA_PKGS_DIRS", "").split(",") if d]
    return Path(dirs[0]) if dirs else cache_dir() / "pkgs"


def envs_dir() -> Path:
    dirs = [d for d in os.environ.get("CONDA_ENVS_PATH", "").split(os.pathsep) if d]
    return Path(dirs[0]) if dirs else cache_dir() / "envs"


def target_subdir(explicit: str | None = None) -> str:
    from rattler import Subdir

    return explicit or os.environ.get("CONDA_SUBDIR") or str(Subdir.current())


def rattler_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("py-rattler")
    except PackageNotFoundError:
        return "unknown"
