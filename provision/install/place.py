"""Where a build goes, and what provision's own marker there says: the prefix's state (absent,
foreign, building, stale, complete), a symlink given as a prefix (followed, or refused when it
leads nowhere), another environment's prefix (refused), and what a run killed beside the prefix
left (`.provision-new`, `.provision-old`: finished by the next run on that prefix)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from provision import diskread, registry
from provision.errors import InstallError, UsageError
from provision.fileio import write_atomic
from provision.install import owned

MARKER = owned.MARKER

PrefixState = Literal["absent", "foreign", "building", "stale", "complete"]


def read_marker(prefix: Path) -> dict[str, object] | None:
    try:
        data = diskread.read_json(prefix / MARKER, diskread.MIB)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def state_of(prefix: Path, digest: str | None = None) -> PrefixState:
    """absent (nothing there), foreign (not ours), building (never finished), stale, complete."""
    try:
        if not prefix.exists():
            return "absent"
        marker = read_marker(prefix)
        if marker is None:
            if not prefix.is_dir():
                return "foreign"
            names = {p.name for p in prefix.iterdir()}
            if names == {MARKER + ".tmp"}:
                return "building"  # killed while writing its first marker
            return "foreign" if names else "absent"
    except OSError as exc:
        raise InstallError(f"cannot read {prefix}: {exc.strerror}") from exc
    if marker.get("state") != "complete":
        return "building"
    if digest is not None and marker.get("inputs_sha256") != digest:
        return "stale"
    return "complete"


def write_marker(prefix: Path, data: Mapping[str, object]) -> None:
    text = json.dumps(dict(data), indent=2, sort_keys=True) + "\n"
    write_atomic(prefix / MARKER, text, temp=prefix / (MARKER + ".tmp"))  # state_of knows it


def followed(target: Path) -> Path:
    """A prefix given as a symlink is the folder it leads to (never replaced by one of ours); a
    symlink that leads nowhere, or in a loop, is refused."""
    if not target.is_symlink() and not any(p.is_symlink() for p in target.parents):
        return target
    try:
        real = Path(os.path.realpath(target, strict=True))
    except OSError:
        if target.is_symlink():
            raise UsageError(
                f"--prefix {target} is a symlink that leads nowhere (or in a loop); provision "
                "will not replace it: give the folder it should lead to"
            ) from None
        return target  # a prefix still to be made, under real folders reached through a link
    return real


def check_not_another(name: str, target: Path) -> None:
    """A prefix that another registered environment lives in (or holds, or is inside) is that
    environment's: building there would wipe it while its record still points at it."""
    real = Path(os.path.realpath(target))
    for other, rec in registry.records():
        if other == name or isinstance(rec, str):
            continue
        theirs = Path(os.path.realpath(rec.prefix))
        if real == theirs or theirs in real.parents or real in theirs.parents:
            raise InstallError(
                f"--prefix {target} is where {other} is built ({rec.prefix}); provision will not "
                f"build {name} over it: choose another --prefix (or `provision remove {other}`)"
            )


def check_same_source(name: str, env_root: Path, replace: bool) -> None:
    """An environment of this name registered from another directory is someone's own (another
    project's, the README's): a build from here would replace it with no word. Only --replace
    does. A directory of the record that is gone counts as another: its build is still in use."""
    record = registry.get(name)
    if record is None or replace:
        return
    theirs, mine = os.path.realpath(record.env_dir), os.path.realpath(env_root)
    if theirs == mine:
        return
    gone = "" if os.path.isdir(record.env_dir) else ", which is gone now"
    raise InstallError(
        f"{name} is already built here ({record.prefix}) from {record.env_dir}{gone}; provision "
        f"will not replace it with {env_root}: give this one another name (--name), or pass "
        f"--replace to rebuild {name} from {env_root}"
    )


OLD = ".provision-old"  # a complete environment kept while its replacement is built
NEW = ".provision-new"  # a prefix being made, with its marker, before it is renamed into place


def finish_leftovers(target: Path) -> None:
    """What a run killed while replacing or making target left beside it: the old environment is
    put back when nothing replaced it, and deleted when something did; an unfinished new one is
    deleted. Only what holds provision's marker for this very prefix is touched."""
    for suffix in (NEW, OLD):
        left = target.with_name(target.name + suffix)
        if not left.is_dir() or left.is_symlink():
            continue
        marker = read_marker(left)
        if marker is None:
            # Killed before its first marker was in place, or after its last file was gone.
            with contextlib.suppress(OSError):
                if set(os.listdir(left)) <= {MARKER + ".tmp"}:
                    (left / (MARKER + ".tmp")).unlink(missing_ok=True)
                    left.rmdir()
            continue
        if marker.get("prefix", str(target)) != str(target):
            continue
        if suffix == NEW:
            owned.delete_tree(left)
            continue
        # OLD: the environment that worked before a rebuild that never finished goes back.
        now = state_of(target)
        if now == "complete":
            owned.delete_tree(left)
        elif now == "absent" and not target.is_symlink():
            left.rename(target)  # killed between moving the old one away and the new one in
        elif now == "building" and not (read_marker(target) or {}).get("existed"):
            owned.delete_tree(target)
            left.rename(target)
