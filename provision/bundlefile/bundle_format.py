"""What a bundle is on disk: one deterministic tar, a manifest first, optionally split into parts.

The tar is uncompressed (wheels and conda packages are compressed already) and holds, under
`provision-bundle/`, in this order and sorted within each group:

    manifest.json        what the bundle builds, what the target needs, every member's size and
                         sha256 (in tar order) and a digest of the manifest itself
    manifest.json.sig    with `provision bundle --sign KEY`: the manifest's SSH signature
                         (bundle_sign); not a member the manifest lists
    bootstrap.py         stdlib only: installs provision from the bundle on a host that has none
    sbom.cdx.json        the CycloneDX bill of materials of the lock for the target (provision.sbom)
    provision/*.whl      provision and its dependencies, for the target's Python and platform
    env/NAME/...         the environment directory: provision.json, its reviewed files, the lock
    wheels/*.whl         the lock's wheels (and the pip part of a conda lock)
    conda/*              the conda packages of conda-lock.yml for the target platform
    toolkit/*            with --with-toolkit: NVIDIA's CUDA runfile and cuDNN archive

Members are regular files, mode 0644, one fixed mtime, uid/gid 0 and no user or group names, so
the same lock and the same files give the same bytes.

A split bundle is NAME.001, NAME.002, ...: each a 512-byte header, then a slice of the tar. The
header is `provision-bundle-part 1` and one JSON line (the sha256 and size of the whole tar, this
part's number, the number of parts, its offset, size and sha256), padded with NULs. So every part
carries its own checksum and names its bundle, and `tail -c +513 PART` of each part, in order,
gives back the tar.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from provision import diskread, records, registry
from provision.errors import ProvisionError, UsageError
from provision.fileio import sha256_text
from provision.matrix import Source

FORMAT = 2  # 2: the manifest says where it came from (matrix_row, citations); may be signed
READS = (1, 2)
ROOT = "provision-bundle"
MANIFEST = "manifest.json"
BOOTSTRAP = "bootstrap.py"
GROUPS = ("manifest", "bootstrap", "sbom", "provision", "env", "wheels", "conda", "toolkit")
SBOM = "sbom.cdx.json"
MTIME = 1_577_836_800  # 2020-01-01 00:00 UTC, every member
PART_MAGIC = b"provision-bundle-part 1\n"
PART_HEADER = 512
CHUNK = 1 << 20
_MEMBER_RE = re.compile(
    r"^(bootstrap\.py|sbom\.cdx\.json|(provision|wheels|conda|toolkit)/[^/]+|env/[A-Za-z0-9][A-Za-z0-9._-]*"
    r"(/[A-Za-z0-9_.-]+)+)$"
)


class BundleError(ProvisionError):
    """A bundle that cannot be built, read or trusted; the message names the file or member."""


def _version_xy(value: str) -> str | None:
    ok = re.fullmatch(r"(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})", value)
    return None if ok else "is not a version X.Y"


def _version(value: str) -> str | None:
    ok = re.fullmatch(r"[0-9]{1,4}(\.[0-9]{1,6}){1,3}", value)
    return None if ok else "is not a version"


def _size(value: int) -> str | None:
    return None if 0 <= value < 2**50 else "is not a size in bytes"


def _hex_digest(value: str) -> str | None:
    return None if re.fullmatch(r"[0-9a-f]{64}", value) else "is not a sha256"


def _python(value: str | None) -> str | None:
    return None if value is None else _version_xy(value)


@dataclass(frozen=True)
class Member:
    name: str  # relative to provision-bundle/
    group: str
    size: int = field(metadata=records.checked(_size))
    sha256: str = field(metadata=records.checked(_hex_digest))


@dataclass(frozen=True)
class Requires:
    """What the target must have, since a bundle cannot carry it."""

    machine: str  # x86_64 | aarch64
    # the newest glibc any member needs
    glibc: str = field(metadata=records.checked(_version_xy))
    # Python X.Y for the venv (pip and system paths), None on the conda path
    python: str | None = field(metadata=records.checked(_python))
    # the oldest NVIDIA driver the CUDA line runs with (minor-version compatibility)
    driver: str = field(metadata=records.checked(_version))
    driver_full: str = field(metadata=records.checked(_version))  # the toolkit's own minimum


@dataclass(frozen=True)
class BundleManifest:
    name: str
    path: str  # conda | pip | system
    tf: str
    python: str = field(metadata=records.checked(_version_xy))  # the environment's Python X.Y
    platform: str  # conda subdir: linux-64
    lock: str  # file name of the lock in env/NAME/
    lock_sha256: str = field(metadata=records.checked(_hex_digest))
    provision_version: str
    # the Python X.Y provision's wheels are for
    provision_python: str = field(metadata=records.checked(_version_xy))
    requires: Requires
    members: tuple[Member, ...]
    # Provenance: the matrix row the environment was rendered from, and the sources it cites
    # (with provision_version, lock_sha256, platform and requires above: what made the bundle)
    matrix_row: str = ""
    citations: tuple[Source, ...] = ()

    def body(self) -> dict[str, object]:
        data = asdict(self)
        data["members"] = [asdict(m) for m in self.members]
        return {"format": FORMAT, **data}

    def dumps(self) -> bytes:
        body = self.body()
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        digest = sha256_text(text)
        out = {**body, "digest": digest}
        return (json.dumps(out, sort_keys=True, indent=1) + "\n").encode()

    @classmethod
    def loads(cls, data: bytes, source: str) -> BundleManifest:
        try:
            raw = diskread.loads_json(data, source)
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            if raw.get("format") not in READS:
                raise ValueError(
                    f"format {raw.get('format')!r} (this provision reads "
                    f"{', '.join(map(str, READS))}; the bundle's own bootstrap.py installs the "
                    "provision that made it)"
                )
            digest = raw.pop("digest", None)
            text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
            if digest != sha256_text(text):
                raise ValueError("its digest does not match its contents")
            raw.pop("format")
            manifest = records.read(cls, raw, "manifest", ValueError)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise BundleError(f"{source}: the bundle's manifest is damaged ({exc})") from exc
        for m in manifest.members:
            if not _MEMBER_RE.match(m.name) or ".." in m.name.split("/") or m.group not in GROUPS:
                raise BundleError(f"{source}: the manifest names an unusable member {m.name!r}")
        return manifest

    def origin(self, manifest_sha256: str, signature: str, signer: str = "", key: str = ""
               ) -> registry.BundleOrigin:  # fmt: skip
        """What an environment built from this bundle records of it (provision show)."""
        return registry.BundleOrigin(
            manifest_sha256, self.provision_version, self.lock_sha256, self.matrix_row,
            tuple(f"{c.id} {c.url} (retrieved {c.retrieved})" for c in self.citations),
            self.platform, self.requires.machine, self.requires.glibc, signature, signer, key,
        )  # fmt: skip

    @property
    def member_bytes(self) -> int:
        return sum(m.size for m in self.members)

    def group(self, name: str) -> list[Member]:
        return [m for m in self.members if m.group == name]


def tar_info(name: str, size: int) -> tarfile.TarInfo:
    """The header of one member: nothing in it depends on who built the bundle, where or when."""
    info = tarfile.TarInfo(f"{ROOT}/{name}")
    info.size = size
    info.mtime = MTIME
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def member_name(info: tarfile.TarInfo) -> str | None:
    prefix = ROOT + "/"
    return info.name[len(prefix) :] if info.name.startswith(prefix) else None


# -- sizes -----------------------------------------------------------------------------------

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_UNITS.update({"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12})


def parse_size(text: str) -> int:
    """'4G' (GiB), '650M', '63000000', '63MB' (powers of 1000) -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]B?|)\s*", text.upper())
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"--split takes a size such as 4G, 650M or 63000000, not {text!r}")
    size = int(m.group(1)) * _UNITS[m.group(2)]
    if size <= PART_HEADER + 1024:
        raise UsageError(f"--split {text}: parts must be larger than {PART_HEADER + 1024} bytes")
    return size


def payload_per_part(split: int) -> int:
    """Each part file is smaller than SIZE (so 4G fits FAT32, whose limit is 4 GiB - 1 byte)."""
    return split - 1 - PART_HEADER


# -- part headers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PartHeader:
    bundle: str  # sha256 of the whole tar
    total: int  # size of the whole tar
    part: int  # 1-based
    parts: int
    offset: int
    size: int
    sha256: str

    def encode(self) -> bytes:
        line = json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()
        raw = PART_MAGIC + line + b"\n"
        if len(raw) > PART_HEADER:
            raise AssertionError("part header too long")
        return raw + b"\0" * (PART_HEADER - len(raw))

    @classmethod
    def decode(cls, raw: bytes, source: str) -> PartHeader:
        if not raw.startswith(PART_MAGIC):
            raise BundleError(f"{source} is not a part of a provision bundle")
        try:
            line = raw[len(PART_MAGIC) :].split(b"\n", 1)[0]
            data = json.loads(line.decode())
            header = cls(**data)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise BundleError(f"{source}: its part header is damaged ({exc})") from exc
        return header


def is_part(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(PART_MAGIC)) == PART_MAGIC
    except OSError:
        return False


def part_path(base: Path, number: int) -> Path:
    return base.with_name(f"{base.name}.{number:03d}")


def base_of(part: Path) -> Path:
    """NAME of NAME.001."""
    m = re.fullmatch(r"(.+)\.(\d{3,})", part.name)
    if not m:
        raise BundleError(f"{part}: a part's name ends in .001, .002, ... (NAME.001 is the first)")
    return part.with_name(m.group(1))


# -- what a target needs ---------------------------------------------------------------------

_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def wheel_glibc(filename: str) -> tuple[int, int] | None:
    """The glibc a wheel's platform tag needs: manylinux_2_28 -> (2, 28); None for pure wheels."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return None
    needs = []
    for tag in tags:
        m = re.match(r"manylinux_(\d+)_(\d+)_", tag.platform)
        if m:
            needs.append((int(m.group(1)), int(m.group(2))))
        for legacy, version in _LEGACY.items():
            if tag.platform.startswith(legacy + "_"):
                needs.append(version)
    return min(needs) if needs else None  # a wheel with several tags runs where any of them does


def newest(versions: Iterable[tuple[int, int]]) -> str:
    return ".".join(map(str, max(versions, default=(2, 17))))


def manylinux_platforms(glibc: str, machine: str) -> list[str]:
    """pip's --platform values for a target with this glibc, most specific first."""
    major, minor = (int(x) for x in glibc.split(".")[:2])
    out = []
    for m in range(minor, 4, -1):
        out.append(f"manylinux_{major}_{m}_{machine}")
        for legacy, version in _LEGACY.items():
            if version == (major, m):
                out.append(f"{legacy}_{machine}")
    return out


def canonical_json(data: Mapping[str, object]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
