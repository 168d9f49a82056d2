"""An environment: its directory envs/<name>/ and what provision builds from it.

The one owner of the environment directory (its files, its manifest provision.json, its spec), of
where a built environment lives by default, of its interpreter and of its activation. Every other
module asks here. Names come from the directory an environment was found in, never from the
manifest: a copied directory is refused until it is rendered under its new name.

Resolution of a NAME typed by a user: with an explicit --out, only OUT/NAME; otherwise the registry
of built environments first (so any directory works), then ./envs/NAME.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from provision import _proc, diskread, records, registry, userpackages
from provision.errors import InstallError, ProvisionError, StaleError, UsageError
from provision.fileio import sha256_bytes
from provision.matrix import kinds
from provision.matrix.kinds import PathKind, PathName
from provision.matrix.spec import NAME_RE, EnvSpec, GpuPolicy, resolve

MANIFEST = "provision.json"
RENDERED_LIMIT = 64 << 20  # a rendered file is a few KiB; a lock a few MB
SCHEMA = 2
# The user's packages (userpackages): an input of every path, theirs to edit, never in the
# manifest's hashes; render keeps it, as it keeps the lock.
USER_FILE = userpackages.FILE
KEPT_FILES = (*sorted({k.lock_file for k in kinds.KINDS.values()}), USER_FILE)
# Folders other commands write into envs/NAME/ (registered here, so that render, which keeps them
# as they are, names none of them): `provision fleet`'s playbook and variables.
FLEET_DIR = "ansible"
COMMAND_DIRS = (FLEET_DIR,)
RUNTIME = "hooks/runtime.env"
DEFAULT_OUT = Path("envs")
# Where `provision install` puts the runtime values in a prefix (install/prefix_hooks.py).
INSTALLED_RUNTIME = Path("etc/provision/runtime.env")
# Where a build keeps the environment directory it was made from (install/prefix_hooks.py).
KEPT_SOURCE = Path("etc/provision/env")


class ManifestError(ProvisionError):
    """provision.json is missing, unreadable, or not what its directory says."""


@dataclass(frozen=True)
class Request:
    """What `provision render` was asked for: everything the spec is resolved from."""

    tf: str
    path: PathName
    python: str
    gpu_memory: str | None = None
    gpus: str | None = None
    jupyter: bool = False

    @property
    def gpu(self) -> GpuPolicy:
        return GpuPolicy(self.gpu_memory, self.gpus)

    def to_json(self) -> dict[str, object]:
        return {
            "tf": self.tf,
            "path": self.path,
            "python": self.python,
            "gpu_memory": self.gpu_memory,
            "gpus": self.gpus,
            "jupyter": self.jupyter,
        }

    @classmethod
    def from_json(cls, data: object) -> Request:
        """The request `to_json` wrote; ValueError naming the field otherwise."""
        return records.read(cls, data, "request", ValueError)


@dataclass(frozen=True)
class Manifest:
    """provision.json: the request and the sha256 of every rendered file (hand edits show)."""

    request: Request
    files: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None  # rendered for; a directory of another name is a copy, refused

    def dumps(self) -> str:
        """Small and stable: three lines (what, the request, the hashes), keys sorted."""
        request = json.dumps(self.request.to_json(), sort_keys=True)
        files = json.dumps(dict(self.files), sort_keys=True)
        return (
            f'{{"schema": {SCHEMA}, "name": {json.dumps(self.name)},\n'
            f' "request": {request},\n'
            f' "files": {files}}}\n'
        )

    @classmethod
    def loads(cls, text: str) -> Manifest:
        data = diskread.loads_json(text, MANIFEST)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        schema = data.get("schema")
        if schema not in (1, SCHEMA):
            raise ValueError(f"schema {schema!r} (this provision reads 1 and {SCHEMA})")
        request = data.get("request")
        files = data.get("files") or {}
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise ValueError("files is not a map of path to sha256")
        name = data.get("name") if schema == SCHEMA else None
        if schema == 1 and isinstance(request, dict):
            # Schema 1 kept the name inside the request.
            request = dict(request)
            name = request.pop("name", None)
        return cls(Request.from_json(request), dict(files), name if isinstance(name, str) else None)


@dataclass(frozen=True)
class EnvDir:
    """envs/<name>/ as it is on disk: its manifest, and the spec that manifest resolves to."""

    root: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def request(self) -> Request:
        return self.manifest.request

    @property
    def path(self) -> PathName:
        return self.manifest.request.path

    @property
    def kind(self) -> PathKind:
        return kinds.of(self.path)

    @property
    def python(self) -> str:
        return self.manifest.request.python

    @cached_property
    def spec(self) -> EnvSpec:
        from provision import matrix

        r = self.request
        return resolve(matrix.load(), r.tf, r.path, r.python, self.name, r.gpu, jupyter=r.jupyter)

    @property
    def lock(self) -> Path:
        return self.root / self.kind.lock_file

    @property
    def inputs(self) -> tuple[Path, ...]:
        return tuple(self.root / rel for rel in self.kind.input_files)

    @property
    def user_file(self) -> Path:
        return self.root / USER_FILE

    def user_text(self) -> str | None:
        """packages.in as it is, None when there is none; ManifestError when it is not a file."""
        try:
            return diskread.read_text(self.user_file, RENDERED_LIMIT)
        except FileNotFoundError:
            return None
        except (OSError, diskread.Unreadable) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise ManifestError(f"cannot read {self.user_file}: {why}") from exc

    def own_files(self) -> list[str]:
        """What the environment directory is, as it travels (bundle, export, the copy a build
        keeps): the manifest, every rendered file it lists, the lock and the user's packages
        (those two when they are there); nothing else that may lie around in the folder."""
        rels = {MANIFEST, *self.manifest.files}
        rels |= {p.name for p in (self.lock, self.user_file) if p.is_file()}
        return sorted(rels)

    def packages(self) -> list[userpackages.Package]:
        """The user's packages, in the file's order (none without packages.in)."""
        text = self.user_text()
        if text is None:
            return []
        return userpackages.parse(text, self.kind.conda_env, f"{self.name}/{USER_FILE}")

    def edited(self) -> list[str]:
        """Rendered files that are missing or no longer what provision rendered (hand edits)."""
        changed = []
        for rel, sha in sorted(self.manifest.files.items()):
            try:
                data = diskread.read_bytes(self.root / rel, RENDERED_LIMIT)
            except (OSError, diskread.Unreadable) as exc:  # gone; a FIFO, a device, a folder
                changed.append(f"{rel} ({'missing' if isinstance(exc, OSError) else 'not a file'})")
                continue
            if sha256_bytes(data) != sha:
                changed.append(rel)
        return changed

    def check_reviewed(self) -> None:
        """StaleError when a rendered file was edited by hand: what runs is what was reviewed."""
        changed = self.edited()
        if changed:
            raise StaleError(
                f"{self.root}: {', '.join(changed)} changed since provision rendered it; re-render "
                f"(provision render {self.request_argv()}) or pass --force to use it as it is"
            )

    def request_argv(self) -> str:
        import shlex

        r = self.request
        argv = ["--tf", r.tf, "--path", r.path, "--python", r.python, "--name", self.name]
        if r.gpu_memory:
            argv += ["--gpu-memory", r.gpu_memory]
        if r.gpus:
            argv += ["--gpus", r.gpus]
        if r.jupyter:
            argv.append("--jupyter")
        if _is_prerelease(r.tf):
            argv.append("--pre")
        if self.root.parent != DEFAULT_OUT:
            argv += ["--out", str(self.root.parent)]
        return shlex.join(argv)

    def default_prefix(self) -> Path:
        return default_prefix(self.name, self.kind)


def _glob(folder: Path, pattern: str) -> list[Path]:
    try:
        return list(folder.glob(pattern))
    except OSError:
        return []


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise UsageError(
            f"environment name {name!r} is not usable: use letters, digits, '.', '_' and '-' "
            "(at most 64, starting with a letter or digit)"
        )
    return name


def load(root: Path) -> EnvDir:
    """envs/<name>/ with its manifest read and checked against the directory's name."""
    root = Path(root)
    manifest = root / MANIFEST
    try:
        text = diskread.read_text(manifest)
    except (FileNotFoundError, NotADirectoryError):
        raise ManifestError(
            f"{root} has no {MANIFEST}: render it first "
            f"(provision render --tf X.Y --name {root.name})"
        ) from None
    except (OSError, diskread.Unreadable) as exc:  # unreadable; a FIFO, a device, too large
        why = f"cannot read {manifest}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
        raise ManifestError(f"{why}; re-render it") from exc
    try:
        parsed = Manifest.loads(text)
    except (ValueError, TypeError) as exc:
        raise ManifestError(
            f"{manifest} is not a provision manifest ({exc}); re-render it"
        ) from exc
    if parsed.name is not None and parsed.name != root.name:
        raise ManifestError(
            f"{manifest} was rendered for {parsed.name!r}, not {root.name!r} "
            "(a copied directory?); "
            f"render it under this name: provision render --tf {parsed.request.tf} "
            f"--path {parsed.request.path} --name {root.name}"
        )
    return EnvDir(root, parsed)


@dataclass(frozen=True)
class Found:
    """An environment a user named: its directory, and its registry record when it was built."""

    env: EnvDir
    record: registry.Record | None
    kept: bool = False  # env is the copy its build keeps: the directory it came from is gone
    via_registry: bool = False  # the record's directory: no --out, not ./envs/NAME

    def editable(self, what: str) -> None:
        """UsageError when `what` would change the environment's inputs and they are the copy a
        build keeps (its own prefix's): a directory of the user's is needed for that."""
        if self.kept:
            source = self.record.env_dir if self.record else "?"
            raise UsageError(
                f"{what}: {self.env.name} was built from {source}, which is gone; its build "
                f"keeps a copy ({self.env.root}) that provision only reads; to change it, copy "
                f"it back (provision export {self.env.name} DIR) and work there"
            )

    def rewritable(self, what: str) -> None:
        """UsageError when `what` would rewrite the environment's inputs (packages.in, the lock)
        in a directory the user did not point at: the record's, outside the current folder (a
        repository's committed lock, another project's). --out, or running it there, says so."""
        self.editable(what)
        if not self.via_registry:
            return
        here = Path(os.path.realpath(Path.cwd()))
        root = Path(os.path.realpath(self.env.root))
        if root == here or here in root.parents or root in here.parents:
            return
        mine = DEFAULT_OUT / self.env.name
        other = (
            f" (this folder's {mine} is another {self.env.name}: `--out {DEFAULT_OUT}` changes "
            "that one)"
            if os.path.lexists(mine / MANIFEST)
            else ""
        )
        raise UsageError(
            f"{what}: {self.env.name} was made from {self.env.root}, outside this folder, and "
            f"would rewrite its {USER_FILE} and lock there; run it in {self.env.root.parent.parent}"
            f" or pass --out {self.env.root.parent}{other}"
        )

    @property
    def prefix(self) -> Path:
        if self.record is not None:
            return Path(self.record.prefix)
        return self.env.default_prefix()


def find(name: str, out: Path | None = None) -> Found:
    """NAME as a user means it: OUT/NAME when --out is given, else the registry, else envs/NAME."""
    check_name(name)
    record = registry.get(name)
    if out is None and record is not None and os.path.lexists(Path(record.env_dir) / MANIFEST):
        return Found(load(Path(record.env_dir)), record, via_registry=True)
    base = out if out is not None else DEFAULT_OUT
    folder = base / name
    if not os.path.lexists(folder / MANIFEST) and out is None and record is not None:
        kept = Path(record.prefix) / KEPT_SOURCE / name
        if os.path.lexists(kept / MANIFEST):
            return Found(load(kept), record, kept=True)
        raise UsageError(
            f"{name} is built at {record.prefix}, but the directory it was built from "
            f"({record.env_dir}) is gone; pass --out DIR where its envs/ is now, or forget it "
            f"with provision remove {name}"
        )
    if not os.path.lexists(folder / MANIFEST):
        where = f"{out}" if out is not None else f"the registry (provision list) or {DEFAULT_OUT}/"
        known = sorted(
            {p.parent.name for p in _glob(base, f"*/{MANIFEST}")}
            | ({n for n, _ in registry.records()} if out is None else set())
        )
        listing = f"known: {', '.join(known)}" if known else "none known yet"
        raise UsageError(
            f"no environment {name!r} in {where} ({listing}); render it (provision render "
            f"--tf X.Y --name {name}) or pass --out DIR"
        )
    env = load(folder)
    same = record is not None and Path(record.env_dir) == env.root.absolute()
    return Found(env, record if same else None)


def built_at(python: Path | None, prefix: Path | None) -> EnvDir | None:
    """The registered environment whose interpreter or prefix this is, if its directory is there."""
    wanted = Path(prefix).absolute() if prefix is not None else None
    exe = Path(python).absolute() if python is not None else None
    for _, record in registry.records():
        if isinstance(record, str):
            continue
        if Path(record.interpreter) == exe or Path(record.prefix) == wanted:
            try:
                return load(Path(record.env_dir))
            except ManifestError:
                return None
    return None


# -- what an environment sets up (hooks/runtime.env) ------------------------------------------


def runtime_values(spec: EnvSpec) -> dict[str, str]:
    """The variables of hooks/runtime.env: where the CUDA libraries and ptxas are, the GPU policy.

    Folders are relative to the prefix; `DIR/*/lib` means every lib folder one level below DIR.
    The system path's toolkit lives outside the prefix: its install records PROVISION_CUDA_HOME.
    """
    site = f"lib/python{spec.python}/site-packages"
    libs = spec.kind.library_folders(site, spec.nvidia_wheels)
    xla = spec.kind.xla_dir(site, spec.cuda.major, spec.ptxas_source)
    values = {
        "PROVISION_ENV": spec.name,
        "PROVISION_LIBRARY_DIRS": ":".join(libs),
        "PROVISION_XLA_DIR": xla,
    }
    if spec.gpu.devices:
        values["PROVISION_GPUS"] = spec.gpu.devices
    if spec.gpu.memory:
        values["PROVISION_GPU_MEMORY"] = spec.gpu.memory
    return values


def parse_runtime(text: str) -> dict[str, str]:
    """KEY='value' lines (as render writes them and the hooks source them); nothing else."""
    import re
    import shlex

    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.fullmatch(r"(PROVISION_[A-Z_]+)=('[^']*')", line.strip())
        if not m:
            raise ValueError(f"line {number} is not PROVISION_NAME='value'")
        values[m.group(1)] = shlex.split(m.group(2))[0] if m.group(2) != "''" else ""
    return values


# -- a built environment ----------------------------------------------------------------------


def default_prefix(name: str, kind: PathKind) -> Path:
    """Inside PROVISION_HOME, except where the kind's own script places its venv (system)."""
    return kind.default_prefix(registry.home(), name)


def interpreter(prefix: Path) -> Path:
    return Path(prefix) / "bin" / "python"


def site_packages(prefix: Path, python: str) -> Path:
    return Path(prefix) / "lib" / f"python{python}" / "site-packages"


# Variables a shell sets for itself; they are not part of what activation changes.
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})


def activation_env(prefix: Path, kind: PathKind) -> dict[str, str]:
    """The variables that activating the prefix sets, for running its programs without a shell.

    The installed hooks are the source of truth: they are sourced in bash exactly as activation
    would, and every variable they change is returned.
    """
    prefix = Path(prefix).absolute()
    base = {
        "PATH": os.pathsep.join([str(prefix / "bin"), os.environ.get("PATH", "")]),
        **kind.activation_vars(prefix),
    }
    hook = prefix / "etc" / "provision" / "activate.sh"
    if not hook.is_file():
        return base
    before = {**os.environ, **base}
    program = '_provision_root="$1"; . "$2" 1>&2 || exit 3; env -0'
    done = _proc.run(
        ["bash", "-c", program, "provision-activate", str(prefix), str(hook)],
        env=base,
        timeout=60,
        check=False,
    )
    if not done:
        raise InstallError(
            f"activation hook {hook} failed (exit {done.returncode}): {done.last_line()}"
        )
    after = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    changed = {k: v for k, v in after.items() if k not in _SHELL_OWN and before.get(k) != v}
    return {**base, **changed}


def _is_prerelease(tf: str) -> bool:
    from provision import matrix

    try:
        return matrix.load().release(tf).prerelease
    except ProvisionError:
        return False
