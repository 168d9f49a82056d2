"""Finding what provision drives: a Python X.Y, uv, a conda-compatible solver, the package index.

One place, one behaviour: install, lock, create and the bundle ask here, never PATH directly.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from provision.errors import InstallError, ProvisionError, ToolMissing, UsageError

SOLVERS = ("auto", "conda", "mamba", "micromamba", "builtin")


# -- Python X.Y --------------------------------------------------------------------------------


def python_version_of(exe: str | Path) -> str | None:
    """The X.Y of an interpreter, or None when it is not a Python that runs here."""
    from provision import _proc  # imports subprocess: not on the CLI's path to --help

    try:
        done = _proc.run(
            [str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            timeout=30,
            check=False,
        )
    except (ProvisionError, OSError):
        return None
    out = done.stdout.strip()
    return out if done and re.fullmatch(r"\d+\.\d+", out) else None


def pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def python_candidates(version: str) -> list[str]:
    """Where Python X.Y may be: `pythonX.Y` on PATH, then pyenv's versions (newest patch first)."""
    from provision import _proc  # imports subprocess: not on the CLI's path to --help

    found: list[str] = []
    on_path = _proc.which(f"python{version}")
    # A pyenv shim is a dispatcher that fails for every version not selected as global; the
    # real interpreters behind it are listed next, straight from pyenv's versions directory.
    if on_path and Path(on_path).parent.name != "shims":
        found.append(on_path)
    versions = pyenv_root() / "versions"
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


@cache
def find_python(version: str) -> Path:
    """An interpreter of Python X.Y on this host, or InstallError naming the version."""
    from provision import _proc  # imports subprocess: not on the CLI's path to --help

    for exe in python_candidates(version):
        if python_version_of(exe) == version:
            return Path(exe)
    uv = uv_or_none()
    if uv:
        done = _proc.run([uv, "python", "find", "--system", version], timeout=60, check=False)
        exe = done.stdout.strip()
        if done and exe and python_version_of(exe) == version:
            return Path(exe)
    raise InstallError(
        f"Python {version} is not installed on this host (looked for python{version} on PATH, "
        f"in {pyenv_root() / 'versions'} and with `uv python find`); install it "
        f"(e.g. `pyenv install {version}` or `uv python install {version}`) "
        "or pick another --python"
    )


def has_python(version: str) -> bool:
    try:
        find_python(version)
    except InstallError:
        return False
    return True


# -- uv ----------------------------------------------------------------------------------------


def uv_or_none() -> str | None:
    """uv from its PyPI package (a dependency of provision), else the first on PATH."""
    from provision import _proc  # imports subprocess: not on the CLI's path to --help

    try:
        from uv import find_uv_bin
    except ImportError:
        return _proc.which("uv")
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return _proc.which("uv")


def uv() -> str:
    found = uv_or_none()
    if found is None:
        raise ToolMissing("uv is not installed (pip install uv, or reinstall provision)")
    return found


# -- the package index -------------------------------------------------------------------------


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


def pip_setting(key: str, env: Mapping[str, str] | None = None) -> str | None:
    """A setting of pip's as `pip install` would take it here: PIP_<KEY>, else the last of pip's
    configuration files that names it (sections global and install); None when none does."""
    env = os.environ if env is None else env
    variable = "PIP_" + key.upper().replace("-", "_")
    if env.get(variable):
        return env[variable]
    found: str | None = None
    for path in _config_files(env):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "install"):
            for spelled in (key, key.replace("-", "_")):
                if parser.has_option(section, spelled):
                    found = parser.get(section, spelled).strip()
    return found or None


def pip_index_url(env: Mapping[str, str] | None = None) -> str | None:
    """The index-url pip would use for `pip install` here, or None for pip's built-in default."""
    return pip_setting("index-url", env)


def network_env(
    env: Mapping[str, str] | None = None, *, extra_index: bool = False
) -> dict[str, str]:
    """pip's network settings, as uv and conda-lock read them: the one place they are passed on.

    A lab behind its own certificate authority or proxy has told pip (PIP_CERT or `cert` in
    pip.conf, `proxy`, `trusted-host`, `client-cert`, `extra-index-url`); uv reads none of pip's
    files, and conda-lock's downloads go through requests. So pip's certificate becomes
    SSL_CERT_FILE (uv, OpenSSL) and REQUESTS_CA_BUNDLE (requests), its proxy HTTPS_PROXY and
    HTTP_PROXY, its trusted hosts UV_INSECURE_HOST, its client certificate SSL_CLIENT_CERT, and
    with `extra_index` (installs, not locks) its extra indexes UV_EXTRA_INDEX_URL: a build may take
    the locked files from a mirror, but a lock must not depend on this machine's extra indexes
    (index-url itself is given to uv as --index-url), searched as pip searches them (uv's
    unsafe-best-match: every index, the pinned version wherever it is). pip's
    certificate wins over an SSL_CERT_FILE of the shell: it is the one that verifies the index;
    for the rest, what the user exported already stays as it is. The standard proxy variables of
    the shell reach every child as they are."""
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    cert = pip_setting("cert", env)
    if cert:
        out["SSL_CERT_FILE"] = out["REQUESTS_CA_BUNDLE"] = str(Path(cert).expanduser())
    client = pip_setting("client-cert", env)
    if client:
        out["SSL_CLIENT_CERT"] = str(Path(client).expanduser())
    defaults: dict[str, str] = {}
    proxy = pip_setting("proxy", env)
    if proxy:
        defaults["HTTPS_PROXY"] = defaults["HTTP_PROXY"] = proxy
    trusted = pip_setting("trusted-host", env)
    if trusted:
        defaults["UV_INSECURE_HOST"] = " ".join(trusted.split())
    extra = pip_setting("extra-index-url", env) if extra_index else None
    if extra:
        defaults["UV_EXTRA_INDEX_URL"] = " ".join(extra.split())
        # pip looks in every index for the best match; uv by default stops at the first index
        # that has the project at all (extra indexes first), where a pinned version may be
        # missing. The lock's exact pins and hashes decide which files are acceptable.
        defaults["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    out.update({k: v for k, v in defaults.items() if not env.get(k) and not env.get(k.lower())})
    return out


def child_env(
    cache_vars: Mapping[str, str], cache_dir: Path | None = None, *, extra_index: bool = False
) -> dict[str, str]:
    """What every installer and resolver provision runs (uv, pip, conda-lock, the solver) gets
    on top of the environment: pip's network settings, and provision's caches (`cache_vars`:
    caches.tool_env(), which the caller hands in so that finding tools stays below the caches'
    floor), or those under --cache-dir."""
    env = {**cache_vars, **network_env(extra_index=extra_index)}
    if cache_dir is not None:
        env["UV_CACHE_DIR"] = str(cache_dir.absolute() / "uv")
    return env


# -- conda-compatible solvers ------------------------------------------------------------------


def solver(name: str = "auto") -> str:
    """The conda-compatible executable for conda-lock: the host's own, else provision-conda."""
    from provision import _proc  # imports subprocess: not on the CLI's path to --help

    if name not in SOLVERS:
        raise UsageError(f"--solver takes one of {', '.join(SOLVERS)}, not {name!r}")
    if name != "builtin":
        for exe in ("micromamba", "mamba", "conda") if name == "auto" else (name,):
            found = _proc.which(exe)
            if found:
                return found
        if name != "auto":
            raise ToolMissing(f"{name} is not installed or not on PATH; use --solver builtin")
    beside = Path(sys.executable).parent / "provision-conda"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = _proc.which("provision-conda")
    if found:
        return found
    raise ToolMissing("provision-conda (the built-in solver) is not installed; reinstall provision")
