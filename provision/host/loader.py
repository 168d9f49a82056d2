"""ld.so emulation: the folders the dynamic loader searches, and which copy of a library it picks.

The order is the loader's own: LD_LIBRARY_PATH, then its cache (`ldconfig -p` on this machine; the
folders of /etc/ld.so.conf, then the trusted folders, under a stand-in root, which has no cache).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from provision import _proc
from provision.errors import ProvisionError
from provision.host.root import Context, glob, read_text

TRUSTED_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


def loader_conf_dirs(ctx: Context) -> list[str]:
    """Folders named in /etc/ld.so.conf (following `include`), then the loader's trusted folders."""
    out: list[str] = []
    seen: set[str] = set()

    def read_conf(path: Path, depth: int) -> None:
        for raw in read_text(path).splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include") and depth < 4:
                pattern = line.split(None, 1)[1] if " " in line else ""
                if not pattern.startswith("/"):
                    pattern = "/etc/" + pattern
                parent, _, leaf = pattern.rpartition("/")
                for conf in glob(ctx.at(parent or "/"), leaf):
                    read_conf(conf, depth + 1)
            elif line.startswith("/") and line not in seen:
                seen.add(line)
                out.append(line.rstrip("/") or "/")

    read_conf(ctx.at("/etc/ld.so.conf"), 0)
    if not (ctx.at("/etc/ld.so.conf").exists()):
        for conf in glob(ctx.at("/etc/ld.so.conf.d"), "*.conf"):
            read_conf(conf, 1)
    for d in TRUSTED_DIRS:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def search_dirs(ctx: Context, *extra: str) -> list[Path]:
    """LD_LIBRARY_PATH, then the ld.so.conf and trusted folders, then `extra` host folders."""
    return [*ctx.dirs("LD_LIBRARY_PATH"), *(ctx.at(d) for d in (*loader_conf_dirs(ctx), *extra))]


def ldconfig_cache(ctx: Context) -> dict[str, list[Path]] | None:
    """SONAME -> files in the loader cache's own order (`ldconfig -p`); None for a stand-in."""
    if ctx.stand_in:
        return None
    exe = _proc.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None
    )
    if exe is None:
        return None
    try:
        done = ctx.run([exe, "-p"])
    except ProvisionError:
        return None
    cache: dict[str, list[Path]] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", line)
        if m:
            cache.setdefault(m.group(1), []).append(Path(m.group(3)))
    return cache


def loader_ranks(
    ctx: Context,
    sonames: Collection[str],
    known: Collection[Path],
    ld_dirs: Sequence[Path],
    cache: Mapping[str, Sequence[Path]] | None,
    conf_dirs: Sequence[str],
) -> dict[Path, int]:
    """Per SONAME, the order in which the loader finds the `known` files (real paths) that carry
    it: LD_LIBRARY_PATH, then the cache (or the ld.so.conf folders). 0 is the copy it loads."""
    ranks: dict[Path, int] = {}
    for soname in sorted(set(sonames) - {""}):
        order: list[Path] = []
        candidates = [d / soname for d in ld_dirs]
        if cache is not None:
            candidates += cache.get(soname, [])
        else:
            candidates += [ctx.at(d) / soname for d in conf_dirs]
        for c in candidates:
            if c.exists():
                real = ctx.real(c)
                if real in known and real not in order:
                    order.append(real)
        ranks.update({real: i for i, real in enumerate(order)})
    return ranks
