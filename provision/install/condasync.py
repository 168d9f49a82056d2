"""The conda path's part of an in-place sync (install/sync): a conda-lock.yml's two halves for
this host, the conda packages linked to match one, and the files a set of them put in a prefix.

Linking goes through provision's own conda front end over rattler (solver.install), whatever
solver built the prefix: conda-meta is conda's format, so rattler sees what is linked, keeps every
package whose file and checksum are the ones the lock names (nothing fetched for those), fetches
and checks the rest against the lock's checksums, and unlinks what the lock no longer holds. The
pip half is the same hashed requirements as on the pip path (sync does that part).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from provision.errors import InstallError
from provision.install.installers import host_subdir
from provision.lock import condafile
from provision.lock.requirements import Pin, norm
from provision.progress import Event, Report, nothing


def _host(text: str) -> list[condafile.LockedPackage]:
    lock = condafile.parse(text, "conda-lock.yml", InstallError)
    return lock.on(host_subdir())


def conda_packages(text: str) -> list[condafile.LockedPackage]:
    """The lock's conda packages for this host."""
    return [p for p in _host(text) if not p.pip]


def pip_pins(text: str) -> list[Pin]:
    """The lock's pip packages for this host, as hashed pins (what uv installs on the pip path)."""
    return [
        Pin(norm(p.name), p.version, (f"sha256:{p.hash.sha256}",), (), 0)
        for p in _host(text)
        if p.pip and p.hash.sha256
    ]


def versions(text: str) -> dict[str, str]:
    """name -> version of every package the lock puts in this host's prefix, conda and pip."""
    return {(norm(p.name) if p.pip else p.name): p.version for p in _host(text)}


def link(prefix: Path, old_text: str, new_text: str, report: Report = nothing) -> None:
    """Link the conda packages of new_text into `prefix` when they differ from old_text's."""
    from provision.solver.errors import CondaError
    from provision.solver.install import ExplicitEntry, install_entries

    def files(pkgs: Iterable[condafile.LockedPackage]) -> set[tuple[str, str | None]]:
        return {(p.file_name, p.hash.sha256 or p.hash.md5) for p in pkgs}

    wanted = conda_packages(new_text)
    if files(wanted) == files(conda_packages(old_text)):
        return
    changed = len(files(wanted) - files(conda_packages(old_text)))
    report(Event("step", f"linking conda packages ({changed} new or changed, checksums checked)"))
    entries = [ExplicitEntry(p.url, p.hash.md5, p.hash.sha256) for p in wanted]
    try:
        install_entries(entries, prefix)
    except CondaError as exc:
        raise InstallError(f"cannot link the conda packages into {prefix}: {exc.message}") from exc


def conda_files(prefix: Path, names: set[str]) -> set[str]:
    """What the linked conda packages `names` put in the prefix, by their conda-meta records, as
    the owned list spells it (the folders they need end in /)."""
    out: set[str] = set()
    for path in (prefix / "conda-meta").glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("name") not in names:
            continue
        out.add(f"conda-meta/{path.name}")
        for rel in data.get("files") or []:
            rel = os.path.normpath(str(rel))
            if rel.startswith(".."):
                continue
            out.add(rel)
            parent = os.path.dirname(rel)
            while parent and parent + "/" not in out:
                out.add(parent + "/")
                parent = os.path.dirname(parent)
    return out
