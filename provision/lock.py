"""`provision lock NAME`: the lockfile next to envs/NAME/'s inputs, and `--check` for staleness.

conda path: the real conda-lock writes conda-lock.yml from environment.yml's conda part, with the
virtual packages of virtual-packages.yml passed explicitly, against the environment's channels or
`--channel` replacements, solved by conda, mamba, micromamba or provision's own conda-compatible
front end over py-rattler (provision.solver); a local, empty PyPI->conda name mapping keeps it
from downloading one. The pip section is resolved by uv (pip's configured index, the locked
Python, the virtual __glibc) and added as conda-lock `manager: pip` entries (see _add_pip_part).
pip and system paths: provision.pylock writes requirements.lock with hashes.

Every lock starts with a header saying how it was made, how to remake it, and a digest of its
inputs (files, platforms, channels, target), so `--check` needs neither network nor solver.
Locks are written beside the old one and renamed into place: an interrupted or failed lock leaves
the previous file as it was. After locking, the CUDA packages in the lock are compared with the
matrix row; a lock that disagrees is not written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision import _proc, matrix, spec
from provision.errors import LockError, StaleError, ToolMissing, UsageError

if TYPE_CHECKING:
    from provision.pylock import AsOf

META = "provision.json"
LOCK_FILES = {"conda": "conda-lock.yml", "pip": "requirements.lock", "system": "requirements.lock"}
INPUT_FILES = {
    "conda": ("environment.yml", "virtual-packages.yml"),
    "pip": ("requirements.in",),
    "system": ("requirements.in",),
}
SOLVERS = ("auto", "conda", "mamba", "micromamba", "builtin")
INPUTS_TAG = "# provision-inputs: "
DIGEST_TAG = "# provision-inputs-sha256: "
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


# -- inputs and the header ---------------------------------------------------------------------


def load_yaml(path: Path | str) -> Any:
    """YAML through libyaml where PyYAML has it (20x faster on a lock than the pure loader)."""
    import yaml

    text = path.read_text(encoding="utf-8") if isinstance(path, Path) else path
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def dump_yaml(data: Any) -> str:
    """What conda-lock's writer produces (PyYAML's dump, insertion order), through libyaml."""
    import yaml

    return str(yaml.dump(data, sort_keys=False, Dumper=getattr(yaml, "CDumper", yaml.Dumper)))


def _strip_auth(url: str) -> str:
    return re.sub(r"//[^/@]+@", "//", url)


def env_channels(target: Target) -> list[str]:
    """The channels environment.yml names (what conda-lock uses without --channel)."""
    data = load_yaml(target.root / "environment.yml") or {}
    return [str(c) for c in data.get("channels") or [] if str(c) != "nodefaults"]


def inputs(target: Target, platforms: Sequence[str], channels: Sequence[str]) -> dict[str, Any]:
    """Everything the lock depends on; its digest goes into the lock's header."""
    files = {
        rel: hashlib.sha256((target.root / rel).read_bytes()).hexdigest()
        for rel in INPUT_FILES[target.spec.path]
    }
    data: dict[str, Any] = {"files": files, "platforms": sorted(platforms)}
    if target.spec.path == "conda":
        data["channels"] = [_strip_auth(c) for c in (channels or env_channels(target))]
    else:
        from provision import pylock

        data["python"] = target.spec.python
        data["target"] = [pylock.python_platform(target.spec, p) for p in sorted(platforms)]
    return data


def digest(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def regen_command(target: Target, platforms: Sequence[str], channels: Sequence[str]) -> str:
    argv = ["provision", "lock", target.name]
    if sorted(platforms) != sorted(target.spec.platforms):
        for p in platforms:
            argv += ["--platform", p]
    for c in channels:
        argv += ["--channel", _strip_auth(c)]
    return shlex.join(argv)


def header(target: Target, data: Mapping[str, Any], regen: str) -> str:
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
        f"# Do not edit by hand; regenerate with: {regen}",
        f"# Install with: {use}",
        f"{INPUTS_TAG}{json.dumps(data, sort_keys=True, separators=(',', ':'))}",
        f"{DIGEST_TAG}{digest(data)}",
    ]
    return "\n".join(lines) + "\n"


def recorded(lock_text: str) -> tuple[str | None, dict[str, Any] | None]:
    found_digest, found_inputs = None, None
    for line in lock_text.splitlines()[:20]:
        if line.startswith(DIGEST_TAG):
            found_digest = line.removeprefix(DIGEST_TAG).strip()
        elif line.startswith(INPUTS_TAG):
            try:
                found_inputs = json.loads(line.removeprefix(INPUTS_TAG))
            except ValueError:
                found_inputs = None
    return found_digest, found_inputs


def _what_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    if not old:
        return "the lock has no provision header"
    changed = [
        f"{rel} changed"
        for rel, sha in new["files"].items()
        if old.get("files", {}).get(rel) != sha
    ]
    for key in ("platforms", "channels", "python", "target"):
        if key in new and old.get(key) != new[key]:
            changed.append(f"{key} {old.get(key)} -> {new[key]}")
    return "; ".join(changed) or "its inputs changed"


# -- entry point -------------------------------------------------------------------------------


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
    if check:
        return _check(target, data, rel, plats, channels)
    started = time.monotonic()
    text = header(target, data, regen_command(target, plats, channels))
    if target.spec.path == "conda":
        _check_virtual_platforms(target, plats)
        body, used, note = _lock_conda(target, plats, channels, solver, cache_dir)
    else:
        (body, note), used = _lock_pip(target, plats[0], cache_dir), "uv"
    _write_atomic(target.lock_path, text + note + body)
    seconds = time.monotonic() - started
    return Result([f"wrote {rel} ({_count(target, body)} packages, {used}, {seconds:.1f} s)"])


def _check(
    target: Target, data: Mapping[str, Any], rel: str, plats: Sequence[str], channels: Sequence[str]
) -> Result:
    regen = regen_command(target, plats, channels)
    if not target.lock_path.is_file():
        raise StaleError(f"{rel} does not exist yet; run: {regen}")
    old_digest, old_inputs = recorded(target.lock_path.read_text(encoding="utf-8"))
    if old_digest != digest(data):
        raise StaleError(f"{rel} is stale ({_what_changed(old_inputs, data)}); run: {regen}")
    return Result([f"{rel} is up to date"])


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


# -- pip and system paths ----------------------------------------------------------------------


def _lock_pip(target: Target, platform: str, cache_dir: Path | None) -> tuple[str, str]:
    from provision import pylock

    previous = _previous_as_of(target)
    with tempfile.TemporaryDirectory(prefix="provision-lock-") as tmp:
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
    with tempfile.TemporaryDirectory(prefix="provision-lock-") as tmp_name:
        tmp = Path(tmp_name)
        # conda-lock records sources relative to the lockfile; both in tmp give "environment.yml".
        source, pip_reqs = _split_environment(target, tmp)
        virtual = tmp / "virtual-packages.yml"
        virtual.write_bytes((target.root / "virtual-packages.yml").read_bytes())
        lookup = tmp / "pypi-to-conda.json"
        lookup.write_text("{}\n", encoding="utf-8")
        lockfile = tmp / "conda-lock.yml"
        env = {"CONDA_LOCK_SUBPROCESS_STDERR_DEFAULT_LOG_LEVEL": "DEBUG"}
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
                "dependencies": {}, "url": f.url, "hash": {"sha256": f.sha256},
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
    return [re.split(r"[\s=<>!~\[]", d, maxsplit=1)[0] for d in deps]
