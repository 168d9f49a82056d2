"""What the command line accepts, checked at the edge before anything runs: paths the file system
can hold, version numbers in ASCII digits, finite numbers. Each refusal is a Click usage error
(exit 2) naming the option, so nothing slow starts on a value that can never be right."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import click

NAME_MAX = 255
PATH_MAX = 4096


def _limits(path: str) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the file system the path is on (its nearest existing folder)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return NAME_MAX, PATH_MAX


def path_problem(path: str) -> str | None:
    """Why the file system cannot hold this path, or None."""
    if not path.strip():
        return "is empty"
    if "\0" in path:
        return "holds a NUL character"
    name_max, path_max = _limits(path)
    longest = max((len(os.fsencode(p)) for p in Path(path).parts), default=0)
    if longest > name_max:
        return f"has a name of {longest} bytes; this file system allows {name_max}"
    if len(os.fsencode(os.path.abspath(path))) >= path_max:
        return f"is longer than this file system allows ({path_max} bytes)"
    return None


class SafePath(click.Path):
    """click.Path that also refuses empty paths and paths too long for the file system."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            why = path_problem(value)
            if why:
                self.fail(f"{value[:60]!r}{'...' if len(value) > 60 else ''} {why}", param, ctx)
        return super().convert(value, param, ctx)


_XY = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")


def version_xy(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """X.Y in ASCII digits (a Python or glibc version), or absent."""
    if value is not None and not _XY.fullmatch(value):
        raise click.BadParameter(f"takes a version X.Y, e.g. 3.11, not {value[:40]!r}")
    return value


def nonblank(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A given value must say something (`--tf ''` is not 'no --tf')."""
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if v is not None and (not v.strip() or any(c in v for c in "\n\r\0")):
            raise click.BadParameter(f"{v[:40]!r} is empty or spans lines")
    return value


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"takes a number of seconds, not {value}")
    return value


def size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A size such as 4G or 650M (bundle --split), checked now rather than after downloading."""
    if value is None:
        return None
    from provision import bundle_format
    from provision.errors import ProvisionError

    if not value.isascii():
        raise click.BadParameter(f"takes a size such as 4G, 650M or 63000000, not {value[:40]!r}")
    try:
        parsed = bundle_format.parse_size(value)
    except (ProvisionError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None
    if parsed > 2**50:
        raise click.BadParameter(f"{value[:40]!r} is larger than any disk (1 PiB at most)")
    return value


def writable_target(path: Path, flag: str) -> None:
    """A file or folder provision will create at path: its nearest existing folder must be a
    folder we may write into. Checked before the work that produces it."""
    from provision.errors import ProvisionError, UsageError

    probe = Path(path).absolute()
    if probe.exists() and not probe.is_dir() and flag in ("--prefix", "--report-dir", "--wheel"):
        raise UsageError(f"{flag} {path} is a file, not a folder")
    parent = probe if probe.is_dir() else probe.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ProvisionError(f"{flag} {path}: {parent} is not writable; choose another place")


def platform_note(platform: str) -> str | None:
    """provision builds environments on Linux only (fcntl locks, bash install scripts, ELF
    libraries, PR_SET_PDEATHSIG): on another system, say so before anything else."""
    if platform.startswith("linux"):
        return None
    where = (
        "Windows: use WSL2 (Ubuntu), where"
        if platform.startswith(("win", "cygwin"))
        else (f"{platform}: use a Linux machine, where")
    )
    return (
        f"provision runs on Linux only; create, install and lock do not work on {where} "
        "provision and TensorFlow's CUDA builds work; this report reads what it can here"
    )
