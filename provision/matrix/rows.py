"""The matrix's rows: loads provision/data/matrix.toml into frozen rows and validates it.

This module owns the data's shape and invariants. It imports nothing heavy: `provision matrix`
must stay as fast as `import click, jinja2`.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

from packaging.version import InvalidVersion, Version

from provision import records
from provision.errors import MatrixError, UnknownRelease, UsageError
from provision.payload import targets as gpu_targets

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DATA_FILE = Path(__file__).parent.parent / "data" / "matrix.toml"
SCHEMA = 1


def _not_a_version(value: str) -> str | None:
    """Why `value` is no version ("" is fine: the field is empty on purpose)."""
    if value:
        try:
            Version(value)
        except InvalidVersion:
            return "is not a version"
    return None


VERSION = records.checked(_not_a_version)  # field metadata: the string is a version, or ""


@dataclass(frozen=True)
class Source:
    id: str
    url: str
    retrieved: str
    what: str
    note: str = ""


@dataclass(frozen=True)
class Cuda:
    """One CUDA toolkit release as TensorFlow builds against it."""

    version: str = field(metadata=VERSION)  # major.minor, the key releases refer to
    full: str = field(metadata=VERSION)
    # the toolkit's own minimum Linux driver (release notes, table 3)
    driver_min: str = field(metadata=VERSION)
    # minor-version-compatibility floor for this major
    driver_compat_min: str = field(metadata=VERSION)
    runfile: str
    runfile_url: str
    runfile_sha256: str
    runfile_md5: str
    conda: dict[str, str]  # {"cudatoolkit": "11.8.0"} or {"cuda_version": "12.5"}
    sources: tuple[str, ...]
    note: str = ""

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def pip_suffix(self) -> str:
        return f"cu{self.major}"


@dataclass(frozen=True)
class Cudnn:
    version: str = field(metadata=VERSION)  # major.minor, the key releases refer to
    full: str = field(metadata=VERSION)
    cuda_major: int
    archive: str
    url: str
    sha256: str
    # conda-forge `cudnn` version to use, "" when it has no compatible build
    conda_forge: str = field(metadata=VERSION)
    pip: str  # exact pip requirement for the NVIDIA wheel, "" when none exists on PyPI
    sources: tuple[str, ...]
    note: str = ""

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


@dataclass(frozen=True)
class Release:
    tf: str = field(metadata=VERSION)  # major.minor
    latest: str = field(metadata=VERSION)
    pin: str = field(metadata=VERSION)  # the exact version that resolves: `tensorflow==<pin>`
    python: tuple[str, ...]
    cuda: str
    cudnn: str
    and_cuda: tuple[str, ...]  # requirement strings of the wheel's `and-cuda` extra, as published
    pip_wheels: dict[str, str]  # NVIDIA wheels the pip path pins exactly: name -> version
    compute_min: str = field(metadata=VERSION)
    compute_targets: tuple[str, ...]
    glibc_min: str = field(metadata=VERSION)
    windows_native_gpu: bool
    sources: tuple[str, ...]
    pin_note: str = ""
    note: str = ""
    disagreements: tuple[str, ...] = ()
    # A pre-release row (pin 2.22.0rc0): never a default, left out of --all; used with --pre.
    prerelease: bool = False
    # Requirements of the wheel that only a pre-release satisfies (keras-nightly>=3.12.0.dev):
    # the pip path asks for them explicitly, so the lock allows pre-releases for them alone.
    prerelease_deps: tuple[str, ...] = ()
    # The sonames TensorFlow's loader builds from the wheel's cuda_config.h ("" rows: not read).
    dlopens: tuple[str, ...] = ()
    # What the wheels cannot say and no person has cited yet (the tested-build table, ...).
    not_yet_cited: tuple[str, ...] = ()

    @property
    def key(self) -> Version:
        return Version(self.tf)


@dataclass(frozen=True)
class CondaForgeCudnn:
    version: str = field(metadata=VERSION)
    cuda_major: int
    sources: tuple[str, ...]


@dataclass(frozen=True)
class CondaForge:
    """What conda-forge really ships, so rendered specs never ask for what does not exist."""

    cudatoolkit: tuple[str, ...]
    cuda_version: tuple[str, ...]
    cuda12_packages: tuple[str, ...]
    cudnn: tuple[CondaForgeCudnn, ...]
    sources: tuple[str, ...]
    note: str = ""

    def cudnn_for(self, version: str, cuda_major: int) -> CondaForgeCudnn | None:
        for row in self.cudnn:
            if row.version == version and row.cuda_major == cuda_major:
                return row
        return None


@dataclass(frozen=True)
class Matrix:
    releases: tuple[Release, ...]
    cuda: dict[str, Cuda]
    cudnn: dict[str, Cudnn]
    conda_forge: CondaForge
    sources: dict[str, Source] = field(repr=False)

    def release(self, tf: str) -> Release:
        """The row of a release a user typed: X.Y or X.Y.Z in ASCII digits, as TensorFlow writes
        its versions; 'v2.13', '02.013', '2.13a' or '2.13.0.1' name no release."""
        if not re.fullmatch(
            r"(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,2}))?", tf
        ):
            raise UsageError(
                f"TensorFlow {tf[:40]!r}{'...' if len(tf) > 40 else ''} is not a release number; "
                "give X.Y or X.Y.Z in digits, e.g. 2.13"
            )
        wanted = _minor_of(tf)
        for row in self.releases:
            if row.tf == wanted:
                return row
        known = [r.tf for r in self.releases]
        close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.5) or known[-3:]
        raise UnknownRelease(
            f"TensorFlow {tf} is not in the matrix; closest known: {', '.join(close)} "
            f"(all: {known[0]}..{known[-1]})"
        )

    def cuda_of(self, release: Release) -> Cuda:
        return self.cuda[release.cuda]

    def cudnn_of(self, release: Release) -> Cudnn:
        return self.cudnn[release.cudnn]

    @property
    def finals(self) -> tuple[Release, ...]:
        """The releases that are defaults and `--all`: pre-release rows left out."""
        return tuple(r for r in self.releases if not r.prerelease)

    @property
    def newest(self) -> Release:
        return self.finals[-1]


def _minor_of(tf: str) -> str:
    """'2.13' and '2.13.1' both mean the 2.13 row."""
    text = tf.strip()
    try:
        v = Version(text)
    except InvalidVersion:
        return text
    return f"{v.major}.{v.minor}"


@cache
def load(path: Path = DATA_FILE) -> Matrix:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"cannot read the matrix {path}: {exc}") from exc
    return parse(raw)


@dataclass(frozen=True)
class _File:
    """The data file's tables as written, before the checks across rows; `named` says what error
    messages call each row."""

    schema: int
    source: tuple[Source, ...] = field(metadata=records.named("source[{i}]"))
    cuda: tuple[Cuda, ...] = field(metadata=records.named("cuda {version}"))
    cudnn: tuple[Cudnn, ...] = field(metadata=records.named("cudnn {version}"))
    conda_forge: CondaForge = field(metadata=records.named("conda_forge"))
    release: tuple[Release, ...] = field(metadata=records.named("release {tf}"))


_Row = TypeVar("_Row", Cuda, Cudnn)


def parse(raw: Mapping[str, object]) -> Matrix:
    schema = raw.get("schema")
    if isinstance(schema, int) and schema != SCHEMA:  # before the tables: they may differ
        raise MatrixError(f"matrix: schema {schema!r} is not {SCHEMA}")
    data = records.read(_File, raw, "matrix", MatrixError)
    sources: dict[str, Source] = {}
    for src in data.source:
        if src.id in sources:
            raise MatrixError(f"source {src.id!r}: duplicate id")
        sources[src.id] = src

    def cite(where: str, ids: tuple[str, ...]) -> None:
        if not ids:
            raise MatrixError(f"{where}: cites no source")
        for sid in ids:
            if sid not in sources:
                raise MatrixError(f"{where}: cites unknown source {sid!r}")

    def by_version(kind: str, rows: tuple[_Row, ...]) -> dict[str, _Row]:
        found: dict[str, _Row] = {}
        for row in rows:
            where = f"{kind} {row.version}"
            cite(where, row.sources)
            if row.version in found:
                raise MatrixError(f"{where}: duplicate row")
            found[row.version] = row
        return found

    cudas = by_version("cuda", data.cuda)
    cudnns = by_version("cudnn", data.cudnn)

    forge = data.conda_forge
    for i, row_f in enumerate(forge.cudnn):
        cite(f"conda_forge.cudnn[{i}]", row_f.sources)
    cite("conda_forge", forge.sources)

    for rel in data.release:
        cite(f"release {rel.tf}", rel.sources)

    releases = list(data.release)
    _validate(releases, cudas, cudnns, forge)
    return Matrix(tuple(releases), cudas, cudnns, forge, sources)


def _validate(
    releases: list[Release], cudas: dict[str, Cuda], cudnns: dict[str, Cudnn], forge: CondaForge
) -> None:
    seen: set[str] = set()
    previous: Version | None = None
    for rel in releases:
        where = f"release {rel.tf}"
        if rel.tf in seen:
            raise MatrixError(f"{where}: duplicate row")
        seen.add(rel.tf)
        if previous is not None and rel.key <= previous:
            raise MatrixError(f"{where}: releases must be in ascending order")
        if (
            previous is not None
            and rel.key.major == previous.major
            and rel.key.minor != previous.minor + 1
        ):
            # A gap is a release nobody checked; users would be told it is not in the matrix.
            raise MatrixError(f"{where}: gap after {previous}: every minor release needs a row")
        previous = rel.key
        _validate_release(rel, cudas, cudnns)
    for cu in cudas.values():
        _validate_cuda(cu, forge)
    for dn in cudnns.values():
        _validate_cudnn(dn, forge)


_SHA256 = re.compile(r"[0-9a-f]{64}")
_MD5 = re.compile(r"[0-9a-f]{32}")


def _validate_release(rel: Release, cudas: dict[str, Cuda], cudnns: dict[str, Cudnn]) -> None:
    where = f"release {rel.tf}"
    if _minor_of(rel.latest) != rel.tf or _minor_of(rel.pin) != rel.tf:
        raise MatrixError(f"{where}: latest/pin {rel.latest}/{rel.pin} are not {rel.tf}.x")
    if rel.prerelease != Version(rel.pin).is_prerelease:
        raise MatrixError(
            f"{where}: field 'prerelease' is {str(rel.prerelease).lower()} but pin {rel.pin} "
            f"{'is' if Version(rel.pin).is_prerelease else 'is not'} a pre-release"
        )
    if Version(rel.pin) > Version(rel.latest):
        raise MatrixError(f"{where}: field 'pin' {rel.pin} is newer than latest {rel.latest}")
    pys = [Version(p) for p in rel.python]
    if not pys or pys != sorted(pys) or len(set(pys)) != len(pys):
        raise MatrixError(f"{where}: python must be a non-empty ascending list, got {rel.python}")
    if rel.cuda not in cudas:
        raise MatrixError(f"{where}: cuda {rel.cuda} has no [[cuda]] row")
    if rel.cudnn not in cudnns:
        raise MatrixError(f"{where}: cudnn {rel.cudnn} has no [[cudnn]] row")
    cuda = cudas[rel.cuda]
    if cudnns[rel.cudnn].cuda_major != cuda.major:
        raise MatrixError(f"{where}: cudnn {rel.cudnn} is not built for CUDA {rel.cuda}")
    archs = [gpu_targets.parse(t) for t in rel.compute_targets]
    if not archs or not all(archs):
        raise MatrixError(
            f"{where}: field 'compute_targets' must be sm_XY/compute_XY names (sm_80, sm_90a, "
            f"sm_100, compute_90), got {list(rel.compute_targets)}"
        )
    lowest = min(a.capability for a in archs if a)
    if Version(rel.compute_min) != Version(f"{lowest[0]}.{lowest[1]}"):
        raise MatrixError(
            f"{where}: field 'compute_min' {rel.compute_min} is not the lowest of compute_targets "
            f"({lowest[0]}.{lowest[1]})"
        )
    for name, ver in rel.pip_wheels.items():
        try:
            Version(ver)
        except InvalidVersion as exc:
            raise MatrixError(f"{where}: pip_wheels {name}: {ver!r} is not a version") from exc
        if not name.endswith(f"-{cuda.pip_suffix}"):
            raise MatrixError(f"{where}: pip_wheels {name} is not a CUDA {cuda.major} wheel")
        if name.startswith("nvidia-cudnn-") and _minor_of(ver) != rel.cudnn:
            raise MatrixError(f"{where}: pip_wheels {name}=={ver} is not cuDNN {rel.cudnn}")
    _validate_and_cuda(rel, where)


def _validate_and_cuda(rel: Release, where: str) -> None:
    """Every NVIDIA wheel the extra names is pinned in pip_wheels, inside the extra's range."""
    from packaging.requirements import InvalidRequirement, Requirement

    for text in rel.and_cuda:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise MatrixError(f"{where}: and_cuda {text!r} is not a requirement: {exc}") from exc
        if req.marker is None or not req.marker.evaluate({"extra": "and-cuda"}):
            raise MatrixError(f"{where}: and_cuda {text!r} is not part of the and-cuda extra")
        if not req.name.startswith("nvidia-"):
            continue  # TensorRT and friends: the pip path leaves them out (see the row's note)
        pinned = rel.pip_wheels.get(req.name)
        if pinned is None:
            raise MatrixError(f"{where}: pip_wheels does not pin {req.name} (and_cuda requires it)")
        if not req.specifier.contains(pinned, prereleases=True):
            raise MatrixError(
                f"{where}: pip_wheels {req.name}=={pinned} is outside and_cuda {req.specifier}"
            )


def _validate_cuda(cu: Cuda, forge: CondaForge) -> None:
    where = f"cuda {cu.version}"
    if _minor_of(cu.full) != cu.version:
        raise MatrixError(f"{where}: full {cu.full} is not {cu.version}.x")
    if Version(cu.driver_compat_min) > Version(cu.driver_min):
        raise MatrixError(
            f"{where}: field 'driver_compat_min' {cu.driver_compat_min} is above driver_min "
            f"{cu.driver_min}"
        )
    if not cu.runfile_url.endswith("/" + cu.runfile):
        raise MatrixError(f"{where}: field 'runfile_url' does not end in {cu.runfile!r}")
    _check_digest(where, "runfile_sha256", cu.runfile_sha256, _SHA256)
    _check_digest(where, "runfile_md5", cu.runfile_md5, _MD5)
    if not (cu.runfile_sha256 or cu.runfile_md5 or cu.note):
        # The system install script refuses such rows; the note must say why none was found.
        raise MatrixError(f"{where}: no runfile_sha256 or runfile_md5, and no note saying why")
    if cu.major == 11:
        tk = cu.conda.get("cudatoolkit", "")
        if tk not in forge.cudatoolkit:
            raise MatrixError(f"{where}: conda-forge has no cudatoolkit {tk!r}")
    else:
        cv = cu.conda.get("cuda_version", "")
        if "cudatoolkit" in cu.conda:
            raise MatrixError(f"{where}: conda-forge has no cudatoolkit for CUDA {cu.major}")
        if cv not in forge.cuda_version:
            raise MatrixError(f"{where}: conda-forge has no cuda-version {cv!r}")


def _validate_cudnn(dn: Cudnn, forge: CondaForge) -> None:
    where = f"cudnn {dn.version}"
    if _minor_of(dn.full) != dn.version:
        raise MatrixError(f"{where}: full {dn.full} is not {dn.version}.x")
    if not (dn.url or dn.archive) and not dn.note:
        raise MatrixError(f"{where}: no archive and url, and no note saying why")
    if (dn.url or dn.archive) and not dn.url.endswith("/" + dn.archive):
        raise MatrixError(f"{where}: field 'url' does not end in {dn.archive!r}")
    _check_digest(where, "sha256", dn.sha256, _SHA256)
    if not (dn.sha256 or dn.note):
        raise MatrixError(f"{where}: no sha256, and no note saying why")
    wheel = f"nvidia-cudnn-cu{dn.cuda_major}=={dn.full}"
    if dn.pip and dn.pip != wheel:
        raise MatrixError(f"{where}: field 'pip' must be {wheel!r} or empty, got {dn.pip!r}")
    if dn.conda_forge and forge.cudnn_for(dn.conda_forge, dn.cuda_major) is None:
        raise MatrixError(
            f"{where}: conda-forge has no cudnn {dn.conda_forge} for CUDA {dn.cuda_major}"
        )


def _check_digest(where: str, field_name: str, value: str, shape: re.Pattern[str]) -> None:
    if value and not shape.fullmatch(value):
        raise MatrixError(f"{where}: field {field_name!r}: {value!r} is not a hex digest")
