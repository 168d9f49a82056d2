"""The payload as one zipapp: how provision ships provision/payload into an environment.

The environment's interpreter runs `python -I <zipapp> smoke|bench ARGS...`; nothing is copied into
the environment. The zipapp is built from provision/payload's sources, deterministically (sorted
members, fixed timestamps and modes, stored uncompressed), so the same sources give the same bytes
on every machine; it is cached under the temporary folder by the hash of its bytes, written
atomically and checked before each use, so concurrent runs (and other users) cannot break it.
"""

from __future__ import annotations

import stat
import zipfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path
from typing import Literal

from provision.fileio import sha256_bytes, umask, write_atomic

Program = Literal["smoke", "bench"]

SOURCE = Path(__file__).with_name("payload")
# The GPU policy's code: in the zipapp, and installed beside the start-up hook under this name.
POLICY_SOURCE = SOURCE / "gpu_policy.py"
POLICY_MODULE = "provision_gpu_policy"
PACKAGE = "provision_payload"  # the payload's name inside the zipapp (no `provision` there)
SHEBANG = b"#!/usr/bin/env python3\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip member can carry
_BOOT = (
    '"""provision\'s payload; run it as: python -I THIS.pyz smoke|bench [ARGS...]"""\n'
    "import sys\n\n"
    f"from {PACKAGE}.__main__ import main\n\n"
    "sys.exit(main())\n"
)


def _members() -> list[tuple[str, bytes]]:
    """(name in the zipapp, bytes) of every member, sorted: the package's modules and the boot."""
    members = [("__main__.py", _BOOT.encode())]
    members += [
        (f"{PACKAGE}/{path.name}", path.read_bytes())
        for path in sorted(SOURCE.glob("*.py"))
        if path.is_file()
    ]
    return sorted(members)


def _digest(members: Sequence[tuple[str, bytes]]) -> str:
    return sha256_bytes(b"".join(f"{name}\0{len(d)}\0".encode() + d for name, d in members))


def digest() -> str:
    """sha256 of the payload's sources (each member's name and bytes): what a verify cache keys."""
    return _digest(_members())


def _zip_bytes(members: Sequence[tuple[str, bytes]]) -> bytes:
    buffer = BytesIO()
    buffer.write(SHEBANG)  # as zipapp.create_archive does: the archive follows the shebang line
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.create_system = 3  # Unix, so the mode below is read back
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            zf.writestr(info, data)
    return buffer.getvalue()


def write_zipapp(dest: Path) -> Path:
    """Write the payload's zipapp to `dest` (atomically, executable), e.g. smoke-test.pyz next to
    an exported environment, where `python -I smoke-test.pyz smoke --json` needs no provision."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, _zip_bytes(_members()), 0o755 & ~umask())
    return dest


def zipapp(folder: Path) -> Path:
    """The zipapp of the current sources, written into `folder`: the temporary folder of the one
    run that uses it, removed with it (nothing of provision's stays in the system's temp dir)."""
    path = Path(folder) / "provision-payload.pyz"
    write_atomic(path, _zip_bytes(_members()), 0o644)
    return path


def payload_argv(python: Path, program: Program, args: Sequence[str], folder: Path) -> list[str]:
    """`python -I <zipapp> PROGRAM ARGS...`, the zipapp in `folder` (the run's own temporary
    folder): -I so that neither the working directory nor PYTHONPATH nor the user's
    site-packages can shadow the payload or what it tests."""
    return [str(python), "-I", str(zipapp(folder)), program, *args]


def payload_env(folder: Path) -> dict[str, str]:
    """What the payload's process sees besides the caller's environment, in folders made under
    `folder` (the run's own temporary folder, removed with it):
    - TMPDIR: TensorFlow writes a file there for each function autograph converts and never
      removes them;
    - KERAS_HOME and KERAS_BACKEND: Keras reads ~/.keras/keras.json, and writes it when missing.
      A user's file there sways the checks: `"backend": "jax"` made Keras 3 (TensorFlow 2.16 on)
      import JAX, failing without it and training on JAX with it, and `floatx` or
      `image_data_format` change what runs. The payload runs on TensorFlow with Keras's defaults,
      and leaves the user's Keras folder as it was."""
    scratch, keras = Path(folder) / "tmp", Path(folder) / "keras"
    scratch.mkdir()
    keras.mkdir()
    return {"TMPDIR": str(scratch), "KERAS_HOME": str(keras), "KERAS_BACKEND": "tensorflow"}
