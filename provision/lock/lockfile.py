"""A lock file as provision writes and reads it: its header, its digests, and what changed.

Every lock starts with a header saying how it was made and how to remake it, the meaning of its
inputs (requirements, match specs, channels, platforms, virtual packages: parsed and normalised,
so a reworded comment changes nothing) with their digest, and the digest of its own body; the body
ends with an end line. The header holds nothing that changes from run to run, so a re-lock of
unchanged inputs is byte-identical. Locks are written beside the old one and renamed into place.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from provision.fileio import sha256_text
from provision.jsontypes import JSONObject
from provision.lock import lockinputs, pylock
from provision.lock.lockinputs import LockTarget, strip_auth
from provision.lock.requirements import normal_requirement, pins
from provision.matrix.spec import EnvSpec
from provision.userpackages import FILE as USER_FILE

# 1: a digest of the input files' bytes. 2: of their meaning, plus the body's digest and end line.
FORMAT = 2
REGEN_TAG = "# Do not edit by hand; regenerate with: "
INPUTS_TAG = "# provision-inputs: "
DIGEST_TAG = "# provision-inputs-sha256: "
BODY_TAG = "# provision-body-sha256: "
END_TAG = "# provision-lock-end: "
HEADER_LINES = 20


# -- inputs, by meaning ------------------------------------------------------------------------

# The header's provision-inputs: format and platforms always; conda: dependencies, pip, channels
# and virtual-packages (platform -> {name: spec}); pip and system: requirements, python, target.
LockInputs = TypedDict(
    "LockInputs",
    {
        "format": int,
        "platforms": list[str],
        "dependencies": list[str],
        "pip": list[str],
        "channels": list[str],
        "virtual-packages": dict[str, dict[str, str]],
        "requirements": list[str],
        "python": str,
        "target": list[str],
        "packages": list[str],
    },
    total=False,
)


def inputs(target: LockTarget, platforms: Sequence[str], channels: Sequence[str]) -> LockInputs:
    """What the lock means to depend on; it goes into the lock's header with its digest.

    pip/system: requirements.in's requirements (normalised, sorted), the Python line, the
    platforms and wheel targets. conda: environment.yml's match specs and pip requirements (both
    normalised, sorted), the channels, the platforms and their virtual packages. Comments, blank
    lines, order and spelling are not inputs."""
    data: LockInputs = {"format": FORMAT, "platforms": sorted(platforms)}
    if target.spec.kind.conda_env:
        env = lockinputs.read_environment(target)
        data["dependencies"] = sorted(set(env.conda))
        data["pip"] = sorted({normal_requirement(r) for r in env.pip})
        data["channels"] = [strip_auth(c) for c in (channels or lockinputs.env_channels(target))]
        data["virtual-packages"] = lockinputs.virtual_packages(target, platforms)
    else:
        reqs = lockinputs.requirements_in(target)
        data["requirements"] = sorted({normal_requirement(r) for r in reqs})
        data["python"] = target.spec.python
        from provision.lock import userlock

        floor = userlock.glibc_floor(target)
        data["target"] = [pylock.python_platform(target.spec, p, floor) for p in sorted(platforms)]
    if target.packages:  # absent without packages.in: the locks made before it read the same
        data["packages"] = sorted(p.line for p in target.packages)
    return data


def digest(data: Mapping[str, object]) -> str:
    return sha256_text(json.dumps(data, sort_keys=True, separators=(",", ":")))


# -- the header, the body ----------------------------------------------------------------------


def regen_command(target: LockTarget, platforms: Sequence[str], channels: Sequence[str]) -> str:
    argv = ["provision", "lock", target.name]
    if sorted(platforms) != sorted(target.spec.platforms):
        for p in platforms:
            argv += ["--platform", p]
    for c in channels:
        argv += ["--channel", strip_auth(c)]
    return shlex.join(argv)


def header(target: LockTarget, data: LockInputs, regen: str, body_sha256: str) -> str:
    s = target.spec
    what = (
        f"{s.name}: TensorFlow {s.release.pin}, CUDA {s.cuda.version}, cuDNN {s.cudnn.version}, "
        f"Python {s.python}, {s.path} path"
    )
    if s.kind.conda_env:
        how = (
            "by conda-lock from environment.yml and virtual-packages.yml (conda packages) "
            "and uv (its pip section)"
        )
        use = (
            f"provision install {target.name}  (or: conda-lock install --prefix DIR conda-lock.yml)"
        )
    else:
        targets = ", ".join(data["target"])
        sources = "requirements.in" + (f" and {USER_FILE}" if "packages" in data else "")
        how = f"by uv pip compile --generate-hashes from {sources} for {targets}"
        use = "pip install --require-hashes --no-deps -r requirements.lock"
    lines = [
        f"# Generated by provision lock ({what}),",
        f"# {how}.",
        f"{REGEN_TAG}{regen}",
        f"# Install with: {use}",
        *_prerelease_line(s),
        f"{INPUTS_TAG}{json.dumps(data, sort_keys=True, separators=(',', ':'))}",
        f"{DIGEST_TAG}{digest(data)}",
        f"{BODY_TAG}{body_sha256}",
    ]
    return "\n".join(lines) + "\n"


def _prerelease_line(spec: EnvSpec) -> list[str]:
    """A pre-release row's lock says which packages may be pre-releases: TensorFlow itself and
    the dependencies it asks for only as pre-releases; every other package is a final release."""
    rel = spec.release
    if not rel.prerelease:
        return []
    allowed = ", ".join([f"tensorflow=={rel.pin}", *rel.prerelease_deps])
    return [f"# Pre-releases allowed for these only (a pre-release row, --pre): {allowed}"]


def check_prereleases(spec: EnvSpec, body: str) -> None:
    """A pre-release row's requirements lock holds pre-releases only where the row allows them
    (see above). Final rows are left to the resolver: 2.5's lock holds keras-nightly, a package
    that has only development releases, as TensorFlow 2.5.3 asks for."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    from provision.errors import LockError

    if not spec.release.prerelease:
        return
    allowed = {"tensorflow"}
    allowed |= {canonicalize_name(Requirement(r).name) for r in spec.release.prerelease_deps}
    found = []
    for name, version in pins(body).items():
        try:
            pre = Version(version).is_prerelease
        except InvalidVersion:
            continue
        if pre and canonicalize_name(name) not in allowed:
            found.append(f"{name}=={version}")
    if found:
        raise LockError(
            f"{spec.name}: the resolver chose pre-releases the matrix does not allow: "
            f"{', '.join(sorted(found))}; nothing written"
        )


def end_line(count: int) -> str:
    return f"{END_TAG}{count} packages\n"


def count(target: LockTarget, body: str) -> int:
    """The packages of a lock's body (every platform's, for a conda lock)."""
    if target.spec.kind.conda_env:
        return len(re.findall(r"^- name: ", body, re.MULTILINE))
    return len(pins(body))


# -- reading a lock ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """A lock file's header, as far as it has one, and its body (everything after the header)."""

    inputs: JSONObject | None
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


def made_for(target: LockTarget) -> tuple[list[str], list[str]]:
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


# -- what changed ------------------------------------------------------------------------------


def what_changed(old: Mapping[str, object] | None, new: Mapping[str, object]) -> str:
    """Why a lock made for `old` inputs (a header's, as read) is stale for `new` ones, on one
    line."""
    if not old:
        return "the lock has no provision header"
    was, now = old.get("format"), new["format"]
    if was != now:
        if isinstance(was, int) and isinstance(now, int) and was > now:
            return f"made by a newer provision (format {was}); upgrade provision or re-lock"
        return "made by an older provision; re-lock"
    changed = []
    for key, label in (
        ("requirements", "requirements"), ("dependencies", "conda dependencies"),
        ("pip", "pip requirements"), ("packages", f"your packages ({USER_FILE})"),
    ):  # fmt: skip
        if (key in new or key in old) and old.get(key) != new.get(key):
            changed.append(
                f"{label} changed: {_list_change(old.get(key) or [], new.get(key) or [])}"
            )
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
    return re.split(r"[\s=<>!~\[;@]", requirement.removeprefix("pypi: "), maxsplit=1)[0]


def _strings(value: object) -> list[str]:
    return [str(r) for r in value] if isinstance(value, list) else []


def _list_change(old: object, new: object) -> str:
    before = {_key(r): r for r in _strings(old)}
    after = {_key(r): r for r in _strings(new)}
    parts = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        parts.append(f"{a} -> {b}" if a and b else f"added {b}" if b else f"removed {a}")
    return ", ".join(parts) or "reordered"


def _virtual_change(old: object, new: object) -> str:
    before = old if isinstance(old, dict) else {}
    after = new if isinstance(new, dict) else {}
    parts = []
    for platform in sorted(after):
        a, b = before.get(platform) or {}, after[platform]
        for name in sorted(a.keys() | b.keys()):
            if a.get(name) != b.get(name):
                parts.append(
                    f"{platform} {name} {a.get(name, '(none)')} -> {b.get(name, '(none)')}"
                )
    return ", ".join(parts)
