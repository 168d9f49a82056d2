"""What in a prefix is provision's: the files its installers put there (listed when a build
completes), provision's own hooks and markers, and the bytecode Python writes beside them. Anything
else (a user's train.py, a package a user added with pip) is the user's: it is never deleted, and
is named when it stands in the way.

Deleting a prefix deletes what the list names, then the folders that became empty, and the marker
last: a deletion killed midway leaves a prefix that is still recognised as provision's, and the next
`remove` or `install` finishes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from provision import diskread
from provision.fileio import write_atomic

MARKER = ".provision-install.json"
FILES = ".provision-install.files"  # what the build installed, one relative path a line
OWN = frozenset({MARKER, MARKER + ".tmp", FILES, FILES + ".tmp", ".provision-verify.json"})
# provision's hooks (prefix_hooks.install_hooks), refreshed by later installs: always provision's.
_HOOKS = re.compile(
    r"^(etc/provision(/.*)?|etc/conda/(activate|deactivate)\.d/provision\.sh"
    r"|lib/python[0-9.]+/site-packages/provision_env_hook\.(py|pth))$"
)
_PYCACHE = re.compile(r"^(?:(.*)/)?__pycache__/([^/.]+)\.[^/]*\.pyc$")
# What uv, pip's venv and conda put at the top of a prefix: the parts of an unfinished build in a
# user's folder that a re-run may delete.
INSTALLER_TOP = frozenset(
    {
        "bin", "include", "lib", "lib64", "share", "etc", "conda-meta", "pyvenv.cfg",
        ".gitignore", "CACHEDIR.TAG", "ssl", "man", "libexec", "sbin", "compiler_compat",
        "x86_64-conda-linux-gnu", ".lock", "aarch64-conda-linux-gnu", "var", "doc", "docs", "info",
        ".nonadmin", "Lib", "Scripts", "pkgs", "mkspecs", "plugins", "translations",
    }
)  # fmt: skip
LIST_LIMIT = 256 * diskread.MIB
LIST_HEADER = "# provision-install-files 1: what the build installed, one path a line\n"


def walk(prefix: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything under prefix, folders before their contents; symlinks
    are listed, never followed."""
    stack = [""]
    while stack:
        rel = stack.pop()
        here = prefix / rel if rel else prefix
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield path, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)


def record(prefix: Path) -> None:
    """List what the build put into prefix (called when it completes, before its marker says so)."""
    write_list(
        prefix,
        {path + ("/" if stat.S_ISDIR(st.st_mode) else "") for path, st in walk(prefix)
         if path not in OWN},
    )  # fmt: skip


def add_with_folders(names: set[str], path: str, stop: str = "") -> None:
    """Add `path` (relative to the prefix) to `names` as the list spells it, with the folders it
    needs (ending in /) up to, not including, `stop` ("" : up to the prefix)."""
    names.add(path)
    parent = os.path.dirname(path)
    while parent and parent != stop and parent + "/" not in names:
        names.add(parent + "/")
        parent = os.path.dirname(parent)


def write_list(prefix: Path, names: set[str]) -> None:
    """The list of what provision installed into prefix (folders end in /), replaced whole."""
    text = LIST_HEADER + "".join(n + "\n" for n in sorted(names))
    write_atomic(prefix / FILES, text, temp=prefix / (FILES + ".tmp"))


def recorded(prefix: Path) -> set[str] | None:
    """The list `record` wrote (folders end in /), or None for a prefix built without one."""
    try:
        text = diskread.read_text(prefix / FILES, LIST_LIMIT)
    except (OSError, ValueError):
        return None
    if not text.startswith(LIST_HEADER):
        return None  # not a list provision wrote: nothing is known
    names = set(text[len(LIST_HEADER) :].splitlines())
    if any(not n or "\0" in n or n.startswith("/") or ".." in n.split("/") for n in names):
        return None
    return names


def _ours(path: str, is_dir: bool, listed: set[str]) -> bool:
    if path in OWN or _HOOKS.match(path):
        return True
    if (path + "/" if is_dir else path) in listed:
        return True
    if is_dir and (path.endswith("/__pycache__") or path == "__pycache__"):
        return True
    m = _PYCACHE.match(path)
    if m:
        source = f"{m.group(1)}/{m.group(2)}.py" if m.group(1) else f"{m.group(2)}.py"
        return source in listed or bool(_HOOKS.match(source))
    return False


def foreign(prefix: Path, listed: set[str] | None = None) -> list[str]:
    """What in prefix provision did not install: the top-most such paths (a user's folder is
    named once, not file by file). Empty for a prefix built without a list (nothing is known)."""
    listed = recorded(prefix) if listed is None else listed
    if listed is None:
        return []
    out: list[str] = []
    for path, st in walk(prefix):
        if out and (path.startswith(out[-1] + "/")):
            continue  # inside a folder already named
        if not _ours(path, stat.S_ISDIR(st.st_mode), listed):
            out.append(path)
    return sorted(out)


def foreign_top(prefix: Path) -> list[str]:
    """In an unfinished build (no list yet): what at the top of prefix no installer makes."""
    try:
        names = sorted(os.listdir(prefix))
    except OSError:
        return []
    return [n for n in names if n not in INSTALLER_TOP and n not in OWN]


def shown(paths: list[str], most: int = 5) -> str:
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


@dataclass(frozen=True)
class Deleted:
    freed: int  # bytes given back to the file system (a file still linked elsewhere frees none)
    kept: list[str]  # the user's, left where they were


def _freed(st: os.stat_result) -> int:
    if stat.S_ISDIR(st.st_mode) or st.st_nlink > 1:
        return 0
    return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size


Mode = Literal["listed", "whole", "installer"]


def delete(prefix: Path, *, keep_folder: bool = False, mode: Mode = "listed") -> Deleted:
    """Delete what in prefix is provision's, the marker last; keep the rest. What is provision's:
    listed: what the build listed; whole: everything (a folder provision made, whose build never
    finished); installer: what is under a name installers make at the top (a build in a user's
    folder that never finished). keep_folder: leave prefix itself (a folder the user made before
    the build), emptied of what was ours."""
    whole = mode == "whole"
    if mode == "installer":
        listed = {p + ("/" if stat.S_ISDIR(st.st_mode) else "") for p, st in walk(prefix)
                  if p.split("/", 1)[0] in INSTALLER_TOP}  # fmt: skip
    else:
        listed = recorded(prefix) or set()
    kept = [] if whole else foreign(prefix, listed)
    keep = set(kept)
    freed = 0
    entries = list(walk(prefix))
    for path, st in reversed(entries):  # contents before their folder
        if path in OWN or any(path == k or path.startswith(k + "/") for k in keep):
            continue
        if not whole and not _ours(path, stat.S_ISDIR(st.st_mode), listed):
            continue
        full = prefix / path
        try:
            if stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(OSError):
                    full.rmdir()  # a folder that holds a kept file stays
            else:
                full.unlink()
                freed += _freed(st)
        except FileNotFoundError:
            pass
    for name in (FILES + ".tmp", FILES, MARKER + ".tmp", ".provision-verify.json", MARKER):
        with contextlib.suppress(FileNotFoundError):
            full = prefix / name
            freed += _freed(full.lstat())
            full.unlink()
    if not keep_folder and not kept:
        with contextlib.suppress(OSError):
            prefix.rmdir()
    return Deleted(freed, kept)


def delete_tree(path: Path) -> None:
    """A folder provision made (staging, an old copy): everything, its marker last, so that a kill
    midway leaves it recognisable as provision's."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
        return
    if not path.exists():
        return
    for child in sorted(path.iterdir()):
        if child.name in (MARKER, FILES):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for name in (FILES, MARKER):
        with contextlib.suppress(FileNotFoundError):
            (path / name).unlink()
    path.rmdir()
