"""`provision install --from-bundle FILE|FIRST_PART`: the environment of a bundle, built with no
index and no channel, verified and registered.

In this order, and nothing is copied before each step before it passed:
1. every part is there, of this bundle, of its size (bundle_io.open_source);
2. the manifest (the tar's first member) is intact, and this host has what a bundle cannot carry:
   the machine, a glibc new enough, Python X.Y for a venv, a driver new enough when it has an
   NVIDIA GPU (or --require-gpu); every shortfall is said at once;
3. every member is unpacked into a staging folder under PROVISION_HOME, checked against the
   manifest on the way out (and every part against its header); a damaged, truncated or missing
   piece is refused naming it, and the staging folder goes;
4. the environment directory is put in place (PROVISION_HOME/bundled/NAME, or --out DIR) and built
   by install.install from the staged files alone (pip/uv: --no-index --find-links; conda: a copy
   of the lock whose URLs name the staged packages), with install's markers: a run killed at any
   point is completed by running it again;
5. the smoke test runs (unless --no-verify) and the result is recorded, as `provision list` shows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import signal
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from provision import environment, fileio, install, registry
from provision.bundlefile import bundle_sign
from provision.bundlefile.bundle_format import (
    CHUNK,
    MANIFEST,
    BundleError,
    BundleManifest,
    Member,
    member_name,
)
from provision.bundlefile.bundle_io import BundleSource, Reader, open_source
from provision.bundlefile.bundle_sign import SIG_LIMIT, SIGNATURE, Signature, Trust
from provision.environment import EnvDir
from provision.errors import InstallError, UsageError
from provision.fileio import sha256_bytes
from provision.install import installers
from provision.install.build import BuildOptions
from provision.matrix import kinds
from provision.progress import Event, Report, human_size, nothing
from provision.verify import VerifyResult

MACHINES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}
FAULT = "PROVISION_TEST_KILL_AT"  # tests: SIGKILL this process at a named point


@dataclass(frozen=True)
class FromBundle:
    name: str
    source: str
    env_dir: Path
    members: int
    member_bytes: int
    installed: install.InstallResult
    verified: VerifyResult | None
    seconds: dict[str, float] = field(default_factory=dict)
    signature: Signature = field(default_factory=lambda: Signature("unsigned"))

    @property
    def ok(self) -> bool:
        return self.verified is None or self.verified.ok

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "bundle": self.source,
            "env_dir": str(self.env_dir),
            "members": self.members,
            "member_bytes": self.member_bytes,
            "install": self.installed.as_json(),
            "verify": self.verified.as_json() if self.verified else None,
            "signature": self.signature.as_json(),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "ok": self.ok,
        }


def _fault(point: str) -> None:
    if os.environ.get(FAULT) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def install_from_bundle(
    path: Path,
    options: BuildOptions,
    *,
    name: str | None = None,
    out: Path | None = None,
    require_gpu: bool = False,
    verify: bool = True,
    timeout: float = 180.0,
    report: Report = nothing,
    trust: Trust | None = None,
) -> FromBundle:
    """Build the bundle's environment with no network: options as for install, except that
    options.force replaces a registered environment of the same name built from other inputs
    (the build itself is never forced: a complete prefix of the same inputs is kept). With
    `trust`, a bundle not signed by a trusted signer is refused before anything is copied."""
    solver, force = options.solver, options.force
    seconds: dict[str, float] = {}
    started = time.monotonic()
    source = open_source(path)
    reader = Reader(source)
    try:
        with tarfile.open(fileobj=reader, mode="r|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
            manifest, digest, signature, first = _manifest(tar, source, trust)
            if name is not None and name != manifest.name:
                raise UsageError(f"{source.shown} is a bundle of {manifest.name}, not of {name}")
            check_same_inputs(manifest, source.shown, force)  # a refusal: one line, said first
            report(Event("step", f"{source.shown}: {signature.line()}"))
            report(
                Event(
                    "step",
                    f"{source.shown}: {manifest.name} (TensorFlow {manifest.tf}, {manifest.path} "
                    f"path), {len(manifest.members)} members, {manifest.member_bytes / 1e6:.1f} MB",
                )
            )
            problems = preflight(manifest, require_gpu)
            if problems:
                raise BundleError(
                    f"this host cannot take {manifest.name} from {source.shown}: "
                    + "; ".join(problems) + "; nothing was copied"
                )  # fmt: skip
            with staging_dir(digest) as staging:
                unpack(tar, reader, source, manifest, staging, report, first, signature)
                seconds["unpack"] = time.monotonic() - started
                env = place_env(staging / "env" / manifest.name, out)
                _fault("unpacked")
                offline = _offline(env, manifest, staging, solver)
                report(Event("step", f"building {manifest.name} with no index and no channel"))
                t0 = time.monotonic()
                build = replace(
                    options, force=False,
                    script_args=_toolkit_args(manifest, staging, options.script_args),
                )  # fmt: skip
                result = install.install(env, build, offline=offline, report=report)
                _record_origin(manifest, digest, signature)
                seconds["install"] = time.monotonic() - t0
    except (tarfile.TarError, EOFError) as exc:
        raise BundleError(
            f"{reader.current} is damaged or truncated ({exc}); nothing was installed"
        ) from exc
    finally:
        reader.close()
    checked = None
    if verify:
        from provision import verify as verify_mod

        report(Event("step", f"verifying {manifest.name} (the smoke test)"))
        t0 = time.monotonic()
        checked = verify_mod.verify(
            env, prefix=result.prefix, require_gpu=require_gpu, timeout=timeout
        )
        seconds["verify"] = time.monotonic() - t0
    seconds["total"] = time.monotonic() - started
    return FromBundle(
        manifest.name, source.shown, env.root, len(manifest.members), manifest.member_bytes,
        result, checked, seconds, signature,
    )  # fmt: skip


def _manifest(
    tar: tarfile.TarFile, source: BundleSource, trust: Trust | None
) -> tuple[BundleManifest, str, Signature, tarfile.TarInfo | None]:
    """The manifest, checked against its signature (the next member, if signed) before it is
    believed; and the member after them, the first the manifest lists."""
    info = tar.next()
    if info is None or member_name(info) != MANIFEST:
        raise BundleError(
            f"{source.shown} is not a provision bundle (its first member is not {MANIFEST})"
        )
    if info.size > MANIFEST_LIMIT:
        raise BundleError(
            f"{source.shown}: its manifest is {info.size} bytes; provision reads at most "
            f"{MANIFEST_LIMIT}"
        )
    fh = tar.extractfile(info)
    data = fh.read(MANIFEST_LIMIT + 1) if fh is not None else b""
    after, sig = tar.next(), None
    if after is not None and member_name(after) == SIGNATURE:
        if after.size > SIG_LIMIT or not after.isreg():
            raise BundleError(f"{source.shown}: its {SIGNATURE} is not a signature")
        sig_fh = tar.extractfile(after)
        sig = sig_fh.read(SIG_LIMIT) if sig_fh is not None else b""
        after = tar.next()
    signature = bundle_sign.check(data, sig, trust, source.shown)
    return BundleManifest.loads(data, source.shown), sha256_bytes(data), signature, after


MANIFEST_LIMIT = 64 << 20  # a bundle of 100,000 members has a manifest of about 20 MB


def _record_origin(manifest: BundleManifest, digest: str, signature: Signature) -> None:
    """The registry record says which bundle built the environment (provision show, verify)."""
    record = registry.get(manifest.name)
    if record is not None:
        origin = manifest.origin(digest, signature.state, signature.principal, signature.key)
        if record.bundle != origin:
            registry.put(replace(record, bundle=origin))


def check_same_inputs(manifest: BundleManifest, source: str, force: bool) -> None:
    """An environment of the bundle's name that is already built here from another lock is
    replaced only with --force: it may be someone's own, of the same name, from other inputs."""
    old = registry.get(manifest.name)
    if old is None or force or old.lock_sha256 == manifest.lock_sha256:
        return
    raise UsageError(
        f"{manifest.name} is already built here ({old.prefix}) from another lock than the one "
        f"in {source}; nothing was changed: `provision install --from-bundle {source} --force` "
        f"replaces it, or `provision remove {manifest.name}` first"
    )


# -- what a bundle cannot carry ----------------------------------------------------------------


def host_driver() -> str:
    """The NVIDIA driver version NVML or nvidia-smi reports, "" when there is none."""
    from provision.host.gpu import probe_gpus
    from provision.host.root import Context

    facts = probe_gpus(Context(None, os.environ, None))
    return facts.driver.version if facts.driver is not None else ""


def preflight(manifest: BundleManifest, require_gpu: bool) -> list[str]:
    """Every reason this host cannot build the bundle's environment, in plain words."""
    from packaging.version import InvalidVersion, Version

    from provision import tools
    from provision.bundle.make import host_glibc

    req = manifest.requires
    problems = []
    machine = MACHINES.get(platform.machine().lower(), platform.machine())
    if machine != req.machine:
        problems.append(f"the bundle is for {req.machine} machines, this one is {machine}")
    glibc = host_glibc()
    if Version(glibc) < Version(req.glibc):
        problems.append(
            f"its packages need glibc >= {req.glibc} and this host has {glibc} (a bundle cannot "
            "carry glibc: build the bundle with --glibc of this host, or use a newer system)"
        )
    if req.python and not tools.has_python(req.python):
        problems.append(
            f"the {manifest.path} path builds a venv from Python {req.python}, which this host "
            f"lacks (a bundle cannot carry Python): install Python {req.python} (pyenv install "
            f"{req.python}, your distribution's python{req.python}, or a standalone build) and "
            "run this again"
        )
    driver = host_driver()
    if driver:
        try:
            old = Version(driver) < Version(req.driver)
        except InvalidVersion:
            old = False
        if old:
            problems.append(
                f"the NVIDIA driver is {driver}, and CUDA needs >= {req.driver} "
                f"(>= {req.driver_full} without minor-version compatibility): upgrade the driver "
                "(a bundle never carries one)"
            )
    elif require_gpu:
        problems.append("--require-gpu: this host has no NVIDIA driver that answers")
    return problems


# -- unpacking ---------------------------------------------------------------------------------


@contextlib.contextmanager
def staging_dir(digest: str) -> Iterator[Path]:
    """PROVISION_HOME/unpack/<bundle>: one run at a time per bundle; what a killed run left (of any
    bundle nobody is unpacking) goes first; removed at the end, whatever happened."""
    base = registry.home() / "unpack"
    locks = registry.home() / "locks"
    base.mkdir(parents=True, exist_ok=True)
    locks.mkdir(parents=True, exist_ok=True)
    for left in sorted(base.iterdir()):
        with (
            open(locks / f"unpack-{left.name}.lock", "a+") as other,
            contextlib.suppress(BlockingIOError),
        ):
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(left, ignore_errors=True)
    key = digest[:16]
    with open(locks / f"unpack-{key}.lock", "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InstallError("another provision install is unpacking this bundle") from None
        folder = base / key
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def unpack(
    tar: tarfile.TarFile, reader: Reader, source: BundleSource, manifest: BundleManifest,
    into: Path, report: Report, first: tarfile.TarInfo | None, signature: Signature,
) -> None:  # fmt: skip
    """Every member the manifest lists, in its order (the first already read: `first`), each
    checked against its sha256 and size; nothing the manifest does not list; then the rest of the
    bundle (its parts' checksums)."""
    pending = [first]
    signed = signature.state != "unsigned"
    group = ""
    half = len(manifest.members) // 2
    for number, member in enumerate(manifest.members):
        if member.group != group:
            group = member.group
            count = len(manifest.group(group))
            size = sum(m.size for m in manifest.group(group))
            report(Event("info", f"unpacking {group}: {count} file(s), {size / 1e6:.1f} MB"))
        info = pending.pop() if pending else tar.next()
        if info is None:
            raise BundleError(f"{source.shown} ends before {member.name}: it is truncated")
        if member_name(info) != member.name or not info.isreg():
            raise BundleError(
                f"{source.shown} holds {info.name} where its {_signed(signed)}manifest lists "
                f"{member.name}{_after(signed)}; nothing was installed"
            )
        _extract(tar, info, member, into / member.name, source, signed)
        report(Event("detail", f"{member.name}: {human_size(member.size)}, sha256 checked"))
        if number == half:
            _fault("unpacking")
    extra = pending.pop() if pending else tar.next()
    if extra is not None:
        raise BundleError(
            f"{source.shown} holds {extra.name}, which its {_signed(signed)}manifest does not "
            f"list{_after(signed)}; nothing was installed"
        )
    reader.drain()


def _signed(signed: bool) -> str:
    return "signed " if signed else ""


def _after(signed: bool) -> str:
    return " (added or changed after it was signed)" if signed else ""


def _extract(tar: tarfile.TarFile, info: tarfile.TarInfo, member: Member, dest: Path,
             source: BundleSource, signed: bool) -> None:  # fmt: skip
    dest.parent.mkdir(parents=True, exist_ok=True)
    fh = tar.extractfile(info)
    if fh is None:
        raise BundleError(f"{member.name} in {source.shown} is not a file")
    h = hashlib.sha256()
    size = 0
    try:
        with open(dest, "wb") as out:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except OSError as exc:
        if isinstance(exc, BundleError):
            raise
        raise InstallError(
            f"cannot unpack {member.name} into {dest.parent}: {exc.strerror or exc}; nothing was "
            f"installed (the bundle is unpacked under PROVISION_HOME, {registry.home()}: it needs "
            "free space for the whole bundle)"
        ) from exc
    if size != member.size or h.hexdigest() != member.sha256:
        how = "was changed after it was signed" if signed else "is corrupt"
        raise BundleError(
            f"{member.name} in {source.shown} {how} (sha256 {h.hexdigest()}, {size} bytes; "
            f"the {_signed(signed)}manifest says {member.sha256}, {member.size} bytes)"
            f"{source.holding(info.offset_data, member.size)}; nothing was installed"
        )


def place_env(staged: Path, out: Path | None) -> EnvDir:
    """The bundle's environment directory at OUT/NAME (default PROVISION_HOME/bundled/NAME),
    replaced as a whole (fileio.swap_dir: a run killed mid-swap leaves the old one or the new one,
    and the next run puts back the old one before it looks); a directory there with hand edits is
    never replaced."""
    name = staged.name
    base = (out if out is not None else registry.home() / "bundled").absolute()
    dest = base / name
    try:
        fileio.finish_swap(dest, "from-bundle")
    except OSError as exc:
        raise InstallError(f"cannot finish an interrupted install into {dest}: {exc}") from exc
    if dest.exists():
        if _same_tree(staged, dest):
            return environment.load(dest)
        try:
            edited = environment.load(dest).edited() if out is not None else []
        except environment.ManifestError:
            edited = ["provision.json"]
        if edited:
            raise InstallError(
                f"{dest} is another {name} with changes of its own ({', '.join(edited)}); "
                "nothing was installed; pass --out DIR to put the bundle's elsewhere"
            )
    try:
        base.mkdir(parents=True, exist_ok=True)
        with fileio.swap_dir(dest, "from-bundle") as tmp:
            shutil.copytree(staged, tmp, dirs_exist_ok=True)
    except OSError as exc:
        raise InstallError(f"cannot put {dest} in place: {exc.strerror or exc}") from exc
    return environment.load(dest)


def _same_tree(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file()}  # fmt: skip

    return files(a) == files(b)


def _offline(
    env: EnvDir, manifest: BundleManifest, staging: Path, solver: str
) -> installers.Offline:
    """Where the build finds each file. conda path: a copy of the lock whose pip URLs name the
    staged wheels; its conda packages are found in the staged package cache by provision-conda
    (so conda-meta keeps the channel's URLs), or named by file:// URLs for another solver."""
    wheels = staging / "wheels"
    if not env.kind.conda_env:
        return installers.Offline(wheels, uv_cache=staging / "uv-cache")
    from provision import tools
    from provision.lock import condafile

    builtin = Path(tools.solver(solver)).name == "provision-conda"
    lock = condafile.read(env.lock, BundleError)
    names = {m.name for m in manifest.members}
    staged: dict[tuple[str, str, str], str] = {}
    for pkg in lock.on(manifest.platform):
        rel = f"{'wheels' if pkg.pip else 'conda'}/{pkg.file_name}"
        if rel not in names:
            raise BundleError(f"the bundle lacks {rel}, which {env.lock.name} names")
        if pkg.pip or not builtin:
            staged[pkg.key] = (staging / rel).as_uri()
    path = staging / "conda-lock.offline.yml"
    path.write_text(lock.with_urls(staged), encoding="utf-8")
    return installers.Offline(wheels, path, staging / "conda" if builtin else None)


def _toolkit_args(
    manifest: BundleManifest, staging: Path, args: tuple[str, ...]
) -> tuple[str, ...]:
    """system path: the staged runfile and cuDNN archive, for install-system.sh."""
    if not kinds.of(manifest.path).host_toolkit:
        return args
    from provision.bundle.bundle_fetch import system_values

    values = system_values(staging / "env" / manifest.name / "system.env")
    extra: list[str] = []
    for flag, key in (("--runfile", "RUNFILE_NAME"), ("--cudnn-archive", "CUDNN_ARCHIVE_NAME")):
        staged = staging / "toolkit" / values.get(key, "")
        if values.get(key) and staged.is_file() and flag not in args:
            extra += [flag, str(staged)]
    return (*extra, *args)
