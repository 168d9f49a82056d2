"""What the command line accepts, checked at the edge before anything runs: paths the file system
can hold, version numbers in ASCII digits, finite numbers. Each refusal is a Click usage error
(exit 2) naming the option, so nothing slow starts on a value that can never be right."""

from __future__ import annotations

import math
import os
import re
from typing import TypeVar

import click

from provision.fileio import path_problem


class SafePath(click.Path):
    """click.Path that also refuses empty paths and paths too long for the file system."""

    def convert(
        self,
        value: str | os.PathLike[str],
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str | bytes | os.PathLike[str]:
        if isinstance(value, str):
            why = path_problem(value)
            if why:
                self.fail(f"{value[:60]!r}{'...' if len(value) > 60 else ''} {why}", param, ctx)
        return super().convert(value, param, ctx)


_XY = re.compile(
    r"(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})"
)  # no leading zeros: 3.011 is no version
T = TypeVar("T")


def version_xy(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """X.Y in ASCII digits (a Python or glibc version), or absent."""
    if value is not None and not _XY.fullmatch(value):
        raise click.BadParameter(f"takes a version X.Y, e.g. 3.11, not {value[:40]!r}")
    return value


def nonblank(ctx: click.Context, param: click.Parameter, value: T) -> T:
    """A given value must say something (`--tf ''` is not 'no --tf'): a string, or each string of
    a tuple (multiple=True), returned as it came."""
    values: tuple[object, ...] = value if isinstance(value, tuple) else (value,)
    for v in values:
        if isinstance(v, str) and (not v.strip() or any(c in v for c in "\n\r\0")):
            raise click.BadParameter(f"{v[:40]!r} is empty or spans lines")
    return value


MAX_SECONDS = 30 * 24 * 3600  # a deadline past a month is a typo, and past 2**63 ns an overflow


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"takes a number of seconds, not {value}")
    if value is not None and value > MAX_SECONDS:
        raise click.BadParameter(f"takes at most {MAX_SECONDS} seconds (30 days), not {value:g}")
    return value


def size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A size such as 4G or 650M (bundle --split), checked now rather than after downloading."""
    if value is None:
        return None
    from provision.bundlefile import bundle_format
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
