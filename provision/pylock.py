"""The pip-path lock: requirements.in -> requirements.lock with hashes, for the target, not here.

uv resolves for the release's Python and for manylinux at the row's glibc floor, whatever this
machine runs. The package index is pip's own configuration (read here, cheaply: the lock must stay
within 1.5x of uv's own time), so a lab's mirror is used the same way pip would use it.
Only index-url is taken: extra-index-url and find-links are usually this machine's own folders,
and a lock must not depend on them.
Requirements files and requirements locks are read with packaging (a lock's pins, hashes and uv's
`# via` provenance), which is how lock.py tells a complete and closed lock from one that is not.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from provision import _proc
from provision.errors import LockError, ToolMissing, UsageError
from provision.spec import EnvSpec

ARCH = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
# The manylinux tags uv's --python-platform accepts (uv 0.9+); a row's glibc floor maps to the
# nearest one at or above it (2.27 -> manylinux_2_28: uv has no 2_27).
UV_MANYLINUX = ((2, 17), (2, 28), *((2, minor) for minor in range(31, 41)))
# pip's rule for comments in requirements files: a '#' at the start of a line or after whitespace
# (a URL's '#sha256=' fragment is not one).
COMMENT_RE = re.compile(r"(^|\s+)#.*$")
HASH_RE = re.compile(r"\s--hash=(\S+)")


def _config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest precedence first (global, user, site, PIP_CONFIG_FILE)."""
    explicit = env.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    home = Path(env.get("HOME") or Path.home())
    xdg_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [Path("/etc/pip.conf")]
    if not (explicit and Path(explicit).exists()):
        xdg_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
        files += [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if explicit:
        files.append(Path(explicit))
    return files


def pip_index_url(env: Mapping[str, str] | None = None) -> str | None:
    """The index-url pip would use for `pip install` here, or None for pip's built-in default."""
    env = os.environ if env is None else env
    if env.get("PIP_INDEX_URL"):
        return env["PIP_INDEX_URL"]
    found: str | None = None
    for path in _config_files(env):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "install"):
            for key in ("index-url", "index_url"):
                if parser.has_option(section, key):
                    found = parser.get(section, key).strip()
    return found or None


def pip_default_index() -> str:
    """pip's built-in index (its own object; no registry host is written in provision)."""
    from pip._internal.models.index import PyPI

    return str(PyPI.simple_url)


def manylinux_target(platform: str, glibc: str) -> str:
    """uv's --python-platform for a conda subdir and a glibc floor, e.g. x86_64-manylinux_2_28."""
    if platform not in ARCH:
        raise UsageError(f"pip packages are locked for {', '.join(ARCH)}, not {platform!r}")
    major, minor = (int(x) for x in glibc.split(".")[:2])
    tag = next((t for t in UV_MANYLINUX if t >= (major, minor)), (major, minor))
    return f"{ARCH[platform]}-manylinux_{tag[0]}_{tag[1]}"


def python_platform(spec: EnvSpec, platform: str) -> str:
    """The target of a pip/system lock: the row's glibc floor (uv's nearest tag at or above)."""
    if platform not in ARCH:
        raise UsageError(
            f"the {spec.path} path locks Linux wheels; --platform takes one of {', '.join(ARCH)}, "
            f"not {platform!r}"
        )
    return manylinux_target(platform, spec.release.glibc_min)


def uv_bin() -> str:
    try:
        from uv import find_uv_bin
    except ImportError as exc:
        raise ToolMissing("uv is not installed (pip install uv, or reinstall provision)") from exc
    try:
        return str(find_uv_bin())
    except FileNotFoundError as exc:
        raise ToolMissing(f"uv's binary is missing: {exc}") from exc


def uv_compile_argv(
    uv: str,
    spec: EnvSpec,
    platform: str,
    output: Path,
    index_url: str | None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The uv call: hashes, the target's Python and platform, pip's index, nothing from uv.toml."""
    argv = [
        uv, "pip", "compile", "requirements.in", "--output-file", str(output),
        "--generate-hashes", "--no-header", "--quiet", "--no-config", "--no-progress",
        "--python", sys.executable,  # only builds sdists if it must; the target is below
        "--python-version", spec.python,
        "--python-platform", python_platform(spec, platform),
        *extra,
    ]  # fmt: skip
    if index_url:
        argv += ["--index-url", index_url]
    return argv


def _uv_env(cache_dir: Path | None) -> dict[str, str]:
    env = {"UV_PYTHON_DOWNLOADS": "never"}
    if cache_dir is not None:
        env["UV_CACHE_DIR"] = str(cache_dir.absolute() / "uv")
    return env


def compile_lock(
    spec: EnvSpec,
    env_dir: Path,
    platform: str,
    workdir: Path,
    cache_dir: Path | None,
    previous: AsOf | None = None,
) -> tuple[str, AsOf | None]:
    """Resolve envs/<name>/requirements.in (body only, no header) as of TensorFlow's release."""
    requirements = requirement_lines((env_dir / "requirements.in").read_text(encoding="utf-8"))
    env = _uv_env(cache_dir)
    target = python_platform(spec, platform)
    when = as_of(requirements, spec.python, target, workdir, env, previous)
    output = workdir / "requirements.lock"
    argv = uv_compile_argv(
        uv_bin(), spec, platform, output, pip_index_url(), cutoff_args(requirements, when)
    )
    done = _proc.run(argv, cwd=env_dir, env=env, timeout=900, check=False)
    if not done:
        why = _uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv could not lock {spec.name} for {platform}: {why}")
    return output.read_text(encoding="utf-8"), when


# -- resolving as of the release ---------------------------------------------------------------
# TensorFlow's older wheels name open ranges (numpy>=1.14.5, tensorboard~=2.6, protobuf>=3.9.2),
# and today's releases of those break them (numpy 2 cannot load TF 2.7's extension modules).
# So dependencies resolve as of the pinned TensorFlow's upload (plus a few days for packages
# released alongside it); exact pins in the requirements (the NVIDIA wheels) are exempt.
AS_OF_MARGIN_DAYS = 3
AS_OF_TAG = "# provision-resolved-as-of: "
EXEMPT_DATE = "2099-12-31"  # an exact pin decides its version, whatever the date


@dataclass(frozen=True)
class AsOf:
    pin: str  # "tensorflow==2.7.4"
    cutoff: str  # "2022-09-05T19:11:01Z"

    def header_line(self) -> str:
        days = AS_OF_MARGIN_DAYS
        return f"{AS_OF_TAG}{self.cutoff} ({self.pin} uploaded + {days} days; exact pins exempt)"


def read_as_of(lock_text: str) -> AsOf | None:
    for line in lock_text.splitlines()[:20]:
        if line.startswith(AS_OF_TAG):
            cutoff, _, rest = line.removeprefix(AS_OF_TAG).partition(" (")
            return AsOf(rest.split(" ", 1)[0], cutoff)
    return None


def requirement_lines(text: str) -> list[str]:
    """The requirement lines of a requirements file, without comments and blank lines."""
    return [ln for ln in (COMMENT_RE.sub("", raw).strip() for raw in text.splitlines()) if ln]


def _exact_pins(requirements: Sequence[str]) -> dict[str, str]:
    out = {}
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue  # uv says what is wrong with it
        version = exact_version(req)
        if version is not None:
            out[norm(req.name)] = version
    return out


def as_of(
    requirements: Sequence[str],
    python_version: str,
    target: str,
    workdir: Path,
    env: Mapping[str, str],
    previous: AsOf | None,
) -> AsOf | None:
    """When the pinned TensorFlow was uploaded (+ margin), from the index's upload times.

    None without a TensorFlow pin or when the index publishes no upload times (then today's
    releases are used, as any resolver would). A previous lock of the same pin answers for free.
    """
    version = _exact_pins(requirements).get("tensorflow")
    if version is None:
        return None
    pin = f"tensorflow=={version}"
    if previous is not None and previous.pin == pin:
        return previous
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tensorflow.in").write_text(pin + "\n", encoding="utf-8")
    argv = [
        uv_bin(), "pip", "compile", "tensorflow.in", "--no-deps", "--output-file",
        "pylock.tensorflow.toml", "--quiet", "--no-config", "--no-progress",
        "--python", sys.executable, "--python-version", python_version,
        "--python-platform", target,
    ]  # fmt: skip
    index = pip_index_url()
    if index:
        argv += ["--index-url", index]
    done = _proc.run(argv, cwd=workdir, env=dict(env), timeout=300, check=False)
    if not done:
        why = _uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv cannot find {pin} for {target}: {why}")
    data = _toml((workdir / "pylock.tensorflow.toml").read_text(encoding="utf-8"))
    times = [
        f["upload-time"]
        for pkg in data.get("packages", [])
        for f in [*(pkg.get("wheels") or []), *([pkg["sdist"]] if pkg.get("sdist") else [])]
        if isinstance(f.get("upload-time"), datetime)
    ]
    if not times:
        return None
    cutoff = max(times).astimezone(timezone.utc) + timedelta(days=AS_OF_MARGIN_DAYS)
    return AsOf(pin, cutoff.strftime("%Y-%m-%dT%H:%M:%SZ"))


def cutoff_args(
    requirements: Sequence[str], when: AsOf | None, exempt: Iterable[str] = ()
) -> list[str]:
    """--exclude-newer at the cutoff; exact pins and `exempt` (conda's own) are taken as given."""
    if when is None:
        return []
    args = ["--exclude-newer", when.cutoff]
    for name in sorted({*_exact_pins(requirements), *exempt} - {"tensorflow"}):
        args += ["--exclude-newer-package", f"{name}={EXEMPT_DATE}"]
    return args


def _toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return dict(tomllib.loads(text))


def _uv_reason(text: str) -> str:
    """uv's explanation, on one line (its 'hint:' lines included)."""
    lines = [ln.strip(" \u2570\u2500\u25b6\u2502\u00d7").strip() for ln in text.splitlines()]
    return " ".join(ln for ln in lines if ln) or "no output"


# -- requirements and locks, as packaging reads them ---------------------------------------------


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
        if spec.operator != "===" and not version.endswith(".*") and _pep440(version):
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


@dataclass(frozen=True)
class Pin:
    """One package of a requirements lock, with the provenance uv wrote under it (`# via`)."""

    name: str  # PEP 503 normalised
    version: str
    hashes: tuple[str, ...]
    via: tuple[str, ...]  # normalised names of the packages that require it, or "-r FILE"
    line: int


def parse_lock(text: str, first_line: int = 1) -> list[Pin]:
    """Every `name==version` of a requirements lock (uv's output), its hashes and its `# via`.

    ValueError, naming the line (text's first is `first_line`), for a requirement that is not
    one or is not pinned exactly."""
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
        out.append(Pin(norm(req.name), version, hashes, tuple(via), start))
    return out


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


def norm(name: str) -> str:
    """PEP 503 normalised project name."""
    return str(canonicalize_name(name))


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
        if not pin.hashes:
            out.append(f"{pin.name}=={pin.version} has no --hash")
        for parent in pin.via:
            if parent.startswith("-"):
                continue
            if parent not in by_name:
                out.append(f"{pin.name}=={pin.version} is there for {parent} (# via), "
                           f"which is not pinned")  # fmt: skip
            required_by.setdefault(parent, []).append(pin.name)
    reached = _reach(roots, required_by)
    out += [
        f"{pin.name}=={pin.version} is pinned but nothing in {source} requires it "
        f"(# via {', '.join(pin.via) or 'nothing'})"
        for pin in lock
        if pin.name not in reached
    ]
    return out


def _reach(roots: Iterable[str], edges: Mapping[str, Iterable[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges.get(name, ()))
    return seen


def problems(spec: EnvSpec, text: str) -> list[str]:
    """What the lock gets wrong against the matrix row: TensorFlow's pin and every NVIDIA wheel."""
    got = pins(text)
    want = {"tensorflow": spec.release.pin}
    if spec.path == "pip":
        want.update({norm(n): v for n, v in spec.release.pip_wheels.items()})
    out = []
    for name, version in sorted(want.items()):
        if got.get(name) != version:
            out.append(f"{name}=={version} (the lock has {got.get(name, 'nothing')})")
    return out


# -- the pip section of a conda environment ----------------------------------------------------


@dataclass(frozen=True)
class LockedFile:
    """One distribution file chosen for the target: what conda-lock's pip entries hold."""

    name: str
    version: str
    url: str
    sha256: str
    requires: tuple[str, ...] = ()  # the resolved packages it depends on (normalised names)


def resolve_files(
    requirements: Sequence[str],
    python_version: str,
    platform: str,
    glibc: str,
    provided: Mapping[str, str],
    workdir: Path,
    cache_dir: Path | None,
    previous: AsOf | None = None,
) -> tuple[list[LockedFile], AsOf | None]:
    """Resolve pip requirements for a conda environment's Python and platform with uv, and pick
    for each package the file pip would install there (best wheel by tag priority, else sdist).
    `provided` (name -> version) are Python packages conda installs: the resolution must use them.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "requirements.in").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    env = _uv_env(cache_dir)
    target = manylinux_target(platform, glibc)
    when = as_of(requirements, python_version, target, workdir, env, previous)
    constraints = "".join(f"{n}=={v}\n" for n, v in sorted(provided.items()) if _pep440(v))
    (workdir / "constraints.txt").write_text(constraints, encoding="utf-8")
    common = [
        "--constraint", "constraints.txt", "--quiet", "--no-config", "--no-progress",
        "--python", sys.executable, "--python-version", python_version,
        "--python-platform", target, *cutoff_args(requirements, when, provided),
    ]  # fmt: skip
    index = pip_index_url()
    if index:
        common += ["--index-url", index]
    uv = uv_bin()
    argv = [uv, "pip", "compile", "requirements.in", "--output-file", "pylock.toml", *common]
    done = _proc.run(argv, cwd=workdir, env=env, timeout=900, check=False)
    if not done:
        why = _uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv could not resolve the pip section for {platform}: {why}")
    data = _toml((workdir / "pylock.toml").read_text(encoding="utf-8"))
    ranks = _tag_ranks(python_version, target)
    chosen = [_choose(pkg, ranks, target) for pkg in data.get("packages", [])]
    requires = _requires(uv, chosen, common, workdir, env, platform)
    out = [
        LockedFile(f.name, f.version, f.url, f.sha256, tuple(sorted(requires.get(f.name, ()))))
        for f in chosen
    ]
    return sorted(out, key=lambda f: f.name), when


def _requires(
    uv: str, chosen: Sequence[LockedFile], common: Sequence[str], workdir: Path,
    env: Mapping[str, str], platform: str,
) -> dict[str, set[str]]:  # fmt: skip
    """name -> the names it depends on, from uv's `# via` (pylock.toml has no dependency graph):
    the same resolution again, held to the versions just chosen, written as requirements.txt."""
    pinned = "".join(f"{f.name}=={f.version}\n" for f in chosen)
    (workdir / "chosen.txt").write_text(pinned, encoding="utf-8")
    argv = [
        uv, "pip", "compile", "requirements.in", "--output-file", "requirements.txt",
        "--no-header", "--constraint", "chosen.txt", *common,
    ]  # fmt: skip
    done = _proc.run(argv, cwd=workdir, env=dict(env), timeout=900, check=False)
    if not done:
        why = _uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv could not trace the pip section's dependencies for {platform}: {why}")
    graph = parse_lock((workdir / "requirements.txt").read_text(encoding="utf-8"))
    if {(p.name, p.version) for p in graph} != {(f.name, f.version) for f in chosen}:
        raise LockError(f"uv resolved the pip section for {platform} differently twice; re-lock")
    requires: dict[str, set[str]] = {}
    for pin in graph:
        for parent in pin.via:
            if not parent.startswith("-"):
                requires.setdefault(parent, set()).add(pin.name)
    return requires


def _pep440(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _tag_ranks(python_version: str, target: str) -> dict[str, int]:
    """Every wheel tag the target accepts -> its priority (0 best), as pip orders them."""
    from packaging import tags

    arch, _, manylinux = target.partition("-")
    glibc_minor = int(manylinux.rsplit("_", 1)[1])
    platforms = [f"manylinux_2_{m}_{arch}" for m in range(glibc_minor, 4, -1)]
    platforms += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    platforms.append(f"linux_{arch}")
    py = tuple(int(x) for x in python_version.split(".")[:2])
    ordered = [
        *tags.cpython_tags(py, platforms=platforms),
        *tags.compatible_tags(py, platforms=platforms),
    ]
    ranks: dict[str, int] = {}
    for i, tag in enumerate(ordered):
        ranks.setdefault(str(tag), i)
    return ranks


def _choose(pkg: Mapping[str, Any], ranks: Mapping[str, int], target: str) -> LockedFile:
    from packaging.utils import parse_wheel_filename

    name, version = norm(str(pkg["name"])), str(pkg["version"])
    best: tuple[int, Mapping[str, Any]] | None = None
    for wheel in pkg.get("wheels") or []:
        filename = str(wheel["url"]).rsplit("/", 1)[-1]
        try:
            _, _, _, wheel_tags = parse_wheel_filename(urllib.parse.unquote(filename))
        except ValueError:
            continue
        rank = min((ranks[str(t)] for t in wheel_tags if str(t) in ranks), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, wheel)
    chosen = best[1] if best else pkg.get("sdist")
    if not chosen or not chosen.get("hashes", {}).get("sha256"):
        raise LockError(f"{name} {version} has no file with a sha256 for {target}")
    return LockedFile(name, version, str(chosen["url"]), str(chosen["hashes"]["sha256"]))
