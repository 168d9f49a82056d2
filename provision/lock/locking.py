"""`provision lock NAME`: the lockfile next to envs/NAME/'s inputs; `--check` and check_lock().

conda path: conda-lock writes conda-lock.yml, its pip section resolved by uv (condalock,
condapip). pip and system paths: uv writes requirements.lock with hashes (pylock).

Every lock starts with a header saying how it was made and how to remake it, the meaning of its
inputs with their digest, and the digest of its own body (lockfile). So `--check` and check_lock()
need neither network nor solver to tell a stale lock from an edited, truncated or unreadable one,
and then check that it is complete and closed (lockcheck). Locks are written beside the old one
and renamed into place: an interrupted or failed lock leaves the previous file as it was, and
stops every process it started (_children). After locking, the CUDA packages in the lock are
compared with the matrix row; a lock that disagrees is not written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from provision import fileio
from provision.environment import EnvDir
from provision.errors import StaleError, UsageError
from provision.lock import condalock, lockfile, pylock, userlock
from provision.lock.lockcheck import verify
from provision.lock.lockinputs import load_target
from provision.steps import StepResult
from provision.tools import SOLVERS


def run(
    env: EnvDir,
    *,
    platforms: Sequence[str] = (),
    channels: Sequence[str] = (),
    solver: str = "auto",
    check: bool = False,
    cache_dir: Path | None = None,
    upgrade: Sequence[str] | None = None,
) -> StepResult:
    """`provision lock`: done when a lock was written; with check, done when the lock is fresh
    and stale (the reason as its line) when it is missing, edited or out of date.
    upgrade: the user's packages to resolve as of now (() for all of them; None: none)."""
    target = load_target(env)
    name = env.name
    plats = list(dict.fromkeys(platforms)) or list(target.spec.platforms)
    if not target.spec.kind.conda_env and channels:
        raise UsageError(
            f"--channel is for conda environments; {name} is on the {target.spec.path} path"
        )
    if not target.spec.kind.conda_env and len(plats) != 1:
        raise UsageError(f"{name}: requirements.lock holds one platform; give one --platform")
    if solver not in SOLVERS:
        raise UsageError(f"--solver takes one of {', '.join(SOLVERS)}, not {solver!r}")
    if upgrade is not None and not target.packages:
        raise UsageError(
            f"--upgrade: {name} has no packages of yours ({name}/packages.in); TensorFlow's own "
            "dependencies move with the release (provision render --tf X.Y)"
        )
    data = lockfile.inputs(target, plats, channels)
    rel = f"{env.root.parent.name}/{name}/{target.lock_path.name}"
    regen = lockfile.regen_command(target, plats, channels)
    if check:
        try:
            count = verify(target, data, rel, regen)
        except StaleError as exc:
            return StepResult("lock", "stale", [str(exc)])
        return StepResult("lock", "done", [f"{rel} is up to date ({count} packages)"])
    started = time.monotonic()
    if target.spec.kind.conda_env:
        condalock.check_virtual_platforms(target, plats)
        body, used, note = condalock.lock(target, plats, channels, solver, cache_dir, upgrade)
    else:
        if target.packages:
            body, note = userlock.lock(target, plats[0], cache_dir, upgrade)
        else:
            body, note = pylock.lock(target, plats[0], cache_dir)
        used = "uv"
        lockfile.check_prereleases(target.spec, body)
    count = lockfile.count(target, body)
    full_body = note + body + lockfile.end_line(count)
    text = lockfile.header(target, data, regen, fileio.sha256_text(full_body)) + full_body
    fileio.write_atomic(target.lock_path, text)
    seconds = time.monotonic() - started
    return StepResult("lock", "done", [f"wrote {rel} ({count} packages, {used}, {seconds:.1f} s)"])


def check_lock(env: EnvDir) -> None:
    """Before installing from envs/NAME's lock: it exists, has provision's header, is fresh for
    the inputs as they are now (with the platforms and channels it was made for), is the body
    it was made with (not edited, not truncated, readable), and is complete and closed.

    Raises StaleError (no lock yet; inputs changed; made by another provision version) or its
    subclass LockInvalid (empty, no header, truncated, edited, not valid YAML, not closed), each
    with a one-line message that names the lock, the reason and `run: provision lock ...`;
    LockError as load_target does (a request that does not resolve, unreadable inputs)."""
    target = load_target(env)
    platforms, channels = lockfile.made_for(target)
    rel = f"{env.root.parent.name}/{env.name}/{target.lock_path.name}"
    verify(target, lockfile.inputs(target, platforms, channels), rel,
           lockfile.regen_command(target, platforms, channels))  # fmt: skip
