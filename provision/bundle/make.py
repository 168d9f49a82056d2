"""`provision bundle NAME`: one archive holding everything needed to build NAME with no network.

What goes in (bundle_fetch gathers it through a cache): the environment directory as reviewed
(its manifest, rendered files and lock, checked as install checks them), every wheel or conda
package of the lock for the target (each checked against the lock's hash), provision's own wheels
and its dependencies' for the target's Python, a stdlib bootstrap, and with --with-toolkit the
system path's runfile and cuDNN archive. The format (manifest first, fixed headers, parts) is
bundle_format's; the bytes are written beside the final name and renamed into place at the end,
so a failed or interrupted build leaves no bundle behind.
"""

from __future__ import annotations

import os
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

from provision.bundle import bundle_fetch as fetch
from provision.bundle import bundle_self
from provision.bundlefile import bundle_sign
from provision.bundlefile.bundle_format import (
    BOOTSTRAP,
    CHUNK,
    GROUPS,
    MANIFEST,
    SBOM,
    BundleError,
    BundleManifest,
    Member,
    Requires,
    newest,
    part_path,
    tar_info,
    wheel_glibc,
)
from provision.bundlefile.bundle_io import Sink
from provision.environment import EnvDir
from provision.errors import StaleError, UsageError
from provision.fileio import sha256_file
from provision.lock import condafile
from provision.lock.condafile import LockedPackage
from provision.progress import Event, Report, nothing


@dataclass(frozen=True)
class BundleResult:
    name: str
    files: tuple[Path, ...]  # the bundle, or its parts in order
    sha256: str  # of the tar
    size: int  # bytes on disk, part headers included
    members: int
    member_bytes: int  # the sum of the members' sizes
    seconds: float

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "files": [str(f) for f in self.files],
            "sha256": self.sha256,
            "size": self.size,
            "members": self.members,
            "member_bytes": self.member_bytes,
            "overhead": round(self.size / self.member_bytes - 1, 6) if self.member_bytes else 0,
            "seconds": round(self.seconds, 2),
        }


def host_glibc() -> str:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        text = ""
    parts = text.split()
    return parts[1] if len(parts) == 2 and parts[0] == "glibc" else "2.17"


def target_of(
    env: EnvDir, glibc: str | None, provision_python: str | None, platform: str | None
) -> fetch.BundleMachine:
    from packaging.version import Version

    from provision.lock.requirements import ARCH

    subdir = platform or env.spec.platforms[0]
    if subdir not in ARCH:
        raise UsageError(f"--platform takes one of {', '.join(ARCH)}, not {subdir!r}")
    if provision_python is None:
        import sys

        usable = Version(env.python) >= Version("3.10")
        provision_python = env.python if usable else "{}.{}".format(*sys.version_info[:2])
    elif Version(provision_python) < Version("3.10"):
        raise UsageError(f"--provision-python {provision_python}: provision needs Python >= 3.10")
    return fetch.BundleMachine(
        env.python, provision_python, ARCH[subdir], glibc or host_glibc(), subdir
    )


def env_items(env: EnvDir) -> list[fetch.Item]:
    """The environment directory as a reviewer approved it (EnvDir.own_files): provision.json,
    every rendered file it lists, the lock and the user's packages.in."""
    out = []
    for rel in env.own_files():
        path = env.root / rel
        out.append(fetch.Item(f"env/{env.name}/{rel}", "env", path, sha256_file(path)))
    return out


def bootstrap_item() -> fetch.Item:
    path = Path(str(resources.files("provision") / "scripts" / "bootstrap_bundle.py"))
    return fetch.Item(BOOTSTRAP, "bootstrap", path, sha256_file(path))


def sbom_item(env: EnvDir, subdir: str, cache: fetch.BundleCache) -> fetch.Item:
    """The bill of materials of the lock for the target (provision.sbom), kept in the cache under
    its own sha256: the same lock gives the same file."""
    from provision import sbom
    from provision.fileio import sha256_text, write_atomic

    text = sbom.document(env, subdir)
    digest = sha256_text(text)
    path = cache.folder("sbom") / f"{digest}.cdx.json"
    if not path.is_file():
        write_atomic(path, text)
    return fetch.Item(SBOM, "sbom", path, digest)


def requires_of(
    env: EnvDir,
    target: fetch.BundleMachine,
    items: Sequence[fetch.Item],
    conda: Sequence[LockedPackage] = (),
) -> Requires:
    """What the target host needs: the newest glibc the wheels' tags, the conda packages'
    __glibc (`conda`: the lock's packages for the target, read once by build) and the release ask
    for; the Python (venv paths) and the driver."""
    floors = [w for i in items if (w := wheel_glibc(i.path.name)) is not None]
    floors += [floor for p in conda if (floor := p.glibc_floor) is not None]
    release = tuple(int(x) for x in env.spec.release.glibc_min.split(".")[:2])
    floors.append((release[0], release[1]))
    return Requires(
        machine=target.machine,
        glibc=newest(floors),
        python=None if env.kind.conda_env else env.python,
        driver=env.spec.cuda.driver_compat_min,
        driver_full=env.spec.cuda.driver_min,
    )


def check_output(output: Path, split: bool, force: bool) -> None:
    """-o (and its first part, when split) can be written: see paths.output_file."""
    from provision import registry
    from provision.paths import output_file

    registry.refuse_inside_an_environment(output, "-o")
    output_file(output, "-o", force)
    if split:
        output_file(part_path(output, 1), "-o", force)


def build(
    env: EnvDir,
    output: Path,
    *,
    split: int | None = None,
    with_toolkit: bool = False,
    cache_dir: Path | None = None,
    provision_python: str | None = None,
    glibc: str | None = None,
    platform: str | None = None,
    wheelhouse: Path | None = None,
    report: Report = nothing,
    force: bool = False,
    sign: Path | None = None,
) -> BundleResult:
    """Write the bundle of `env` to `output` (or its parts output.001, ...); an existing file
    there is replaced only with `force`, and never one that is not a regular file. `sign`: an SSH
    key that signs the manifest (bundle_sign)."""
    started = time.monotonic()
    check_output(output, split is not None, force)
    if sign is not None:
        bundle_sign.check_key(sign)  # before any download
    if with_toolkit and not env.kind.host_toolkit:
        raise UsageError(f"--with-toolkit is for the system path; {env.name} is on the {env.path}")
    env.check_reviewed()
    _check_lock(env)
    if wheelhouse is not None:
        bundle_self.check_wheelhouse(wheelhouse)  # before any download
    target = target_of(env, glibc, provision_python, platform)
    cache = fetch.BundleCache(Path(cache_dir) if cache_dir else fetch.default_cache())
    items = env_items(env)
    conda: list[LockedPackage] = []
    if env.kind.conda_env:
        conda = condafile.read(env.lock, BundleError).on(target.subdir)
        items += fetch.conda_packages(conda, env.lock, target.subdir, cache, report)
    else:
        report(
            Event("step", f"collecting the wheels of {env.lock.name} for Python {target.python}")
        )
        items += fetch.lock_wheels(env.lock, target, cache, report)
    if with_toolkit:
        items += fetch.toolkit(env.root / "system.env", cache, report)
    report(Event("step", f"collecting provision's wheels for Python {target.provision_python}"))
    items += bundle_self.provision_wheels(target, cache, wheelhouse, report)
    items.append(bootstrap_item())
    items.append(sbom_item(env, target.subdir, cache))
    items.sort(key=lambda i: (GROUPS.index(i.group), i.name))
    manifest = BundleManifest(
        name=env.name,
        path=env.path,
        tf=env.spec.release.pin,
        python=env.python,
        platform=target.subdir,
        lock=env.lock.name,
        lock_sha256=sha256_file(env.lock),
        provision_version=_provision_version(items),
        provision_python=target.provision_python,
        requires=requires_of(env, target, items, conda),
        members=tuple(Member(i.name, i.group, i.path.stat().st_size, i.sha256) for i in items),
        **provenance(env),
    )
    report(
        Event(
            "step",
            f"writing {len(items)} members ({manifest.member_bytes / 1e6:.1f} MB) to {output}",
        )
    )
    signature = None
    if sign is not None:
        report(Event("step", f"signing the manifest with {sign}"))
        signature = bundle_sign.sign(manifest.dumps(), sign)
    files, digest = write(output, manifest, items, split, force, signature)
    return BundleResult(
        env.name, tuple(files), digest, sum(f.stat().st_size for f in files), len(items),
        manifest.member_bytes, time.monotonic() - started,
    )  # fmt: skip


def provenance(env: EnvDir) -> dict[str, Any]:
    """The matrix row the environment was rendered from and every source it cites (the release's,
    then its CUDA's and cuDNN's, each once): no clock, no host, so the same inputs give the same
    bytes."""
    from provision import matrix

    s = env.spec
    known = matrix.load().sources
    ids = dict.fromkeys((*s.release.sources, *s.cuda.sources, *s.cudnn.sources))
    return {
        "matrix_row": f"TensorFlow {s.release.pin}, CUDA {s.cuda.full}, cuDNN {s.cudnn.full}",
        "citations": tuple(known[i] for i in ids if i in known),
    }


def _check_lock(env: EnvDir) -> None:
    from provision import lock

    try:
        lock.check_lock(env)
    except StaleError as exc:
        raise BundleError(f"refusing to bundle {env.name}: {exc}") from exc


def _provision_version(items: Sequence[fetch.Item]) -> str:
    for item in items:
        if item.group == "provision" and item.path.name.startswith("provision-"):
            return item.path.name.split("-")[1]
    raise BundleError("the bundle would hold no provision wheel")


class _Checked:
    """A member's source as the tar reads it, hashed on the way in."""

    def __init__(self, fh: BinaryIO) -> None:
        import hashlib

        self.fh = fh
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.hash.update(data)
        return data


def write(
    output: Path,
    manifest: BundleManifest,
    items: Sequence[fetch.Item],
    split: int | None,
    force: bool = False,
    signature: bytes | None = None,
) -> tuple[list[Path], str]:
    """The tar: the manifest, its signature if any, then every item as the manifest lists it,
    each checked against the manifest's sha256 as it is added. Nothing is left at `output` unless
    all of it was written."""
    import io

    output.parent.mkdir(parents=True, exist_ok=True)
    sink = Sink(output, split, force)
    try:
        with tarfile.open(
            fileobj=sink,
            mode="w|",
            format=tarfile.PAX_FORMAT,
            bufsize=CHUNK,  # type: ignore[call-overload]
        ) as tar:
            data = manifest.dumps()
            tar.addfile(tar_info(MANIFEST, len(data)), io.BytesIO(data))
            if signature is not None:
                info = tar_info(bundle_sign.SIGNATURE, len(signature))
                tar.addfile(info, io.BytesIO(signature))
            for item, member in zip(items, manifest.members, strict=True):
                with open(item.path, "rb") as fh:
                    checked = _Checked(fh)
                    try:
                        tar.addfile(tar_info(member.name, member.size), checked)
                    except OSError as exc:
                        raise BundleError(
                            f"{item.path} changed while it was bundled ({exc})"
                        ) from exc
                    if checked.hash.hexdigest() != member.sha256 or fh.read(1):
                        raise BundleError(
                            f"{item.path} is not the file the lock names (sha256 "
                            f"{checked.hash.hexdigest()}, expected {member.sha256}); remove it "
                            "from the cache and bundle again"
                        )
        return sink.commit()
    except BaseException:
        sink.abort()
        raise
