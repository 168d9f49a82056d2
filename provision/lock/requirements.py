"""Requirements files and requirements locks, as packaging reads them.

A requirements file's requirements, each in one spelling per meaning (what a lock's header records);
a lock's pins, hashes and uv's `# via` provenance; the PEP 508 environment of the target, not of
this machine. With these, lockcheck tells a complete and closed requirements lock from one that is
not, and the conda path reads the pip section of environment.yml.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from provision.errors import LockError

ARCH = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
# pip's rule for comments in requirements files: a '#' at the start of a line or after whitespace
# (a URL's '#sha256=' fragment is not one).
COMMENT_RE = re.compile(r"(^|\s+)#.*$")
HASH_RE = re.compile(r"\s--hash=(\S+)")
T = TypeVar("T")


def requirement_lines(text: str) -> list[str]:
    """The requirement lines of a requirements file, without comments and blank lines."""
    return [ln for ln in (COMMENT_RE.sub("", raw).strip() for raw in text.splitlines()) if ln]


def parse_requirements(text: str, source: str) -> list[Requirement]:
    """The requirements of a requirements file (comments and blank lines ignored); LockError
    naming the line for anything else (options such as --index-url included: locks ignore them)."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = COMMENT_RE.sub("", raw).strip()
        if not line:
            continue
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            raise LockError(
                f"{source}, line {number}: {line!r} is not a requirement ({_first_line(exc)})"
            ) from exc
    return out


def _first_line(exc: Exception) -> str:
    """packaging's own reason, without the lines that point at the column."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def normal_requirement(req: Requirement) -> str:
    """One spelling per meaning: normalised name and extras, sorted specifiers, PEP 440 versions."""
    extras = f"[{','.join(sorted(norm(e) for e in req.extras))}]" if req.extras else ""
    specs = []
    for spec in req.specifier:
        version = spec.version
        if spec.operator != "===" and not version.endswith(".*") and pep440(version):
            version = str(Version(version))
        specs.append(f"{spec.operator}{version}")
    text = f"{norm(req.name)}{extras}{','.join(sorted(specs))}"
    if req.url:
        text += f" @ {req.url}"
    if req.marker:
        text += f"{' ' if req.url else ''}; {req.marker}"
    return text


def exact_version(req: Requirement) -> str | None:
    """X of `name==X` (no wildcard), else None."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def exact_pins(requirements: Sequence[str]) -> dict[str, str]:
    """name -> version of the requirement lines pinned with ==; uv says what is wrong with
    a line that is no requirement."""
    out = {}
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        version = exact_version(req)
        if version is not None:
            out[norm(req.name)] = version
    return out


def pep440(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def norm(name: str) -> str:
    """PEP 503 normalised project name."""
    return str(canonicalize_name(name))


# -- requirements locks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """One package of a requirements lock, with the provenance uv wrote under it (`# via`)."""

    name: str  # PEP 503 normalised
    version: str
    hashes: tuple[str, ...]
    via: tuple[str, ...]  # normalised names of the packages that require it, or "-r FILE"
    line: int
    marker: str = ""  # the PEP 508 marker after `;`, when the lock has one


def parse_lock(text: str, first_line: int = 1) -> list[Pin]:
    """Every `name==version` of a requirements lock (uv's output), its hashes and its `# via`.

    ValueError, naming the line (text's first is `first_line`), for a requirement that is not
    one or is not pinned exactly."""
    return list(_parsed(text, first_line))


@functools.lru_cache(maxsize=8)
def _parsed(text: str, first_line: int) -> tuple[Pin, ...]:
    """parse_lock's work, kept for the same text: one command reads its lock several times (the
    lock, its check, the sync, what moved), and each read parses every requirement again."""
    lines = text.splitlines()
    out: list[Pin] = []
    i = 0
    while i < len(lines):
        start, logical = i + first_line, lines[i]
        i += 1
        if not logical.strip() or logical[0].isspace() or logical.startswith(("#", "-")):
            continue  # comments, options, and what belongs to no requirement
        while logical.rstrip().endswith("\\") and i < len(lines):
            logical = logical.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        logical = " " + logical.rstrip().removesuffix("\\")
        hashes = tuple(HASH_RE.findall(logical))
        text_req = COMMENT_RE.sub("", HASH_RE.sub("", logical)).strip()
        via: list[str] = []
        in_via = False
        while i < len(lines) and lines[i][:1].isspace() and lines[i].lstrip().startswith("#"):
            note = lines[i].strip()[1:].strip()
            i += 1
            if note == "via" or note.startswith("via "):
                in_via, note = True, note[3:].strip()
            if in_via and note:
                via.append(_via_name(note))
        try:
            req = Requirement(text_req)
        except InvalidRequirement as exc:
            raise ValueError(
                f"line {start}: {text_req!r} is not a requirement ({_first_line(exc)})"
            ) from exc
        version = exact_version(req)
        if version is None:
            raise ValueError(f"line {start}: {text_req!r} is not pinned with ==")
        marker = str(req.marker) if req.marker is not None else ""
        out.append(Pin(norm(req.name), version, hashes, tuple(via), start, marker))
    return tuple(out)


def _via_name(note: str) -> str:
    """`-r requirements.in` as it is; `tensorflow` or `tensorflow[and-cuda]` -> its name."""
    if note.startswith("-"):
        return " ".join(note.split())
    word = note.split()[0]
    try:
        return norm(Requirement(word).name)
    except InvalidRequirement:
        return norm(word.split("[", 1)[0])


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` of a requirements lock (names normalised)."""
    return {pin.name: pin.version for pin in parse_lock(text)}


# -- the target's markers, and what a lock must hold -------------------------------------------


def marker_environment(python_version: str, platform: str) -> dict[str, str]:
    """The PEP 508 environment of the target (a Linux CPython), not of this machine."""
    env = {str(k): str(v) for k, v in default_environment().items()}
    env.update({
        "python_version": ".".join(python_version.split(".")[:2]),
        "python_full_version": python_version if python_version.count(".") >= 2
        else f"{python_version}.0",
        "platform_machine": ARCH.get(platform, env["platform_machine"]),
        "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
        "implementation_name": "cpython", "platform_python_implementation": "CPython",
    })  # fmt: skip
    return env


def applies(req: Requirement, env: Mapping[str, str]) -> bool:
    """Whether the requirement's marker holds on the target (no marker: always)."""
    if req.marker is None:
        return True
    try:
        return bool(req.marker.evaluate(dict(env)))
    except Exception:  # an unknown marker variable: the requirement counts
        return True


def satisfies(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(version, prereleases=True)
    except InvalidVersion:
        return False


def closure_problems(requirements: Sequence[Requirement], lock: Sequence[Pin], source: str,
                     env: Mapping[str, str]) -> list[str]:  # fmt: skip
    """What makes a requirements lock incomplete or open, each naming the package: a requirement
    of the inputs no pin satisfies; a `# via` naming a package that is not pinned; a pin nothing
    requires (not reachable from the inputs through `# via`); a pin without a hash."""
    by_name = {pin.name: pin for pin in lock}
    out = []
    roots = []
    for req in requirements:
        if not applies(req, env):
            continue
        name = norm(req.name)
        roots.append(name)
        pin = by_name.get(name)
        if pin is None:
            out.append(f"{req} from {source} has no pin")
        elif not satisfies(req, pin.version):
            out.append(f"{req} from {source} is not satisfied by {pin.name}=={pin.version}")
    required_by: dict[str, list[str]] = {}
    for pin in lock:
        out += pin_problems(pin, env)
        for parent in pin.via:
            if parent.startswith("-"):
                continue
            if parent not in by_name:
                out.append(f"{pin.name}=={pin.version} is there for {parent} (# via), "
                           f"which is not pinned")  # fmt: skip
            required_by.setdefault(parent, []).append(pin.name)
    reached = reach(roots, required_by)
    out += [
        f"{pin.name}=={pin.version} is pinned but nothing in {source} requires it "
        f"(# via {', '.join(pin.via) or 'nothing'})"
        for pin in lock
        if pin.name not in reached
    ]
    return out


SHA256_RE = re.compile(r"sha256:[0-9a-f]{64}")


def pin_problems(pin: Pin, env: Mapping[str, str]) -> list[str]:
    """What is wrong with one pin whatever else the lock holds: a marker that is false on the
    target (the package would be left out, and the environment reported built without it), and
    hashes that uv would not write (none, one twice, not sha256, or not in uv's sorted order: a
    hash added by hand lets other bytes than the locked ones be installed)."""
    shown = f"{pin.name}=={pin.version}"
    out = []
    if pin.marker and not applies(Requirement(f"{pin.name}; {pin.marker}"), env):
        out.append(
            f"{shown} carries a marker that is false on the target (Python "
            f"{env['python_version']}, {env['platform_machine']} Linux): {pin.marker!r}, so it "
            "would not be installed"
        )
    if not pin.hashes:
        out.append(f"{shown} has no --hash")
    bad = [h for h in pin.hashes if not SHA256_RE.fullmatch(h)]
    if bad:
        out.append(f"{shown} has a --hash that is not a sha256: {bad[0][:80]!r}")
    elif len(set(pin.hashes)) != len(pin.hashes):
        out.append(f"{shown} names a --hash twice")
    elif list(pin.hashes) != sorted(pin.hashes):
        out.append(
            f"{shown} has --hash lines in an order uv never writes (a hash was added by hand)"
        )
    return out


def reach(roots: Iterable[T], edges: Mapping[T, Iterable[T]]) -> set[T]:
    """Every node reachable from the roots along the edges (the roots included)."""
    seen: set[T] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges.get(name, ()))
    return seen
