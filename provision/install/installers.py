"""Runs the installers that fill a prefix from its lock: uv (or pip) with hashes and no resolution
for the pip path, the conda solver and pip for the conda path. Each step's output is streamed as
progress, and a failure is explained in one line from the tool's own last words. The prefix's
life cycle (markers, the exclusive lock, the registry) is install.py's."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from provision import _proc, caches, tools
from provision.environment import EnvDir, interpreter
from provision.errors import InstallError, ProvisionError, ToolMissing
from provision.install import prefix_hooks
from provision.progress import Event, Report, nothing
from provision.toolout import InstallerLines

INSTALL_TIMEOUT = 3600.0
Installer = Literal["auto", "uv", "pip"]


@dataclass(frozen=True)
class Offline:
    """Where every file of the lock already is, for a build that asks no index and no channel
    (`install --from-bundle`): a folder of the lock's wheels, and on the conda path a copy of the
    lock whose URLs name local files (same packages, same hashes)."""

    find_links: Path
    conda_lock: Path | None = None
    conda_pkgs: Path | None = None  # a package cache that holds every conda package of the lock
    # uv's cache for this build, beside the staged files and removed with them: uv unpacks every
    # wheel it installs into its cache, keyed by the folder it came from, which is gone after the
    # install (a TensorFlow bundle left 4.4 GB in the user's uv cache that nothing would reuse).
    uv_cache: Path | None = None

    def environ(self) -> dict[str, str]:
        pkgs = {"CONDA_PKGS_DIRS": str(self.conda_pkgs)} if self.conda_pkgs else {}
        return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(self.find_links), **pkgs}


# -- installers ------------------------------------------------------------------------------


def uv_index_args() -> list[str]:
    """The index the pip-path lock was resolved against (pip's index-url, as `provision lock`
    reads it), and nothing from uv's configuration: every file comes from where the lock looked."""
    from provision.lock import pylock

    url = pylock.pip_index_url()
    return ["--no-config", *(["--index-url", url] if url else [])]


def pip_install_argv(venv_python: Path, lock: Path, find_links: Path | None = None) -> list[str]:
    local = ["--no-index", "--find-links", str(find_links)] if find_links else []
    return [
        str(venv_python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
        "--require-hashes", "--no-deps", "-r", str(lock), *local,
    ]  # fmt: skip


def uv_install_argv(uv: str, venv_python: Path, lock: Path, offline: Offline | None = None
                    ) -> list[str]:  # fmt: skip
    where = (["--no-config", "--no-index", "--find-links", str(offline.find_links)] if offline
             else uv_index_args())  # fmt: skip
    if offline and offline.uv_cache:
        where += ["--cache-dir", str(offline.uv_cache)]
    return [
        uv, "pip", "install", "--python", str(venv_python),
        "--require-hashes", "--no-deps", "-r", str(lock), *where,
    ]  # fmt: skip


# -- building --------------------------------------------------------------------------------


_LOG_PREFIX = re.compile(r"^(?:(?:ERROR|WARNING|INFO|DEBUG):root:)\s*")
# pip marks its failure summary with a multiplication sign ("\u00d7 Building wheel ... failed").
_ERROR_LINE = re.compile(
    r"^(?:error|ERROR|CondaError|\w+Error|Caused by|cause)\b|No space left|\u00d7"
)


def reason(done: _proc.Completed, lines: int = 3) -> str:
    """The installer's own explanation: its error lines (pip's inside conda-lock's log included),
    else the last lines it printed, never a Python traceback's frames."""
    text = "\n".join((done.stdout, done.stderr))
    clean = [_LOG_PREFIX.sub("", ln).strip() for ln in text.splitlines()]
    clean = [ln for ln in clean if ln and not ln.startswith(('File "', "Traceback", "raise "))]
    errors = list(dict.fromkeys(ln for ln in clean if _ERROR_LINE.search(ln)))
    keep = errors[-lines:] or clean[-lines:]
    return " | ".join(keep) or "(no output)"


DISK_FULL = ("No space left on device", "ENOSPC", "Disk quota", "os error 28")


def disk_full(done: _proc.Completed) -> bool:
    """The installer ran out of disk, wherever in its output it said so (pip says it inside a
    "Connection broken" error, uv as "os error 28"): not a network failure."""
    text = done.stdout + done.stderr
    return any(s in text for s in DISK_FULL)


def explain(what: str, done: _proc.Completed, where: Path) -> InstallError:
    """One line: what failed, the installer's own words, and what to do about it."""
    why = reason(done)
    hint = "check the package index and network, then re-run"
    if disk_full(done):
        why = f"No space left on device (the disk of {where.parent})"
        hint = "free disk space there, or use --prefix elsewhere, then re-run"
    elif "Failed building wheel" in why or "Could not build wheels" in why:
        hint = "the lock names a source distribution that cannot be built here; re-lock"
    return InstallError(
        f"{what} failed (exit {done.returncode}): {why}; nothing was installed at {where}; {hint}"
    )


def run_step(
    what: str,
    argv: list[str],
    prefix: Path,
    env: Mapping[str, str] | None = None,
    lock_fd: int | None = None,
    report: Report = nothing,
    offline_first: bool = False,
) -> None:
    """One installer run. It holds the prefix's build lock too (lock_fd), and dies with provision,
    so no installer can go on writing into the prefix once a re-run may rebuild it. What it
    prints is reported as it comes (downloads, sizes, rates). offline_first (uv, exact pins with
    hashes): from uv's cache alone first, which skips a request per package to revalidate index
    pages the lock has just read; anything not cached there and it runs online."""
    keep = () if lock_fd is None else (lock_fd,)
    report(Event("info", what))
    lines = InstallerLines(report)
    try:
        # pip's network settings (its extra indexes too: the lock's hashes decide), the caches
        cache_vars = caches.tool_env()
        everything = {**tools.child_env(cache_vars, extra_index=True), **(env or {})}
        if offline_first:
            said: list[tuple[str, bool]] = []
            cached = _proc.stream(
                [*argv, "--offline"], lambda line, err: said.append((line, err)),
                timeout=INSTALL_TIMEOUT, env=everything, keep_fds=keep,
            )  # fmt: skip
            if cached:
                for line, err in said:
                    lines(line, err)
                lines.close()
                return
        done = _proc.stream(argv, lines, timeout=INSTALL_TIMEOUT, env=everything, keep_fds=keep)
        lines.close()
    except ToolMissing:
        raise
    except ProvisionError as exc:
        raise InstallError(f"{what}: {exc}; nothing was installed at {prefix}") from exc
    if not done:
        raise explain(what, done, prefix)


def build_pip(
    env: EnvDir, prefix: Path, installer: Installer, lock_fd: int | None,
    offline: Offline | None = None, report: Report = nothing,
) -> str:  # fmt: skip
    links = offline.find_links if offline else None
    base_python = tools.find_python(env.python)
    uv = tools.uv_or_none() if installer in ("auto", "uv") else None
    if installer == "uv" and uv is None:
        raise ToolMissing("uv is not available; install it or use --installer pip")
    venv_python = interpreter(prefix)
    lock = env.lock.absolute()
    if links is None:  # from the index: its files must be the lock's, one hash each
        from provision.install import hashcheck

        hashcheck.check(lock)
    if uv:
        run_step(
            "creating the venv",
            [uv, "venv", "--quiet", "--no-config", "--allow-existing",
             "--python", str(base_python), str(prefix)],
            prefix, lock_fd=lock_fd, report=report,
        )  # fmt: skip
        argv = uv_install_argv(uv, venv_python, lock, offline)
        run_step("uv pip install", argv, prefix, lock_fd=lock_fd, report=report)
        used = "uv"
    else:
        run_step(
            "creating the venv",
            [str(base_python), "-m", "venv", str(prefix)],
            prefix,
            lock_fd=lock_fd,
            report=report,
        )
        argv = pip_install_argv(venv_python, lock, links)
        run_step("pip install", argv, prefix, lock_fd=lock_fd, report=report)
        used = "pip"
    prefix_hooks.install_hooks(env, prefix)
    return used


def build_conda(
    env: EnvDir, prefix: Path, solver: str, lock_fd: int | None, offline: Offline | None = None,
    report: Report = nothing,
) -> str:  # fmt: skip
    conda = tools.solver(solver)
    lock = offline.conda_lock if offline and offline.conda_lock else env.lock
    # -I: `python -m` would put the working directory first on sys.path, and a stray build.py or
    # yaml.py there would be imported in place of conda-lock's own dependencies.
    argv = [
        sys.executable, "-I", "-m", "conda_lock", "install", "--conda", conda,
        "--prefix", str(prefix), str(lock.absolute()),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="provision-pip-guard-") as guard:
        run_env = {**_pip_guard(Path(guard)), **(offline.environ() if offline else {})}
        run_step("conda-lock install", argv, prefix, env=run_env, lock_fd=lock_fd,
                  report=report)  # fmt: skip
    _check_pip_part(env.lock, prefix)
    prefix_hooks.install_hooks(env, prefix)
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
    from provision.lock import condafile

    lock = condafile.read(lock_file, InstallError)
    wanted = {p.name: p.version for p in lock.on(host_subdir()) if p.pip}
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
