"""The environments provision built on this machine, under PROVISION_HOME.

One small JSON record per environment (`PROVISION_HOME/registry/<name>.json`): where its directory
and prefix are, what it was built from, and the last verify. Records are written atomically and read
leniently: a record that cannot be read is reported, never fatal to listing the others.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from provision.errors import ProvisionError, UsageError
from provision.fileio import write_atomic
from provision.records import read as read_record  # `records` here is the listing below

RECORD_SCHEMA = 1
RECORD_LIMIT = 1 << 20  # a record is about 1 KiB


class RegistryError(ProvisionError):
    """PROVISION_HOME cannot be used (a file, read-only, unreadable)."""


def home() -> Path:
    """The directory provision owns for built environments (PROVISION_HOME relocates it)."""
    explicit = os.environ.get("PROVISION_HOME")
    if explicit:
        try:
            path = Path(explicit).expanduser().absolute()
        except RuntimeError:  # ~user of a user this machine does not have
            raise RegistryError(
                f"PROVISION_HOME {explicit[:80]}: {explicit.split('/', 1)[0]} names no user of "
                "this machine; set it to a folder"
            ) from None
        _check_home(path)
        return path
    import platformdirs

    return Path(platformdirs.user_data_dir("provision", appauthor=False))


def _check_home(path: Path) -> None:
    """PROVISION_HOME must be a folder, or a path where one can be made: not a file, not under a
    file, not longer than the file system allows. (Whether it is writable is checked by those
    who write: listing a read-only home is fine.)"""
    from provision.fileio import path_problem

    why = path_problem(str(path))
    if why:
        shown = str(path) if len(str(path)) <= 80 else str(path)[:80] + "..."
        shown = repr(shown) if any(c in shown for c in "\n\r") else shown
        raise RegistryError(f"PROVISION_HOME {shown} {why}; set it to a folder")
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise RegistryError(
                    f"PROVISION_HOME {path}: {parent} is a file, not a folder; set "
                    "PROVISION_HOME to a folder"
                )
            break
    inside = _inside_an_environment(path)
    if inside:
        raise RegistryError(
            f"PROVISION_HOME {path} is inside {inside}; set it to a folder of its own"
        )


def refuse_inside_an_environment(path: Path, flag: str) -> None:
    """Where provision writes what a user asked for (export's folder, a bundle): never `-` (it
    writes files, not standard output) and never inside an environment directory or a built
    prefix, which render, lock and install own and would replace or delete (UsageError)."""
    if str(path) == "-":
        raise UsageError(
            f"{flag} -: provision writes files here, not to standard output; give a path"
        )
    inside = _inside_an_environment(Path(os.path.realpath(path)))
    if inside:
        raise UsageError(
            f"{flag} {path} is inside {inside}, which provision replaces or deletes as a whole; "
            "write it somewhere else"
        )


def _inside_an_environment(path: Path) -> str | None:
    """An environment directory (its provision.json) or a prefix provision built (its install
    marker) above or at `path`: a home there would be deleted or rendered over with it."""
    for parent in (path, *path.parents):
        if (parent / "provision.json").is_file():
            return f"the environment directory {parent}"
        if (parent / ".provision-install.json").is_file():
            return f"the environment prefix {parent}"
    return None


def usable_home() -> Path:
    """PROVISION_HOME, checked before a build that will register into it (RegistryError)."""
    return _usable_home()


def writable() -> Path:
    """PROVISION_HOME, checked by really writing (a read-only mount stops root too, and os.access
    does not see it): before a build or a removal that ends by changing the registry, so that a
    registry that cannot change stops it before anything else did (RegistryError)."""
    base = _usable_home()
    folder = _folder()
    probe = next((p for p in (folder, base, *base.parents) if p.exists()), None)
    if probe is None:
        return base
    try:
        fd, tmp = tempfile.mkstemp(prefix=".provision-probe.", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise RegistryError(
            f"PROVISION_HOME {base}: cannot write into {probe} ({exc.strerror}); nothing was "
            "changed"
        ) from exc
    return base


def _folder() -> Path:
    return home() / "registry"


@dataclass(frozen=True)
class LastVerify:
    ok: bool
    gpus: int  # GPUs the smoke test saw; 0 means the environment ran on the CPU only
    summary: str  # one line: "PASS" or the failed checks, and why no GPU was used
    at: float  # seconds since the epoch
    # --require-gpu failed on a host with no GPU, and nothing else did: it works on the CPU
    cpu_ok: bool = False

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.at))


@dataclass(frozen=True)
class BundleOrigin:
    """Where an environment built from a bundle came from, as its manifest said (and its
    signature, as install --from-bundle found it): what a fleet report names per host."""

    manifest_sha256: str  # the bundle's identity: the sha256 of its manifest's bytes
    provision_version: str  # the provision that made the bundle
    lock_sha256: str
    matrix_row: str  # "TensorFlow 2.13.1, CUDA 11.8.0, cuDNN 8.6.0.163"
    citations: tuple[str, ...]  # the row's sources: "ID URL (retrieved DATE)"
    platform: str  # the target: conda subdir, machine, the newest glibc its packages need
    machine: str
    glibc: str
    signature: str  # unsigned | unverified | verified
    signer: str = ""  # the trusted principal, when verified
    key: str = ""  # "ED25519 key SHA256:...", when signed


@dataclass(frozen=True)
class Record:
    name: str
    env_dir: str  # absolute path of envs/<name>/ it was built from
    path: str  # conda | pip | system
    tf: str  # the TensorFlow pin
    python: str  # X.Y
    prefix: str  # absolute
    interpreter: str  # absolute
    installer: str  # uv | pip | conda-lock | install.sh
    lock_sha256: str
    built_at: float
    owned: bool = True  # provision created the prefix (remove may delete it)
    last_verify: LastVerify | None = None
    bundle: BundleOrigin | None = None  # built by install --from-bundle
    schema: int = field(default=RECORD_SCHEMA)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Record:
        """The record `to_json` wrote (parsed JSON); ValueError naming the field otherwise."""
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            raise ValueError("not a provision registry record")
        record = read_record(cls, data, "record", ValueError)
        # Its interpreter is what kernel, verify and check run: only the prefix's own.
        prefix, exe = os.path.normpath(record.prefix), os.path.normpath(record.interpreter)
        if record.interpreter and (exe == prefix or os.path.commonpath([prefix, exe]) != prefix):
            raise ValueError(f"its interpreter {record.interpreter} is outside its prefix {prefix}")
        return record


def _path(name: str) -> Path:
    return _folder() / f"{name}.json"


def get(name: str) -> Record | None:
    from provision import diskread

    try:
        data = diskread.read_json(_path(name), RECORD_LIMIT)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise RegistryError(f"cannot read {_path(name)}: {exc.strerror}") from exc
    except diskread.Unreadable as exc:
        raise RegistryError(f"{exc}; remove it") from exc
    try:
        return Record.from_json(data)
    except (ValueError, TypeError) as exc:
        raise RegistryError(
            f"{_path(name)} is not a provision registry record ({exc}); remove it"
        ) from exc


def records() -> Iterator[tuple[str, Record | str]]:
    """(name, record) for every registered environment, or (name, why it cannot be read)."""
    folder = _folder()
    for place in (folder.parent, folder):
        if place.is_dir() and not os.access(place, os.R_OK | os.X_OK):
            raise RegistryError(
                f"PROVISION_HOME {folder.parent}: {place} cannot be read (its permissions); "
                "fix them, or set PROVISION_HOME to a folder you can read"
            )
    try:
        files = sorted(folder.glob("*.json"))
    except OSError as exc:
        raise RegistryError(f"cannot read {folder}: {exc.strerror}") from exc
    for f in files:
        try:
            rec = get(f.stem)
        except RegistryError as exc:
            yield f.stem, str(exc)
            continue
        if rec is not None:
            yield f.stem, rec


def _usable_home() -> Path:
    base = home()
    for parent in (base, *base.parents):
        if parent.exists():
            if not parent.is_dir():
                raise RegistryError(f"PROVISION_HOME {base}: {parent} is a file, not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise RegistryError(f"PROVISION_HOME {base}: {parent} is not writable")
            break
    return base


def put(record: Record) -> None:
    """Write a record atomically (a reader sees the old one or the new one, never half)."""
    _usable_home()
    folder = _folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n"
        write_atomic(_path(record.name), text, mode=0o600)  # private, as mkstemp made it
    except OSError as exc:
        raise RegistryError(f"cannot write the registry in {folder}: {exc.strerror}") from exc


def set_verify(name: str, last: LastVerify) -> None:
    rec = get(name)
    if rec is not None:
        put(replace(rec, last_verify=last))


def forget(name: str) -> bool:
    try:
        _path(name).unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RegistryError(f"cannot remove {_path(name)}: {exc.strerror}") from exc
    return True
