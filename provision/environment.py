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

from provision import _proc, payload_app, records, registry
from provision.errors import InstallError, ProvisionError, StaleError, UsageError
from provision.matrix.spec import NAME_RE, EnvSpec, GpuPolicy, PathKind, resolve

MANIFEST = "provision.json"
SCHEMA = 2
LOCK_FILES: dict[str, str] = {
    "conda": "conda-lock.yml",
    "pip": "requirements.lock",
    "system": "requirements.lock",
}
INPUT_FILES: dict[str, tuple[str, ...]] = {
    "conda": ("environment.yml", "virtual-packages.yml"),
    "pip": ("requirements.in",),
    "system": ("requirements.in", "system.env"),
}
RUNTIME = "hooks/runtime.env"
DEFAULT_OUT = Path("envs")
# What `provision install` puts into a prefix, from the package (never from envs/).
HOOKS_DIR = Path(__file__).with_name("hooks")
HOOK_MODULE = "provision_env_hook"
INSTALLED_RUNTIME = Path("etc/provision/runtime.env")
# Where templates/system's install script puts its venv when run without --prefix (as root).
SYSTEM_VENVS = Path("/opt/provision/venvs")


class ManifestError(ProvisionError):
    """provision.json is missing, unreadable, or not what its directory says."""


@dataclass(frozen=True)
class Request:
    """What `provision render` was asked for: everything the spec is resolved from."""

    tf: str
    path: PathKind
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
        data = json.loads(text)
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


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


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
    def path(self) -> PathKind:
        return self.manifest.request.path

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
        return self.root / LOCK_FILES[self.path]

    @property
    def inputs(self) -> tuple[Path, ...]:
        return tuple(self.root / rel for rel in INPUT_FILES[self.path])

    def edited(self) -> list[str]:
        """Rendered files that are missing or no longer what provision rendered (hand edits)."""
        changed = []
        for rel, sha in sorted(self.manifest.files.items()):
            try:
                data = (self.root / rel).read_bytes()
            except OSError:
                changed.append(f"{rel} (missing)")
                continue
            if _sha256(data) != sha:
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
        if self.root.parent != DEFAULT_OUT:
            argv += ["--out", str(self.root.parent)]
        return shlex.join(argv)

    def default_prefix(self) -> Path:
        return default_prefix(self.name, self.path)


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
        text = manifest.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise ManifestError(
            f"{root} has no {MANIFEST}: render it first "
            f"(provision render --tf X.Y --name {root.name})"
        ) from None
    except OSError as exc:
        raise ManifestError(f"cannot read {manifest}: {exc.strerror}") from exc
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

    @property
    def prefix(self) -> Path:
        if self.record is not None:
            return Path(self.record.prefix)
        return self.env.default_prefix()


def find(name: str, out: Path | None = None) -> Found:
    """NAME as a user means it: OUT/NAME when --out is given, else the registry, else envs/NAME."""
    check_name(name)
    record = registry.get(name)
    if out is None and record is not None and (Path(record.env_dir) / MANIFEST).is_file():
        return Found(load(Path(record.env_dir)), record)
    base = out if out is not None else DEFAULT_OUT
    folder = base / name
    if not (folder / MANIFEST).is_file() and out is None and record is not None:
        raise UsageError(
            f"{name} is built at {record.prefix}, but the directory it was built from "
            f"({record.env_dir}) is gone; pass --out DIR where its envs/ is now, or forget it "
            f"with provision remove {name}"
        )
    if not (folder / MANIFEST).is_file():
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
    libs: list[str] = []
    if spec.path == "conda":
        libs.append("lib")
    if spec.nvidia_wheels:
        libs.append(f"{site}/nvidia/*/lib")
    xla = ""
    if spec.path == "conda" and spec.cuda.major >= 12:
        xla = "."  # cuda-nvcc: ptxas in bin/, libdevice in nvvm/libdevice/
    elif spec.path != "system" and spec.ptxas_source:
        xla = f"{site}/nvidia/cuda_nvcc"
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


def default_prefix(name: str, path: str) -> Path:
    """Always inside PROVISION_HOME, except the system path's venv, which its script places."""
    if path == "system":
        return SYSTEM_VENVS / name
    return registry.home() / "envs" / name


def interpreter(prefix: Path) -> Path:
    return Path(prefix) / "bin" / "python"


def site_packages(prefix: Path, python: str) -> Path:
    return Path(prefix) / "lib" / f"python{python}" / "site-packages"


_VENV_BLOCK_BEGIN = "# >>> provision hooks >>>"
_VENV_BLOCK_END = "# <<< provision hooks <<<"


def install_hooks(env: EnvDir, prefix: Path, extra: Mapping[str, str] | None = None) -> None:
    """Put the environment's set-up into a built prefix, from the package and runtime.env.

    - etc/provision/runtime.env: the reviewed variables (plus `extra`, e.g. the toolkit's home);
    - etc/provision/{activate,deactivate}.sh, and conda's activate.d/deactivate.d or the venv's
      bin/activate calling them: activation as before;
    - site-packages/provision_env_hook.{py,pth}: the interpreter finds its CUDA libraries and
      applies the GPU policy (with provision_gpu_policy.py, the payload's) on `import tensorflow`.
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
    if env.path == "conda":
        for sub, script in (
            ("activate.d", "conda-activate.sh"),
            ("deactivate.d", "conda-deactivate.sh"),
        ):
            target = prefix / "etc" / "conda" / sub
            target.mkdir(parents=True, exist_ok=True)
            _copy(HOOKS_DIR / script, target / "provision.sh")
    elif (prefix / "bin" / "activate").is_file():
        _hook_venv_activate(prefix / "bin" / "activate")


def _write(path: Path, text: str) -> None:
    """Atomically, and only when the content differs: a re-run changes nothing it need not."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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


# Variables a shell sets for itself; they are not part of what activation changes.
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})


def activation_env(prefix: Path, path: str) -> dict[str, str]:
    """The variables that activating the prefix sets, for running its programs without a shell.

    The installed hooks are the source of truth: they are sourced in bash exactly as activation
    would, and every variable they change is returned.
    """
    prefix = Path(prefix).absolute()
    base = {
        "PATH": os.pathsep.join([str(prefix / "bin"), os.environ.get("PATH", "")]),
        **(
            {"CONDA_PREFIX": str(prefix), "CONDA_DEFAULT_ENV": str(prefix)}
            if path == "conda"
            else {"VIRTUAL_ENV": str(prefix)}
        ),
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
