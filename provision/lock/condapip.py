"""The pip section of a conda environment, resolved with uv and added to conda-lock's lock.

conda-lock 4.0.3's pip resolver cannot lock TensorFlow: its marker environment has no
platform_machine (TF 2.14 then needs the aarch64-only tensorflow-cpu-aws), it reads one wheel's
metadata for all (TF's aarch64 wheels list other dependencies), and it knows no manylinux_2_27
(TF 2.21's wheels). uv gets all three right, as for the pip path. So for each platform, uv
resolves the pip section for the locked Python and the virtual __glibc, holding the Python
packages conda already installs, and the file pip would install there (URL + sha256) goes into
the lock as conda-lock's own `manager: pip` entries, with the dependencies uv traced.
"""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from provision import _proc, tools
from provision.errors import LockError
from provision.fileio import load_yaml
from provision.lock import condafile, pylock
from provision.lock.lockinputs import LockTarget
from provision.lock.pylock import AsOf
from provision.lock.requirements import norm, parse_lock, pep440


def add_pip_part(
    target: LockTarget, lockfile: Path, requirements: Sequence[str], platforms: Sequence[str],
    tmp: Path, cache_dir: Path | None,
) -> AsOf | None:  # fmt: skip
    """Resolve the pip section with uv for each platform's locked Python and glibc, and add the
    chosen files (URL + sha256) to the lock as conda-lock's own `manager: pip` entries."""
    lock = condafile.read(lockfile)
    virtual = load_yaml(target.root / "virtual-packages.yml")
    subdirs = virtual.get("subdirs") if isinstance(virtual, dict) else None
    when = pylock.previous_as_of(target)
    added: list[condafile.LockedPackage] = []
    for platform in platforms:
        conda_pkgs = lock.on(platform)
        python = next((p for p in conda_pkgs if p.name == "python"), None)
        if python is None:
            raise LockError(f"{target.name}: pip dependencies need python among the conda ones")
        # Python distributions conda already installs (they depend on python) stay conda's.
        provided = {norm(p.name): p.version for p in conda_pkgs if "python" in p.dependencies}
        packages = (subdirs or {}).get(platform, {}).get("packages") or {}
        glibc = str(packages.get("__glibc") or target.spec.release.glibc_min).split()[0]
        files, when = resolve_files(
            requirements, python.version, platform, glibc, provided, tmp / platform,
            cache_dir, when,
        )  # fmt: skip
        added += [
            condafile.pip_package(f.name, f.version, platform, f.url, f.sha256, f.requires)
            for f in files
            if f.name not in provided
        ]
    lockfile.write_text(lock.with_pip(added), encoding="utf-8")
    return when


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
    env = pylock.uv_env(cache_dir)
    target = pylock.manylinux_target(platform, glibc)
    when = pylock.as_of(requirements, python_version, target, workdir, env, previous)
    constraints = "".join(f"{n}=={v}\n" for n, v in sorted(provided.items()) if pep440(v))
    (workdir / "constraints.txt").write_text(constraints, encoding="utf-8")
    common = [
        "--constraint", "constraints.txt", "--quiet", "--no-config", "--no-progress",
        "--python", sys.executable, "--python-version", python_version,
        "--python-platform", target, *pylock.cutoff_args(requirements, when, provided),
        *pylock.index_args(pylock.pip_index_url()),
    ]  # fmt: skip
    uv = tools.uv()
    argv = [uv, "pip", "compile", "requirements.in", "--output-file", "pylock.toml", *common]
    done = _proc.run(argv, cwd=workdir, env=env, timeout=900, check=False)
    if not done:
        why = pylock.uv_reason(done.stderr or done.stdout)
        raise LockError(f"uv could not resolve the pip section for {platform}: {why}")
    data = pylock.toml_loads((workdir / "pylock.toml").read_text(encoding="utf-8"))
    ranks = _tag_ranks(python_version, target)
    packages = data.get("packages", [])
    chosen = [
        _choose(pkg, ranks, target) for pkg in (packages if isinstance(packages, list) else [])
    ]
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
        why = pylock.uv_reason(done.stderr or done.stdout)
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


def _choose(pkg: Mapping[str, object], ranks: Mapping[str, int], target: str) -> LockedFile:
    from packaging.utils import parse_wheel_filename

    name, version = norm(str(pkg["name"])), str(pkg["version"])
    best: tuple[int, object] | None = None
    wheels = pkg.get("wheels") or []
    for wheel in wheels if isinstance(wheels, list) else []:
        filename = str(wheel["url"]).rsplit("/", 1)[-1]
        try:
            _, _, _, wheel_tags = parse_wheel_filename(urllib.parse.unquote(filename))
        except ValueError:
            continue
        rank = min((ranks[str(t)] for t in wheel_tags if str(t) in ranks), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, wheel)
    chosen = best[1] if best else pkg.get("sdist")
    if not isinstance(chosen, dict) or not chosen.get("hashes", {}).get("sha256"):
        raise LockError(f"{name} {version} has no file with a sha256 for {target}")
    return LockedFile(name, version, str(chosen["url"]), str(chosen["hashes"]["sha256"]))
