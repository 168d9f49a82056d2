"""The pip-path lock: requirements.in -> requirements.lock with hashes, for the target, not here.

uv resolves for the release's Python and for manylinux at the row's glibc floor, whatever this
machine runs. The package index is pip's own configuration (read here, cheaply: the lock must stay
within 1.5x of uv's own time), so a lab's mirror is used the same way pip would use it.
Only index-url is taken: extra-index-url and find-links are usually this machine's own folders,
and a lock must not depend on them. Dependencies resolve as of the pinned TensorFlow's upload
(see AsOf). The uv calls here serve the pip section of a conda environment too (condapip).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from provision import _children, _proc, caches, tools
from provision.errors import LockError, UsageError
from provision.lock.lockinputs import LockTarget
from provision.lock.requirements import ARCH, exact_pins, norm, requirement_lines
from provision.lock.requirements import pins as pins
from provision.matrix.spec import EnvSpec
from provision.tools import pip_index_url as pip_index_url  # pip's configured index

# The manylinux tags uv's --python-platform accepts (uv 0.9+); a row's glibc floor maps to the
# nearest one at or above it (2.27 -> manylinux_2_28: uv has no 2_27).
UV_MANYLINUX = ((2, 17), (2, 28), *((2, minor) for minor in range(31, 41)))
uv_bin = tools.uv  # the name tests/bench knows; tools finds uv for every caller


def index_args(index_url: str | None) -> list[str]:
    """uv's --index-url for pip's configured index. When pip's configuration names none, no flag:
    uv's own default index is the public one pip defaults to, so uv resolves where pip would
    install from (and no registry host is written in provision)."""
    return ["--index-url", index_url] if index_url else []


def manylinux_target(platform: str, glibc: str) -> str:
    """uv's --python-platform for a conda subdir and a glibc floor, e.g. x86_64-manylinux_2_28."""
    if platform not in ARCH:
        raise UsageError(f"pip packages are locked for {', '.join(ARCH)}, not {platform!r}")
    major, minor = (int(x) for x in glibc.split(".")[:2])
    tag = next((t for t in UV_MANYLINUX if t >= (major, minor)), (major, minor))
    return f"{ARCH[platform]}-manylinux_{tag[0]}_{tag[1]}"


def python_platform(spec: EnvSpec, platform: str, glibc: str | None = None) -> str:
    """The target of a pip/system lock: the row's glibc floor (uv's nearest tag at or above)."""
    if platform not in ARCH:
        raise UsageError(
            f"the {spec.path} path locks Linux wheels; --platform takes one of {', '.join(ARCH)}, "
            f"not {platform!r}"
        )
    return manylinux_target(platform, glibc or spec.release.glibc_min)


# -- the lock ----------------------------------------------------------------------------------


def lock(target: LockTarget, platform: str, cache_dir: Path | None) -> tuple[str, str]:
    """(the body of requirements.lock, its as-of header line or ''), checked against the row."""
    with _children.workdir() as tmp:
        body, when = compile_lock(
            target.spec, target.root, platform, Path(tmp), cache_dir, previous_as_of(target)
        )
    check_row(target, body)
    return body, when.header_line() + "\n" if when else ""


def check_row(target: LockTarget, body: str) -> None:
    """LockError when the lock does not hold TensorFlow's and the NVIDIA wheels' pins of the row."""
    wrong = problems(target.spec, body)
    if wrong:
        raise LockError(
            f"{target.name}: the resolved lock does not hold what the matrix pins: "
            + "; ".join(wrong)
        )


def uv_compile_argv(
    uv: str,
    spec: EnvSpec,
    platform: str,
    output: Path,
    index_url: str | None,
    extra: Sequence[str] = (),
    sources: Sequence[str] = (),
    glibc: str | None = None,
) -> list[str]:
    """The uv call: hashes, the target's Python and platform, pip's index, nothing from uv.toml."""
    argv = [
        uv, "pip", "compile", "requirements.in", *sources, "--output-file", str(output),
        "--generate-hashes", "--no-header", "--quiet", "--no-config", "--no-progress",
        "--python", sys.executable,  # only builds sdists if it must; the target is below
        "--python-version", spec.python,
        "--python-platform", python_platform(spec, platform, glibc),
        *extra,
    ]  # fmt: skip
    return argv + index_args(index_url)


def uv_env(cache_dir: Path | None) -> dict[str, str]:
    return {**tools.child_env(caches.tool_env(), cache_dir), "UV_PYTHON_DOWNLOADS": "never"}


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
    env = uv_env(cache_dir)
    target = python_platform(spec, platform)
    when = as_of(requirements, spec.python, target, workdir, env, previous)
    output = workdir / "requirements.lock"
    argv = uv_compile_argv(
        tools.uv(), spec, platform, output, pip_index_url(), cutoff_args(requirements, when)
    )
    done = _proc.run(argv, cwd=env_dir, env=env, timeout=900, check=False)
    if not done:
        why = uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv could not lock {spec.name} for {platform}: {why}")
    return output.read_text(encoding="utf-8"), when


def problems(spec: EnvSpec, text: str) -> list[str]:
    """What the lock gets wrong against the matrix row: TensorFlow's pin and every NVIDIA wheel."""
    got = pins(text)
    want = {"tensorflow": spec.release.pin}
    if spec.kind.pins_nvidia_wheels:
        want.update({norm(n): v for n, v in spec.release.pip_wheels.items()})
    out = []
    for name, version in sorted(want.items()):
        if got.get(name) != version:
            out.append(f"{name}=={version} (the lock has {got.get(name, 'nothing')})")
    return out


def toml_loads(text: str) -> dict[str, object]:
    """A TOML document: strings, numbers, booleans, dates and times, lists and tables."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return dict(tomllib.loads(text))


def uv_reason(text: str) -> str:
    """uv's explanation, on one line (its 'hint:' lines included)."""
    lines = [ln.strip(" \u2570\u2500\u25b6\u2502\u00d7").strip() for ln in text.splitlines()]
    return " ".join(ln for ln in lines if ln) or "no output"


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


def previous_as_of(target: LockTarget) -> AsOf | None:
    """The cutoff of the target's current lock: a re-lock of the same pin needs no index call."""
    try:
        return read_as_of(target.lock_path.read_text(encoding="utf-8"))
    except OSError:
        return None


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
    version = exact_pins(requirements).get("tensorflow")
    if version is None:
        return None
    pin = f"tensorflow=={version}"
    if previous is not None and previous.pin == pin:
        return previous
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tensorflow.in").write_text(pin + "\n", encoding="utf-8")
    argv = [
        tools.uv(), "pip", "compile", "tensorflow.in", "--no-deps", "--output-file",
        "pylock.tensorflow.toml", "--quiet", "--no-config", "--no-progress",
        "--python", sys.executable, "--python-version", python_version,
        "--python-platform", target, *index_args(pip_index_url()),
    ]  # fmt: skip
    done = _proc.run(argv, cwd=workdir, env=dict(env), timeout=300, check=False)
    if not done:
        why = uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv cannot find {pin} for {target}: {why}")
    data = toml_loads((workdir / "pylock.tensorflow.toml").read_text(encoding="utf-8"))
    packages = data.get("packages", [])
    times = [
        f["upload-time"]
        for pkg in (packages if isinstance(packages, list) else [])
        if isinstance(pkg, dict)
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
    for name in sorted({*exact_pins(requirements), *exempt} - {"tensorflow"}):
        args += ["--exclude-newer-package", f"{name}={EXEMPT_DATE}"]
    return args


# -- the standard's lock file (PEP 751) ----------------------------------------------------------


def pep751(spec: EnvSpec, lock_text: str, platform: str = "linux-64") -> str:
    """requirements.lock as a PEP 751 `pylock.toml` for tools that read the standard: uv resolves
    the lock's exact pins again (no dependencies) to the files the index serves for the target,
    with their URLs; each file's sha256 must be one the lock holds (else LockError: the index
    serves other files than those locked)."""
    from provision.lock.requirements import parse_lock

    allowed = {p.name: {h.removeprefix("sha256:") for h in p.hashes} for p in parse_lock(lock_text)}
    with _children.workdir() as tmp:
        folder = Path(tmp)
        (folder / "requirements.lock").write_text(lock_text, encoding="utf-8")
        argv = [
            tools.uv(), "pip", "compile", "requirements.lock", "--no-deps", "--output-file",
            "pylock.toml", "--quiet", "--no-header", "--no-config", "--no-progress",
            "--python", sys.executable,
            "--python-version", spec.python, "--python-platform", python_platform(spec, platform),
            *index_args(pip_index_url()),
        ]  # fmt: skip
        done = _proc.run(argv, cwd=folder, env=uv_env(None), timeout=600, check=False)
        if not done:
            raise LockError(f"uv could not write pylock.toml: {uv_reason(done.stderr)}")
        text = (folder / "pylock.toml").read_text(encoding="utf-8")
    data = toml_loads(text)
    packages = data.get("packages")
    for pkg in packages if isinstance(packages, list) else []:
        name = norm(str(pkg.get("name")))
        files = [*(pkg.get("wheels") or []), *([pkg["sdist"]] if pkg.get("sdist") else [])]
        for f in files:
            sha = str((f.get("hashes") or {}).get("sha256", ""))
            if sha not in allowed.get(name, set()):
                raise LockError(
                    f"pylock.toml: {name} {pkg.get('version')}: the index serves "
                    f"{str(f.get('url', '?')).rsplit('/', 1)[-1]} (sha256 {sha[:12]}…), which the "
                    "lock does not hold; re-lock"
                )
    return (
        f"# {spec.name}: requirements.lock as a PEP 751 lock (provision export; the same pins and\n"
        "# hashes, with the files the index serves for the target). Do not edit by hand.\n" + text
    )
