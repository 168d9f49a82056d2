"""Locking the user's packages (packages.in) with TensorFlow's requirements, on the pip path.

TensorFlow's own requirements resolve as of its upload (pylock.AsOf). A user's package resolves as
of the time it was declared: that time is recorded per line in the lock (`provision-declared`),
reused by every later lock of the same line (so a re-lock of unchanged inputs is byte-identical),
and moved to now only by `lock --upgrade [PKG]` or by a changed line.

The smallest change: the previous lock (or, on a first lock, TensorFlow's lock alone) is given to
uv as the output file it starts from, so uv keeps every pin it holds unless the new packages need
it to move. A resolution that fails is explained in a few lines (conflicts).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from provision import _children, _proc, diskread, environment, tools
from provision.errors import LockError
from provision.lock import conflicts, frameworks, pylock
from provision.lock.lockinputs import LockTarget
from provision.lock.requirements import exact_pins, pins, requirement_lines

DECLARED_TAG = "# provision-declared: "
# The line of a pip lock whose NVIDIA libraries moved for another framework.
CUDA_TAG = "# provision-cuda-libraries: "
ALL: tuple[str, ...] = ()  # upgrade=ALL: every one of the user's packages


def lock_requirements(target: LockTarget) -> list[str]:
    """requirements.in's requirement lines as the lock resolves them: with another framework
    among the user's packages, TensorFlow's NVIDIA pins widened to its and-cuda ranges."""
    lines = requirement_lines((target.root / "requirements.in").read_text("utf-8"))
    return frameworks.requirements(target.spec, lines) if beside(target) else lines


def read_declared(lock_text: str | None) -> dict[str, str]:
    """line of packages.in -> when it was declared, as the lock records it."""
    for line in (lock_text or "").splitlines()[:40]:
        if line.startswith(DECLARED_TAG):
            try:
                data = json.loads(line.removeprefix(DECLARED_TAG))
            except ValueError:
                return {}
            if isinstance(data, dict):
                return {str(k): str(v) for k, v in data.items()}
    return {}


def declared_line(declared: dict[str, str]) -> str:
    return f"{DECLARED_TAG}{json.dumps(declared, sort_keys=True, separators=(',', ':'))}\n"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def lock(
    target: LockTarget, platform: str, cache_dir: Path | None, upgrade: Sequence[str] | None = None
) -> tuple[str, str]:
    """pylock.lock, with the user's packages: the body and its notes, checked against the row."""
    with _children.workdir() as tmp:
        body, notes = _lock(target, platform, cache_dir, Path(tmp), upgrade)
    if beside(target):
        wrong = frameworks.problems(target.spec, body)
        got = pins(body)
        wrong += [
            f"{name} resolved to its CPU build only (no CUDA build of it fits TensorFlow "
            f"{target.spec.release.pin}'s CUDA line; provision matrix pairs {name})"
            for name in beside(target)
            if not frameworks.gpu_build(name, got)
        ]
        if wrong:
            raise LockError(f"{target.name}: the resolved lock is not usable: {'; '.join(wrong)}")
    else:
        pylock.check_row(target, body)
    return body, notes


def beside(target: LockTarget) -> list[str]:
    """The other frameworks among the user's packages (pip path): TensorFlow's NVIDIA libraries
    may move within its and-cuda ranges (where its wheel has them), in one CUDA line."""
    if not target.spec.kind.pins_nvidia_wheels:
        return []
    return frameworks.named([p.name for p in target.packages])


def glibc_floor(target: LockTarget) -> str | None:
    """The glibc the lock targets when it is not the release's own: the frameworks' (beside)."""
    return frameworks.glibc(target.spec) if beside(target) else None


def _lock(
    target: LockTarget,
    platform: str,
    cache_dir: Path | None,
    workdir: Path,
    upgrade: Sequence[str] | None = None,
) -> tuple[str, str]:
    """(the body, its notes: as-of and declared lines) of a pip lock with the user's packages.
    upgrade: None keeps every declared time; ALL moves every user package to now; names, those."""
    spec = target.spec
    previous_text = diskread.text_or_none(target.lock_path, environment.RENDERED_LIMIT)
    if previous_text is not None and not _readable(previous_text):
        previous_text = None  # an edited or truncated lock is no place to start from
    previous = pylock.read_as_of(previous_text or "")
    requirements = lock_requirements(target)
    env = pylock.uv_env(cache_dir)
    floor = glibc_floor(target)
    python_platform = pylock.python_platform(spec, platform, floor)
    when = pylock.as_of(requirements, spec.python, python_platform, workdir, env, previous)
    same_release = previous is not None and when is not None and previous.pin == when.pin
    upgraded = _upgraded(target, upgrade)
    moving = _with_their_own(upgraded, previous_text or "", requirements)
    recorded = read_declared(previous_text) if same_release or when is None else {}
    stamp = now()
    declared = {
        p.line: stamp if p.name in upgraded else recorded.get(p.line, stamp)
        for p in target.packages
    }
    # Where uv starts from: the previous lock, else TensorFlow's lock alone (as it would be).
    if previous_text is not None and (same_release or when is None):
        seed = previous_text
    else:
        (workdir / "base").mkdir()
        seed, _ = pylock.compile_lock(
            spec, target.root, platform, workdir / "base", cache_dir, previous=when
        )
    (workdir / "requirements.in").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    (workdir / "packages.in").write_text(
        "".join(p.spec + "\n" for p in target.packages), encoding="utf-8"
    )
    output = workdir / "requirements.lock"
    output.write_text(seed, encoding="utf-8")
    extra = _cutoffs(target, requirements, when, declared)
    others = beside(target)
    if others:
        (workdir / "constraints.txt").write_text(
            "".join(c + "\n" for c in frameworks.forbidden(spec)), encoding="utf-8"
        )
        extra += ["--constraint", "constraints.txt"]
    index = pylock.pip_index_url()

    def uv_argv(out: Path, args: Sequence[str], sources: Sequence[str] = ()) -> list[str]:
        return pylock.uv_compile_argv(
            tools.uv(), spec, platform, out, index, args, sources=sources, glibc=floor
        )

    upgrades = [arg for name in sorted(moving) for arg in ("--upgrade-package", name)]
    argv = uv_argv(output, [*extra, *upgrades], ("packages.in",))
    fresh = [p.spec for p in target.packages if p.name in upgraded or p.line not in recorded]
    # (uv's --upgrade-package implies --refresh-package: what moves is read fresh, as online)
    refresh = [arg for name in sorted(moving) for arg in ("--refresh-package", name)]
    folders = iter(range(1, 100))

    def read_fresh(lines: Sequence[str], deps: bool) -> dict[str, str] | None:
        """Resolve `lines` alone, online, reading their index pages again (with deps, also those
        of all they need, and their metadata): name -> the release chosen, None on a failure."""
        folder = workdir / f"fresh{next(folders)}"
        folder.mkdir()
        (folder / "requirements.in").write_text("".join(ln + "\n" for ln in lines), "utf-8")
        if others:  # one CUDA line beside another framework
            shutil.copyfile(workdir / "constraints.txt", folder / "constraints.txt")
        out = folder / "requirements.lock"
        args = [*extra, *refresh, *([] if deps else ["--no-deps"])]
        done = _proc.run(uv_argv(out, args), cwd=folder, env=env, timeout=900, check=False)
        return pins(out.read_text(encoding="utf-8")) if done else None

    offline = uv_argv(output, [*extra, "--offline"], ("packages.in",))
    if seed is not previous_text or not _from_cache(offline, fresh, moving, read_fresh, env):
        done = _proc.run(argv, cwd=workdir, env=env, timeout=900, check=False)
        if not done:
            raise conflicts.explain(
                target, done.stderr or done.stdout, _relaxed(argv, workdir, env), others
            )
    notes = (when.header_line() + "\n" if when else "") + declared_line(declared)
    if others:
        notes += (
            f"{CUDA_TAG}TensorFlow {spec.release.pin}'s NVIDIA libraries within its and-cuda "
            f"ranges, one CUDA line, beside {', '.join(others)}\n"
        )
    return output.read_text(encoding="utf-8"), notes


UNCACHED_RE = re.compile(r"`([^`\s]+==[^`\s]+)` needs to be downloaded from a registry")


def _from_cache(
    offline: list[str],
    fresh: Sequence[str],
    moving: Iterable[str],
    read_fresh: Callable[[Sequence[str], bool], dict[str, str] | None],
    env: dict[str, str],
) -> bool:
    """True when the lock came from uv's cache and is the one an online resolution gives; False
    (the output file as it was) to resolve online. `offline`: the resolution with --offline and
    without --upgrade-package (which would ask for the page again): what moves is left out of the
    lock uv starts from instead.

    uv revalidates every index page older than the index's max-age, a request a package: a change
    to a lock of 60 pins cost 60. A pin uv keeps from the previous lock needs no fresh page; one
    the change adds, moves or upgrades does: so the cached resolution runs, the pages of what it
    decided are read again (a request each, together, no dependencies followed), and it runs
    again until it decides nothing on a page not read just now (four rounds at most), unless
    those pages offer nothing newer than what it decided. Offline, uv passes over a release whose
    metadata it has not cached (its log says so): those are fetched and the round repeats. A
    package never seen before: its line is resolved alone online first."""
    output = Path(offline[offline.index("--output-file") + 1])
    workdir = output.parent
    seed = output.read_text(encoding="utf-8")
    before = pins(seed)
    upgraded = set(moving)
    start = "".join(f"{n}=={v}\n" for n, v in before.items() if n not in upgraded)
    logged = [a for a in offline if a != "--quiet"] + ["--verbose"]
    read: set[str] = set()
    alone = not fresh  # the new lines resolved alone, online: once at most
    for _ in range(4):
        output.write_text(start if upgraded else seed, encoding="utf-8")
        done = _proc.run(logged, cwd=workdir, env=env, timeout=900, check=False)
        if not done or (uncached := sorted(set(UNCACHED_RE.findall(done.stderr or "")))):
            # a cache miss (the new lines, once) or releases passed over: fetch them, and all
            # they need, online; their pages are then read too
            if not done and alone:
                break  # a conflict: the online resolution says which
            more = read_fresh(fresh if not done else uncached, True)
            if more is None:
                break
            alone = alone or not done
            read.update(more)
            continue
        after = pins(output.read_text(encoding="utf-8"))
        unread = sorted(
            n for n, v in after.items() if (n in upgraded or before.get(n) != v) and n not in read
        )
        if not unread:
            return True
        newest = read_fresh(unread, False)
        if newest is None:
            break
        if all(newest.get(n) == after[n] for n in unread):
            return True  # the fresh pages hold nothing newer than what was decided: it stands
        read.update(unread)
    output.write_text(seed, encoding="utf-8")
    return False


def _readable(text: str) -> bool:
    from provision.lock.requirements import parse_lock

    try:
        parse_lock(text)
    except ValueError:
        return False
    return True


def _upgraded(target: LockTarget, upgrade: Sequence[str] | None) -> set[str]:
    names = {p.name for p in target.packages}
    if upgrade is None:
        return set()
    if not upgrade:
        return names
    from provision.userpackages import canonical

    unknown = sorted({canonical(n) for n in upgrade} - names)
    if unknown:
        from provision.errors import UsageError

        yours = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"--upgrade {', '.join(unknown)}: not one of your packages in {target.name}/"
            f"packages.in (yours: {yours}); TensorFlow's own dependencies move with the release"
        )
    return {canonical(n) for n in upgrade}


def _with_their_own(names: set[str], lock_text: str, requirements: Sequence[str]) -> set[str]:
    """The packages to upgrade and the dependencies only they bring (by the lock's `# via`):
    what TensorFlow's own requirements reach stays as of the release."""
    if not names:
        return set()
    from packaging.requirements import InvalidRequirement, Requirement

    from provision.lock.requirements import norm, parse_lock, reach

    required_by: dict[str, list[str]] = {}  # parent -> what it requires
    for pin in parse_lock(lock_text):
        for parent in pin.via:
            required_by.setdefault(parent, []).append(pin.name)
    roots: list[str] = []
    for line in requirements:
        with contextlib.suppress(InvalidRequirement):
            roots.append(norm(Requirement(line).name))
    edges: Mapping[str, Iterable[str]] = required_by
    theirs: set[str] = reach(sorted(names), edges)
    tensorflows: set[str] = reach(roots, edges)
    return names | (theirs - tensorflows)


def _cutoffs(
    target: LockTarget,
    requirements: Sequence[str],
    when: pylock.AsOf | None,
    declared: dict[str, str],
) -> list[str]:
    """TensorFlow's exact pins as given; each user package as of its declaration; the rest may
    move up to the latest declaration, but only where a user's package needs it (uv keeps the
    previous pins otherwise)."""
    if when is None:  # the index publishes no upload times: no cut-off for anyone
        return []
    latest = max([when.cutoff, *declared.values()])
    args = pylock.cutoff_args(requirements, pylock.AsOf(when.pin, latest))
    for package in target.packages:
        if package.name not in exact_pins(requirements):
            args += ["--exclude-newer-package", f"{package.name}={declared[package.line]}"]
    return args


def _relaxed(argv: list[str], workdir: Path, env: dict[str, str]) -> conflicts.Relax:
    """relax(name) -> the version uv picks for `name` alone in place of the user's requirement,
    or None when even that does not resolve (for the explanation's "what fits")."""

    def relax(name: str, lines: Sequence[str]) -> str | None:
        trial = workdir / "relaxed"
        trial.mkdir(exist_ok=True)
        (trial / "requirements.in").write_text(
            (workdir / "requirements.in").read_text("utf-8"), encoding="utf-8"
        )
        (trial / "packages.in").write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
        if (workdir / "constraints.txt").is_file():  # one CUDA line beside another framework
            shutil.copyfile(workdir / "constraints.txt", trial / "constraints.txt")
        out = trial / "requirements.lock"
        out.unlink(missing_ok=True)
        again = [str(out) if a == str(workdir / "requirements.lock") else a for a in argv]
        done = _proc.run(again, cwd=trial, env=env, timeout=600, check=False)
        if not done:
            return None
        return pylock.pins(out.read_text(encoding="utf-8")).get(name)

    return relax


def locked_libraries(env: environment.EnvDir) -> dict[str, str]:
    """The CUDA runtime and cuDNN (major.minor, keys "cuda" and "cudnn") of a pip lock whose
    NVIDIA libraries moved within the release's and-cuda ranges for another framework (its
    CUDA_TAG line); empty for any other lock, and for one that cannot be read."""
    try:
        text = diskread.read_text(env.lock, environment.RENDERED_LIMIT)
    except (OSError, diskread.Unreadable):
        return {}
    if CUDA_TAG not in text:
        return {}
    try:
        locked = pins(text)
    except ValueError:
        return {}
    found = {}
    for key, wheel in (("cuda", "nvidia-cuda-runtime-cu"), ("cudnn", "nvidia-cudnn-cu")):
        version = next((v for n, v in sorted(locked.items()) if n.startswith(wheel)), None)
        if version:
            found[key] = ".".join(version.split(".")[:2])
    return found
