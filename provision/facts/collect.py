"""The facts an environment runs on: the host's driver and GPUs, and what its prefix holds.

Read quickly and without TensorFlow: the driver and GPUs through the doctor's own probes (NVML in
a child interpreter, else nvidia-smi; PROVISION_HOST_ROOT reads a stand-in machine), the prefix
from its files (`provision.facts.prefix`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from provision import records
from provision.errors import ProvisionError
from provision.facts import prefix as files
from provision.fileio import sha256_file

SCHEMA = 1
HOOK_FILES = (
    "etc/provision/runtime.env",
    "etc/provision/activate.sh",
    "etc/provision/deactivate.sh",
    "etc/conda/activate.d/provision.sh",
    "etc/conda/deactivate.d/provision.sh",
    "bin/activate",
)


@dataclass(frozen=True)
class GpuFact:
    index: int
    name: str
    cc: str  # compute capability, "9.0"; "" when unknown
    memory_mib: int | None


@dataclass(frozen=True)
class HostFacts:
    driver: str  # "" when no driver answered
    cuda: str  # the highest CUDA the driver supports
    gpus: tuple[GpuFact, ...]
    error: str = ""  # what NVML / nvidia-smi said when they could not answer


@dataclass(frozen=True)
class PackageFact:
    kind: str  # pip | conda
    name: str
    version: str
    requires: tuple[str, ...]
    installer: str
    files: int  # how many files its installer recorded
    files_digest: str  # sizes and modification times of those files (prefix.stat_digest)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def pip(self) -> bool:
        """A Python distribution (dist-info), which pip or uv can put back; else a conda package."""
        return self.kind == "pip"


@dataclass(frozen=True)
class LibraryFact:
    path: str  # relative to the prefix
    soname: str
    size: int
    package: str  # "name version" of the package that installed it, "" when none says


@dataclass(frozen=True)
class EnvFacts:
    prefix: str
    python: str  # the interpreter's version, X.Y.Z
    interpreter: str  # the file it resolves to
    interpreter_sha256: str
    packages: tuple[PackageFact, ...]
    libraries: tuple[LibraryFact, ...]
    hooks: dict[str, str]  # path relative to the prefix -> sha256 of the installed hook
    policy: dict[str, str]  # the runtime variables installed (GPU memory, visible devices, ...)


@dataclass(frozen=True)
class Facts:
    name: str
    tf: str
    source: str  # install | verify: what recorded them
    at: float  # seconds since the epoch
    host: HostFacts
    env: EnvFacts
    gpus_used: int = 0  # GPUs the passing smoke test used (verify only)
    schema: int = SCHEMA

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Facts:
        return records.read(cls, data, "facts", ValueError)


def host_facts(env: dict[str, str] | None = None) -> HostFacts:
    """The driver and GPUs, by the doctor's probes (PROVISION_HOST_ROOT: a stand-in machine)."""
    from provision.host.gpu import probe_gpus
    from provision.host.root import Context

    environ = dict(os.environ if env is None else env)
    ctx = Context(environ.get("PROVISION_HOST_ROOT") or None, environ, None)
    found = probe_gpus(ctx)
    driver = found.driver
    gpus = tuple(GpuFact(g.index, g.name, g.compute_capability, g.memory_mib) for g in found.gpus)
    if driver is None:
        return HostFacts("", "", gpus)
    return HostFacts(driver.version, driver.cuda, gpus, driver.error)


def env_facts(prefix: Path, interpreter: Path, python_xy: str) -> EnvFacts:
    """What the prefix holds now, from its files."""
    prefix = Path(prefix)
    installed = files.packages(prefix)
    policy = _policy(prefix)
    libs = files.libraries(prefix, policy.get("PROVISION_CUDA_HOME", ""))
    wanted = {os.path.normpath(prefix / lib.path) for lib in libs}
    owner = {
        path: f"{p.name} {p.version}" for p in installed for path, _ in p.files if path in wanted
    }
    hooks = {}
    hook_files = list(HOOK_FILES)
    for site in files.site_dirs(prefix):
        rel = os.path.relpath(site, prefix)
        hook_files += [f"{rel}/provision_env_hook.py", f"{rel}/provision_env_hook.pth"]
    for rel in hook_files:
        path = prefix / rel
        if path.is_file():
            hooks[rel] = sha256_file(path)
    real = os.path.realpath(interpreter)
    try:
        interpreter_sha = sha256_file(real)
    except OSError:
        interpreter_sha = ""
    return EnvFacts(
        prefix=str(prefix),
        python=files.interpreter_version(prefix, interpreter) or python_xy,
        interpreter=real,
        interpreter_sha256=interpreter_sha,
        packages=tuple(
            PackageFact(
                p.kind,
                p.name,
                p.version,
                p.requires,
                p.installer,
                len(p.files),
                files.stat_digest(p.files),
            )
            for p in sorted(installed, key=lambda p: (p.kind, p.name))
        ),
        libraries=tuple(
            LibraryFact(
                lib.path, lib.soname, lib.size, owner.get(os.path.normpath(prefix / lib.path), "")
            )
            for lib in libs
        ),
        hooks=hooks,
        policy=policy,
    )


def _policy(prefix: Path) -> dict[str, str]:
    from provision.environment import INSTALLED_RUNTIME, parse_runtime

    try:
        return parse_runtime((prefix / INSTALLED_RUNTIME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def collect(
    name: str, tf: str, prefix: Path, interpreter: Path, python_xy: str, *, source: str,
    host: HostFacts | None = None, gpus_used: int = 0,
) -> Facts:  # fmt: skip
    import time

    if not Path(prefix).is_dir():
        raise ProvisionError(f"{name}: its prefix {prefix} is gone")
    return Facts(
        name=name, tf=tf, source=source, at=time.time(),
        host=host if host is not None else host_facts(),
        env=env_facts(Path(prefix), Path(interpreter), python_xy), gpus_used=gpus_used,
    )  # fmt: skip


def package_files(prefix: Path, key: str) -> tuple[tuple[str, str], ...]:
    """The recorded files of one installed package (`kind:name`), as its installer wrote them."""
    for p in files.packages(Path(prefix)):
        if f"{p.kind}:{p.name}" == key:
            return p.files
    return ()
