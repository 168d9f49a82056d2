"""provision's caches: where they are, how big, and pruning them.

One folder holds them all: PROVISION_HOME/cache when PROVISION_HOME is set (so a home on a big disk
takes the gigabytes with it), else the user's cache folder for provision (~/.cache/provision).
Inside: `uv` (uv's cache, for locks and pip-path builds: wheels of TensorFlow and NVIDIA's
libraries, gigabytes after one create), `pip` (pip's, when pip installs), `bundle` (what
`provision bundle` downloads), the built-in solver's `provision-conda`, and `jinja` (the compiled
templates of render).

A cache the user chose (UV_CACHE_DIR, PIP_CACHE_DIR, --cache-dir) is theirs: used as it is, shown
as theirs, never pruned. prune deletes only the folders above, which provision made.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from provision.errors import ProvisionError

# name -> the variable that moves it (a user's setting wins)
KINDS = {
    "uv": "UV_CACHE_DIR",
    "pip": "PIP_CACHE_DIR",
    "bundle": "",
    "provision-conda": "PROVISION_CONDA_CACHE",
    "jinja": "",  # the templates render compiles (kilobytes)
}


def root() -> Path:
    """The folder of provision's caches. XDG_CACHE_HOME is checked even under PROVISION_HOME: the
    tools provision runs (pip, uv, conda-lock) keep what provision does not move there."""
    _check_xdg_cache()
    if os.environ.get("PROVISION_HOME"):
        from provision import registry

        return registry.home() / "cache"
    import platformdirs

    return Path(platformdirs.user_cache_dir("provision", appauthor=False))


def _check_xdg_cache() -> None:
    """XDG_CACHE_HOME, when set, is a folder or can become one (ProvisionError): a file there
    would make each tool fail, or quietly cache nothing, in its own way."""
    value = os.environ.get("XDG_CACHE_HOME", "")
    if not value:
        return
    path = Path(value).absolute()
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                what = "is a file" if parent == path else f"is under the file {parent}"
                raise ProvisionError(
                    f"XDG_CACHE_HOME {value[:80]} {what}, not a folder; set it to a folder, or "
                    "unset it"
                )
            return


def tool_env() -> dict[str, str]:
    """The variables that put uv's and pip's caches into provision's folder, for the variables
    the user has not set."""
    base = root()
    return {var: str(base / name) for name, var in KINDS.items() if var and not os.environ.get(var)}


@dataclass(frozen=True)
class Cache:
    name: str
    path: Path
    size: int  # bytes on disk (0 when absent)
    owned: bool  # inside provision's folder (prune deletes it); False: the user's own setting


def folder_size(path: Path) -> int:
    """Bytes the files under path take on disk (blocks, not lengths: sparse files and hard
    links count once), without following symbolic links; 0 when absent."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for folder, dirs, files in os.walk(path, onerror=lambda e: None):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def info() -> list[Cache]:
    base = root()
    out = []
    for name, var in KINDS.items():
        chosen = os.environ.get(var) if var else None
        path = Path(chosen) if chosen else base / name
        out.append(Cache(name, path, folder_size(path), owned=not chosen))
    return out


def total() -> int:
    return sum(c.size for c in info())


@dataclass(frozen=True)
class Pruned:
    freed: int
    removed: tuple[Path, ...]
    kept: tuple[Cache, ...]  # the user's own caches, left as they are


def prune() -> Pruned:
    """Delete provision's caches (only those in its own folder); say what was freed."""
    freed, removed, kept = 0, [], []
    for cache in info():
        if not cache.owned:
            kept.append(cache)
            continue
        if not cache.path.exists() and not cache.path.is_symlink():
            continue
        if cache.path.is_symlink() or not cache.path.is_dir():
            raise ProvisionError(f"{cache.path} is not a folder provision made; remove it yourself")
        try:
            shutil.rmtree(cache.path)
        except OSError as exc:
            raise ProvisionError(
                f"cannot delete {cache.path}: {exc.strerror}; check its permissions"
            ) from exc
        freed += cache.size
        removed.append(cache.path)
    return Pruned(freed, tuple(removed), tuple(kept))


def human(size: int) -> str:
    """1.2 GB, 340 MB, 12 kB, 0 B (decimal units, as df -H and uv print)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
