"""A built prefix read from its files only: nothing in it is imported or run.

Packages come from site-packages' `*.dist-info` (METADATA for name, version and Requires-Dist,
INSTALLER, RECORD for the files and their sha256) and, in conda prefixes, from `conda-meta/*.json`
(name, version, depends, `paths_data` with sha256). A package's files are summed up by a digest of
their sizes and modification times, cheap to take again; only when that digest moved are the files
hashed and compared with what the installer recorded, which names the file that was edited.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from provision.payload import elf

# The CUDA libraries TensorFlow loads, and the NVIDIA ones they load in turn.
CUDA_LIB_RE = re.compile(
    r"lib(cudart|cudnn[a-z_]*|cublas(Lt)?|cufft|curand|cusolver|cusparse|nvJitLink|nvrtc|nccl|"
    r"cupti|nvinfer)\.so(\.\d+)*$"
)


@dataclass(frozen=True)
class Installed:
    """One installed package and where its records are."""

    kind: str  # pip | conda
    name: str  # PEP 503 normalised for pip, as conda names it for conda
    version: str
    requires: tuple[str, ...]  # Requires-Dist (pip) or depends (conda), as written
    installer: str  # pip, uv, conda, ... ("" when unrecorded)
    files: tuple[tuple[str, str], ...]  # (absolute path, "sha256=<hex>" or "") from its record


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def site_dirs(prefix: Path) -> list[Path]:
    """Every site-packages of the prefix (lib/pythonX.Y/site-packages)."""
    try:
        return sorted((prefix / "lib").glob("python*/site-packages"))
    except OSError:
        return []


def _record_hash(value: str) -> str:
    """RECORD's `sha256=<urlsafe base64, no padding>` as `sha256=<hex>`; "" for another hash."""
    algo, _, b64 = value.partition("=")
    if algo != "sha256" or not b64:
        return ""
    try:
        raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
    except ValueError:
        return ""
    return "sha256=" + raw.hex()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def pip_packages(site: Path) -> Iterator[Installed]:
    try:
        infos = sorted(site.glob("*.dist-info"))
    except OSError:
        return
    for info in infos:
        meta = HeaderParser().parsestr(_read(info / "METADATA"))
        name, version = meta.get("Name"), meta.get("Version")
        if not name or not version:
            continue
        installer = _read(info / "INSTALLER").strip()
        if installer == "conda":
            continue  # conda-meta holds it, with its files
        files = []
        for line in _read(info / "RECORD").splitlines():
            parts = line.rsplit(",", 2)
            if len(parts) != 3 or not parts[0]:
                continue
            path = os.path.normpath(site / parts[0])
            files.append((path, _record_hash(parts[1])))
        yield Installed(
            "pip", norm(name), version, tuple(meta.get_all("Requires-Dist") or ()), installer,
            tuple(files),
        )  # fmt: skip


def conda_packages(prefix: Path) -> Iterator[Installed]:
    try:
        metas = sorted((prefix / "conda-meta").glob("*.json"))
    except OSError:
        return
    for meta in metas:
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not data.get("name") or not data.get("version"):
            continue
        paths = (data.get("paths_data") or {}).get("paths") or []
        files = [
            (str(prefix / str(p.get("_path"))), f"sha256={p['sha256']}" if p.get("sha256") else "")
            for p in paths
            if isinstance(p, dict) and p.get("_path")
        ]
        if not files:
            files = [(str(prefix / str(f)), "") for f in data.get("files") or []]
        yield Installed(
            "conda", str(data["name"]), str(data["version"]),
            tuple(str(d) for d in data.get("depends") or ()), "conda", tuple(files),
        )  # fmt: skip


def packages(prefix: Path) -> list[Installed]:
    found = list(conda_packages(prefix))
    for site in site_dirs(prefix):
        found += pip_packages(site)
    return found


def stat_digest(files: tuple[tuple[str, str], ...]) -> str:
    """A digest of each file's size and modification time (a missing file counts as such)."""
    h = hashlib.sha256()
    for path, _ in files:
        try:
            st = os.lstat(path)
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{path}\0-\n".encode())
    return h.hexdigest()


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def altered_files(files: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """(path, "edited" | "deleted") for every recorded file whose content is no longer what its
    installer recorded. Files recorded without a hash count only when deleted."""
    out = []
    for path, want in files:
        if not os.path.lexists(path):
            out.append((path, "deleted"))
            continue
        if not want or os.path.islink(path):
            continue
        try:
            got = "sha256=" + sha256_file(path)
        except OSError:
            out.append((path, "unreadable"))
            continue
        if got != want:
            out.append((path, "edited"))
    return out


@dataclass(frozen=True)
class LibraryFile:
    path: str  # relative to the prefix (or absolute, outside it)
    soname: str
    size: int


def library_dirs(prefix: Path, cuda_home: str = "") -> list[Path]:
    dirs = [prefix / "lib"]
    for site in site_dirs(prefix):
        with contextlib.suppress(OSError):
            dirs += sorted(site.glob("nvidia/*/lib"))
    if cuda_home:
        dirs += [Path(cuda_home) / "lib64", Path(cuda_home) / "lib"]
    return dirs


def libraries(prefix: Path, cuda_home: str = "") -> list[LibraryFile]:
    """Every CUDA library file (and link to one) the prefix's loader paths hold, with its SONAME
    read from the ELF header."""
    out = []
    seen: set[str] = set()
    for folder in library_dirs(prefix, cuda_home):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if not (CUDA_LIB_RE.match(name) or folder.parent.parent.name == "nvidia"):
                continue
            if ".so" not in name:
                continue
            path = folder / name
            shown = os.path.relpath(path, prefix) if _inside(path, prefix) else str(path)
            if shown in seen:
                continue
            seen.add(shown)
            info = elf.read(str(path))
            try:
                size = os.stat(path).st_size
            except OSError:
                size = -1  # a link to nothing
            out.append(LibraryFile(shown, info.soname if info else "", size))
    return out


def _inside(path: Path, prefix: Path) -> bool:
    try:
        path.relative_to(prefix)
    except ValueError:
        return False
    return True


def interpreter_version(prefix: Path, interpreter: Path) -> str:
    """X.Y.Z from pyvenv.cfg or conda-meta; the interpreter's file name as a last resort."""
    cfg = _read(prefix / "pyvenv.cfg")
    for key in ("version_info", "version"):
        m = re.search(rf"^{key}\s*=\s*(\d+\.\d+(?:\.\d+)?)", cfg, re.M)
        if m:
            return m.group(1)
    try:
        for meta in (prefix / "conda-meta").glob("python-[0-9]*.json"):
            return meta.name[len("python-") :].rsplit("-", 1)[0]
    except OSError:
        pass
    m = re.search(r"python(\d+\.\d+)$", os.path.realpath(interpreter))
    return m.group(1) if m else ""
