"""The baseline `provision check` compares with, and what may replace it.

A build records the facts it left (provision.facts). A passing smoke test, or an add, records them
anew, except over a break it did not vouch for: a break stays found until it is fixed. What the
host changed (the driver, the GPUs) a smoke test that ran on a GPU vouches for; what changed inside
the environment and breaks it (a library gone, the start-up hook gone, a package conflict, another
Python) no smoke test does, since it loads only part of the environment: a smoke test on the CPU
never loads cuDNN, and none imports every package. Those are fixed by putting the environment
back (`provision install NAME --force`), which records its facts as a build does.
"""

from __future__ import annotations

from pathlib import Path

from provision import registry
from provision.errors import ProvisionError, UsageError
from provision.facts import store
from provision.facts.collect import env_facts, host_facts
from provision.verify.changes import Change, DriftSubject, compare

# Breaks a smoke test that ran on a GPU disproves: the GPU the environment needs works.
VOUCHED_ON_A_GPU = frozenset({"driver", "gpu"})


def unvouched(changes: tuple[Change, ...] | list[Change], gpus_used: int) -> list[Change]:
    """The breaks among `changes` that a passing run on `gpus_used` GPUs did not vouch for."""
    return [
        c for c in changes
        if c.severity == "breaks" and not (gpus_used > 0 and c.subject in VOUCHED_ON_A_GPU)
    ]  # fmt: skip


def changes_of(rec: registry.Record) -> list[Change]:
    """What changed under a registered environment since its recorded facts (FactsError when
    there are none to compare with)."""
    old = store.get(rec.name)
    now = env_facts(Path(rec.prefix), Path(rec.interpreter), rec.python)
    return compare(old, host_facts(), now, subject(rec))


def standing(name: str, gpus_used: int = 0) -> list[Change]:
    """The breaks under NAME now that a run on `gpus_used` GPUs does not vouch for ([] when it is
    not built here or has no usable baseline)."""
    rec = registry.get(name)
    return [] if rec is None else _standing(rec, gpus_used)


def _standing(rec: registry.Record, gpus_used: int) -> list[Change]:
    try:
        return unvouched(changes_of(rec), gpus_used)
    except (ProvisionError, OSError):
        return []  # no usable baseline to keep: one is recorded


def record_after(name: str, source: str, gpus_used: int = 0) -> list[Change]:
    """Record the facts of NAME as they are now, after a passing `source` ("verify", "add") that
    ran on `gpus_used` GPUs, unless a break it did not vouch for stands: then the old baseline is
    kept and those breaks are returned, for the caller to say. Never raises (a run that worked is
    not reported as failed for want of its facts)."""
    rec = registry.get(name)
    if rec is None:
        return []
    breaks = _standing(rec, gpus_used)
    if not breaks:
        store.record_quietly(name, source, gpus_used)
    return breaks


def still_broken_line(name: str, breaks: list[Change], by: str) -> str:
    """One line: what still breaks NAME although `by` ("a smoke test on the CPU only") passed,
    and how to proceed."""
    first = breaks[0]
    more = f" (and {len(breaks) - 1} more break(s))" if len(breaks) > 1 else ""
    fix = first.fix or f"`provision install {name} --force`"
    return (
        f"{name}: baseline kept, still broken: {first.what}: {first.effect}{more} ({by} does "
        f"not vouch for it); fix: {fix}, then `provision check {name} --verify`"
    )


def subject(rec: registry.Record) -> DriftSubject:
    """What the judgement needs to know about the environment besides its facts."""
    from provision import matrix

    release = cuda = None
    try:
        m = matrix.load()
        release = m.release(rec.tf)
        cuda = m.cuda_of(release)
    except ProvisionError:
        pass
    return DriftSubject(rec.name, rec.tf, release, cuda, _lock_pins(rec), rec.interpreter)


def _lock_pins(rec: registry.Record) -> dict[str, str]:
    """name -> version the lock pins (a conda lock: its linux-64 packages, pip ones included)."""
    from provision.matrix import kinds

    try:
        kind: kinds.PathKind | None = kinds.of(rec.path)
    except UsageError:
        kind = None  # a path name provision does not know: read as a requirements lock
    lock = Path(rec.env_dir) / (kind.lock_file if kind is not None else "requirements.lock")
    try:
        text = lock.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        if kind is not None and kind.conda_env:
            from provision.lock import condafile
            from provision.lock.requirements import norm

            pkgs = condafile.parse(text, lock.name).versions()
            return {norm(k): v for k, v in (pkgs.get("linux-64") or {}).items()}
        from provision.lock.requirements import pins

        return pins(text)
    except (ProvisionError, ValueError, KeyError, TypeError):
        return {}
