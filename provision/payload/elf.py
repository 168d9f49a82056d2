"""ELF objects: the one reader of a shared object's dynamic section (SONAME, NEEDED, RUNPATH/RPATH).

Headers only, nothing is loaded; 32- and 64-bit, either byte order. The smoke test asks it which
folders TensorFlow's own libraries search; `provision doctor` asks it what each CUDA library found
on the host calls itself, and for which machine it was built.
"""

import os
import struct
from typing import IO, List, NamedTuple, Optional, Tuple

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 14, 15, 29
_MAX_STRING = 1 << 16


class Elf(NamedTuple):
    machine: int  # e_machine: 62 x86-64, 183 AArch64, 21 PowerPC 64
    bits: int  # 32 or 64
    soname: str  # "" when it names none
    needed: Tuple[str, ...]  # DT_NEEDED, in order
    rpath: Optional[str]  # DT_RPATH as written ($ORIGIN unexpanded); None when absent
    runpath: Optional[str]  # DT_RUNPATH likewise


def read(path: str) -> Optional[Elf]:
    """The identity and dynamic names of an ELF file; None when it is not ELF or cannot be read."""
    try:
        with open(path, "rb") as fh:
            return _read(fh)
    except (OSError, struct.error, ValueError):
        return None


def search_path(path: str) -> Tuple[str, List[str]]:
    """('RUNPATH' | 'RPATH' | '', dirs) an object's dependencies are looked for in, $ORIGIN
    expanded. DT_RUNPATH wins when both are present, as in the dynamic loader."""
    info = read(path)
    if info is None:
        return "", []
    if info.runpath is not None:
        kind, raw = "RUNPATH", info.runpath
    elif info.rpath is not None:
        kind, raw = "RPATH", info.rpath
    else:
        return "", []
    origin = os.path.dirname(os.path.realpath(path))
    dirs: List[str] = []
    for entry in raw.split(":"):
        entry = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        entry = os.path.normpath(entry) if entry else ""
        if entry and entry not in dirs:
            dirs.append(entry)
    return kind, dirs


def _read(fh: IO[bytes]) -> Optional[Elf]:
    head = fh.read(64)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    wide = head[4] == 2
    end = "<" if head[5] == 1 else ">"
    machine = struct.unpack_from(end + "H", head, 18)[0]
    if wide:
        phoff = struct.unpack_from(end + "Q", head, 32)[0]
        phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
    else:
        phoff = struct.unpack_from(end + "I", head, 28)[0]
        phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
    fh.seek(phoff)
    table = fh.read(phentsize * phnum)
    loads: List[Tuple[int, int, int]] = []
    dynamic: Optional[Tuple[int, int]] = None
    for i in range(phnum):
        if wide:
            ptype, _, off, vaddr, _, size = struct.unpack_from(end + "IIQQQQ", table, i * phentsize)
        else:
            ptype, off, vaddr, _, size = struct.unpack_from(end + "IIIII", table, i * phentsize)
        if ptype == _PT_LOAD:
            loads.append((vaddr, off, size))
        elif ptype == _PT_DYNAMIC:
            dynamic = (off, size)
    bits = 64 if wide else 32
    if dynamic is None:
        return Elf(machine, bits, "", (), None, None)
    fh.seek(dynamic[0])
    raw = fh.read(dynamic[1])
    step, fmt = (16, end + "qQ") if wide else (8, end + "iI")
    strtab: Optional[int] = None
    names: List[Tuple[int, int]] = []  # (tag, offset in the string table)
    for at in range(0, len(raw) - step + 1, step):
        tag, val = struct.unpack_from(fmt, raw, at)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = val
        elif tag in (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH):
            names.append((tag, val))
    # DT_STRTAB is an address: the file offset is where the loadable segment holding it starts.
    base = None
    if strtab is not None:
        base = next((o + strtab - v for v, o, s in loads if v <= strtab < v + s), None)
    if base is None:
        return Elf(machine, bits, "", (), None, None)
    soname = ""
    rpath: Optional[str] = None
    runpath: Optional[str] = None
    needed: List[str] = []
    for tag, offset in names:
        text = _string(fh, base + offset)
        if tag == _DT_NEEDED:
            needed.append(text)
        elif tag == _DT_SONAME:
            soname = text
        elif tag == _DT_RPATH:
            rpath = text
        else:
            runpath = text
    return Elf(machine, bits, soname, tuple(needed), rpath, runpath)


def _string(fh: IO[bytes], offset: int) -> str:
    fh.seek(offset)
    data = b""
    while len(data) < _MAX_STRING:
        chunk = fh.read(256)
        end = chunk.find(b"\0")
        if end >= 0:
            return (data + chunk[:end]).decode(errors="replace")
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")
