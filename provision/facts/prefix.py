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
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from provision.fileio import sha256_file, sha256_text
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


def _read(path: str | Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _metadata(text: str) -> tuple[str, str, list[str]]:
    """Name, Version and Requires-Dist of a METADATA file (its headers, up to the first blank
    line; read by hand: the email parser costs more than the rest of a check)."""
    name = version = ""
    requires = []
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return name, version, requires


def pip_packages(site: Path) -> Iterator[Installed]:
    try:
        infos = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))
    except OSError:
        return
    base = str(site) + os.sep
    for info in infos:
        where = base + info + os.sep
        name, version, requires = _metadata(_read(where + "METADATA"))
        if not name or not version:
            continue
        installer = _read(where + "INSTALLER").strip()
        if installer == "conda":
            continue  # conda-meta holds it, with its files
        files = []
        for line in _read(where + "RECORD").splitlines():
            rel, _, rest = line.partition(",")
            if not rel:
                continue
            path = base + rel
            if ".." in rel:
                path = os.path.normpath(path)
            files.append((path, rest.rpartition(",")[0]))
        yield Installed("pip", norm(name), version, tuple(requires), installer, tuple(files))


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
    """A digest of the size and modification time of each file its installer recorded a sha256
    for (a missing file counts as such). Files recorded without one (bytecode pip compiled, the
    RECORD itself) may be written again by Python and are left out."""
    parts = []
    lstat = os.lstat
    for path, want in files:
        if not want:
            continue
        try:
            st = lstat(path)
            parts.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}\0-")
    return sha256_text("\n".join(parts))


def _matches(digest: bytes, want: str) -> bool:
    """RECORD writes `sha256=<urlsafe base64, no padding>`, conda-meta the hex digest."""
    b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return want in (f"sha256={b64}", f"sha256={digest.hex()}")


def altered_files(files: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """(path, "edited" | "deleted") for every recorded file whose content is no longer what its
    installer recorded. Files recorded without a sha256 count only when deleted."""
    out = []
    for path, want in files:
        if not os.path.lexists(path):
            out.append((path, "deleted"))
            continue
        if not want.startswith("sha256=") or os.path.islink(path):
            continue
        try:
            digest = bytes.fromhex(sha256_file(path))
        except OSError:
            out.append((path, "unreadable"))
            continue
        if not _matches(digest, want):
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
                size = os.lstat(path).st_size  # a link: the length of what it names
            except OSError:
                size = -1
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
