"""Builds an environment on this machine from its lock: a conda prefix, a venv, or the system path.

Venvs and conda prefixes write their own absolute path into scripts and metadata, so a copy built
elsewhere cannot be renamed into place. A build therefore happens at its final prefix, and a marker
file in the prefix says what state it is in: written as "building" before anything else lands there,
rewritten as "complete" (with the digest of the lock and runtime it was built from) only at the very
end. A prefix whose marker is not "complete" with the current digest is never presented as done: a
re-run wipes it and builds again, so an install killed midway (SIGKILL) is completed by running the
same command. A directory without a marker is not ours and is never deleted.

Every build ends with the environment's set-up put into the prefix (prefix_hooks.install_hooks) and
a record in the registry, so `provision list`, `verify NAME` and `run NAME` find it from anywhere.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from provision import _proc, environment, fileio, registry, tools
from provision.environment import EnvDir, interpreter
from provision.errors import InstallError, ProvisionError, UsageError
from provision.install import installers, owned, prefix_hooks
from provision.install.installers import Installer, Offline
from provision.install.place import (
    NEW,
    OLD,
    PrefixState,
    check_not_another,
    check_same_source,
    finish_leftovers,
    followed,
    read_marker,
    state_of,
    write_marker,
)
from provision.progress import Event, Report, nothing
from provision.steps import StepResult
from provision.toolout import InstallerLines

MARKER_SCHEMA = 2
LOCK_WAIT_S = 5.0


@dataclass(frozen=True)
class InstallResult:
    name: str
    path: str
    prefix: Path
    python: Path  # the environment's interpreter
    installer: str  # uv | pip | conda-lock | install.sh
    lock_sha256: str
    skipped: bool  # the prefix was already complete for this lock; nothing was touched
    seconds: float
    output: str = ""  # what the system path's install script printed (its plan, its steps)

    def as_step(self) -> StepResult:
        if self.skipped:
            return StepResult("install", "skipped", [f"{self.prefix} already built from this lock"])
        return StepResult("install", "done", [f"built {self.prefix} with {self.installer}"])

    def as_json(self) -> dict[str, object]:
        extra = {"output": self.output} if self.output else {}
        return {
            "name": self.name,
            "path": self.path,
            "prefix": str(self.prefix),
            "python": str(self.python),
            "installer": self.installer,
            "lock_sha256": self.lock_sha256,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 2),
            **extra,
        }


def inputs_digest(env: EnvDir) -> str:
    """What a built prefix depends on: the lock, the runtime variables, the path and Python."""
    parts = [f"{MARKER_SCHEMA}\0{env.path}\0{env.python}\0".encode()]
    for f in (env.lock, env.root / environment.RUNTIME):
        parts.append(f.name.encode() + b"\0" + (f.read_bytes() if f.is_file() else b"-") + b"\0")
    return fileio.sha256_bytes(b"".join(parts))


@dataclass(frozen=True)
class BuildOptions:
    """How a prefix is built, as `install` and `create` take it from the command line."""

    prefix: Path | None = None  # None: where it was built before, else the kind's default
    force: bool = False  # rebuild a complete prefix; accept rendered files edited by hand
    installer: Installer = "auto"
    solver: str = "auto"
    script_args: tuple[str, ...] = ()  # install-system.sh's own options (system path)
    replace: bool = False  # rebuild NAME from here though it was built from another directory


def install(
    env: EnvDir,
    options: BuildOptions = BuildOptions(),
    *,
    offline: Offline | None = None,
    report: Report = nothing,
) -> InstallResult:
    """Build the environment of `env` at options.prefix (its default prefix unless given) and
    register it. report: progress while it builds (each installer, each download, install.sh's
    steps).

    Hand-edited rendered files are refused unless options.force (which also rebuilds a complete
    prefix). options.script_args go to the system path's install script (e.g. --runfile FILE,
    --dry-run)."""
    prefix, force, script_args = options.prefix, options.force, options.script_args
    installer, solver = options.installer, options.solver
    start = time.monotonic()
    if offline is None:  # a bundle's own rule (same lock, or --force) decides what it replaces
        check_same_source(env.name, env.root.absolute(), options.replace)
    if not force:
        env.check_reviewed()
    needs_lock = not env.kind.host_toolkit or "--skip-venv" not in script_args
    if needs_lock and not env.lock.is_file():
        raise InstallError(
            f"{env.lock} does not exist: run `provision lock {env.name}` first "
            f"(or `provision create`, which locks)"
        )
    if needs_lock:
        _check_lock(env)
    if env.kind.host_toolkit:
        # The script's venv is what add and drop change later: one of them at a time.
        with exclusive(system_venv(env, prefix, script_args)):
            result = _install_system(env, prefix, script_args, start, offline, report)
            if "--dry-run" not in script_args and interpreter(result.prefix).exists():
                home = _system_cuda_home(env, prefix)
                prefix_hooks.install_hooks(env, result.prefix, {"PROVISION_CUDA_HOME": str(home)})
                _register(env, result, owned=False)
        return result
    if script_args:
        raise UsageError(f"extra arguments {' '.join(script_args)} apply to the system path only")
    target = followed((Path(prefix) if prefix else env.default_prefix()).absolute())
    check_prefix(target)
    check_not_another(env.name, target)
    with exclusive(target) as lock_fd:
        result = _install_at(env, target, force, installer, solver, start, lock_fd, offline, report)
    _register(env, result, owned=True)
    return result


def check_prefix(target: Path) -> None:
    """Before anything is written: the prefix can be built here and registered (its path fits
    the file system, it is not a file, its folder is writable, PROVISION_HOME is usable)."""
    from provision.fileio import path_problem
    from provision.paths import writable_target

    why = path_problem(str(target))
    if why:
        raise UsageError(f"--prefix {str(target)[:80]} {why}")
    if os.path.realpath(target) == "/":  # a build replaces its prefix as a whole: never the root
        raise UsageError(
            f"--prefix {target} is the root of the file system; give a folder of the environment's "
            "own, e.g. /opt/envs/NAME"
        )
    writable_target(target, "--prefix")
    if target.is_dir() and not os.access(target, os.W_OK | os.X_OK):
        raise InstallError(f"--prefix {target} is not writable; choose another place")
    registry.writable()  # a build that could not be registered would be half done


def _check_lock(env: EnvDir) -> None:
    """Only what a reviewer could have approved is built: the lock is fresh for the inputs as
    they are, is the body it was made with (not edited, not truncated) and is complete and closed.
    Offline; the reason names the lock and the package."""
    from provision import lock
    from provision.errors import StaleError

    try:
        lock.check_lock(env)
    except StaleError as exc:
        raise InstallError(f"refusing to install {env.name}: {exc}") from exc


def _system_cuda_home(env: EnvDir, prefix: Path | None) -> Path:
    """Where the system script puts the toolkit: /usr/local/cuda-X.Y, or PREFIX/cuda-X.Y."""
    leaf = f"cuda-{env.spec.cuda.version}"
    return Path(prefix).absolute() / leaf if prefix is not None else Path("/usr/local") / leaf


def _register(env: EnvDir, result: InstallResult, *, owned: bool) -> None:
    old = registry.get(env.name)
    same_build = (
        old is not None
        and old.prefix == str(result.prefix)
        and old.lock_sha256 == result.lock_sha256
        and result.skipped
    )
    record = registry.Record(
        name=env.name,
        env_dir=str(env.root.absolute()),
        path=env.path,
        tf=env.spec.release.pin,
        python=env.python,
        prefix=str(result.prefix),
        interpreter=str(result.python),
        installer=result.installer,
        lock_sha256=result.lock_sha256,
        built_at=old.built_at if same_build and old is not None else time.time(),
        owned=owned,
        last_verify=old.last_verify if same_build and old is not None else None,
    )
    if record != old:  # a build that did nothing leaves its record as it was, byte for byte
        registry.put(record)
    from provision.facts import store

    if not same_build or not store.path_of(env.name).exists():
        store.record_quietly(env.name, "install")


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


@contextlib.contextmanager
def exclusive(target: Path) -> Iterator[int]:
    """One build or change of a prefix at a time (two `provision create` runs would wipe each
    other's work; an add would sync into a prefix being rebuilt), keyed by the real path, so a
    prefix reached through a symlink is the same prefix.
    The kernel drops the lock when its holder dies, SIGKILL included."""
    import fcntl

    locks = registry.home() / "locks"  # not beside the prefix: its folder may be anybody's
    made_folder = not locks.exists()
    try:
        locks.mkdir(parents=True, exist_ok=True)
        key = fileio.sha256_text(os.path.realpath(target))[:24]
        lock_file = locks / f"{key}.lock"
        made_file = not lock_file.exists()
        fh = open(lock_file, "a+")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise InstallError(
            f"cannot use PROVISION_HOME {registry.home()}: {exc.strerror} ({exc.filename})"
        ) from exc
    with fh:
        # A build killed a moment ago may still hold it for as long as its installers take to
        # die: wait a little before calling it another build.
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InstallError(
                        f"another provision command is building or changing {target}; wait for "
                        "it, then re-run"
                    ) from None
                time.sleep(0.1)
        if not _same_file(fh.fileno(), lock_file):
            # The build we waited for failed and removed its lock file: lock the current one.
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            with exclusive(target) as fd:
                yield fd
            return
        try:
            yield fh.fileno()
        except BaseException:
            # A build that failed leaves nothing behind, this lock file included (removed while
            # still held; whoever waited on it sees that and locks a new one).
            if made_file:
                lock_file.unlink(missing_ok=True)
                if made_folder:
                    with contextlib.suppress(OSError):
                        locks.rmdir()
            raise
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _install_at(
    env: EnvDir,
    target: Path,
    force: bool,
    installer: Installer,
    solver: str,
    start: float,
    lock_fd: int | None = None,
    offline: Offline | None = None,
    report: Report = nothing,
) -> InstallResult:
    digest = inputs_digest(env)
    lock_sha = fileio.sha256_file(env.lock)
    finish_leftovers(target)
    state = state_of(target, digest)
    if state == "foreign":
        raise InstallError(
            f"{target} exists and was not built by provision; remove it or choose another --prefix"
        )
    if state == "building" and (read_marker(target) or {}).get("existed"):
        theirs = owned.foreign_top(target)
        if theirs:
            raise InstallError(
                f"{target} holds an unfinished build and files provision did not make "
                f"({owned.shown(theirs)}); provision will not delete them: move them out, "
                "then re-run"
            )
    if state == "stale" or (state == "complete" and force):
        theirs = _not_the_locks(env, target)
        if theirs:
            hint = (
                f" (a package the lock does not name: `provision add {env.name} PKG` locks it, "
                f"`uv pip uninstall --python {interpreter(target)} PKG` removes it)"
                if any(".dist-info" in p for p in theirs)
                else ""
            )
            raise InstallError(
                f"{target} holds files provision did not install ({owned.shown(theirs)}); "
                f"a rebuild would delete them: move them out, then re-run{hint}"
            )
    if state == "complete" and not force:
        marker = read_marker(target) or {}
        prefix_hooks.install_hooks(env, target)  # the hooks of this provision, cheap to refresh
        return InstallResult(
            env.name, env.path, target, interpreter(target), str(marker.get("installer", "")),
            lock_sha, skipped=True, seconds=time.monotonic() - start,
        )  # fmt: skip
    used = _build(env, target, state, digest, lock_sha, installer, solver, lock_fd, offline, report)
    return InstallResult(
        env.name, env.path, target, interpreter(target), used, lock_sha,
        skipped=False, seconds=time.monotonic() - start,
    )  # fmt: skip


def _not_the_locks(env: EnvDir, target: Path) -> list[str]:
    """What in target provision did not install and is not a package the lock names: one the
    lock names, installed by hand at another version, is provision's to put back."""
    listed = owned.recorded(target)
    if listed is None:
        return []  # built without a list: nothing is known (owned.foreign)
    from provision.install.sync import Locked, installed_files

    conda = env.kind.conda_env
    try:
        names = set(Locked.read(env.lock.read_text(encoding="utf-8"), conda).versions())
    except (OSError, UnicodeDecodeError, ProvisionError, ValueError):
        names = set()
    return owned.foreign(target, listed | installed_files(conda, target, names))


def _build(
    env: EnvDir,
    target: Path,
    state: PrefixState,
    digest: str,
    lock_sha: str,
    installer: Installer,
    solver: str,
    lock_fd: int | None = None,
    offline: Offline | None = None,
    report: Report = nothing,
) -> str:
    old = target.with_name(target.name + OLD)
    before = read_marker(target) or {}
    # A folder the user made (empty) before the build, or a build into one that never finished:
    # built in place, and left as an empty folder when the environment is removed.
    kept = (state == "absent" and target.is_dir()) or (
        state == "building" and bool(before.get("existed"))
    )
    existed = kept or bool(before.get("existed"))
    if state in ("stale", "complete"):
        if old.exists() or old.is_symlink():  # finish_leftovers took any of ours
            raise InstallError(f"{old} is in the way and is not provision's; move it, then re-run")
        # Keep the working environment until the new one is complete; put it back on failure.
        target.rename(old)
    elif state == "building":
        # a run that never finished
        owned.delete(target, keep_folder=kept, mode="installer" if kept else "whole")
    record: dict[str, object] = {
        "schema": MARKER_SCHEMA,
        "state": "building",
        "name": env.name,
        "path": env.path,
        "tf": env.spec.release.pin,
        "python": env.python,
        "lock": env.lock.name,
        "lock_sha256": lock_sha,
        "inputs_sha256": digest,
        "prefix": str(target),
        "existed": existed,
    }
    try:
        if kept:
            write_marker(target, record)
        else:
            # The prefix appears only with its marker in it: a kill at any point leaves either
            # nothing, or a directory marked as ours and unfinished.
            staging = target.with_name(target.name + NEW)
            if staging.exists() or staging.is_symlink():
                raise InstallError(
                    f"{staging} is in the way and is not provision's; move it, then re-run"
                )
            staging.mkdir(parents=True)
            write_marker(staging, record)
            staging.rename(target)
        if env.kind.conda_env:
            used = installers.build_conda(env, target, solver, lock_fd, offline, report)
        else:
            used = installers.build_pip(env, target, installer, lock_fd, offline, report)
        owned.record(target)
        write_marker(target, {**record, "state": "complete", "installer": used})
    except BaseException:
        if kept:
            owned.delete(target, keep_folder=True, mode="whole")  # empty when this run began
        else:
            owned.delete_tree(target)
        if old.exists():
            old.rename(target)
        raise
    owned.delete_tree(old)
    return used


def system_script() -> Path:
    """The system path's install script: one static script in the package, for every environment;
    each environment's system.env (its --vars) says what to install."""
    import provision

    return Path(provision.__file__).parent / "scripts" / "install-system.sh"


def _install_system(
    env: EnvDir, prefix: Path | None, script_args: tuple[str, ...], start: float,
    offline: Offline | None = None, report: Report = nothing,
) -> InstallResult:  # fmt: skip
    """The system path's script is idempotent and resumable: it runs as it is, options passed on."""
    variables = env.root / "system.env"
    if not variables.is_file():
        raise InstallError(f"{variables} is missing; re-render with `provision render`")
    script = system_script()
    argv = ["bash", str(script), "--vars", str(variables.absolute())]
    if prefix is not None:
        argv += ["--prefix", str(Path(prefix).absolute())]
    if "--python" not in script_args and "--skip-venv" not in script_args:
        # The script looks only on PATH; hand it the interpreter found here (pyenv, uv) as well.
        argv += ["--python", str(tools.find_python(env.python))]
    argv += list(script_args)
    try:
        pip_env = offline.environ() if offline else {}  # the venv step's pip: no index
        # How the script's hints name its options when provision runs it (not `bash install.sh`).
        pip_env = {
            **pip_env,
            "PROVISION_VIA": f"provision install {env.name} --out {env.root.parent} --",
        }
        report(Event("info", f"running {script.name} --vars {variables.name}"))
        lines = InstallerLines(report)  # its steps as they run: it says what it is doing
        done = _proc.stream(
            argv, lines, cwd=env.root, env=pip_env, timeout=installers.INSTALL_TIMEOUT,
            group=True,
        )  # fmt: skip
        lines.close()
    except ProvisionError as exc:
        raise InstallError(f"{script.name} --vars {variables}: {exc}") from exc
    if not done:
        if installers.disk_full(done):
            where = system_venv(env, prefix, script_args)
            raise installers.explain(f"{script.name} --vars {variables}", done, where)
        raise InstallError(
            f"{script.name} --vars {variables} failed (exit {done.returncode}): "
            f"{installers.reason(done)}"
        )
    venv = system_venv(env, prefix, script_args)
    lock_sha = fileio.sha256_file(env.lock) if env.lock.is_file() else ""
    return InstallResult(
        env.name, env.path, venv, interpreter(venv), "install.sh", lock_sha,
        skipped=False, seconds=time.monotonic() - start, output=done.stdout,
    )  # fmt: skip


def system_venv(env: EnvDir, prefix: Path | None, script_args: tuple[str, ...] = ()) -> Path:
    """Where the system path's install script puts its venv (its --venv, else under the prefix)."""
    args = list(script_args)
    for i, arg in enumerate(args):
        if arg == "--venv" and i + 1 < len(args):
            return Path(args[i + 1]).absolute()
        if arg.startswith("--venv="):
            return Path(arg.split("=", 1)[1]).absolute()
    if prefix is None:
        return environment.default_prefix(env.name, env.kind)
    return Path(prefix).absolute() / "venvs" / env.name
