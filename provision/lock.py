"""`provision lock NAME`: the lockfile next to envs/NAME/'s inputs; `--check` and check_lock().

conda path: the real conda-lock writes conda-lock.yml from environment.yml's conda part, with the
virtual packages of virtual-packages.yml passed explicitly, against the environment's channels or
`--channel` replacements, solved by conda, mamba, micromamba or provision's own conda-compatible
front end over py-rattler (provision.solver); a local, empty PyPI->conda name mapping keeps it
from downloading one. The pip section is resolved by uv (pip's configured index, the locked
Python, the virtual __glibc) and added as conda-lock `manager: pip` entries (see _add_pip_part).
pip and system paths: provision.pylock writes requirements.lock with hashes.

Every lock starts with a header saying how it was made and how to remake it, the meaning of its
inputs (requirements, match specs, channels, platforms, virtual packages: parsed and normalised,
so a reworded comment changes nothing) with their digest, and the digest of its own body; the body
ends with an end line. So `--check` and check_lock() need neither network nor solver to tell a
stale lock from an edited, truncated or unreadable one, and then check that it is complete and
closed (every input requirement pinned, every pin required). Locks are written beside the old
one and renamed into place: an interrupted or failed lock leaves the previous file as it was.
After locking, the CUDA packages in the lock are compared with the matrix row; a lock that
disagrees is not written.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision import _proc, matrix, spec
from provision.errors import LockError, LockInvalid, StaleError, ToolMissing, UsageError

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from provision.pylock import AsOf

META = "provision.json"
LOCK_FILES = {"conda": "conda-lock.yml", "pip": "requirements.lock", "system": "requirements.lock"}
INPUT_FILES = {
    "conda": ("environment.yml", "virtual-packages.yml"),
    "pip": ("requirements.in",),
    "system": ("requirements.in",),
}
SOLVERS = ("auto", "conda", "mamba", "micromamba", "builtin")
# 1: a digest of the input files' bytes. 2: of their meaning, plus the body's digest and end line.
FORMAT = 2
REGEN_TAG = "# Do not edit by hand; regenerate with: "
INPUTS_TAG = "# provision-inputs: "
DIGEST_TAG = "# provision-inputs-sha256: "
BODY_TAG = "# provision-body-sha256: "
END_TAG = "# provision-lock-end: "
HEADER_LINES = 20
CONDA_LOCK_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Target:
    """envs/<name>/ as lock sees it: the folder, and the EnvSpec its provision.json asks for."""

    name: str
    root: Path
    spec: spec.EnvSpec

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_FILES[self.spec.path]


@dataclass
class Result:
    lines: list[str] = field(default_factory=list)
    ok: bool = True


def known_envs(out: Path) -> list[str]:
    if not out.is_dir():
        return []

    def natural(name: str) -> list[Any]:
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]

    return sorted((p.parent.name for p in out.glob(f"*/{META}")), key=natural)


def load_target(out: Path, name: str) -> Target:
    root = out / name
    meta = root / META
    if not meta.is_file():
        known = known_envs(out)
        listing = ", ".join(known) if known else "none (run provision render first)"
        raise UsageError(f"no environment {name!r} in {out}; known: {listing}")
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
        request = data.get("request", data)
        gpu = spec.GpuPolicy(request.get("gpu_memory"), request.get("gpus"))
        resolved = spec.resolve(
            matrix.load(), str(request["tf"]), str(request["path"]), str(request["python"]),
            str(request.get("name") or name), gpu,
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LockError(
            f"{meta}: cannot read the request ({exc}); render the environment again"
        ) from exc
    for rel in INPUT_FILES[resolved.path]:
        if not (root / rel).is_file():
            raise LockError(
                f"{root / rel} is missing; run: provision render --tf {resolved.release.tf} "
                f"--path {resolved.path}"
            )
    return Target(name, root, resolved)


# -- inputs, by meaning ------------------------------------------------------------------------


def load_yaml(path: Path | str) -> Any:
    """YAML through libyaml where PyYAML has it (20x faster on a lock than the pure loader)."""
    import yaml

    text = path.read_text(encoding="utf-8") if isinstance(path, Path) else path
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def dump_yaml(data: Any) -> str:
    """What conda-lock's writer produces (PyYAML's dump, insertion order), through libyaml."""
    import yaml

    return str(yaml.dump(data, sort_keys=False, Dumper=getattr(yaml, "CDumper", yaml.Dumper)))


def _input_yaml(target: Target, rel: str) -> dict[str, Any]:
    import yaml

    try:
        data = load_yaml(target.root / rel)
    except yaml.YAMLError as exc:
        raise LockError(f"{target.root / rel} is not valid YAML: {_one_line(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LockError(f"{target.root / rel} is not a mapping; render the environment again")
    return data


def _strip_auth(url: str) -> str:
    return re.sub(r"//[^/@]+@", "//", url)


def env_channels(target: Target) -> list[str]:
    """The channels environment.yml names (what conda-lock uses without --channel)."""
    data = _input_yaml(target, "environment.yml")
    return [str(c) for c in data.get("channels") or [] if str(c) != "nodefaults"]


@dataclass(frozen=True)
class Environment:
    """environment.yml as the lock reads it: conda match specs and the pip section."""

    conda: tuple[str, ...]  # whitespace normalised, in the file's order
    pip: tuple[Requirement, ...]


def read_environment(target: Target) -> Environment:
    from provision import pylock

    conda: list[str] = []
    pip: list[Requirement] = []
    for dep in _input_yaml(target, "environment.yml").get("dependencies") or []:
        if isinstance(dep, dict) and "pip" in dep:
            lines = "\n".join(str(r) for r in dep["pip"] or [])
            pip += pylock.parse_requirements(lines, f"{target.name}/environment.yml (pip)")
        elif isinstance(dep, dict):
            conda.append(json.dumps(dep, sort_keys=True))  # conda-lock says what it makes of it
        else:
            conda.append(normal_match_spec(str(dep)))
    return Environment(tuple(conda), tuple(pip))


def normal_match_spec(text: str) -> str:
    """`python >= 3.8` and `python>=3.8` are one spec; `numpy 1.2` (name, space, version) stays."""
    return re.sub(r"\s*([=<>!~,|]+)\s*", r"\1", " ".join(text.split()))


def _virtual_packages(target: Target, platforms: Sequence[str]) -> dict[str, dict[str, str]]:
    subdirs = _input_yaml(target, "virtual-packages.yml").get("subdirs") or {}
    out = {}
    for platform in sorted(platforms):
        entry = subdirs.get(platform) if isinstance(subdirs, dict) else None
        packages = entry.get("packages") if isinstance(entry, dict) else None
        out[platform] = {
            str(k): " ".join(str(v).split())
            for k, v in sorted((packages if isinstance(packages, dict) else {}).items())
        }
    return out


def inputs(target: Target, platforms: Sequence[str], channels: Sequence[str]) -> dict[str, Any]:
    """What the lock means to depend on; it goes into the lock's header with its digest.

    pip/system: requirements.in's requirements (normalised, sorted), the Python line, the
    platforms and wheel targets. conda: environment.yml's match specs and pip requirements (both
    normalised, sorted), the channels, the platforms and their virtual packages. Comments, blank
    lines, order and spelling are not inputs."""
    from provision import pylock

    data: dict[str, Any] = {"format": FORMAT, "platforms": sorted(platforms)}
    if target.spec.path == "conda":
        env = read_environment(target)
        data["dependencies"] = sorted(set(env.conda))
        data["pip"] = sorted({pylock.normal_requirement(r) for r in env.pip})
        data["channels"] = [_strip_auth(c) for c in (channels or env_channels(target))]
        data["virtual-packages"] = _virtual_packages(target, platforms)
    else:
        reqs = _requirements_in(target)
        data["requirements"] = sorted({pylock.normal_requirement(r) for r in reqs})
        data["python"] = target.spec.python
        data["target"] = [pylock.python_platform(target.spec, p) for p in sorted(platforms)]
    return data


def _requirements_in(target: Target) -> list[Requirement]:
    from provision import pylock

    text = (target.root / "requirements.in").read_text(encoding="utf-8")
    return pylock.parse_requirements(text, f"{target.name}/requirements.in")


def digest(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- the header, the body, and what changed ----------------------------------------------------


def regen_command(target: Target, platforms: Sequence[str], channels: Sequence[str]) -> str:
    argv = ["provision", "lock", target.name]
    if sorted(platforms) != sorted(target.spec.platforms):
        for p in platforms:
            argv += ["--platform", p]
    for c in channels:
        argv += ["--channel", _strip_auth(c)]
    return shlex.join(argv)


def header(target: Target, data: Mapping[str, Any], regen: str, body_sha256: str) -> str:
    s = target.spec
    what = (
        f"{s.name}: TensorFlow {s.release.pin}, CUDA {s.cuda.version}, cuDNN {s.cudnn.version}, "
        f"Python {s.python}, {s.path} path"
    )
    if s.path == "conda":
        how = (
            "by conda-lock from environment.yml and virtual-packages.yml (conda packages) "
            "and uv (its pip section)"
        )
        use = (
            f"provision install {target.name}  (or: conda-lock install --prefix DIR conda-lock.yml)"
        )
    else:
        targets = ", ".join(data["target"])
        how = f"by uv pip compile --generate-hashes from requirements.in for {targets}"
        use = "pip install --require-hashes --no-deps -r requirements.lock"
    lines = [
        f"# Generated by provision lock ({what}),",
        f"# {how}.",
        f"{REGEN_TAG}{regen}",
        f"# Install with: {use}",
        f"{INPUTS_TAG}{json.dumps(data, sort_keys=True, separators=(',', ':'))}",
        f"{DIGEST_TAG}{digest(data)}",
        f"{BODY_TAG}{body_sha256}",
    ]
    return "\n".join(lines) + "\n"


def end_line(count: int) -> str:
    return f"{END_TAG}{count} packages\n"


@dataclass(frozen=True)
class Recorded:
    """A lock file's header, as far as it has one, and its body (everything after the header)."""

    inputs: dict[str, Any] | None
    inputs_digest: str | None
    body_digest: str | None
    regen: str | None
    body: str


def read_lock(text: str) -> Recorded:
    fields: dict[str, str] = {}
    offset = 0
    for line in text.splitlines(keepends=True)[:HEADER_LINES]:
        if not line.startswith("#"):
            break
        offset += len(line)
        for tag in (REGEN_TAG, INPUTS_TAG, DIGEST_TAG, BODY_TAG):
            if line.startswith(tag):
                fields[tag] = line.removeprefix(tag).strip()
        if line.startswith(BODY_TAG):
            break
    try:
        found = json.loads(fields[INPUTS_TAG]) if INPUTS_TAG in fields else None
    except ValueError:
        found = None
    return Recorded(
        found if isinstance(found, dict) else None,
        fields.get(DIGEST_TAG),
        fields.get(BODY_TAG),
        fields.get(REGEN_TAG),
        text[offset:] if BODY_TAG in fields else text,
    )


def _what_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    if not old:
        return "the lock has no provision header"
    if old.get("format") != new["format"]:
        if isinstance(old.get("format"), int) and old["format"] > new["format"]:
            return (
                f"made by a newer provision (format {old['format']}); upgrade provision or re-lock"
            )
        return "made by an older provision; re-lock"
    changed = []
    for key, label in (
        ("requirements", "requirements"), ("dependencies", "conda dependencies"),
        ("pip", "pip requirements"),
    ):  # fmt: skip
        if key in new and old.get(key) != new[key]:
            changed.append(f"{label} changed: {_list_change(old.get(key) or [], new[key])}")
    if "virtual-packages" in new and old.get("virtual-packages") != new["virtual-packages"]:
        changed.append(
            "virtual packages changed: "
            + _virtual_change(old.get("virtual-packages") or {}, new["virtual-packages"])
        )
    for key in ("platforms", "channels", "python", "target"):
        if key in new and old.get(key) != new[key]:
            changed.append(f"{key} {old.get(key)} -> {new[key]}")
    return "; ".join(changed) or "its inputs changed"


def _key(requirement: str) -> str:
    """The name a normalised requirement or match spec is about (`ns::name` for a channel's)."""
    return re.split(r"[\s=<>!~\[;@]", requirement, maxsplit=1)[0]


def _list_change(old: Sequence[str], new: Sequence[str]) -> str:
    before = {_key(r): r for r in old}
    after = {_key(r): r for r in new}
    parts = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        parts.append(f"{a} -> {b}" if a and b else f"added {b}" if b else f"removed {a}")
    return ", ".join(parts) or "reordered"


def _virtual_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    parts = []
    for platform in sorted(new):
        a, b = old.get(platform) or {}, new[platform]
        for name in sorted(a.keys() | b.keys()):
            if a.get(name) != b.get(name):
                parts.append(
                    f"{platform} {name} {a.get(name, '(none)')} -> {b.get(name, '(none)')}"
                )
    return ", ".join(parts)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# -- entry points ------------------------------------------------------------------------------


def run(
    out: Path,
    name: str,
    *,
    platforms: Sequence[str] = (),
    channels: Sequence[str] = (),
    solver: str = "auto",
    check: bool = False,
    cache_dir: Path | None = None,
) -> Result:
    target = load_target(out, name)
    plats = list(dict.fromkeys(platforms)) or list(target.spec.platforms)
    if target.spec.path != "conda" and channels:
        raise UsageError(
            f"--channel is for conda environments; {name} is on the {target.spec.path} path"
        )
    if target.spec.path != "conda" and len(plats) != 1:
        raise UsageError(f"{name}: requirements.lock holds one platform; give one --platform")
    if solver not in SOLVERS:
        raise UsageError(f"--solver takes one of {', '.join(SOLVERS)}, not {solver!r}")
    data = inputs(target, plats, channels)
    rel = f"{out.name}/{name}/{target.lock_path.name}"
    regen = regen_command(target, plats, channels)
    if check:
        count = verify(target, data, rel, regen)
        return Result([f"{rel} is up to date ({count} packages)"])
    started = time.monotonic()
    if target.spec.path == "conda":
        _check_virtual_platforms(target, plats)
        body, used, note = _lock_conda(target, plats, channels, solver, cache_dir)
    else:
        (body, note), used = _lock_pip(target, plats[0], cache_dir), "uv"
    count = _count(target, body)
    full_body = note + body + end_line(count)
    _write_atomic(target.lock_path, header(target, data, regen, _sha256(full_body)) + full_body)
    seconds = time.monotonic() - started
    return Result([f"wrote {rel} ({count} packages, {used}, {seconds:.1f} s)"])


def check_lock(out: Path, name: str) -> None:
    """Before installing from envs/NAME's lock: it exists, has provision's header, is fresh for
    the inputs as they are now (with the platforms and channels it was made for), is the body
    it was made with (not edited, not truncated, readable), and is complete and closed.

    Raises StaleError (no lock yet; inputs changed; made by another provision version) or its
    subclass LockInvalid (empty, no header, truncated, edited, not valid YAML, not closed), each
    with a one-line message that names the lock, the reason and `run: provision lock ...`;
    UsageError / LockError as load_target does (unknown environment, unreadable inputs)."""
    target = load_target(out, name)
    platforms, channels = _made_for(target)
    rel = f"{out.name}/{name}/{target.lock_path.name}"
    verify(target, inputs(target, platforms, channels), rel,
           regen_command(target, platforms, channels))  # fmt: skip


def _made_for(target: Target) -> tuple[list[str], list[str]]:
    """The platforms and channels the lock was made for (its header), else the spec's."""
    platforms, channels = list(target.spec.platforms), list[str]()
    try:
        found = read_lock(target.lock_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return platforms, channels
    recorded_platforms = (found.inputs or {}).get("platforms")
    if isinstance(recorded_platforms, list) and recorded_platforms:
        platforms = [str(p) for p in recorded_platforms]
    try:
        given = "--channel" in shlex.split(found.regen or "")
    except ValueError:
        given = False
    recorded_channels = (found.inputs or {}).get("channels")
    if given and isinstance(recorded_channels, list):
        channels = [str(c) for c in recorded_channels]  # made with --channel: those, not the file's
    return platforms, channels


def verify(target: Target, data: Mapping[str, Any], rel: str, regen: str) -> int:
    """The number of packages of a lock that is fresh for `data`, intact, complete and closed;
    else StaleError / LockInvalid, naming the first thing wrong (see check_lock)."""
    path = target.lock_path
    if not path.is_file():
        raise StaleError(f"{rel} does not exist yet; run: {regen}")
    try:
        text = path.read_text(encoding="utf-8")  # universal newlines: a CRLF checkout is the same
    except (OSError, UnicodeDecodeError) as exc:
        raise LockInvalid(f"{rel} cannot be read ({_one_line(exc)}); run: {regen}") from exc
    if not text.strip():
        raise LockInvalid(f"{rel}: the lock is empty; run: {regen}")
    found = read_lock(text)
    if found.inputs is None:
        raise LockInvalid(
            f"{rel} has no provision header (its first lines were removed, or provision did not "
            f"make it); run: {regen}"
        )
    if found.inputs.get("format") != FORMAT:
        raise StaleError(f"{rel} is stale ({_what_changed(found.inputs, data)}); run: {regen}")
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
    if _sha256(found.body) != found.body_digest:
        raise LockInvalid(
            f"{rel}: the lock was edited after it was made (its body does not match the "
            f"digest in its header); run: {regen}"
        )
    if found.inputs_digest != digest(data) or found.inputs != data:
        raise StaleError(f"{rel} is stale ({_what_changed(found.inputs, data)}); run: {regen}")
    wrong = _closure(target, parsed, str(data["platforms"][0]))
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise LockInvalid(f"{rel} is not complete and closed: {wrong[0]}{more}; run: {regen}")
    return len(parsed) if isinstance(parsed, list) else len(parsed["package"])


def _parse_body(target: Target, body: str, first_line: int) -> Any:
    """The body as data: pylock Pins (pip/system) or conda-lock's mapping; ValueError if not."""
    if target.spec.path != "conda":
        from provision import pylock

        try:
            return pylock.parse_lock(body, first_line)
        except ValueError as exc:
            raise ValueError(f"the lock's body is not a requirements lock ({exc})") from exc
    import yaml

    try:
        data = load_yaml(body)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + first_line}" if mark is not None else ""
        what = getattr(exc, "problem", None) or _one_line(exc)
        raise ValueError(f"the lock's body is not valid YAML ({what}{where})") from exc
    packages = data.get("package") if isinstance(data, dict) else None
    if not isinstance(packages, list) or not all(isinstance(p, dict) for p in packages):
        raise ValueError("the lock's body is not a conda-lock file (no list of packages)")
    return data


# -- complete and closed -----------------------------------------------------------------------


def _closure(target: Target, parsed: Any, platform: str) -> list[str]:
    from provision import pylock

    if target.spec.path != "conda":
        env = pylock.marker_environment(target.spec.python, platform)
        return pylock.closure_problems(_requirements_in(target), parsed, "requirements.in", env)
    return conda_closure_problems(read_environment(target), parsed["package"])


def conda_closure_problems(env: Environment, packages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per platform: every match spec of environment.yml is met by a conda package and every pip
    requirement by a pip package (or a Python package conda provides); every dependency a package
    names is in the lock (virtual packages aside); every package is reachable from the inputs
    through the packages' `dependencies`; every package has a hash."""
    out: list[str] = []
    for platform in sorted({str(p.get("platform")) for p in packages}):
        pkgs = [p for p in packages if str(p.get("platform")) == platform]
        out += [f"{platform}: {problem}" for problem in _platform_closure(env, pkgs, platform)]
    return out


def _platform_closure(
    env: Environment, pkgs: Sequence[Mapping[str, Any]], platform: str
) -> list[str]:
    from provision import pylock

    table: dict[tuple[str, str], Mapping[str, Any]] = {
        (str(p.get("manager")), pylock.norm(str(p.get("name"))) if p.get("manager") == "pip"
         else str(p.get("name"))): p
        for p in pkgs
    }  # fmt: skip
    provided = {pylock.norm(n): n for m, n in table if m == "conda"}
    out: list[str] = []

    def find(name: str, pip_name: bool) -> tuple[str, str] | None:
        """A conda package names conda packages; pip names a pip package, or a Python
        package conda provides (the pip section was resolved with those held)."""
        if not pip_name:
            return ("conda", name) if ("conda", name) in table else None
        key = pylock.norm(name)
        if ("pip", key) in table:
            return ("pip", key)
        return ("conda", provided[key]) if key in provided else None

    def shown(node: tuple[str, str]) -> str:
        return f"{table[node].get('name')} {table[node].get('version')}"

    conda = {n: pkg for (m, n), pkg in table.items() if m == "conda"}
    roots = []
    for text in env.conda:
        name, problem = _conda_requirement(text, conda)
        roots += [("conda", name)] if name else []
        out += [problem] if problem else []
    python = table.get(("conda", "python"))
    markers = pylock.marker_environment(str(python.get("version")) if python else "3", platform)
    for req in (r for r in env.pip if pylock.applies(r, markers)):
        node = find(req.name, pip_name=True)
        if node is None:
            out.append(f"{req} (pip) has no package")
            continue
        roots.append(node)
        if not pylock.satisfies(req, str(table[node].get("version"))):
            out.append(f"{req} (pip) is not satisfied by {shown(node)}")
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for node, pkg in table.items():
        hashes = pkg.get("hash")
        if not (isinstance(hashes, dict) and any(hashes.values())):
            out.append(f"{shown(node)} has no hash")
        deps = pkg.get("dependencies")
        for dep in (str(d) for d in (deps if isinstance(deps, dict) else {})):
            if dep.startswith("__"):
                continue  # virtual packages: the host's, never in a lock
            found = find(dep, pip_name=node[0] == "pip")
            if found is None:
                out.append(f"{shown(node)} depends on {dep}, which the lock does not hold")
            else:
                edges.setdefault(node, []).append(found)
    reached = _reach_nodes(roots, edges)
    out += [
        f"{shown(node)} ({node[0]}) is in the lock but nothing in environment.yml requires it"
        for node in sorted(table)
        if node not in reached
    ]
    return out


def _conda_requirement(text: str, conda: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """(the locked package a match spec names, what is wrong: '' when the lock meets it)."""
    from rattler import MatchSpec, Version, VersionSpec

    try:
        ms = MatchSpec(text, strict=False)
        name = ms.name.normalized if ms.name is not None else ""
    except Exception as exc:  # rattler's InvalidMatchSpecError is no Python subclass we can name
        return "", f"{text} is not a conda match spec ({_one_line(exc)})"
    pkg = conda.get(name)
    if pkg is None:
        return "", f"{text} has no conda package"
    if ms.version is not None:
        try:
            ok = VersionSpec(str(ms.version)).matches(Version(str(pkg.get("version"))))
        except Exception:
            ok = False
        if not ok:
            return name, f"{text} is not satisfied by {name} {pkg.get('version')}"
    return name, ""


def _reach_nodes(
    roots: Iterable[tuple[str, str]], edges: Mapping[tuple[str, str], list[tuple[str, str]]]
) -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    todo = list(roots)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return seen


def _count(target: Target, body: str) -> int:
    if target.spec.path == "conda":
        return len(re.findall(r"^- name: ", body, re.MULTILINE))
    from provision import pylock

    return len(pylock.pins(body))


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- interrupts --------------------------------------------------------------------------------
# Locking runs conda-lock, which runs the solver, which can wait minutes on a channel (or uv).
# A SIGINT must stop all of them promptly. It did not, in two ways:
# - started with SIGINT ignored (a background job of a non-interactive shell: `cmd &` in a script,
#   some CI runners), Python installs no KeyboardInterrupt handler and every process of the tree
#   inherits the ignore: a SIGINT, even to the whole process group, stops nothing;
# - a SIGINT to provision alone (`kill -INT PID`, a supervisor): subprocess.run kills its direct
#   child only (conda-lock, SIGKILL after 0.25 s), and the solver conda-lock started lives on,
#   orphaned, still waiting on its channel.
# So while locking, provision catches SIGINT itself (and a caught signal is reset to its default
# in children at exec, so they can be interrupted too), is the subreaper of what it starts (an
# orphan is re-parented to provision, not to init), and when the lock fails or is interrupted it
# stops every process it started that is still there.
# (_proc.run is the better home for this, with a process group per command; it is not lock's.)

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
STOP_GRACE_S = 1.0


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    """A temporary folder for one lock, removed after what the lock started has stopped."""
    with (
        tempfile.TemporaryDirectory(prefix="provision-lock-", ignore_cleanup_errors=True) as tmp,
        stop_descendants_on_failure(),
    ):
        yield Path(tmp)


@contextlib.contextmanager
def stop_descendants_on_failure() -> Iterator[None]:
    """While the block runs, SIGINT raises KeyboardInterrupt here (inherited ignore or not) and is
    at its default in what we start; orphans come to us. If the block raises, every process it
    started that is still running gets SIGTERM, then SIGKILL a second later."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    ours = previous in (signal.SIG_IGN, signal.SIG_DFL, signal.default_int_handler)
    if ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    before = _descendants()
    reaper = _set_subreaper(True)
    try:
        yield
    except BaseException:
        _stop(set(_descendants().items()) - set(before.items()))
        raise
    finally:
        if reaper:
            _set_subreaper(False)
        if ours:
            signal.signal(signal.SIGINT, previous)


def _set_subreaper(on: bool) -> bool:
    """Become (or stop being) the subreaper of our descendants; False where that is not possible
    or we already were one (then it stays as it was)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if on:
            was = ctypes.c_int(0)
            if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0 or was.value:
                return False
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _descendants() -> dict[int, str]:
    """pid -> start time (against reused pids) of every live descendant of this process."""
    parents: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
        started[int(entry)] = fields[19]
    out: dict[int, str] = {}
    todo = list(parents.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = started[pid]
            todo.extend(parents.get(pid, []))
    return out


def _stop(pids: Iterable[tuple[int, str]]) -> None:
    """SIGTERM, a moment's grace, then SIGKILL, for each process that is still the same one;
    then collect those that were our own children (conda-lock, an orphan re-parented to us)."""
    everyone = targets = set(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + STOP_GRACE_S
        while targets and time.monotonic() < deadline:
            time.sleep(0.02)
            live = _descendants()
            targets = {(pid, start) for pid, start in targets if live.get(pid) == start}
    for pid, _ in everyone:
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)


# -- pip and system paths ----------------------------------------------------------------------


def _lock_pip(target: Target, platform: str, cache_dir: Path | None) -> tuple[str, str]:
    from provision import pylock

    previous = _previous_as_of(target)
    with _workdir() as tmp:
        body, when = pylock.compile_lock(
            target.spec, target.root, platform, Path(tmp), cache_dir, previous
        )
    wrong = pylock.problems(target.spec, body)
    if wrong:
        raise LockError(
            f"{target.name}: the resolved lock does not hold what the matrix pins: "
            + "; ".join(wrong)
        )
    return body, when.header_line() + "\n" if when else ""


def _previous_as_of(target: Target) -> AsOf | None:
    from provision import pylock

    try:
        return pylock.read_as_of(target.lock_path.read_text(encoding="utf-8"))
    except OSError:
        return None


# -- conda path --------------------------------------------------------------------------------


def solver_exe(solver: str = "auto") -> str:
    """The conda-compatible executable for conda-lock: the host's own, else provision-conda."""
    if solver not in SOLVERS:
        raise UsageError(f"--solver takes one of {', '.join(SOLVERS)}, not {solver!r}")
    if solver != "builtin":
        for name in ("micromamba", "mamba", "conda") if solver == "auto" else (solver,):
            found = _proc.which(name)
            if found:
                return found
        if solver != "auto":
            raise ToolMissing(f"{solver} is not installed or not on PATH; use --solver builtin")
    beside = Path(sys.executable).parent / "provision-conda"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = _proc.which("provision-conda")
    if found:
        return found
    raise ToolMissing("provision-conda (the built-in solver) is not installed; reinstall provision")


def _check_virtual_platforms(target: Target, platforms: Sequence[str]) -> None:
    data = load_yaml(target.root / "virtual-packages.yml") or {}
    have = set((data.get("subdirs") or {}).keys())
    missing = [p for p in platforms if p not in have]
    if missing:
        raise UsageError(
            f"{target.name}/virtual-packages.yml describes "
            f"{', '.join(sorted(have)) or 'no platform'}, "
            f"not {', '.join(missing)}; locking without its virtual packages would guess __cuda"
        )


def conda_lock_argv(
    conda: str, source: Path, lockfile: Path, virtual: Path, lookup: Path,
    platforms: Sequence[str], channels: Sequence[str],
) -> list[str]:  # fmt: skip
    argv = [
        sys.executable, "-m", "conda_lock", "lock", "--file", str(source),
        "--lockfile", str(lockfile),
        "--kind", "lock", "--conda", conda, "--virtual-package-spec", str(virtual),
        "--pypi_to_conda_lookup_file", str(lookup), "--log-level", "WARNING",
    ]  # fmt: skip
    if os.path.basename(conda).startswith("micromamba"):
        argv.append("--micromamba")
    elif os.path.basename(conda).startswith("mamba"):
        argv.append("--mamba")
    for p in platforms:
        argv += ["--platform", p]
    for c in channels:
        argv += ["--channel", c]
    return argv


def _split_environment(target: Target, tmp: Path) -> tuple[Path, list[str]]:
    """environment.yml without its pip section (for conda-lock), and that section's requirements."""
    data = load_yaml(target.root / "environment.yml") or {}
    deps, pip_reqs = [], []
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict) and "pip" in dep:
            pip_reqs += [str(r) for r in dep["pip"] or []]
        else:
            deps.append(dep)
    data["dependencies"] = deps
    out = tmp / "environment.yml"
    out.write_text(dump_yaml(data), encoding="utf-8")
    return out, pip_reqs


def _lock_conda(
    target: Target, platforms: Sequence[str], channels: Sequence[str], solver: str,
    cache_dir: Path | None,
) -> tuple[str, str, str]:  # fmt: skip
    conda = solver_exe(solver)
    _check_reachable(target, platforms, channels)
    with _workdir() as tmp:
        # conda-lock records sources relative to the lockfile; both in tmp give "environment.yml".
        source, pip_reqs = _split_environment(target, tmp)
        virtual = tmp / "virtual-packages.yml"
        virtual.write_bytes((target.root / "virtual-packages.yml").read_bytes())
        lookup = tmp / "pypi-to-conda.json"
        lookup.write_text("{}\n", encoding="utf-8")
        lockfile = tmp / "conda-lock.yml"
        # conda-lock's own temporary folders go into ours, which goes even when it cannot.
        (tmp / "tmp").mkdir()
        env = {
            "CONDA_LOCK_SUBPROCESS_STDERR_DEFAULT_LOG_LEVEL": "DEBUG",
            "TMPDIR": str(tmp / "tmp"),
        }
        if cache_dir is not None:
            # conda-lock's and provision-conda's caches both follow XDG_CACHE_HOME.
            env["XDG_CACHE_HOME"] = str(cache_dir.absolute())
        argv = conda_lock_argv(conda, source, lockfile, virtual, lookup, platforms, channels)
        done = _proc.run(argv, cwd=tmp, env=env, timeout=CONDA_LOCK_TIMEOUT_S, check=False)
        if not done or not lockfile.is_file():
            raise LockError(
                f"conda-lock could not lock {target.name}: {solver_reason(done.stderr)}"
            )
        note = ""
        if pip_reqs:
            when = _add_pip_part(target, lockfile, pip_reqs, platforms, tmp, cache_dir)
            note = when.header_line() + "\n" if when else ""
        body = _strip_help(lockfile.read_text(encoding="utf-8"))
    wrong = conda_problems(target.spec, body)
    if wrong:
        raise LockError(
            f"{target.name}: the lock does not hold the CUDA packages the matrix promises: "
            + "; ".join(wrong)
        )
    return body, Path(conda).name, note


def _add_pip_part(
    target: Target, lockfile: Path, requirements: Sequence[str], platforms: Sequence[str],
    tmp: Path, cache_dir: Path | None,
) -> AsOf | None:  # fmt: skip
    """Resolve the pip section with uv for each platform's locked Python and glibc, and add the
    chosen files (URL + sha256) to the lock as conda-lock's own `manager: pip` entries.

    conda-lock 4.0.3's pip resolver cannot lock TensorFlow: its marker environment has no
    platform_machine (TF 2.14 then needs the aarch64-only tensorflow-cpu-aws), it reads one
    wheel's metadata for all (TF's aarch64 wheels list other dependencies), and it knows no
    manylinux_2_27 (TF 2.21's wheels). uv gets all three right, as for the pip path.
    """
    from provision import pylock

    lock_data = load_yaml(lockfile)
    virtual = load_yaml(target.root / "virtual-packages.yml")
    when = _previous_as_of(target)
    entries: list[dict[str, Any]] = lock_data["package"]
    for platform in platforms:
        conda_pkgs = [p for p in entries if p["platform"] == platform]
        python = next((p for p in conda_pkgs if p["name"] == "python"), None)
        if python is None:
            raise LockError(f"{target.name}: pip dependencies need python among the conda ones")
        # Python distributions conda already installs (they depend on python) stay conda's.
        provided = {
            pylock.norm(p["name"]): str(p["version"])
            for p in conda_pkgs
            if "python" in (p.get("dependencies") or {})
        }
        packages = (virtual.get("subdirs") or {}).get(platform, {}).get("packages") or {}
        glibc = str(packages.get("__glibc") or target.spec.release.glibc_min).split()[0]
        files, when = pylock.resolve_files(
            requirements, str(python["version"]), platform, glibc, provided, tmp / platform,
            cache_dir, when,
        )  # fmt: skip
        for f in files:
            if f.name in provided:
                continue
            entries.append({
                "name": f.name, "version": f.version, "manager": "pip", "platform": platform,
                "dependencies": {d: "" for d in f.requires}, "url": f.url,
                "hash": {"sha256": f.sha256},
                "category": "main", "optional": False,
            })  # fmt: skip
    # conda-lock's own order and serialiser (PyYAML, insertion order), so the conda part is
    # byte for byte what conda-lock wrote.
    entries.sort(key=lambda p: (p["manager"], p["name"], p["platform"]))
    lockfile.write_text(dump_yaml(lock_data), encoding="utf-8")
    return when


def _check_reachable(target: Target, platforms: Sequence[str], channels: Sequence[str]) -> None:
    """Fail in seconds, naming the channel, before conda-lock even starts (it would take longer)."""
    from provision import solver

    try:
        solver.check_reachable(channels or env_channels(target), platforms[0])
    except solver.CondaError as exc:
        raise LockError(f"cannot lock {target.name}: {exc.message}") from exc


def solver_reason(stderr: str) -> str:
    """The solver's own explanation from conda-lock's output, on one line."""
    lines = stderr.splitlines()
    marker = next(
        (i for i, ln in enumerate(lines) if ln.startswith("Could not lock the environment")), None
    )
    picked: list[str] = []
    if marker is not None:
        for ln in lines[marker + 1 :]:
            if ln.startswith("    Command:"):
                break
            picked.append(ln)
        where = lines[marker].removeprefix("Could not lock the environment ").strip()
        picked.insert(0, f"{where}:")
    else:
        tail = [ln for ln in lines if ln.strip() and not ln.startswith((" ", "Traceback"))]
        picked = tail[-1:] or ["conda-lock failed without a message"]
    text = " ".join(ln.strip(" ├└│─").strip() for ln in picked)
    return re.sub(r"\s+", " ", text.replace("{ }", "")).strip()


def _strip_help(text: str) -> str:
    """conda-lock's generic leading comment block goes; provision's header replaces it."""
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and lines[start].startswith("#"):
        start += 1
    return "".join(lines[start:])


def conda_packages(body: str) -> dict[str, dict[str, str]]:
    """platform -> {name: version} of the lock's packages (pip ones included, by pip name)."""
    data = load_yaml(body) or {}
    out: dict[str, dict[str, str]] = {}
    for pkg in data.get("package") or []:
        out.setdefault(str(pkg["platform"]), {})[str(pkg["name"]).lower()] = str(pkg["version"])
    return out


def _matches(version: str | None, wanted: str) -> bool:
    """conda's `name=X.Y` means X.Y or X.Y.*."""
    return version is not None and (version == wanted or version.startswith(wanted + "."))


def conda_problems(s: spec.EnvSpec, body: str) -> list[str]:
    """Where the lock disagrees with the row: cudatoolkit / cuda-version, split packages, cuDNN."""
    problems = []
    for platform, pkgs in sorted(conda_packages(body).items()):
        want: list[tuple[str, str]] = []
        if s.cuda.major == 11:
            want.append(("cudatoolkit", s.cuda.conda["cudatoolkit"]))
        else:
            want.append(("cuda-version", s.cuda.conda["cuda_version"]))
            if "cudatoolkit" in pkgs:
                problems.append(
                    f"{platform}: cudatoolkit {pkgs['cudatoolkit']} in a CUDA "
                    f"{s.cuda.major} environment"
                )
            for name in _names(s.conda_dependencies):
                if name not in pkgs:
                    problems.append(f"{platform}: {name} is missing")
        if s.cudnn.conda_forge:
            want.append(("cudnn", s.cudnn.conda_forge))
        elif s.cudnn.pip:
            name, _, version = s.cudnn.pip.partition("==")
            want.append((name.lower(), version))
        for name, version in want:
            if not _matches(pkgs.get(name), version):
                problems.append(
                    f"{platform}: {name} {pkgs.get(name, 'absent')}, expected {version}"
                )
    return problems


def _names(deps: Iterable[str]) -> list[str]:
    """The package names of conda match specs (rattler parses them: `cudatoolkit=11.8` is no
    PEP 508 requirement, so packaging cannot)."""
    from rattler import MatchSpec

    out = []
    for dep in deps:
        name = MatchSpec(dep, strict=False).name
        out.append(name.normalized if name is not None else dep)
    return out
