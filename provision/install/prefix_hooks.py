"""The environment's set-up put into a built prefix: its runtime values, the activation scripts
(conda's activate.d or the venv's bin/activate), and the start-up hook with the GPU policy that
make its interpreter work with no activation. Shipped from the package (provision/hooks/, the
payload's gpu_policy.py); written only when a file differs, so a re-run changes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from provision import payload_app
from provision.environment import (
    INSTALLED_RUNTIME,
    KEPT_SOURCE,
    RUNTIME,
    EnvDir,
    parse_runtime,
    site_packages,
)
from provision.errors import InstallError
from provision.fileio import write_atomic

_PACKAGE = Path(__file__).resolve().parent.parent
HOOKS_DIR = _PACKAGE / "hooks"
HOOK_MODULE = "provision_env_hook"

_VENV_BLOCK_BEGIN = "# >>> provision hooks >>>"
_VENV_BLOCK_END = "# <<< provision hooks <<<"


def install_hooks(env: EnvDir, prefix: Path, extra: Mapping[str, str] | None = None) -> None:
    """Put the environment's set-up into a built prefix, from the package and runtime.env.

    - etc/provision/runtime.env: the reviewed variables (plus `extra`, e.g. the toolkit's home);
    - etc/provision/{activate,deactivate}.sh, and conda's activate.d/deactivate.d or the venv's
      bin/activate calling them: activation as before;
    - site-packages/provision_env_hook.{py,pth}: the interpreter finds its CUDA libraries and
      applies the GPU policy when TensorFlow is imported, with no activation at all; the policy's
      code is site-packages/provision_gpu_policy.py (payload/gpu_policy.py).
    """
    prefix = Path(prefix)
    values = parse_runtime((env.root / RUNTIME).read_text(encoding="utf-8"))
    values.update(extra or {})
    etc = prefix / "etc" / "provision"
    etc.mkdir(parents=True, exist_ok=True)
    import shlex

    lines = [f"# Installed by provision from {env.name}/{RUNTIME}."]
    lines += [
        f"{k}='{v}'" if "'" not in v else f"{k}={shlex.quote(v)}" for k, v in sorted(values.items())
    ]
    _write(prefix / INSTALLED_RUNTIME, "\n".join(lines) + "\n")
    for script in ("activate.sh", "deactivate.sh"):
        _copy(HOOKS_DIR / script, etc / script)
    site = site_packages(prefix, env.python)
    site.mkdir(parents=True, exist_ok=True)
    _copy(HOOKS_DIR / f"{HOOK_MODULE}.py", site / f"{HOOK_MODULE}.py")
    _copy(payload_app.POLICY_SOURCE, site / f"{payload_app.POLICY_MODULE}.py")
    _write(site / f"{HOOK_MODULE}.pth", f"import {HOOK_MODULE}\n")
    if env.kind.conda_env:
        for sub, script in (
            ("activate.d", "conda-activate.sh"),
            ("deactivate.d", "conda-deactivate.sh"),
        ):
            target = prefix / "etc" / "conda" / sub
            target.mkdir(parents=True, exist_ok=True)
            _copy(HOOKS_DIR / script, target / "provision.sh")
    elif (prefix / "bin" / "activate").is_file():
        _hook_venv_activate(prefix / "bin" / "activate")
    keep_source(env, prefix)


def keep_source(env: EnvDir, prefix: Path) -> None:
    """etc/provision/env/NAME/: the environment directory's own files (inputs, manifest, lock,
    the user's packages.in) as this build was made from them, so that `run`, `show`, `verify`
    and `check` work when the directory it was rendered in is moved or deleted."""
    kept = Path(prefix) / KEPT_SOURCE / env.name
    wanted = env.own_files()
    for rel in wanted:
        (kept / rel).parent.mkdir(parents=True, exist_ok=True)
        _write(kept / rel, (env.root / rel).read_text(encoding="utf-8"))
    for path in sorted(kept.rglob("*"), reverse=True) if kept.is_dir() else []:
        rel = path.relative_to(kept).as_posix()
        if path.is_file() and rel not in wanted:
            path.unlink()  # a file of an earlier build (the folder is provision's own)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _write(path: Path, text: str) -> None:
    """Atomically, and only when the content differs: a re-run changes nothing it need not."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    write_atomic(path, text)


def _copy(src: Path, dest: Path) -> None:
    _write(dest, src.read_text(encoding="utf-8"))


# The first line of the venv's deactivate: undo the hooks of the environment that is active (this
# one, or another provision venv, since bin/activate starts with `deactivate nondestructive`).
_VENV_UNDO = (
    '    _provision_undo="${_PROVISION_HOOKED:-}/etc/provision/deactivate.sh"; '
    'if [ -n "${_PROVISION_HOOKED:-}" ] && [ -f "$_provision_undo" ]; then . "$_provision_undo"; '
    "fi; unset _PROVISION_HOOKED _provision_undo  # provision hooks\n"
)


def _hook_venv_activate(activate: Path) -> None:
    """bin/activate runs the hooks; its deactivate undoes them. POSIX sh, as bin/activate is."""
    block = (HOOKS_DIR / "venv-activate-block.sh").read_text(encoding="utf-8")
    text = activate.read_text(encoding="utf-8")
    if _VENV_BLOCK_BEGIN in text:
        text = text[: text.index(_VENV_BLOCK_BEGIN)]
    lines = [ln for ln in text.rstrip("\n").split("\n") if not ln.endswith("  # provision hooks")]
    try:
        at = lines.index("deactivate () {") + 1
    except ValueError:
        raise InstallError(
            f"{activate} defines no deactivate () {{: not a venv's activate"
        ) from None
    lines.insert(at, _VENV_UNDO.rstrip("\n"))
    _write(activate, "\n".join(lines) + "\n" + block)
