"""What users do with built environments: list, show, remove, run a command, a Jupyter kernel,
an export for another machine. Data in, data out; the CLI presents it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision import _proc, environment, fileio, registry
from provision.environment import Found
from provision.errors import InstallError, ProvisionError, UsageError
from provision.install import prefix_hooks
from provision.matrix import kinds

KERNEL_PREFIX = "provision-"
PIP_NAME = re.compile(r"pip(\d+(\.\d+)?)?")  # pip, pip3, pip3.11


@dataclass(frozen=True)
class Listed:
    name: str
    record: registry.Record | None
    problem: str = ""  # why the record cannot be read, or what is wrong with the environment

    @property
    def state(self) -> str:
        if self.problem:
            return "broken"
        assert self.record is not None
        if not Path(self.record.interpreter).exists():
            return "missing"
        return "built"


def listing() -> list[Listed]:
    out = []
    for name, rec in registry.records():
        if isinstance(rec, str):
            out.append(Listed(name, None, rec))
        else:
            out.append(Listed(name, rec))
    return out


def require_built(found: Found) -> registry.Record:
    record = found.record
    if record is None:
        raise UsageError(
            f"{found.env.name} is not built on this machine (provision list shows what is); "
            f"build it with provision install {found.env.name}"
        )
    if not Path(record.interpreter).exists():
        raise InstallError(
            f"{found.env.name}: its prefix {record.prefix} is gone; rebuild it with "
            f"provision install {found.env.name}, or forget it with "
            f"provision remove {found.env.name}"
        )
    return record


# -- remove ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Removed:
    name: str
    prefix: str
    deleted_prefix: bool
    kept_because: str
    kernel: str | None
    freed: int = 0  # bytes the file system got back
    kept: tuple[str, ...] = ()  # the user's files, left in the prefix (with --force)


def remove(name: str, *, keep_prefix: bool = False, force: bool = False) -> Removed:
    """Forget NAME and delete what its installer put in its prefix, only when the prefix is the
    one provision built for NAME (its marker says so). Files provision did not install refuse the
    removal, naming them; with `force` they are kept and named, and the rest is deleted."""
    environment.check_name(name)
    record = registry.get(name)
    if record is None:
        raise UsageError(f"{name} is not registered on this machine (provision list shows what is)")
    registry.writable()  # before anything is deleted: the record must be removable too
    prefix = Path(record.prefix)
    why = _kept_because(name, record, prefix, keep_prefix)
    deleted = None
    if not why:
        from provision.install import owned
        from provision.install.place import finish_leftovers

        finish_leftovers(prefix)
        marker = _marker(prefix)
        existed = bool(marker.get("existed"))
        mode: owned.Mode = "listed"
        if marker.get("state") != "complete":  # a build that never finished: no list yet
            mode = "installer" if existed else "whole"
            theirs = owned.foreign_top(prefix) if existed else []
        else:
            theirs = owned.foreign(prefix)
            if owned.recorded(prefix) is None:
                mode = "whole"
                if not force:
                    raise InstallError(
                        f"{prefix} has no list of the files provision installed (an older "
                        f"provision built it); nothing was removed: `provision remove {name} "
                        "--force` deletes the whole folder"
                    )
        if theirs and not force:
            raise InstallError(
                f"{prefix} holds files provision did not install ({owned.shown(theirs)}); "
                f"nothing was removed: move them out, or `provision remove {name} --force` "
                "deletes what provision installed and keeps them"
            )
        try:
            deleted = owned.delete(prefix, keep_folder=existed, mode=mode)
        except OSError as exc:
            raise InstallError(f"cannot remove {prefix}: {exc.strerror}") from exc
    kernel = _remove_kernel(name)
    registry.forget(name)
    from provision.facts import store

    store.forget(name)
    return Removed(
        name, str(prefix), deleted is not None, why, kernel,
        deleted.freed if deleted else 0, tuple(deleted.kept) if deleted else (),
    )  # fmt: skip


def _marker(prefix: Path) -> dict[str, object]:
    from provision.install.place import read_marker

    return read_marker(prefix) or {}


def _kept_because(name: str, record: registry.Record, prefix: Path, keep_prefix: bool) -> str:
    """Why NAME's prefix is left as it is, or "" when it is NAME's own to delete: built by
    provision, for NAME, at this very place, and no other environment's."""
    if keep_prefix:
        return "--keep-prefix"
    if not record.owned:
        return "its system install script made it; remove it by hand"
    if not prefix.exists() and not prefix.is_symlink():
        return "it was already gone"
    if prefix.is_symlink() or not prefix.is_dir():
        return "it is not a folder provision made"
    marker = _marker(prefix)
    if not marker:
        return "it has no provision build marker: not provision's"
    if marker.get("name", name) != name:
        return f"its marker says it is {marker.get('name')!r}'s, not {name}'s"
    if marker.get("prefix", str(prefix)) != str(prefix):
        return f"its marker says it was built at {marker.get('prefix')}: a copy, not provision's"
    if not (Path(record.interpreter).parent.parent == prefix or not record.interpreter):
        return "its record names an interpreter elsewhere"
    real = Path(os.path.realpath(prefix))
    for other, rec in registry.records():
        if other != name and not isinstance(rec, str):
            theirs = Path(os.path.realpath(rec.prefix))
            if theirs == real or theirs in real.parents or real in theirs.parents:
                return f"it is where {other} is built too"
    return ""


# -- run ---------------------------------------------------------------------------------------


def run_argv(found: Found, command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """What `provision run NAME -- CMD` executes: CMD, with the environment's activation."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the command to run after --, e.g. provision run NAME -- python x.py")
    record = require_built(found)
    env = {**os.environ, **environment.activation_env(Path(record.prefix), kinds.of(record.path))}
    exe = shutil.which(command[0], path=env.get("PATH"))
    if exe is None:
        raise UsageError(f"{command[0]}: no such command in {found.env.name} or on PATH")
    _check_own_pip(found.env.name, command[0], exe, Path(record.prefix))
    return [exe, *command[1:]], env


def _check_own_pip(name: str, given: str, exe: str, prefix: Path) -> None:
    """`pip` inside `run` means the environment's pip, as in `conda run`. An environment uv built
    has none, and the pip found on PATH then is the host's: it would install outside the
    environment with no word. Refused; a path given in full is the user's own choice."""
    if "/" in given or not PIP_NAME.fullmatch(given):
        return
    here = Path(os.path.realpath(prefix))
    if here in Path(os.path.realpath(Path(exe).parent)).parents:
        return
    python = environment.interpreter(prefix)
    raise UsageError(
        f"{given}: {name} has no pip of its own (uv built it); the {given} on PATH ({exe}) would "
        f"act outside it: add packages with `provision add {name} PKG` (locked with TensorFlow), "
        f"or run `uv pip install --python {python} PKG` (by hand, unlocked)"
    )


# -- Jupyter -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    name: str
    display_name: str
    location: str
    argv: list[str]


def kernel_spec(found: Found, display_name: str | None = None) -> dict[str, object]:
    record = require_built(found)
    return {
        "argv": [record.interpreter, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name or f"TensorFlow {record.tf} ({found.env.name})",
        "language": "python",
        # Nothing else is needed: the interpreter finds its CUDA libraries by itself.
        "env": {"PROVISION_ENV": found.env.name},
        "metadata": {"provision": {"name": found.env.name, "prefix": record.prefix}},
    }


def install_kernel(
    found: Found, *, display_name: str | None = None, user: bool = True, prefix: Path | None = None
) -> Kernel:
    """Register a kernelspec through jupyter_client's KernelSpecManager."""
    import tempfile

    record = require_built(found)
    done = _proc.run([record.interpreter, "-c", "import ipykernel"], timeout=120, check=False)
    if not done:
        raise InstallError(
            f"{found.env.name} has no ipykernel: render it with --jupyter, then lock and install "
            f"(provision create --tf {found.env.request.tf} --path {found.env.path} --jupyter)"
        )
    from jupyter_client.kernelspec import KernelSpecManager

    spec = kernel_spec(found, display_name)
    kernel_name = KERNEL_PREFIX + found.env.name.lower()
    with tempfile.TemporaryDirectory(prefix="provision-kernel-") as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        try:
            where = KernelSpecManager().install_kernel_spec(
                tmp,
                kernel_name,
                user=user and prefix is None,
                prefix=str(prefix) if prefix else None,
            )
        except OSError as exc:
            raise InstallError(f"cannot install the kernel {kernel_name}: {exc}") from exc
    return Kernel(kernel_name, str(spec["display_name"]), where, list(spec["argv"]))  # type: ignore[call-overload]


def _remove_kernel(name: str) -> str | None:
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        return None
    kernel_name = KERNEL_PREFIX + name.lower()
    manager = KernelSpecManager()
    try:
        manager.get_kernel_spec(kernel_name)
    except NoSuchKernel:
        return None
    try:
        manager.remove_kernel_spec(kernel_name)
    except (OSError, NoSuchKernel):
        return None
    return kernel_name


# -- export ------------------------------------------------------------------------------------


def export(found: Found, dest: Path, sbom: bool = False, modulefile: bool = False) -> list[str]:
    """A self-contained copy for another machine: the reviewed files, the lock, a README, the
    smoke test as one zipapp, the system script where the path needs it, and with `sbom` the
    CycloneDX bill of materials (sbom.py), with `modulefile` an Lmod module file for its built
    prefix (modulefile.py). Written next to DEST and renamed into place (fileio.swap_dir); an
    existing DEST is never overwritten."""
    env = found.env
    env.check_reviewed()
    if modulefile and found.record is None:
        raise UsageError(
            f"--modulefile points at the built prefix, and {env.name} is not built here: "
            f"provision install {env.name} --prefix /shared/envs/{env.name} first"
        )
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():  # a symlink, even one leading nowhere, is not ours
        raise UsageError(f"{dest} exists; export into a new directory")
    target = dest.absolute()
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent} is not a directory")
    try:
        fileio.finish_swap(target, "export")  # what an export killed midway left
        with fileio.swap_dir(target, "export", replace=False) as tmp:
            files = _export_into(tmp, found, sbom, modulefile)
    except OSError as exc:
        raise ProvisionError(f"cannot write {dest}: {exc.strerror or exc}") from exc
    return sorted(files)


def _export_into(tmp: Path, found: Found, sbom: bool, modulefile: bool) -> list[str]:
    """Every file of an export, written into tmp; their paths."""
    from provision import matrix, payload_app, render

    env = found.env
    files = env.own_files()
    for rel in files:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(env.root / rel, tmp / rel)
    for rel, text in render.render_export(env.spec, matrix.load()).items():
        (tmp / rel).write_text(text, encoding="utf-8")
        files.append(rel)
    payload_app.write_zipapp(tmp / "smoke-test.pyz")
    files.append("smoke-test.pyz")
    hooks = tmp / "hooks"
    hooks.mkdir(exist_ok=True)
    for script in ("activate.sh", "deactivate.sh", "provision_env_hook.py"):
        shutil.copyfile(prefix_hooks.HOOKS_DIR / script, hooks / script)
        files.append(f"hooks/{script}")
    policy = f"hooks/{payload_app.POLICY_MODULE}.py"
    shutil.copyfile(payload_app.POLICY_SOURCE, tmp / policy)
    files.append(policy)
    if env.kind.host_toolkit:
        from provision.install.build import system_script

        shutil.copyfile(system_script(), tmp / "install-system.sh")
        (tmp / "install-system.sh").chmod(0o755)
        files.append("install-system.sh")
    lock_text = env.lock.read_text(encoding="utf-8") if env.lock.is_file() else ""
    if not env.kind.conda_env and "==" in lock_text:  # a requirements lock
        from provision.lock import pylock

        text = pylock.pep751(env.spec, lock_text)
        (tmp / "pylock.toml").write_text(text, encoding="utf-8")
        files.append("pylock.toml")
    if sbom:
        from provision import sbom as bill

        if not env.lock.is_file():
            raise ProvisionError(
                f"--sbom lists what the lock holds, and {env.name} has no lock yet: "
                f"provision lock {env.name}"
            )
        (tmp / bill.FILE_NAME).write_text(bill.document(env), encoding="utf-8")
        files.append(bill.FILE_NAME)
    if modulefile and found.record is not None:
        from provision import modulefile as lmod

        (tmp / "modulefiles").mkdir()
        text = lmod.text(found.record, env.spec.cuda.version, env.spec.cudnn.version)
        (tmp / "modulefiles" / f"{env.name}.lua").write_text(text, encoding="utf-8")
        files.append(f"modulefiles/{env.name}.lua")
    return files
