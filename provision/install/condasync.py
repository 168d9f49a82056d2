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
from collections.abc import Sequence
from pathlib import Path

from provision.errors import InstallError
from provision.install import owned
from provision.install.installers import host_subdir
from provision.lock import condafile
from provision.lock.requirements import Pin, norm
from provision.progress import Event, Report, nothing


def _host(text: str) -> list[condafile.LockedPackage]:
    lock = condafile.parse(text, "conda-lock.yml", InstallError)
    return lock.on(host_subdir())


def halves(text: str) -> tuple[list[condafile.LockedPackage], list[Pin]]:
    """The lock's conda packages for this host, and its pip packages as hashed pins (what uv
    installs on the pip path)."""
    packages = _host(text)
    pins = [
        Pin(norm(p.name), p.version, (f"sha256:{p.hash.sha256}",), (), 0)
        for p in packages
        if p.pip and p.hash.sha256
    ]
    return [p for p in packages if not p.pip], pins


def link(
    prefix: Path,
    old: Sequence[condafile.LockedPackage],
    new: Sequence[condafile.LockedPackage],
    report: Report = nothing,
) -> None:
    """Link the conda packages `new` into `prefix` when they differ from `old`."""
    from provision.solver.conda_errors import CondaError
    from provision.solver.install import ExplicitEntry, install_entries

    def files(pkgs: Sequence[condafile.LockedPackage]) -> set[tuple[str, str | None]]:
        return {(p.file_name, p.hash.sha256 or p.hash.md5) for p in pkgs}

    was, now = files(old), files(new)
    if was == now:
        return
    changed = len(now - was)
    report(Event("step", f"linking conda packages ({changed} new or changed, checksums checked)"))
    entries = [ExplicitEntry(p.url, p.hash.md5, p.hash.sha256) for p in new]
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
            if not rel.startswith(".."):
                owned.add_with_folders(out, rel)
    return out
