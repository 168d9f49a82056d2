"""Bringing a built prefix from one lock to the next, in place: a pip-path (or system-path) venv,
or a conda-path prefix.

Only the difference moves: uv installs the pins that are new or changed, with their hashes
checked, then the packages the old lock had and the new one has not are uninstalled. On the conda
path the pip packages that leave go first, then the conda packages are linked to match the new
lock (condasync: only what changed is fetched, checksums checked), then the pip packages that are
new or changed are installed. A package a user installed by hand, in neither lock, is not
touched. The list of what provision installed (owned) and the build marker follow the change, so
`remove` and `check` see the prefix as it now is. Any failure puts the prefix back to the old
lock, the same way.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision import tools
from provision.environment import EnvDir, interpreter
from provision.errors import InstallError, ProvisionError
from provision.fileio import sha256_text
from provision.install import condasync, installers, owned
from provision.install.place import read_marker, write_marker
from provision.lock import condafile
from provision.lock.requirements import Pin, parse_lock
from provision.progress import Report, nothing


@dataclass(frozen=True)
class Locked:
    """A lock as the sync reads it, once: the pins uv installs (the pip path's all, the conda
    path's pip half) and, on the conda path, its conda packages for this host."""

    sha256: str  # of the lock's text: what the build marker records
    pins: tuple[Pin, ...]
    conda: tuple[condafile.LockedPackage, ...] | None = None  # None: a requirements lock

    @classmethod
    def read(cls, text: str, conda: bool) -> Locked:
        if not conda:
            return cls(sha256_text(text), tuple(parse_lock(text)))
        packages, pins = condasync.halves(text)
        return cls(sha256_text(text), tuple(pins), tuple(packages))

    def versions(self) -> dict[str, str]:
        """name -> version of every package the lock puts in the prefix."""
        return {**{p.name: p.version for p in self.conda or ()}, **_versions(self.pins)}


@dataclass(frozen=True)
class Before:
    """The prefix as the old lock left it: what restore puts back."""

    lock: Locked  # the old lock
    listed: set[str] | None  # owned's list of what provision installed
    marker: dict[str, object] | None  # the build marker (none for install.sh's venv)


@dataclass(frozen=True)
class Synced:
    installed: dict[str, str]  # name -> version now in the prefix, that was not before
    removed: dict[str, str]  # name -> version that left
    seconds: float
    before: Before
    after: Locked  # the new lock


def _files_of(prefix: Path, names: set[str]) -> set[str]:
    """What the distributions `names` (normalised) installed into the prefix, by their RECORD,
    as the owned list spells it (relative to the prefix; the folders they need end in /).
    Reading a few RECORDs instead of walking a TensorFlow venv (57,000 entries) keeps a sync of
    one package as fast as installing it."""
    from provision.lock.requirements import norm

    out: set[str] = set()
    for site in prefix.glob("lib/python*/site-packages"):
        base = site.relative_to(prefix).as_posix()
        for dist in site.glob("*.dist-info"):
            if norm(dist.name[: -len(".dist-info")].rsplit("-", 1)[0]) not in names:
                continue
            try:
                lines = (dist / "RECORD").read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                lines = []
            for line in lines:
                rel = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
                path = os.path.normpath(f"{base}/{rel}")
                if not rel or path.startswith(".."):
                    continue
                owned.add_with_folders(out, path, stop=base)
            out.add(f"{base}/{dist.name}/")
    return out


def _versions(pins: Sequence[Pin]) -> dict[str, str]:
    return {p.name: p.version for p in pins}


def difference(old: Sequence[Pin], new: Sequence[Pin]) -> str:
    """The pins of new that old does not hold at that version, with their hashes and markers, as
    a requirements file: all that has to be installed."""
    before = _versions(old)
    lines = []
    for pin in new:
        if before.get(pin.name) == pin.version:
            continue
        marker = f" ; {pin.marker}" if pin.marker else ""
        hashes = "".join(f" \\\n    --hash={h}" for h in pin.hashes)
        lines.append(f"{pin.name}=={pin.version}{marker}{hashes}\n")
    return "".join(lines)


def _pip(prefix: Path, old: Sequence[Pin], new: Sequence[Pin], report: Report, *,
         install: bool = True, uninstall: bool = True) -> None:  # fmt: skip
    """Install what new adds or changes (hashes checked), uninstall what it drops: each an
    installer run as a build makes them (installers.run_step: progress, the installer's words)."""
    uv = tools.uv()
    gone = sorted(set(_versions(old)) - set(_versions(new)))
    wanted = difference(old, new)
    if wanted and install:
        with tempfile.TemporaryDirectory(prefix="provision-sync-") as tmp:
            part = Path(tmp) / "difference.lock"
            part.write_text(wanted, encoding="utf-8")
            argv = installers.uv_install_argv(uv, interpreter(prefix), part)
            what = f"uv pip install ({wanted.count('==')} changed, hashes checked)"
            installers.run_step(what, argv, prefix, report=report, offline_first=True)
    if gone and uninstall:
        argv = [uv, "pip", "uninstall", "--python", str(interpreter(prefix)), *gone]
        installers.run_step(f"uv pip uninstall {' '.join(gone)}", argv, prefix, report=report)


def _apply(prefix: Path, old: Locked, new: Locked, report: Report) -> None:
    """Move the prefix from the lock `old` to `new`."""
    if old.conda is None or new.conda is None:
        _pip(prefix, old.pins, new.pins, report)
        return
    _pip(prefix, old.pins, new.pins, report, install=False)  # a pip package may become conda's
    condasync.link(prefix, old.conda, new.conda, report)
    _pip(prefix, old.pins, new.pins, report, uninstall=False)


def installed_files(conda: bool, prefix: Path, names: set[str]) -> set[str]:
    """What the packages `names` (normalised) put into the prefix, as the owned list spells it."""
    return _files_of(prefix, names) | (condasync.conda_files(prefix, names) if conda else set())


def sync(
    env: EnvDir, prefix: Path, old: Locked, new: Locked, digest: str, report: Report = nothing,
) -> Synced:  # fmt: skip
    """Move the prefix from the lock `old` to `new`; `digest`: the build marker's new
    inputs_sha256. On any failure the prefix is put back to `old`; the result's `before` puts it
    back later (restore), when what follows the sync fails."""
    start = time.monotonic()
    conda = new.conda is not None
    marker = read_marker(prefix)
    # The system path's venv is made by install.sh, with no marker of provision's.
    if env.kind.owns_prefix and (marker is None or marker.get("state") != "complete"):
        raise InstallError(f"{prefix} is not a complete provision build; provision install it")
    state = Before(old, owned.recorded(prefix), marker)
    was, now = old.versions(), new.versions()
    changed = {n for n in was.keys() | now.keys() if was.get(n) != now.get(n)}
    before = installed_files(conda, prefix, changed)
    try:
        _apply(prefix, old, new, report)
    except BaseException:
        restore(prefix, state, new, report)
        raise
    after = installed_files(conda, prefix, changed)
    if state.listed is not None:
        # What the old versions had and the new ones have not left; what the new ones brought
        # came. A folder that is still there stays listed (another package uses it; removing a
        # prefix only deletes folders that became empty).
        gone = {p for p in before - after if not (p.endswith("/") and (prefix / p).is_dir())}
        owned.write_list(prefix, (state.listed - gone) | after)
    if marker is not None:
        write_marker(prefix, {**marker, "inputs_sha256": digest, "lock_sha256": new.sha256})
    return Synced(
        {n: v for n, v in now.items() if was.get(n) != v},
        {n: v for n, v in was.items() if n not in now},
        time.monotonic() - start,
        state,
        new,
    )


def restore(prefix: Path, before: Before, new: Locked, report: Report = nothing) -> None:
    """Put the prefix back as `before` was: the old lock's packages at their versions, those the
    new lock added removed, the list and the marker. InstallError when it cannot."""
    try:
        _apply(prefix, new, before.lock, report)
    except ProvisionError as exc:
        raise InstallError(
            f"{prefix} could not be put back to its previous lock ({exc}); rebuild it with "
            "provision install NAME --force"
        ) from exc
    if before.listed is not None:
        owned.write_list(prefix, before.listed)
    if before.marker is not None:
        write_marker(prefix, before.marker)
