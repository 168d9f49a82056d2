"""A wheel of the provision that is running, for machines that have Python but not provision.

Built from the installed package itself (an editable checkout or a wheel install alike): the
package's files, the templates render reads, and the installed metadata (name, version,
dependencies, entry points) without its long description. No build backend and no network. The
bytes depend only on those files: the same code gives the same wheel, so a copy to a host that
already has it changes nothing.
"""

from __future__ import annotations

import base64
import importlib.metadata
import io
import os
import zipfile
from pathlib import Path

import provision
from provision import __version__
from provision.fileio import sha256_bytes, write_atomic

PACKAGE = Path(provision.__file__).resolve().parent
_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


def wheel_name() -> str:
    return f"provision-{__version__}-py3-none-any.whl"


def _package_files() -> dict[str, Path]:
    """archive name -> file on disk, for the package and the templates render reads."""
    from provision import paths

    files: dict[str, Path] = {}
    roots = [(PACKAGE, "provision")]
    templates = paths.templates_dir().resolve()
    if not templates.is_relative_to(PACKAGE):  # a checkout keeps them beside the package
        roots.append((templates, "provision/templates"))
    for root, prefix in roots:
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in names:
                if name.endswith((".pyc", ".pyo", ".tmp")):
                    continue
                path = Path(folder) / name
                files[f"{prefix}/{path.relative_to(root).as_posix()}"] = path
    return files


def _metadata() -> tuple[str, str]:
    """METADATA (headers only) and entry_points.txt of the installed distribution."""
    dist = importlib.metadata.distribution("provision")
    text = dist.read_text("METADATA") or ""
    head = text.split("\n\n", 1)[0].splitlines()
    keep = [ln for ln in head if not ln.startswith(("Description-Content-Type", "License-File"))]
    entry_points = dist.read_text("entry_points.txt") or ""
    return "\n".join(keep) + "\n", entry_points


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(bytes.fromhex(sha256_bytes(data))).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(dest: Path) -> Path:
    """Write provision's wheel into `dest` (atomically) and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    info = f"provision-{__version__}.dist-info"
    metadata, entry_points = _metadata()
    members: list[tuple[str, bytes, int]] = []
    for name, path in sorted(_package_files().items()):
        mode = 0o755 if os.access(path, os.X_OK) else 0o644
        members.append((name, path.read_bytes(), mode))
    members.append((f"{info}/METADATA", metadata.encode(), 0o644))
    members.append((f"{info}/entry_points.txt", entry_points.encode(), 0o644))
    wheel = b"Wheel-Version: 1.0\nGenerator: provision\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    members.append((f"{info}/WHEEL", wheel, 0o644))
    record = [_record_line(n, d) for n, d, _ in members] + [f"{info}/RECORD,,"]
    members.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    target = dest / wheel_name()
    from provision.paths import output_file

    output_file(target, "--wheel", force=True)  # a wheel of this name is provision's; no device
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in members:
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    write_atomic(target, buffer.getvalue())
    return target


def wheel_problem(path: Path) -> str | None:
    """Why a file named *.whl is not a wheel pip could install (not a zip, no dist-info METADATA,
    a name that is no wheel's), or None: a wheelhouse is checked before it goes into a bundle,
    not on the target, where nothing can be fetched instead."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        return f"is not a wheel's name ({exc})"
    if not path.is_file():
        return "is not a regular file"
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        return f"is not a zip archive ({exc})"
    metadata = {n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1}
    if not metadata:
        return f"holds no .dist-info/METADATA (not a wheel of {name} {version})"
    return None
