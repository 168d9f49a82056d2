"""The conda-path lock: conda-lock.yml from environment.yml and virtual-packages.yml.

The real conda-lock writes the lock from environment.yml's conda part, with the virtual packages
of virtual-packages.yml passed explicitly, against the environment's channels or `--channel`
replacements, solved by conda, mamba, micromamba or provision's own conda-compatible front end
over py-rattler (provision.solver); a local, empty PyPI->conda name mapping keeps it from
downloading one. provision-conda starts from the previous lock (solver.prefer): its conda
packages stay where the inputs allow. The pip section is resolved by uv and added to the lock
(condapip). The CUDA packages in the lock are then compared with the matrix row; a lock that
disagrees is an error.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from provision import _children, _proc, caches, diskread, environment, tools
from provision.errors import LockError, UsageError
from provision.fileio import dump_yaml, load_yaml, sha256_text
from provision.lock import condafile, lockfile
from provision.lock.condapip import add_pip_part
from provision.lock.lockinputs import LockTarget, env_channels
from provision.lock.requirements import reach
from provision.matrix import spec
from provision.userpackages import FILE as USER_FILE
from provision.userpackages import canonical

CONDA_LOCK_TIMEOUT_S = 1800


def lock(
    target: LockTarget, platforms: Sequence[str], channels: Sequence[str], solver: str,
    cache_dir: Path | None, upgrade: Sequence[str] | None = None,
) -> tuple[str, str, str]:  # fmt: skip
    """(the lock's body, the solver's name, the as-of header line of its pip section or '').
    The previous lock's conda packages are kept where the inputs allow (provision-conda only),
    but for upgrade: () the user's packages and what only they need, or those named."""
    from provision.solver import prefer

    conda = tools.solver(solver)
    _check_reachable(target, platforms, channels)
    with _children.workdir() as tmp:
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
            **tools.child_env(caches.tool_env(), cache_dir),
            "CONDA_LOCK_SUBPROCESS_STDERR_DEFAULT_LOG_LEVEL": "DEBUG",
            "TMPDIR": str(tmp / "tmp"),
        }
        if cache_dir is not None:
            # conda-lock's and provision-conda's caches both follow XDG_CACHE_HOME.
            env["XDG_CACHE_HOME"] = str(cache_dir.absolute())
        choices = previous_choices(target, upgrade)
        if choices:
            prefer.write(tmp / "prefer.json", choices)
            env[prefer.PREFER_ENV] = str(tmp / "prefer.json")
        argv = conda_lock_argv(conda, source, lockfile, virtual, lookup, platforms, channels)
        done = _proc.run(argv, cwd=tmp, env=env, timeout=CONDA_LOCK_TIMEOUT_S, check=False)
        if not done or not lockfile.is_file():
            raise LockError(
                f"conda-lock could not lock {target.name}: {solver_reason(done.stderr)}"
            )
        note = ""
        if pip_reqs:
            when = add_pip_part(target, lockfile, pip_reqs, platforms, tmp, cache_dir)
            note = when.header_line() + "\n" if when else ""
        body = _strip_help(lockfile.read_text(encoding="utf-8"))
    wrong = conda_problems(target.spec, body)
    if wrong:
        raise LockError(
            f"{target.name}: the lock does not hold the CUDA packages the matrix promises: "
            + "; ".join(wrong)
        )
    return body, Path(conda).name, note


def previous_choices(
    target: LockTarget, upgrade: Sequence[str] | None
) -> dict[str, dict[str, tuple[str, str]]]:
    """subdir -> name -> (version, build): the conda packages of the lock as it is, less those
    `upgrade` frees. A missing, unreadable or edited lock gives nothing to start from."""
    text = diskread.text_or_none(target.lock_path, environment.RENDERED_LIMIT)
    if text is None:
        return {}
    recorded = lockfile.read_lock(text)
    if recorded.body_digest != sha256_text(recorded.body):
        return {}
    try:
        packages = [p for p in condafile.parse(recorded.body, "the lock").packages if not p.pip]
    except LockError:
        return {}
    freed: set[str] = set()
    if upgrade is not None:
        yours = {p.name for p in target.packages if not p.pypi}
        named = {canonical(n) for n in upgrade} or yours
        unknown = sorted(named - yours)
        if unknown:
            raise UsageError(
                f"--upgrade {', '.join(unknown)}: not one of your conda packages in "
                f"{target.name}/{USER_FILE} (yours: {', '.join(sorted(yours)) or 'none'}); "
                "TensorFlow's own dependencies move with the release"
            )
        edges: dict[str, set[str]] = {}
        for p in packages:
            edges.setdefault(p.name, set()).update(p.dependencies)
        roots = sorted(p.name for p in packages if canonical(p.name) in named)
        rendered = reach(_names(str(d) for d in _rendered(target)[1]), edges)
        freed = reach(roots, edges) - rendered | set(roots)
    choices: dict[str, dict[str, tuple[str, str]]] = {}
    for p in packages:
        build = p.build_string
        if p.name not in freed and build is not None:
            choices.setdefault(p.platform, {})[p.name] = (p.version, build)
    return choices


def check_virtual_platforms(target: LockTarget, platforms: Sequence[str]) -> None:
    """UsageError unless virtual-packages.yml describes every platform to lock."""
    data = load_yaml(target.root / "virtual-packages.yml")
    subdirs = data.get("subdirs") if isinstance(data, dict) else None
    have = set(subdirs.keys()) if isinstance(subdirs, dict) else set()
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


def _rendered(target: LockTarget) -> tuple[dict[str, object], list[object], list[str]]:
    """environment.yml as rendered: the document, its conda dependencies, its pip section."""
    data = load_yaml(target.root / "environment.yml") or {}
    if not isinstance(data, dict):
        where = target.root / "environment.yml"
        raise LockError(f"{where} is not a mapping; render the environment again")
    deps: list[object] = []
    pip_reqs: list[str] = []
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict) and "pip" in dep:
            pip_reqs += [str(r) for r in dep["pip"] or []]
        else:
            deps.append(dep)
    return data, deps, pip_reqs


def _split_environment(target: LockTarget, tmp: Path) -> tuple[Path, list[str]]:
    """environment.yml without its pip section (for conda-lock), and that section's requirements."""
    data, deps, pip_reqs = _rendered(target)
    # The user's packages (packages.in): conda-forge ones beside the rendered, `pypi:` ones with
    # the pip section.
    deps += [p.spec for p in target.packages if not p.pypi]
    pip_reqs += [p.spec for p in target.packages if p.pypi]
    data["dependencies"] = deps
    out = tmp / "environment.yml"
    out.write_text(dump_yaml(data), encoding="utf-8")
    return out, pip_reqs


def _check_reachable(target: LockTarget, platforms: Sequence[str], channels: Sequence[str]) -> None:
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


# -- the lock against the matrix row -----------------------------------------------------------


def _matches(version: str | None, wanted: str) -> bool:
    """conda's `name=X.Y` means X.Y or X.Y.*."""
    return version is not None and (version == wanted or version.startswith(wanted + "."))


def conda_problems(s: spec.EnvSpec, body: str) -> list[str]:
    """Where the lock disagrees with the row: cudatoolkit / cuda-version, split packages, cuDNN."""
    problems = []
    locked = condafile.parse(body, "the lock conda-lock wrote").versions()
    for platform, pkgs in sorted(locked.items()):
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
