"""Builds an environment on this machine from its lock: a conda prefix, a venv, or the system path.

Venvs and conda prefixes write their own absolute path into scripts and metadata, so a copy built
elsewhere cannot be renamed into place. A build therefore happens at its final prefix, and a marker
file in the prefix says what state it is in: written as "building" before anything else lands there,
rewritten as "complete" (with the digest of the lock and hooks it was built from) only at the very
end. A prefix whose marker is not "complete" with the current digest is never presented as done: a
re-run wipes it and builds again, so an install killed midway (SIGKILL) is completed by running the
same command. A directory without a marker is not ours and is never deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from provision import _proc
from provision.errors import InstallError, ProvisionError, ToolMissing, UsageError

MARKER = ".provision-install.json"
MARKER_SCHEMA = 1
MANIFEST = "provision.json"
LOCKS = {"conda": "conda-lock.yml", "pip": "requirements.lock", "system": "requirements.lock"}
HOOKS = ("hooks/activate.sh", "hooks/deactivate.sh")
# Rendered only with --gpu-memory MiB: a .pth that imports the module at interpreter start-up, so
# the limit is configured before TensorFlow initialises its GPUs.
STARTUP_HOOKS = ("hooks/provision_gpu_policy.py", "hooks/provision_gpu_policy.pth")
INSTALL_TIMEOUT = 3600.0
Installer = Literal["auto", "uv", "pip"]
# Variables a shell sets for itself; they are not part of what an activation hook changes.
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})
_ACTIVATE_BEGIN = "# >>> provision hooks >>>"
_ACTIVATE_END = "# <<< provision hooks <<<"


@dataclass(frozen=True)
class EnvDir:
    """What install needs from envs/<name>/: the request recorded by render, and where files are."""

    root: Path
    name: str
    path: str
    python: str
    tf: str

    @property
    def lock(self) -> Path:
        return self.root / LOCKS[self.path]


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


# -- the environment directory ---------------------------------------------------------------


def load_env(out: Path, name: str) -> EnvDir:
    root = Path(out) / name
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise InstallError(
            f"{root} has no {MANIFEST}: render it first (provision render --tf X.Y --name {name})"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        request = data.get("request", data)
        path, python, tf = str(request["path"]), str(request["python"]), str(request["tf"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InstallError(f"{manifest} is not a provision manifest ({exc}); re-render it") from exc
    if path not in LOCKS:
        raise InstallError(f"{manifest}: unknown path {path!r}")
    return EnvDir(root=root, name=str(request.get("name") or name), path=path, python=python, tf=tf)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def inputs_digest(env: EnvDir) -> str:
    """What a built prefix depends on: the lock, the hooks, the path and the Python line."""
    h = hashlib.sha256(f"{MARKER_SCHEMA}\0{env.path}\0{env.python}\0".encode())
    for rel in (LOCKS[env.path], *HOOKS, *STARTUP_HOOKS):
        f = env.root / rel
        h.update(rel.encode() + b"\0" + (f.read_bytes() if f.is_file() else b"-") + b"\0")
    return h.hexdigest()


# -- where environments live -----------------------------------------------------------------


def home() -> Path:
    """The directory provision owns for named environments (PROVISION_HOME relocates it)."""
    explicit = os.environ.get("PROVISION_HOME")
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("provision", appauthor=False))


def conda_envs_dir() -> Path | None:
    """The first envs directory of the host's conda, so that `conda activate NAME` finds ours."""
    exe = os.environ.get("CONDA_EXE") or _proc.which("conda")
    if not exe:
        return None
    done = _proc.run([exe, "info", "--json"], timeout=60, check=False)
    try:
        dirs = json.loads(done.stdout).get("envs_dirs") or []
    except ValueError:
        return None
    return Path(dirs[0]) if dirs else None


# Where templates/system/install.sh.j2 puts its venv when run without --prefix (as root).
SYSTEM_VENVS = Path("/opt/provision/venvs")


def default_prefix(name: str, path: str) -> Path:
    if path == "system":
        return SYSTEM_VENVS / name
    if path == "conda":
        envs = conda_envs_dir()
        if envs is not None:
            return envs / name
    return home() / "envs" / name


def interpreter(prefix: Path) -> Path:
    return prefix / "bin" / "python"


def locate(env_dir: Path, prefix: Path | None = None) -> tuple[Path, dict[str, str]]:
    """The interpreter of env_dir's built environment (at its default prefix unless given) and the
    variables its activation sets, for running it without a shell (verify, bench)."""
    env = load_env(Path(env_dir).parent, Path(env_dir).name)
    where = Path(prefix) if prefix is not None else default_prefix(env.name, env.path)
    python = interpreter(where)
    if not python.exists():
        raise InstallError(
            f"no environment at {where}: build it with `provision install {env.name}`, or "
            "point at one with --prefix DIR or --python EXE"
        )
    return python, activation_env(env_dir, where)


# -- markers ---------------------------------------------------------------------------------

State = Literal["absent", "foreign", "building", "stale", "complete"]


def read_marker(prefix: Path) -> dict[str, object] | None:
    try:
        data = json.loads((prefix / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def state_of(prefix: Path, digest: str | None = None) -> State:
    """absent (nothing there), foreign (not ours), building (never finished), stale, complete."""
    if not prefix.exists():
        return "absent"
    marker = read_marker(prefix)
    if marker is None:
        return "foreign" if any(prefix.iterdir()) else "absent"
    if marker.get("state") != "complete":
        return "building"
    if digest is not None and marker.get("inputs_sha256") != digest:
        return "stale"
    return "complete"


def _write_marker(prefix: Path, data: Mapping[str, object]) -> None:
    tmp = prefix / (MARKER + ".tmp")
    tmp.write_text(json.dumps(dict(data), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, prefix / MARKER)


def is_installed(env: EnvDir, prefix: Path) -> bool:
    return state_of(prefix, inputs_digest(env)) == "complete"


# -- finding a Python for venvs --------------------------------------------------------------


def _python_version_of(exe: str) -> str | None:
    try:
        done = _proc.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            timeout=30,
            check=False,
        )
    except ProvisionError:
        return None
    return done.stdout.strip() if done else None


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def python_candidates(version: str) -> list[str]:
    """Where Python X.Y may be: `pythonX.Y` on PATH, then pyenv's versions (newest patch first)."""
    found: list[str] = []
    on_path = _proc.which(f"python{version}")
    # A pyenv shim is a dispatcher that fails for every version not selected as global; the
    # real interpreters behind it are listed next, straight from pyenv's versions directory.
    if on_path and Path(on_path).parent.name != "shims":
        found.append(on_path)
    versions = _pyenv_root() / "versions"
    if versions.is_dir():
        pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")
        patches = sorted(
            (int(m.group(1)), d) for d in versions.iterdir() if (m := pattern.match(d.name))
        )
        found.extend(
            str(d / "bin" / f"python{version}")
            for _, d in reversed(patches)
            if (d / "bin" / f"python{version}").is_file()
        )
    return found


def find_python(version: str) -> Path:
    """An interpreter of Python X.Y on this host, or InstallError naming the version."""
    for exe in python_candidates(version):
        if _python_version_of(exe) == version:
            return Path(exe)
    uv = _uv_bin()
    if uv:
        done = _proc.run([uv, "python", "find", "--system", version], timeout=60, check=False)
        exe = done.stdout.strip()
        if done and exe and _python_version_of(exe) == version:
            return Path(exe)
    raise InstallError(
        f"Python {version} is not installed on this host (looked for python{version} on PATH, "
        f"in {_pyenv_root() / 'versions'} and with `uv python find`); install it "
        f"(e.g. `pyenv install {version}` or `uv python install {version}`) "
        "or pick another --python"
    )


# -- tools -----------------------------------------------------------------------------------


def _uv_bin() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return _proc.which("uv")
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return _proc.which("uv")


def uv_index_args() -> list[str]:
    """The index the pip-path lock was resolved against (pip's index-url, as `provision lock`
    reads it), and nothing from uv's configuration: every file comes from where the lock looked."""
    from provision import pylock

    return ["--no-config", "--index-url", pylock.pip_index_url() or pylock.pip_default_index()]


def pip_install_argv(venv_python: Path, lock: Path) -> list[str]:
    return [
        str(venv_python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
        "--require-hashes", "--no-deps", "-r", str(lock),
    ]  # fmt: skip


def uv_install_argv(uv: str, venv_python: Path, lock: Path) -> list[str]:
    return [
        uv, "pip", "install", "--quiet", "--python", str(venv_python),
        "--require-hashes", "--no-deps", "-r", str(lock), *uv_index_args(),
    ]  # fmt: skip


# -- activation ------------------------------------------------------------------------------


def _hook_scripts(env_dir: Path, prefix: Path, path: str) -> list[Path]:
    if path == "conda":
        installed = prefix / "etc" / "conda" / "activate.d"
        if installed.is_dir():
            return sorted(p for p in installed.iterdir() if p.suffix == ".sh")
    else:
        installed_hook = prefix / "etc" / "provision" / "activate.sh"
        if installed_hook.is_file():
            return [installed_hook]
    rendered = env_dir / HOOKS[0]
    return [rendered] if rendered.is_file() else []


def _env_path(env_dir: Path) -> str:
    try:
        return load_env(env_dir.parent, env_dir.name).path
    except InstallError:
        return "pip"


def activation_env(env_dir: Path, prefix: Path) -> dict[str, str]:
    """The variables that activating the environment sets, for running its Python without a shell.

    A start-up hook inside Python (.pth, sitecustomize) cannot change the dynamic loader's search
    path of the process it runs in, so whoever runs the environment's interpreter directly (verify,
    create) starts it with this environment instead. The hooks themselves are the source of truth:
    they are sourced in bash exactly as activation would, and every variable they change is
    returned.
    """
    env_dir, prefix = Path(env_dir), Path(prefix).absolute()
    path = _env_path(env_dir)
    bin_dir = str(prefix / "bin")
    base = {
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
        **(
            {"CONDA_PREFIX": str(prefix), "CONDA_DEFAULT_ENV": str(prefix)}
            if path == "conda"
            else {"VIRTUAL_ENV": str(prefix)}
        ),
    }
    scripts = _hook_scripts(env_dir, prefix, path)
    if not scripts:
        return base
    before = {**os.environ, **base}
    program = 'for f in "$@"; do . "$f" 1>&2 || exit 3; done; env -0'
    done = _proc.run(
        ["bash", "-c", program, "provision-activate", *map(str, scripts)],
        env=base,
        timeout=60,
        check=False,
    )
    if not done:
        raise InstallError(
            f"activation hook {scripts[-1]} failed (exit {done.returncode}): "
            f"{(done.stderr.strip().splitlines() or ['(no output)'])[-1]}"
        )
    after = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    changed = {k: v for k, v in after.items() if k not in _SHELL_OWN and before.get(k) != v}
    return {**base, **changed}


_VENV_HOOK_BLOCK = f"""
{_ACTIVATE_BEGIN}
# Added by `provision install`: the environment's hooks (library path, XLA flags, GPU policy).
# bin/activate redefines deactivate before calling it, so hooks of an environment that is still
# active (this one again, or another provision venv) are undone here, from the path recorded below.
_provision_undo="${{_PROVISION_HOOKED:-}}/etc/provision/deactivate.sh"
if [ -n "${{_PROVISION_HOOKED:-}}" ] && [ -f "$_provision_undo" ]; then
    . "$_provision_undo"
fi
unset _provision_undo
_PROVISION_HOOKED="$VIRTUAL_ENV"
if [ -f "$VIRTUAL_ENV/etc/provision/activate.sh" ]; then
    . "$VIRTUAL_ENV/etc/provision/activate.sh"
fi
eval "_provision_$(declare -f deactivate)"
deactivate () {{
    if [ -n "${{_PROVISION_HOOKED:-}}" ] \
        && [ -f "$_PROVISION_HOOKED/etc/provision/deactivate.sh" ]; then
        . "$_PROVISION_HOOKED/etc/provision/deactivate.sh"
    fi
    unset _PROVISION_HOOKED
    _provision_deactivate "$@"
    if [ "${{1:-}}" != "nondestructive" ]; then
        unset -f _provision_deactivate
    fi
}}
{_ACTIVATE_END}
"""


def install_venv_hooks(env_dir: Path, prefix: Path) -> None:
    """Copy the rendered hooks into the venv and make bin/activate and deactivate run them."""
    target = prefix / "etc" / "provision"
    target.mkdir(parents=True, exist_ok=True)
    for rel in HOOKS:
        src = env_dir / rel
        if src.is_file():
            shutil.copyfile(src, target / Path(rel).name)
    activate = prefix / "bin" / "activate"
    text = activate.read_text(encoding="utf-8")
    if _ACTIVATE_BEGIN in text:
        text = text[: text.index(_ACTIVATE_BEGIN)]
    activate.write_text(text.rstrip("\n") + "\n" + _VENV_HOOK_BLOCK, encoding="utf-8")


def install_startup_hooks(env_dir: Path, prefix: Path, python: str) -> None:
    """Put the GPU-policy start-up hook, when the environment has one, into its site-packages."""
    site = prefix / "lib" / f"python{python}" / "site-packages"
    for rel in STARTUP_HOOKS:
        src = env_dir / rel
        if src.is_file():
            site.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, site / Path(rel).name)


def install_conda_hooks(env_dir: Path, prefix: Path) -> None:
    """conda runs every script in etc/conda/activate.d on activation and deactivate.d on leaving."""
    for rel, sub in zip(HOOKS, ("activate.d", "deactivate.d"), strict=True):
        src = env_dir / rel
        if src.is_file():
            target = prefix / "etc" / "conda" / sub
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target / "provision.sh")


# -- building --------------------------------------------------------------------------------


_LOG_PREFIX = re.compile(r"^(?:(?:ERROR|WARNING|INFO|DEBUG):root:)\s*")
# pip marks its failure summary with a multiplication sign ("\u00d7 Building wheel ... failed").
_ERROR_LINE = re.compile(
    r"^(?:error|ERROR|CondaError|\w+Error|Caused by|cause)\b|No space left|\u00d7"
)


def _reason(done: _proc.Completed, lines: int = 3) -> str:
    """The installer's own explanation: its error lines (pip's inside conda-lock's log included),
    else the last lines it printed, never a Python traceback's frames."""
    text = "\n".join((done.stdout, done.stderr))
    clean = [_LOG_PREFIX.sub("", ln).strip() for ln in text.splitlines()]
    clean = [ln for ln in clean if ln and not ln.startswith(('File "', "Traceback", "raise "))]
    errors = list(dict.fromkeys(ln for ln in clean if _ERROR_LINE.search(ln)))
    keep = errors[-lines:] or clean[-lines:]
    return " | ".join(keep) or "(no output)"


def _explain(what: str, done: _proc.Completed, prefix: Path) -> InstallError:
    reason = _reason(done)
    hint = "check the package index and network, then re-run"
    if any(s in reason for s in ("No space left on device", "ENOSPC", "Disk quota")):
        hint = f"free disk space on the file system of {prefix.parent}, or use --prefix elsewhere"
    elif "Failed building wheel" in reason or "Could not build wheels" in reason:
        hint = "the lock names a source distribution that cannot be built here; re-lock"
    return InstallError(
        f"{what} failed (exit {done.returncode}): {reason}; "
        f"nothing was installed at {prefix}; {hint}"
    )


def _run_step(
    what: str, argv: list[str], prefix: Path, env: Mapping[str, str] | None = None
) -> None:
    try:
        done = _proc.run(argv, timeout=INSTALL_TIMEOUT, check=False, env=env)
    except ToolMissing:
        raise
    except ProvisionError as exc:
        raise InstallError(f"{what}: {exc}; nothing was installed at {prefix}") from exc
    if not done:
        raise _explain(what, done, prefix)


def _build_pip(env: EnvDir, prefix: Path, installer: Installer) -> str:
    base_python = find_python(env.python)
    uv = _uv_bin() if installer in ("auto", "uv") else None
    if installer == "uv" and uv is None:
        raise ToolMissing("uv is not available; install it or use --installer pip")
    venv_python = interpreter(prefix)
    lock = env.lock.absolute()
    if uv:
        _run_step(
            "creating the venv",
            [
                uv,
                "venv",
                "--quiet",
                "--no-config",
                "--allow-existing",
                "--python",
                str(base_python),
                str(prefix),
            ],
            prefix,
        )
        _run_step("uv pip install", uv_install_argv(uv, venv_python, lock), prefix)
        used = "uv"
    else:
        _run_step("creating the venv", [str(base_python), "-m", "venv", str(prefix)], prefix)
        _run_step("pip install", pip_install_argv(venv_python, lock), prefix)
        used = "pip"
    install_venv_hooks(env.root, prefix)
    install_startup_hooks(env.root, prefix, env.python)
    return used


def _build_conda(env: EnvDir, prefix: Path, solver: str) -> str:
    from provision import lock

    conda = lock.solver_exe(solver)
    # -I: `python -m` would put the working directory first on sys.path, and a stray build.py or
    # yaml.py there would be imported in place of conda-lock's own dependencies.
    argv = [
        sys.executable, "-I", "-m", "conda_lock", "install", "--conda", conda,
        "--prefix", str(prefix), str(env.lock.absolute()),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="provision-pip-guard-") as guard:
        _run_step("conda-lock install", argv, prefix, env=_pip_guard(Path(guard)))
    _check_pip_part(env.lock, prefix)
    install_conda_hooks(env.root, prefix)
    install_startup_hooks(env.root, prefix, env.python)
    return "conda-lock"


_PIP_GUARD = """#!/bin/sh
# Written by provision install: conda-lock runs `pip` through the solver with the environment's
# bin/ first on PATH. Should the environment have no pip there, this runs its Python's pip module
# instead of letting another pip on PATH install into some other interpreter.
if [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/python" ]; then
    exec "$CONDA_PREFIX/bin/python" -m pip "$@"
fi
echo "provision: no Python in ${CONDA_PREFIX:-the environment} to run pip with" >&2
exit 127
"""


def _pip_guard(folder: Path) -> dict[str, str]:
    """PATH with a guard `pip` right after the environment's bin/ (which the solver prepends)."""
    for name in ("pip", "pip3"):
        script = folder / name
        script.write_text(_PIP_GUARD, encoding="utf-8")
        script.chmod(0o755)
    return {"PATH": os.pathsep.join([str(folder), os.environ.get("PATH", "")])}


_VERSIONS_OF = """
import json, sys
from importlib import metadata
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


def host_subdir() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "64", "amd64": "64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)
    return f"{sys.platform.replace('darwin', 'osx')}-{arch or machine}"


def _check_pip_part(lock_file: Path, prefix: Path) -> None:
    """conda-lock runs `pip` through the solver's `run`: should the prefix lack a working pip, the
    first pip on PATH would install elsewhere and the step would still succeed. Check the result."""
    import yaml

    data = yaml.safe_load(lock_file.read_text(encoding="utf-8")) or {}
    wanted = {
        str(p["name"]): str(p["version"])
        for p in data.get("package") or []
        if p.get("manager") == "pip" and p.get("platform") == host_subdir()
    }
    if not wanted:
        return
    done = _proc.run(
        [str(interpreter(prefix)), "-c", _VERSIONS_OF, *sorted(wanted)], timeout=120, check=False
    )
    try:
        found = json.loads(done.stdout) if done else {}
    except ValueError:
        found = {}
    wrong = sorted(n for n, v in wanted.items() if found.get(n) != v)
    if wrong:
        raise InstallError(
            f"conda-lock install finished, but {prefix} lacks the pip packages "
            f"{', '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''} (was pip run from outside "
            f"the environment?); nothing was installed at {prefix}"
        )


def _clear(prefix: Path) -> None:
    if prefix.is_symlink() or prefix.is_file():
        prefix.unlink()
    elif prefix.exists():
        shutil.rmtree(prefix)


def install(
    out: Path,
    name: str,
    prefix: Path | None = None,
    *,
    force: bool = False,
    installer: Installer = "auto",
    solver: str = "auto",
    script_args: tuple[str, ...] = (),
) -> InstallResult:
    """Build the environment NAME (rendered and locked under `out`) at `prefix`.

    script_args go to the system path's install.sh (e.g. --runfile FILE, --dry-run)."""
    start = time.monotonic()
    env = load_env(out, name)
    needs_lock = env.path != "system" or "--skip-venv" not in script_args
    if needs_lock and not env.lock.is_file():
        raise InstallError(
            f"{env.lock} does not exist: run `provision lock {env.name}` first "
            f"(or `provision create`, which locks)"
        )
    if env.path == "system":
        return _install_system(env, prefix, script_args, start)
    if script_args:
        raise UsageError(f"extra arguments {' '.join(script_args)} apply to the system path only")
    target = (Path(prefix) if prefix else default_prefix(env.name, env.path)).absolute()
    with _exclusive(target):
        return _install_at(env, target, force, installer, solver, start)


@contextlib.contextmanager
def _exclusive(target: Path) -> Iterator[None]:
    """One build of a prefix at a time (two `provision create` runs would wipe each other's work).
    The kernel drops the lock when its holder dies, SIGKILL included."""
    locks = home() / "locks"  # not beside the prefix: its folder may be anybody's
    locks.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(target).encode()).hexdigest()[:24]
    with open(locks / f"{key}.lock", "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InstallError(
                f"another provision install is building {target}; wait for it, then re-run"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _install_at(
    env: EnvDir, target: Path, force: bool, installer: Installer, solver: str, start: float
) -> InstallResult:
    digest = inputs_digest(env)
    lock_sha = sha256_file(env.lock)
    state = state_of(target, digest)
    if state == "foreign":
        raise InstallError(
            f"{target} exists and was not built by provision; remove it or choose another --prefix"
        )
    if state == "complete" and not force:
        marker = read_marker(target) or {}
        return InstallResult(
            env.name, env.path, target, interpreter(target), str(marker.get("installer", "")),
            lock_sha, skipped=True, seconds=time.monotonic() - start,
        )  # fmt: skip
    used = _build(env, target, state, digest, lock_sha, installer, solver)
    return InstallResult(
        env.name, env.path, target, interpreter(target), used, lock_sha,
        skipped=False, seconds=time.monotonic() - start,
    )  # fmt: skip


def _build(
    env: EnvDir,
    target: Path,
    state: State,
    digest: str,
    lock_sha: str,
    installer: Installer,
    solver: str,
) -> str:
    old = target.with_name(target.name + ".provision-old")
    _clear(old)  # left by a run that was killed while replacing a complete environment
    if state in ("stale", "complete"):
        # Keep the working environment until the new one is complete; put it back on failure.
        target.rename(old)
    else:
        _clear(target)  # "building": a run that never finished
    record: dict[str, object] = {
        "schema": MARKER_SCHEMA,
        "state": "building",
        "name": env.name,
        "path": env.path,
        "tf": env.tf,
        "python": env.python,
        "lock": LOCKS[env.path],
        "lock_sha256": lock_sha,
        "inputs_sha256": digest,
    }
    try:
        target.mkdir(parents=True)
        _write_marker(target, record)
        if env.path == "conda":
            used = _build_conda(env, target, solver)
        else:
            used = _build_pip(env, target, installer)
        _write_marker(target, {**record, "state": "complete", "installer": used})
    except BaseException:
        _clear(target)
        if old.exists():
            old.rename(target)
        raise
    _clear(old)
    return used


def _install_system(
    env: EnvDir, prefix: Path | None, script_args: tuple[str, ...], start: float
) -> InstallResult:
    """The system path's script is idempotent and resumable: it runs as it is, options passed on."""
    script = env.root / "install.sh"
    if not script.is_file():
        raise InstallError(f"{script} is missing; re-render with `provision render`")
    argv = ["bash", str(script.absolute())]
    if prefix is not None:
        argv += ["--prefix", str(Path(prefix).absolute())]
    if "--python" not in script_args and "--skip-venv" not in script_args:
        # The script looks only on PATH; hand it the interpreter found here (pyenv, uv) as well.
        argv += ["--python", str(find_python(env.python))]
    argv += list(script_args)
    try:
        done = _proc.run(argv, cwd=env.root, timeout=INSTALL_TIMEOUT, check=False)
    except ProvisionError as exc:
        raise InstallError(f"{script}: {exc}") from exc
    if not done:
        raise InstallError(f"{script} failed (exit {done.returncode}): {_reason(done)}")
    venv = system_venv(env, prefix, script_args)
    lock_sha = sha256_file(env.lock) if env.lock.is_file() else ""
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
        return default_prefix(env.name, "system")
    return Path(prefix).absolute() / "venvs" / env.name
