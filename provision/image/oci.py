"""The OCI image layout, written by hand so that the same files give the same bytes.

A layer is a tar of files under one root, in sorted order, every header the same whatever built
it: one mtime, uid/gid 0, no user or group names, the file's own permission bits; folders, files,
symlinks and a base's device nodes (a hard link is stored as a file, a socket is refused).
It is gzipped with no name and no time in the gzip header. Its diff_id is the sha256 of the tar,
its digest the sha256 of the gzip: both depend on the files alone.

An image is the base's layers (taken as they are, never unpacked again to be written) and new
ones, a config (no creation time, a history without dates), a manifest and index.json; an OCI
archive is that layout as a tar (`oci-layout`, `index.json`, then `blobs/sha256/*`, sorted), what
`podman load`, `skopeo copy oci-archive:FILE ...` and Apptainer's `Bootstrap: oci-archive` read.

A base is an OCI archive, an OCI layout directory, or a root filesystem directory (a debootstrapped
Debian), which becomes one layer by the same rules.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from provision.errors import ProvisionError
from provision.fileio import sha256_bytes, sha256_file

MTIME = 1_577_836_800  # 2020-01-01 00:00 UTC, as bundles' members
CHUNK = 1 << 20
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_PLAIN = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


class ImageError(ProvisionError):
    """An image that cannot be built or read; the message names the file or the step."""


@dataclass(frozen=True)
class Blob:
    digest: str  # sha256:...
    size: int
    path: Path
    media_type: str

    def descriptor(self) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layer:
    blob: Blob
    diff_id: str  # sha256 of the uncompressed tar
    comment: str = ""  # the history entry's words


@dataclass(frozen=True)
class Base:
    layers: tuple[Layer, ...]
    config: dict[str, Any] = field(default_factory=dict)  # the base's own config, as read
    shown: str = ""


# -- writing a layer ---------------------------------------------------------------------------


class _Hashing:
    """A write-only file that hashes what passes through it on its way to `inner` (or nowhere)."""

    def __init__(self, inner: IO[bytes] | None = None) -> None:
        self.inner = inner
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        if self.inner is not None:
            self.inner.write(data)
        return len(data)

    def flush(self) -> None:
        if self.inner is not None:
            self.inner.flush()


def entries(root: Path, top: str, skip: Iterable[str] = ()) -> list[tuple[str, Path]]:
    """(name in the layer, path here) of `root` and everything under it, named `top/...`, sorted;
    names in `skip` (relative to root, folders with all they hold) are left out."""
    skipped = set(skip)
    out: list[tuple[str, Path]] = [(top, root)]
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if _join(rel, d) not in skipped]
        for name in [*dirs, *files]:
            if _join(rel, name) in skipped:
                continue
            path = Path(folder, name)
            if path.is_dir() and not path.is_symlink() and name not in dirs:
                continue  # a symlink to a folder is listed in dirs by os.walk, not followed
            out.append((f"{top}/{_join(rel, name)}", path))
    return sorted(out)


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def with_parents(items: Sequence[tuple[str, Path]], rootfs: Path) -> list[tuple[str, Path]]:
    """items and the folders above each (from rootfs), so that a layer unpacks on its own."""
    names = {name for name, _ in items}
    out = list(items)
    for name, _ in items:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            if parent not in names:
                names.add(parent)
                out.append((parent, rootfs / parent))
    return sorted(out)


def tar_info(name: str, path: Path, owners: bool = False) -> tarfile.TarInfo:
    """One header; `owners`: the file's numeric uid and gid (a base's), else 0."""
    st = os.lstat(path)
    info = tarfile.TarInfo(name)
    info.mtime = MTIME
    info.uid, info.gid = (st.st_uid, st.st_gid) if owners else (0, 0)
    info.uname = info.gname = ""
    info.mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISREG(st.st_mode):
        info.type = tarfile.REGTYPE
        info.size = st.st_size
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):  # a base's /dev
        info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    else:
        raise ImageError(f"{path} is neither a file, a folder nor a symlink; an image holds none")
    return info


def _write_tar(items: Sequence[tuple[str, Path]], out: _Hashing, owners: bool) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for name, path in items:
            info = tar_info(name, path, owners)
            if info.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)


def layer_diff_id(items: Sequence[tuple[str, Path]], owners: bool = False) -> str:
    """The sha256 of the layer's tar, written nowhere."""
    sink = _Hashing()
    _write_tar(items, sink, owners)
    return "sha256:" + sink.hash.hexdigest()


def write_layer(
    items: Sequence[tuple[str, Path]], blobs: Path, comment: str, level: int = 6,
    cache: Path | None = None, owners: bool = False, reuse: bool = True,
) -> Layer:  # fmt: skip
    """The layer of `items` as a gzipped blob in `blobs` (a folder of sha256 names). With a cache
    folder, a layer already compressed once (the same diff_id and level) is taken from it (unless
    not `reuse`), and one compressed here is kept there."""
    diff_id = layer_diff_id(items, owners)
    key = f"{diff_id.removeprefix('sha256:')}-{level}.tar.gz"
    cached = cache / key if cache is not None else None
    if reuse and cached is not None and cached.is_file():  # read in place by write_archive
        digest = "sha256:" + sha256_file(cached)
        return Layer(Blob(digest, cached.stat().st_size, cached, LAYER), diff_id, comment)
    tmp = blobs / f".layer-{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        outer = _Hashing(fh)
        with gzip.GzipFile(filename="", mode="wb", fileobj=outer, compresslevel=level, mtime=0
                           ) as gz:  # fmt: skip
            inner = _Hashing(gz)  # type: ignore[arg-type]
            _write_tar(items, inner, owners)
    if "sha256:" + inner.hash.hexdigest() != diff_id:
        tmp.unlink()
        raise ImageError(f"files under {items[0][1]} changed while the image was written")
    digest = "sha256:" + outer.hash.hexdigest()
    dest = blobs / digest.removeprefix("sha256:")
    tmp.replace(dest)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        _copy(dest, cached)
    return Layer(Blob(digest, outer.size, dest, LAYER), diff_id, comment)


def _copy(src: Path, dest: Path) -> None:
    """src at dest, whole or not at all: a hard link where it can be (one file system)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    tmp.replace(dest)


def json_blob(data: object, blobs: Path, media_type: str) -> Blob:
    text = (json.dumps(data, sort_keys=True, separators=(",", ":"))).encode()
    digest = sha256_bytes(text)
    dest = blobs / digest
    dest.write_bytes(text)
    return Blob("sha256:" + digest, len(text), dest, media_type)


# -- the archive -------------------------------------------------------------------------------


def write_archive(dest: Path, manifest: Blob, blobs: Sequence[Blob], ref: str) -> None:
    """An OCI archive at dest (a new file): the layout of one image whose manifest is `manifest`."""
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{**manifest.descriptor(), "annotations": {REF_NAME: ref}}],
    }
    index_bytes = (json.dumps(index, sort_keys=True, separators=(",", ":"))).encode()
    layout = b'{"imageLayoutVersion":"1.0.0"}'
    unique = {b.digest: b for b in [*blobs, manifest]}
    with open(dest, "xb") as fh, tarfile.open(fileobj=fh, mode="w|", format=tarfile.PAX_FORMAT
                                             ) as tar:  # fmt: skip
        for name in ("blobs", "blobs/sha256"):
            tar.addfile(_fixed(name, tarfile.DIRTYPE, 0))
        for digest in sorted(unique):
            blob = unique[digest]
            with open(blob.path, "rb") as data:
                tar.addfile(_fixed(f"blobs/sha256/{digest[7:]}", tarfile.REGTYPE, blob.size), data)
        for name, data_bytes in (("index.json", index_bytes), ("oci-layout", layout)):
            import io

            tar.addfile(_fixed(name, tarfile.REGTYPE, len(data_bytes)), io.BytesIO(data_bytes))


def _fixed(name: str, kind: bytes, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mtime = MTIME
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# -- reading a base ----------------------------------------------------------------------------


def check_base(path: Path) -> None:
    """ImageError unless path looks like a base read_base takes (before anything is made)."""
    if path.is_dir():
        if not (path / "oci-layout").is_file() and not (path / "usr").is_dir():
            raise ImageError(
                f"--base {path} is a folder but neither an OCI layout (no oci-layout file) nor a "
                "root filesystem (no usr/): give an OCI archive, a layout, or a debootstrapped "
                "folder"
            )
        return
    try:
        with tarfile.open(path, "r:") as tar:  # an OCI archive is a plain tar
            names = set(tar.getnames())
    except (tarfile.TarError, OSError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ImageError(f"--base {path} is not an OCI archive ({why})") from exc
    if not {"oci-layout", "index.json"} <= names:
        raise ImageError(
            f"--base {path} is a tar but not an OCI archive (no oci-layout and index.json): "
            "skopeo copy containers-storage:IMAGE oci-archive:FILE makes one"
        )


def read_base(path: Path, work: Path, level: int, cache: Path | None, reuse: bool = True) -> Base:
    """The base at path: an OCI archive (unpacked into work/base), an OCI layout directory, or a
    root filesystem directory (made one layer into work/blobs)."""
    if path.is_dir() and not (path / "oci-layout").is_file():
        if not (path / "usr").is_dir() and not (path / "bin").exists():
            raise ImageError(
                f"--base {path} is a folder but neither an OCI layout (no oci-layout file) nor a "
                "root filesystem (no usr/): give an OCI archive, a layout, or a debootstrapped "
                "folder"
            )
        items = [(name, p) for name, p in entries(path, ".") if name != "."]
        items = [(name.removeprefix("./"), p) for name, p in items]
        layer = write_layer(
            items, work / "blobs", f"root filesystem {path.name}", level, cache, True, reuse
        )
        return Base((layer,), {"architecture": "amd64", "os": "linux"}, str(path))
    layout = path
    if path.is_file():
        layout = work / "base"
        layout.mkdir()
        try:
            with tarfile.open(path) as tar:
                tar.extractall(layout, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise ImageError(f"--base {path} is not an OCI archive ({exc})") from exc
    elif not path.exists():
        raise ImageError(f"--base {path}: no such file or folder")
    return _read_layout(layout, str(path))


def _read_layout(layout: Path, shown: str) -> Base:
    def load(digest: str) -> Any:
        return json.loads(_blob_path(layout, digest, shown).read_bytes())

    try:
        index = json.loads((layout / "index.json").read_bytes())
        manifests = index["manifests"]
        if len(manifests) != 1:
            raise ImageError(
                f"--base {shown} holds {len(manifests)} images; give an archive of one (skopeo "
                "copy containers-storage:IMAGE oci-archive:FILE)"
            )
        manifest = load(manifests[0]["digest"])
        if manifest.get("mediaType", MANIFEST) != MANIFEST:
            raise ImageError(f"--base {shown}: {manifest.get('mediaType')} is not an image")
        config = load(manifest["config"]["digest"])
        diff_ids = config["rootfs"]["diff_ids"]
        layers = tuple(
            Layer(
                Blob(
                    d["digest"],
                    int(d["size"]),
                    _blob_path(layout, d["digest"], shown),
                    d["mediaType"],
                ),
                diff_id,
                "base",
            )
            for d, diff_id in zip(manifest["layers"], diff_ids, strict=True)
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ImageError(f"--base {shown} is not a readable OCI image ({exc})") from exc
    return Base(layers, config, shown)


def _blob_path(layout: Path, digest: str, shown: str) -> Path:
    algo, _, hexdigest = digest.partition(":")
    path = layout / "blobs" / algo / hexdigest
    if algo != "sha256" or not path.is_file() or "/" in hexdigest:
        raise ImageError(f"--base {shown} lacks the blob {digest}")
    return path


def unpack(layers: Sequence[Layer], rootfs: Path) -> None:
    """The layers applied in order onto rootfs, whiteouts included (what a runtime would see)."""
    for layer in layers:
        if not layer.blob.media_type.startswith((LAYER_PLAIN, "application/vnd.docker.image")):
            raise ImageError(f"the base's layer {layer.blob.digest} is {layer.blob.media_type}")
        gz = layer.blob.media_type.endswith("+gzip")
        with tarfile.open(layer.blob.path, "r:gz" if gz else "r:") as tar:
            for info in _whiteouts(tar, rootfs):
                tar.extract(info, rootfs, filter="tar", numeric_owner=True)


def _whiteouts(tar: tarfile.TarFile, rootfs: Path) -> Iterator[tarfile.TarInfo]:
    for info in tar:
        head, _, base = info.name.rpartition("/")
        if base == ".wh..wh..opq":
            folder = rootfs / head
            if folder.is_dir():
                for child in folder.iterdir():
                    _remove(child)
        elif base.startswith(".wh."):
            _remove(rootfs / head / base.removeprefix(".wh."))
        else:
            yield info


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
