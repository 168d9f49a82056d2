"""`provision create`: render -> lock -> install -> verify, the one command users remember.

Every step is skipped when its output already matches its inputs, so running create again on a
built environment changes nothing and takes a second: render leaves identical files alone, the lock
is kept when `lock --check` passes, install finds its completion marker for this lock, and verify is
cached in the prefix (a marker keyed by the install's inputs and the smoke test's hash; `--force`
or `provision verify` runs it again). The first failing step stops the run; the result says which
step failed and what to do. Nothing here prints: progress goes to a callback, the CLI shows it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from provision import environment, fileio, registry, tools
from provision.errors import InstallError, ProvisionError, UsageError
from provision.install import build, place
from provision.matrix import Matrix
from provision.matrix.spec import EnvRequest, EnvSpec, check_pre
from provision.progress import Event, Report, nothing
from provision.steps import StepName, StepOutcome, StepResult

STEPS: tuple[StepName, ...] = ("render", "lock", "install", "verify")
VERIFY_MARKER = ".provision-verify.json"


@dataclass
class Step:
    """One step of a create as it runs: its outcome is None until it ends (the step protocol's
    words: done, skipped, stale, failed)."""

    name: StepName
    index: int  # 1-based, of len(STEPS)
    outcome: StepOutcome | None = None
    seconds: float = 0.0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("done", "skipped")

    def as_json(self) -> dict[str, object]:
        return {
            "step": self.name,
            "status": self.outcome,
            "seconds": round(self.seconds, 2),
            "detail": self.detail,
        }


@dataclass
class CreateResult:
    name: str = ""
    path: str = ""
    env_dir: Path | None = None
    prefix: Path | None = None
    python: Path | None = None
    steps: list[Step] = field(default_factory=list)
    error: str = ""
    hint: str = ""
    report: dict[str, object] | None = None  # the smoke test's JSON report
    cpu_only: str = ""  # why the environment runs on the CPU only ("" when it used a GPU)

    @property
    def ok(self) -> bool:
        return not self.error and all(s.ok for s in self.steps)

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "name": self.name,
            "path": self.path,
            "env_dir": str(self.env_dir) if self.env_dir else None,
            "prefix": str(self.prefix) if self.prefix else None,
            "python": str(self.python) if self.python else None,
            "seconds": round(sum(s.seconds for s in self.steps), 2),
            "steps": [s.as_json() for s in self.steps],
            "cpu_only": self.cpu_only or None,
            "error": self.error or None,
            "hint": self.hint or None,
        }


StepProgress = Callable[[Step], None]


def default_python(tf: str, path: str) -> str | None:
    """The newest Python the release supports that this host has (venvs are made from it).

    The conda path brings its own Python from the channel, so the release's newest is used there.
    """
    from provision import matrix
    from provision.matrix import kinds

    if kinds.of(path).conda_env:
        return None

    release = matrix.load().release(tf)
    for version in reversed(release.python):
        if tools.has_python(version):
            return version
    raise InstallError(
        f"TensorFlow {release.tf} supports Python {', '.join(release.python)} and none of them is "
        f"installed on this host; install one (e.g. `pyenv install {release.python[-1]}`)"
    )


def create(
    request: EnvRequest,
    options: build.BuildOptions,
    *,
    out: Path,
    channels: Sequence[str] = (),
    packages: Sequence[str] = (),
    progress: StepProgress | None = None,
    report: Report = nothing,
    verify: bool = True,
) -> CreateResult:
    """Render, lock, install and verify `request` into out/NAME and options.prefix.
    progress: each step as it starts and ends; report: what goes on inside the steps (the
    installers' downloads, install.sh's steps, the smoke test). verify False: the smoke test is
    not run (the verify step says so)."""
    from provision import matrix
    from provision.matrix import kinds

    kind = kinds.of(request.path)
    if request.python and not kind.conda_env:
        tools.find_python(request.python)  # create builds here: say so before rendering anything
    m = matrix.load()
    check_pre(m.release(request.tf), request.pre)
    if not request.python:
        request = replace(request, python=default_python(request.tf, request.path))
    env_spec = request.resolve(m)
    prefix, force, solver = options.prefix, options.force, options.solver
    result = CreateResult(name=env_spec.name, path=env_spec.path, env_dir=Path(out) / env_spec.name)
    if channels and not kind.conda_env:
        raise UsageError("--channel applies to the conda path only")
    from provision.userpackages import parse_spec

    for given in packages:  # a bad spec is refused before anything is written
        parse_spec(given, kind.conda_env, "--with")
    # Everything that can be checked is checked before the first file is written.
    place.check_same_source(env_spec.name, (Path(out) / env_spec.name).absolute(), options.replace)
    if prefix is not None:
        target = place.followed(Path(prefix).absolute())
        build.check_prefix(target)
        place.check_not_another(env_spec.name, target)
    else:
        registry.writable()
    made = [d for d in (Path(out), Path(out) / env_spec.name) if not d.exists()]
    try:
        _steps(result, _named(env_spec.name, out), [
            lambda: _render(out, env_spec, m, force, packages),
            lambda: _lock(out, env_spec.name, solver, channels, force),
            lambda: _install(out, env_spec.name, options, result, report),
            lambda: _verify(out, env_spec.name, result, force, report) if verify
            else _not_verified(_named(env_spec.name, out)),
        ], progress)  # fmt: skip
    except BaseException:
        _remove_made(made)
        raise
    built = any(s.name == "install" and s.ok for s in result.steps)
    if not result.ok and not built:
        _remove_made(made)  # a create that failed leaves no half-made environment directory
    return result


def _remove_made(made: list[Path]) -> None:
    """Remove the folders this create made (the environment directory, envs/ when it made it)."""
    for folder in reversed(made):
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)


def _steps(
    result: CreateResult, named: str, actions: list[Callable[[], StepResult]],
    progress: StepProgress | None,
) -> None:  # fmt: skip
    """Run the steps in order through the step protocol; the first that does not end ok stops."""
    for index, (step_name, action) in enumerate(zip(STEPS, actions, strict=True), start=1):
        step = Step(step_name, index)
        result.steps.append(step)
        if progress:
            progress(step)
        start = time.monotonic()
        try:
            outcome = action()
        except ProvisionError as exc:
            outcome = StepResult(step_name, "failed", [str(exc)], _hint(step_name, named))
        step.outcome = outcome.outcome
        step.detail = outcome.summary
        if not outcome.ok:
            result.error = f"{step_name} failed: {outcome.summary}"
            result.hint = outcome.hint or _hint(step_name, named)
        step.seconds = time.monotonic() - start
        if progress:
            progress(step)
        if not step.ok:
            break


def _hint(step: StepName, named: str) -> str:
    """What to do when a step raised; named: NAME as a command needs it."""
    return {
        "render": "fix the request, or move hand-edited files away / re-run with --force",
        "lock": "fix the cause above (the package index, the channels, the inputs), then re-run",
        "install": "fix the cause above and re-run the same command: a partial build is redone",
        "verify": f"`provision verify {named}` shows the full report",
        "bench": f"`provision bench {named}` shows the full output",
    }[step]


def _named(name: str, out: Path) -> str:
    """NAME as a command needs it: with --out when the environments are not in envs/."""
    return name if Path(out) == Path("envs") else f"{name} --out {out}"


def _render(
    out: Path, env_spec: EnvSpec, m: Matrix, force: bool, packages: Sequence[str] = ()
) -> StepResult:
    from provision import render

    return render.write(out, [env_spec], m, StepResult("render"), force=force, packages=packages)


def _lock(out: Path, name: str, solver: str, channels: Sequence[str], force: bool) -> StepResult:
    from provision import lock

    env = environment.load(Path(out) / name)
    if not force:
        checked = lock.run(env, channels=channels, check=True)
        if checked.ok:  # fresh: nothing to lock
            return replace(checked, outcome="skipped")
    return lock.run(env, channels=channels, solver=solver)


def _install(
    out: Path, name: str, options: build.BuildOptions, result: CreateResult,
    report: Report = nothing,
) -> StepResult:  # fmt: skip
    env = environment.load(Path(out) / name)
    res = build.install(env, options, report=report)
    result.prefix, result.python = res.prefix, res.python
    return res.as_step()


def _not_verified(named: str) -> StepResult:
    line = f"not run (--no-verify): `provision verify {named}` runs the smoke test"
    return StepResult("verify", "skipped", [line])


def _verify_key(prefix: Path) -> str:
    """A passed verify stays valid while the build and the payload that judged it are the same."""
    from provision import payload_app

    marker = place.read_marker(prefix) or {}
    return fileio.sha256_text(str(marker.get("inputs_sha256", "")) + payload_app.digest())


def _verify(
    out: Path, name: str, result: CreateResult, force: bool, report: Report = nothing
) -> StepResult:
    from provision import verify

    assert result.prefix is not None
    env = environment.load(Path(out) / name)
    prefix = result.prefix
    cache = prefix / VERIFY_MARKER
    key = _verify_key(prefix)
    if env.kind.owns_prefix and not force:  # the system path's venv belongs to its script
        try:
            cached = json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cached = None
        if isinstance(cached, dict) and cached.get("key") == key and cached.get("ok") is True:
            result.report = cached.get("report")
            result.cpu_only = str(cached.get("cpu_only") or "")
            line = f"passed before for this build (cached; `provision verify {name}` re-runs)"
            return StepResult("verify", "skipped", [line])
    report(Event("info", f"running the smoke test with {environment.interpreter(prefix)}"))
    outcome = verify.verify(env, prefix=prefix)
    smoke = outcome.as_json()
    result.report, result.cpu_only = smoke, outcome.cpu_only
    if outcome.ok and env.kind.owns_prefix:
        record = {"key": key, "ok": True, "cpu_only": outcome.cpu_only, "report": smoke}
        fileio.write_atomic(cache, json.dumps(record, indent=2) + "\n")
    return outcome.as_step(_named(name, out))
