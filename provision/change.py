"""`provision add NAME SPEC…` and `provision drop NAME PKG…`: change the user's packages later.

Each edits packages.in (the user's file: their other lines and comments stay), re-locks with the
smallest change (every other pin stays unless the change needs it to move: userlock on the
pip path, condalock's previous choices on the conda path), says what moved, then brings a built
environment along in place (install/sync: only the difference, hashes or checksums checked, on
every path) and verifies it again. When anything fails, packages.in, the lock and the prefix are
put back as they were, and the failure is said in one line (a conflict in a few).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from provision import diskread, environment, fileio, userpackages
from provision.environment import EnvDir, Found
from provision.errors import UsageError, VerifyError
from provision.fileio import write_atomic
from provision.progress import Event, Report, nothing

if TYPE_CHECKING:
    from provision.install.sync import Locked


@dataclass
class Changed:
    """What add/drop did: the lines to print, and what moved in the lock and the prefix."""

    name: str
    moved: list[str] = field(default_factory=list)  # "numpy 1.24.3 -> 1.26.0", "+ pandas 2.2.0"
    lines: list[str] = field(default_factory=list)
    synced_seconds: float | None = None
    verified: bool | None = None


def add(found: Found, specs: Sequence[str], *, verify: bool = True,
        report: Report = nothing) -> Changed:  # fmt: skip
    env = found.env
    conda = env.kind.conda_env
    wanted = [userpackages.parse_spec(s, conda, "add") for s in specs]
    old = env.user_text()
    new = userpackages.added(old, wanted, env.name, conda)
    return _change(found, old, new, verify, report, what=", ".join(p.line for p in wanted))


def drop(found: Found, names: Sequence[str], *, verify: bool = True,
         report: Report = nothing) -> Changed:  # fmt: skip
    found.rewritable("provision drop")  # where, before what
    env = found.env
    conda = env.kind.conda_env
    mine = {p.name: p for p in env.packages()}
    gone = [userpackages.canonical(n.split("[")[0].strip()) for n in names]
    theirs = [n for n in gone if n not in mine]
    if theirs:
        own = [n for n in theirs if n in userpackages.OWN or n in _pinned(env)]
        why = (
            f"{', '.join(own)} {'is' if len(own) == 1 else 'are'} TensorFlow's own pins, which stay"
            if own
            else f"{', '.join(theirs)} {'is' if len(theirs) == 1 else 'are'} not in "
            f"{env.name}/{environment.USER_FILE} (yours: {', '.join(mine) or 'none'}); a "
            "dependency goes when nothing of yours needs it"
        )
        raise UsageError(f"cannot drop from {env.name}: {why}")
    text = env.user_text() or ""
    new = userpackages.dropped(text, gone, conda)
    return _change(found, text, new, verify, report, what=", ".join(gone), dropping=True)


def _pinned(env: EnvDir) -> set[str]:
    from provision.lock.requirements import exact_pins, requirement_lines

    try:
        text = (env.root / "requirements.in").read_text(encoding="utf-8")
    except OSError:
        return set()
    return set(exact_pins(requirement_lines(text)))


def _change(found: Found, old_text: str | None, new_text: str, verify: bool, report: Report,
            *, what: str, dropping: bool = False) -> Changed:  # fmt: skip
    from provision import lock
    from provision.install.sync import Locked

    env = found.env
    found.rewritable(f"provision {'drop' if dropping else 'add'}")
    result = Changed(env.name)
    if old_text == new_text and _fresh(env):
        result.lines.append(f"{env.user_file}: nothing to change ({what} as it is)")
        return result
    old_lock = diskread.text_or_none(env.lock, environment.RENDERED_LIMIT)
    prefix = _built_prefix(found)
    report(Event("step", f"{'dropping' if dropping else 'adding'} {what}: locking {env.name} ..."))
    with _held(prefix), _restored_on_failure(env, old_text, old_lock):
        write_atomic(env.user_file, new_text)
        locked = lock.run(env)
        conda = env.kind.conda_env
        old = Locked.read(old_lock, conda) if old_lock else None  # an empty lock: nothing moved
        new = Locked.read(env.lock.read_text(encoding="utf-8"), conda)
        result.moved = moved(old, new)
        result.lines.append(locked.summary)
        if prefix is None:
            result.lines.append(_not_synced(found))
        elif old_lock is not None:
            before = old if old is not None else Locked.read(old_lock, conda)
            _sync_and_verify(env, prefix, before, new, verify, report, result)
    return result


def _sync_and_verify(env: EnvDir, prefix: Path, old: Locked, new: Locked, verify: bool,
                     report: Report, result: Changed) -> None:  # fmt: skip
    from dataclasses import replace

    from provision import registry
    from provision.facts import store
    from provision.install import prefix_hooks, sync
    from provision.install.build import inputs_digest
    from provision.verify import baseline

    record = registry.get(env.name)
    # Breaks that stand before this change are not provision's to vouch for; what the sync does
    # is: the baseline follows it (a package dropped is not "removed by hand").
    standing = baseline.standing(env.name)
    kept = store.get_or_none(env.name)
    done = sync.sync(env, prefix, old, new, inputs_digest(env), report)
    result.synced_seconds = done.seconds
    result.lines.append(
        f"synced {prefix} in {done.seconds:.1f} s ({len(done.installed)} installed or changed, "
        f"{len(done.removed)} removed)"
    )
    try:
        if record is not None:
            registry.put(replace(record, lock_sha256=fileio.sha256_file(env.lock)))
        if not standing:
            store.record_quietly(env.name, "add")
        if verify:
            from provision import verify as verify_mod

            report(Event("step", f"verifying {env.name} ..."))
            outcome = verify_mod.verify(env, prefix=prefix)
            result.verified = outcome.ok
            if not outcome.ok:
                raise VerifyError(f"{env.name} no longer verifies: {outcome.as_step().summary}")
            result.lines.append(outcome.as_step(env.name).summary)
            if outcome.still_broken:
                result.lines.append(outcome.still_broken)
    except BaseException:
        sync.restore(prefix, done.before, done.after, report)
        if record is not None:
            registry.put(record)
        if kept is not None:
            store.put(kept)  # the baseline goes back with the prefix
        raise
    prefix_hooks.keep_source(env, prefix)  # the copy the build keeps follows its inputs
    if standing and not verify:
        result.lines.append(baseline.still_broken_line(env.name, standing, "an add"))


def moved(old: Locked | None, new: Locked) -> list[str]:
    """What changed between two locks (a conda lock: its conda and pip packages for this host), a
    line a package, sorted by name."""
    before = old.versions() if old is not None else {}
    after = new.versions()
    out = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        out.append(f"+ {name} {b}" if a is None else f"- {name} {a}" if b is None
                   else f"  {name} {a} -> {b}")  # fmt: skip
    return out


def _fresh(env: EnvDir) -> bool:
    from provision import lock
    from provision.errors import StaleError

    try:
        lock.check_lock(env)
    except StaleError:
        return False
    return True


def _not_synced(found: Found) -> str:
    """Why no built environment followed the lock, and how to build one from it."""
    from provision import registry

    name, other = found.env.name, registry.get(found.env.name)
    if other is None or found.record is not None:
        return f"{name} is not built here; provision install {name} builds it"
    return (
        f"{name} is built here from {other.env_dir}, not from {found.env.root}: the built "
        f"environment did not change (provision install {name} --out {found.env.root.parent} "
        "--replace rebuilds it from this one)"
    )


def _built_prefix(found: Found) -> Path | None:
    """The prefix of NAME's build here, when it is complete and built from this directory."""
    from provision.install.place import state_of

    if found.record is None:
        return None
    prefix = Path(found.record.prefix)
    if not found.env.kind.owns_prefix:  # install.sh's venv: no marker of provision's
        return prefix if (prefix / "bin" / "python").exists() else None
    if state_of(prefix) != "complete":
        return None
    return prefix


@contextlib.contextmanager
def _held(prefix: Path | None) -> Iterator[None]:
    """The prefix's build lock, as install holds it: no install rebuilds it while it is synced."""
    if prefix is None:
        yield
        return
    from provision.install.build import exclusive

    with exclusive(prefix):
        yield


@contextlib.contextmanager
def _restored_on_failure(
    env: EnvDir, user_text: str | None, lock_text: str | None
) -> Iterator[None]:
    """packages.in and the lock as they were, whatever fails inside (Ctrl-C included)."""
    try:
        yield
    except BaseException:
        if user_text is None:
            with contextlib.suppress(OSError):
                env.user_file.unlink()
        else:
            write_atomic(env.user_file, user_text)
        if lock_text is not None:
            write_atomic(env.lock, lock_text)
        raise
