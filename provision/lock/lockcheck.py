"""Is a lock the one to install from? Offline: neither network nor solver.

verify() tells a stale lock (no lock yet, inputs changed, another format) from an invalid one
(empty, no header, truncated, edited, unreadable), and then checks that it is complete and closed:
every input requirement is met by a package of the lock, every dependency a package names is in
it, every package is required by something, and every package has a hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provision import diskread
from provision.errors import LockInvalid, StaleError
from provision.fileio import sha256_text
from provision.lock import condafile, lockinputs
from provision.lock.condafile import LockedPackage
from provision.lock.lockfile import (
    END_TAG,
    FORMAT,
    LockInputs,
    digest,
    header,
    read_lock,
    what_changed,
)
from provision.lock.lockinputs import EnvironmentYml, LockTarget, one_line
from provision.lock.requirements import (
    Pin,
    applies,
    closure_problems,
    marker_environment,
    norm,
    parse_lock,
    reach,
    satisfies,
)

LOCK_LIMIT = condafile.LIMIT


def verify(target: LockTarget, data: LockInputs, rel: str, regen: str) -> int:
    """The number of packages of a lock that is fresh for `data`, intact, complete and closed;
    else StaleError / LockInvalid, naming the first thing wrong (see lock.check_lock)."""
    path = target.lock_path
    if not path.is_file():
        raise StaleError(f"{rel} does not exist yet; run: {regen}")
    try:
        # universal newlines: a CRLF checkout is the same
        text = diskread.read_text(path, LOCK_LIMIT)
    except (OSError, ValueError) as exc:
        raise LockInvalid(f"{rel} cannot be read ({one_line(exc)}); run: {regen}") from exc
    if not text.strip():
        raise LockInvalid(f"{rel}: the lock is empty; run: {regen}")
    found = read_lock(text)
    if found.inputs is None:
        raise LockInvalid(
            f"{rel} has no provision header (its first lines were removed, or provision did not "
            f"make it); run: {regen}"
        )
    if found.inputs.get("format") != FORMAT:
        raise StaleError(f"{rel} is stale ({what_changed(found.inputs, data)}); run: {regen}")
    if found.body_digest is None or found.inputs_digest is None:
        raise LockInvalid(f"{rel} has an incomplete provision header; run: {regen}")
    if not found.body.rstrip("\n").rsplit("\n", 1)[-1].startswith(END_TAG):
        raise LockInvalid(
            f"{rel}: the lock is truncated (its last line, {END_TAG.strip()}, is missing); "
            f"run: {regen}"
        )
    first_line = text[: len(text) - len(found.body)].count("\n") + 1
    try:
        parsed = _parse_body(target, found.body, first_line)
    except ValueError as exc:
        raise LockInvalid(f"{rel}: {exc}; run: {regen}") from exc
    if sha256_text(found.body) != found.body_digest:
        raise LockInvalid(
            f"{rel}: the lock was edited after it was made (its body does not match the "
            f"digest in its header); run: {regen}"
        )
    if found.inputs_digest != digest(data) or found.inputs != data:
        raise StaleError(f"{rel} is stale ({what_changed(found.inputs, data)}); run: {regen}")
    _check_header(target, data, rel, regen, text[: len(text) - len(found.body)], found.body_digest)
    wrong = _closure(target, parsed, str(data["platforms"][0]))
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise LockInvalid(f"{rel} is not complete and closed: {wrong[0]}{more}; run: {regen}")
    return len(parsed)


def _check_header(
    target: LockTarget, data: LockInputs, rel: str, regen: str, head: str, body_digest: str
) -> None:
    """The header must be the one provision writes for these inputs, line for line: users read
    its `regenerate with:` and `Install with:` lines as commands to type, and no digest covers
    them. A line that differs is not shown (it may be a command no one should run)."""
    want = header(target, data, regen, body_digest).splitlines()
    have = head.splitlines()
    for number, (line, wanted) in enumerate(zip(have, want, strict=False), 1):
        if line != wanted:
            raise LockInvalid(
                f"{rel}: line {number} of its header is not what provision writes (an edited "
                f"header may show a command provision never wrote); run: {regen}"
            )
    if len(have) != len(want):
        raise LockInvalid(
            f"{rel}: its header has {len(have)} lines, provision writes {len(want)}; run: {regen}"
        )


def _parse_body(target: LockTarget, body: str, first_line: int) -> list[Pin] | list[LockedPackage]:
    """The body's packages: requirements Pins (pip/system) or conda-lock's packages; ValueError
    if not."""
    if not target.spec.kind.conda_env:
        try:
            return parse_lock(body, first_line)
        except ValueError as exc:
            raise ValueError(f"the lock's body is not a requirements lock ({exc})") from exc
    return list(condafile.parse(body, "the lock's body", ValueError, first_line).packages)


# -- complete and closed -----------------------------------------------------------------------


def _closure(
    target: LockTarget, parsed: list[Pin] | list[LockedPackage], platform: str
) -> list[str]:
    # The list is of one kind, the one _parse_body read for this path: each filter keeps it all.
    if not target.spec.kind.conda_env:
        env = marker_environment(target.spec.python, platform)
        pins = [p for p in parsed if isinstance(p, Pin)]
        from provision.lock import userlock

        base = lockinputs.requirements_in(target)
        if userlock.beside(target):  # TensorFlow's NVIDIA pins widened to its ranges
            from packaging.requirements import Requirement

            base = [Requirement(r) for r in userlock.lock_requirements(target)]
        requirements = [*base, *lockinputs.user_requirements(target)]
        source = "requirements.in" + (" and packages.in" if target.packages else "")
        return closure_problems(requirements, pins, source, env)
    packages = [p for p in parsed if isinstance(p, LockedPackage)]
    return conda_closure_problems(lockinputs.read_environment(target, user=True), packages)


def conda_closure_problems(env: EnvironmentYml, packages: Sequence[LockedPackage]) -> list[str]:
    """Per platform: every match spec of environment.yml is met by a conda package and every pip
    requirement by a pip package (or a Python package conda provides); every dependency a package
    names is in the lock (virtual packages aside); every package is reachable from the inputs
    through the packages' `dependencies`; every package has a hash."""
    out: list[str] = []
    for platform in sorted({p.platform for p in packages}):
        pkgs = [p for p in packages if p.platform == platform]
        out += [f"{platform}: {problem}" for problem in _platform_closure(env, pkgs, platform)]
    return out


def _platform_closure(
    env: EnvironmentYml, pkgs: Sequence[LockedPackage], platform: str
) -> list[str]:
    table: dict[tuple[str, str], LockedPackage] = {
        (p.manager, norm(p.name) if p.pip else p.name): p for p in pkgs
    }
    provided = {norm(p.name): p.name for p in pkgs if not p.pip}
    out: list[str] = []

    def find(name: str, pip_name: bool) -> tuple[str, str] | None:
        """A conda package names conda packages; pip names a pip package, or a Python
        package conda provides (the pip section was resolved with those held)."""
        if not pip_name:
            return ("conda", name) if ("conda", name) in table else None
        key = norm(name)
        if ("pip", key) in table:
            return ("pip", key)
        return ("conda", provided[key]) if key in provided else None

    conda = {p.name: p for p in pkgs if not p.pip}
    roots = []
    for text in env.conda:
        name, problem = _conda_requirement(text, conda)
        roots += [("conda", name)] if name else []
        out += [problem] if problem else []
    python = table.get(("conda", "python"))
    markers = marker_environment(python.version if python else "3", platform)
    for req in (r for r in env.pip if applies(r, markers)):
        node = find(req.name, pip_name=True)
        if node is None:
            out.append(f"{req} (pip) has no package")
            continue
        roots.append(node)
        if not satisfies(req, table[node].version):
            out.append(f"{req} (pip) is not satisfied by {table[node].shown}")
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for node, pkg in table.items():
        if not (pkg.hash.md5 or pkg.hash.sha256):
            out.append(f"{pkg.shown} has no hash")
        for dep in pkg.dependencies:
            if dep.startswith("__"):
                continue  # virtual packages: the host's, never in a lock
            found = find(dep, pip_name=pkg.pip)
            if found is None:
                out.append(f"{pkg.shown} depends on {dep}, which the lock does not hold")
            else:
                edges.setdefault(node, []).append(found)
    reached = reach(roots, edges)
    out += [
        f"{table[node].shown} ({node[0]}) is in the lock but nothing in environment.yml requires it"
        for node in sorted(table)
        if node not in reached
    ]
    return out


def _conda_requirement(text: str, conda: Mapping[str, LockedPackage]) -> tuple[str, str]:
    """(the locked package a match spec names, what is wrong: '' when the lock meets it)."""
    from rattler import MatchSpec, Version, VersionSpec

    try:
        ms = MatchSpec(text, strict=False)
        name = ms.name.normalized if ms.name is not None else ""
    except Exception as exc:  # rattler's InvalidMatchSpecError is no Python subclass we can name
        return "", f"{text} is not a conda match spec ({one_line(exc)})"
    pkg = conda.get(name)
    if pkg is None:
        return "", f"{text} has no conda package"
    if ms.version is not None:
        try:
            ok = VersionSpec(str(ms.version)).matches(Version(pkg.version))
        except Exception:
            ok = False
        if not ok:
            return name, f"{text} is not satisfied by {pkg.shown}"
    return name, ""
