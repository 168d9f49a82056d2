"""`provision image NAME`: an OCI image of an environment, built with no network from its bundle.

In this order, and nothing is built before each step before it passed:
1. the output can be written (a new file, or a regular file with --force);
2. the bundle (--from-bundle FILE, or one made here from the cache, as `provision bundle` makes
   it) is read through: every part there, the manifest intact (and signed by a trusted key, with
   --trust), every member of the sha256 the manifest says; a tampered, truncated or missing part
   is refused here, before the base is opened;
3. the base's layers are unpacked into a folder beside the output, and the bundle's bootstrap.py
   runs in it as on an air-gapped host: chrooted, in namespaces of its own with no network
   (`unshare --net`), PROVISION_HOME=/opt/provision. The base's python3 makes provision's venv
   and the environment's, uv installs the locked wheels from the bundle;
4. what it made becomes three layers above the base's, each a pure function of its files
   (image/oci): provision's venv; the environment's prefix without the user's packages (TensorFlow
   and its CUDA wheels: a change to packages.in leaves this layer's digest as it was); the user's
   packages, the environment directory and the registry record;
5. the config (PATH to the environment's bin first: `python` is the environment's, with its
   start-up hook, so nothing needs activating; `provision verify NAME` as Docker's Healthcheck and
   a label), the manifest and the archive are written beside the output and renamed into place.

The work folder goes whatever happens. Two builds of one bundle on one base give one digest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from provision import _proc, registry
from provision.bundlefile.bundle_format import BOOTSTRAP, CHUNK, BundleManifest, member_name
from provision.bundlefile.bundle_io import Reader, open_source
from provision.bundlefile.bundle_sign import SIG_LIMIT, SIGNATURE, Trust
from provision.image import oci
from provision.image.oci import ImageError
from provision.progress import Event, Report, nothing

HOME = "/opt/provision"  # PROVISION_HOME inside the image
BOOT = "/run/provision-image"  # where the bundle's folder is seen during the build
BUILD_TIMEOUT = 3600.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageResult:
    name: str
    output: Path
    digest: str  # the manifest's: what podman shows as the image's digest
    size: int
    layers: tuple[oci.Layer, ...]
    bundle_size: int
    base_size: int
    seconds: dict[str, float]
    definition: Path | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "output": str(self.output),
            "digest": self.digest,
            "size": self.size,
            "bundle_size": self.bundle_size,
            "base_size": self.base_size,
            "layers": [
                {
                    "digest": x.blob.digest,
                    "diff_id": x.diff_id,
                    "size": x.blob.size,
                    "comment": x.comment,
                }
                for x in self.layers
            ],
            "apptainer_definition": str(self.definition) if self.definition else None,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
        }


def check_bundle(path: Path, trust: Trust | None, report: Report = nothing) -> BundleManifest:
    """The bundle at path read through, each member against the manifest, written nowhere."""
    import hashlib

    from provision.bundlefile import bundle_sign
    from provision.bundlefile.bundle_format import BundleError

    source = open_source(path)
    reader = Reader(source)
    try:
        with tarfile.open(fileobj=reader, mode="r|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
            info = tar.next()
            if info is None or member_name(info) != "manifest.json":
                raise BundleError(f"{source.shown} is not a provision bundle")
            data = _read(tar, info, 64 << 20)
            info, sig = tar.next(), None
            if info is not None and member_name(info) == SIGNATURE:
                sig = _read(tar, info, SIG_LIMIT)
                info = tar.next()
            signature = bundle_sign.check(data, sig, trust, source.shown)
            manifest = BundleManifest.loads(data, source.shown)
            report(Event("step", f"{source.shown}: {signature.line()}; checking every member"))
            for member in manifest.members:
                if info is None or member_name(info) != member.name or not info.isreg():
                    where = info.name if info is not None else "its end"
                    raise BundleError(
                        f"{source.shown} holds {where} where its manifest lists {member.name}; "
                        "nothing was built"
                    )
                fh = tar.extractfile(info)
                h, size = hashlib.sha256(), 0
                while fh is not None and (chunk := fh.read(CHUNK)):
                    h.update(chunk)
                    size += len(chunk)
                if (h.hexdigest(), size) != (member.sha256, member.size):
                    raise BundleError(
                        f"{member.name} in {source.shown} is corrupt (sha256 {h.hexdigest()}, "
                        f"{size} bytes; the manifest says {member.sha256}, {member.size} bytes); "
                        "nothing was built"
                    )
                info = tar.next()
            if info is not None:
                raise BundleError(
                    f"{source.shown} holds {info.name}, which its manifest does not list; "
                    "nothing was built"
                )
            reader.drain()
    except (tarfile.TarError, EOFError) as exc:
        raise BundleError(
            f"{reader.current} is damaged or truncated ({exc}); nothing was built"
        ) from exc
    finally:
        reader.close()
    return manifest


def _read(tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int) -> bytes:
    fh = tar.extractfile(info)
    return fh.read(limit) if fh is not None else b""


@contextlib.contextmanager
def work_dir(output: Path) -> Iterator[Path]:
    """A folder beside the output (same file system: the archive is renamed into place), removed
    at the end; what a killed build left beside it goes first."""
    parent = output.absolute().parent
    for left in parent.glob(f".{output.name}.image-*"):
        pid = left.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(left, ignore_errors=True)
    folder = parent / f".{output.name}.image-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def chroot_argv(rootfs: Path, bundle: Path, options: list[str]) -> list[str]:
    """unshare + chroot: a mount, PID and network namespace of the build's own (no route out),
    /dev and /proc for the base's Python, the bundle's folder read-only at BOOT."""
    script = (
        'set -e; mount --rbind /dev "$1/dev"; mkdir -p "$1$2"; mount --bind "$3" "$1$2"; '
        'mount -o remount,bind,ro "$1$2"; root=$1; shift 3; exec chroot "$root" "$@"'
    )
    unshare = _proc.which("unshare") or "unshare"
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    env = [
        f"PATH={PATH}", "HOME=/root", "LANG=C.UTF-8", f"PROVISION_HOME={HOME}",
        f"SOURCE_DATE_EPOCH={oci.MTIME}", "TMPDIR=/tmp",
    ]  # fmt: skip
    return [
        unshare, *user, "--mount", "--net", "--pid", "--fork", f"--mount-proc={rootfs}/proc",
        "sh", "-c", script, "sh", str(rootfs), BOOT, str(bundle.absolute().parent),
        "/usr/bin/env", "-i", *env, "python3", "/tmp/provision-bootstrap.py",
        f"{BOOT}/{bundle.name}", "--no-verify", *options,
    ]  # fmt: skip


def build_in_root(rootfs: Path, bundle: Path, bootstrap: bytes, report: Report) -> None:
    (rootfs / "tmp").mkdir(exist_ok=True)
    (rootfs / "proc").mkdir(exist_ok=True)
    (rootfs / "tmp" / "provision-bootstrap.py").write_bytes(bootstrap)
    if not (rootfs / "usr" / "bin" / "python3").exists():
        raise ImageError(
            "the base has no /usr/bin/python3; make it with python3 and python3-venv "
            "(debootstrap --include=python3,python3-venv,ca-certificates)"
        )

    def line(text: str, is_err: bool) -> None:
        report(Event("detail", text.rstrip()))

    done = _proc.stream(chroot_argv(rootfs, bundle, []), line, timeout=BUILD_TIMEOUT, group=True)
    if not done:
        raise ImageError(
            f"building inside the base failed (exit {done.returncode}): {done.last_line()}; "
            "nothing was written"
        )


def first_bootstrap(path: Path) -> bytes:
    source = open_source(path)
    reader = Reader(source)
    try:
        with tarfile.open(fileobj=reader, mode="r|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
            for info in tar:
                if member_name(info) == BOOTSTRAP:
                    return _read(tar, info, 1 << 20)
    finally:
        reader.close()
    raise ImageError(f"{path} has no {BOOTSTRAP}")


def settle_record(rootfs: Path, name: str) -> None:
    """The registry record's build time is the image's fixed time: two builds, one layer."""
    path = rootfs / HOME.lstrip("/") / "registry" / f"{name}.json"
    import json

    from provision.fileio import write_atomic

    try:
        record = registry.Record.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ImageError(f"the build left no usable registry record for {name} ({exc})") from exc
    fixed = replace(record, built_at=float(oci.MTIME))
    write_atomic(path, json.dumps(fixed.to_json(), indent=2, sort_keys=True) + "\n", mode=0o600)


def settle_prefix(rootfs: Path, record: registry.Record) -> None:
    """uv's uv_cache.json in each dist-info records the install's clock time: the image's fixed
    time instead, and its line of RECORD to match (what `uv pip` or a RECORD check reads)."""
    import base64
    import json

    from provision.environment import site_packages
    from provision.fileio import sha256_text, write_atomic

    site = site_packages(rootfs / record.prefix.lstrip("/"), record.python)
    for stamp in sorted(site.glob("*.dist-info/uv_cache.json")):
        data = json.loads(stamp.read_text(encoding="utf-8"))
        data["timestamp"] = {"secs_since_epoch": oci.MTIME, "nanos_since_epoch": 0}
        text = json.dumps(data, separators=(",", ":"))
        write_atomic(stamp, text)
        digest = base64.urlsafe_b64encode(bytes.fromhex(sha256_text(text))).rstrip(b"=")
        rel = f"{stamp.parent.name}/{stamp.name}"
        rows = (stamp.parent / "RECORD").read_text(encoding="utf-8").splitlines()
        rows = [
            f"{rel},sha256={digest.decode()},{len(text)}" if r.startswith(f"{rel},") else r
            for r in rows
        ]
        write_atomic(stamp.parent / "RECORD", "\n".join(rows) + "\n")
