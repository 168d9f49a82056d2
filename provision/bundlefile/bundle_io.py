"""A bundle's bytes: written as one file or as parts (Sink), read back across parts (BundleSource,
Reader), each part checked for presence, bundle and size before anything is read, and for its
sha256 as it is read. The format itself is bundle_format's."""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from provision.bundlefile.bundle_format import (
    CHUNK,
    PART_HEADER,
    BundleError,
    PartHeader,
    base_of,
    is_part,
    part_path,
    payload_per_part,
)


class Sink:
    """Where a tar goes: one file, or parts smaller than `split` bytes. Everything is written
    beside the final names and renamed into place by commit(): an interrupted or failed build
    leaves no bundle (or part) that looks finished."""

    def __init__(self, output: Path, split: int | None, force: bool = False) -> None:
        self.output = output
        self.force = force
        self.per_part = payload_per_part(split) if split else None
        self.whole = hashlib.sha256()
        self.total = 0
        self.parts: list[tuple[Path, PartHeader]] = []  # (temporary file, header without bundle)
        self._fh: BinaryIO | None = None
        self._part_hash = hashlib.sha256()
        self._part_size = 0
        self._forget_killed()
        self._open_next()

    def _forget_killed(self) -> None:
        """What a build killed with SIGKILL left beside the output (its process is gone)."""
        for left in self.output.parent.glob(f".{self.output.name}*.partial-*"):
            pid = left.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    left.unlink()

    def _tmp(self, final: Path) -> Path:
        return final.with_name(f".{final.name}.partial-{os.getpid()}")

    def _open_next(self) -> None:
        final = (
            self.output if self.per_part is None else part_path(self.output, len(self.parts) + 1)
        )
        tmp = self._tmp(final)
        fh = open(tmp, "wb")  # noqa: SIM115 (closed when the part is full, or by commit/abort)
        if self.per_part is not None:
            fh.write(b"\0" * PART_HEADER)  # the header is written last, when every sum is known
        self._fh = fh
        self._part_hash = hashlib.sha256()
        self._part_size = 0
        self.parts.append((tmp, PartHeader("", 0, len(self.parts) + 1, 0, self.total, 0, "")))

    def _close_part(self) -> None:
        tmp, header = self.parts[-1]
        self.parts[-1] = (
            tmp,
            replace(header, size=self._part_size, sha256=self._part_hash.hexdigest()),
        )
        fh = self._file
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        self._fh = None

    @property
    def _file(self) -> BinaryIO:
        if self._fh is None:
            raise BundleError(f"{self.output}: written after it was closed")
        return self._fh

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            room = len(view) if self.per_part is None else self.per_part - self._part_size
            if room == 0:
                self._close_part()
                self._open_next()
                continue
            piece = view[:room]
            self._file.write(piece)
            self._part_hash.update(piece)
            self.whole.update(piece)
            self._part_size += len(piece)
            self.total += len(piece)
            view = view[len(piece) :]
        return len(data)

    def commit(self) -> tuple[list[Path], str]:
        """Finish the last part, write every header, rename into place; (files, tar sha256)."""
        self._close_part()
        digest = self.whole.hexdigest()
        finals: list[Path] = []
        from provision.paths import output_file

        for final in (
            [self.output]
            if self.per_part is None
            else [part_path(self.output, h.part) for _, h in self.parts]
        ):  # judged again now: what is there may have changed while the members were written
            output_file(final, "-o", self.force)
        if self.per_part is None:
            tmp, _ = self.parts[0]
            os.replace(tmp, self.output)
            return [self.output], digest
        count = len(self.parts)
        for tmp, header in self.parts:
            full = replace(header, bundle=digest, total=self.total, parts=count)
            with open(tmp, "r+b") as fh:
                fh.write(full.encode())
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, header in self.parts:
            final = part_path(self.output, header.part)
            os.replace(tmp, final)
            finals.append(final)
        stale = count + 1
        while is_part(part_path(self.output, stale)):  # parts of an older, longer bundle
            part_path(self.output, stale).unlink()
            stale += 1
        return finals, digest

    def abort(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        for tmp, _ in self.parts:
            with contextlib.suppress(OSError):
                tmp.unlink()


@dataclass(frozen=True)
class BundleSource:
    """A bundle's files: one tar, or every part in order with its header."""

    files: tuple[Path, ...]
    headers: tuple[PartHeader, ...]  # empty for a single tar

    @property
    def shown(self) -> str:
        return str(self.files[0]) if not self.headers else f"{base_of(self.files[0])}.*"

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    def holding(self, offset: int, size: int) -> str:
        """Which parts hold the tar's bytes [offset, offset + size), for a message."""
        hit = [
            f"part {h.part} of {h.parts} ({path})"
            for path, h in zip(self.files, self.headers, strict=False)
            if h.offset < offset + max(size, 1) and offset < h.offset + h.size
        ]
        return f"; it is in {', '.join(hit)}: copy that again" if hit else ""


def _header(path: Path) -> PartHeader:
    with open(path, "rb") as fh:
        return PartHeader.decode(fh.read(PART_HEADER), str(path))


def open_source(path: Path) -> BundleSource:
    """The files of the bundle at `path` (a tar, or any of its parts). Before a byte of the tar is
    read: every part is there, of this bundle, in its place and of the size its header says;
    BundleError naming each part that is not."""
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle (give the bundle file, or its first part)")
    if not is_part(path):
        with open(path, "rb") as fh:
            start = fh.read(PART_HEADER)
        if len(start) < PART_HEADER or start[257:262] != b"ustar":
            raise BundleError(f"{path} is not a provision bundle (neither a tar nor a part)")
        return BundleSource((path,), ())
    base = base_of(path)
    first_path = part_path(base, 1)
    if not first_path.is_file():
        raise BundleError(f"part 1 of the bundle is missing: {first_path}")
    first = _header(first_path)
    files, headers, problems = [], [], []
    offset = 0
    for number in range(1, first.parts + 1):
        part = part_path(base, number)
        if not part.is_file():
            problems.append(f"part {number} of {first.parts} is missing: {part}")
            continue
        header = _header(part)
        size = part.stat().st_size
        if header.bundle != first.bundle:
            problems.append(f"{part} belongs to another bundle (bundle {header.bundle[:12]})")
        elif header.part != number or header.offset != offset:
            problems.append(f"{part} holds part {header.part}, not part {number}")
        elif size < PART_HEADER + header.size:
            problems.append(
                f"{part} is truncated: {size} bytes, its header says {PART_HEADER + header.size}"
            )
        elif size > PART_HEADER + header.size:
            problems.append(f"{part} is longer than its header says ({size} bytes)")
        files.append(part)
        headers.append(header)
        offset += header.size
    if not problems and offset != first.total:
        problems.append(f"the parts hold {offset} bytes, the bundle {first.total}")
    if problems:
        raise BundleError(f"{base}: " + "; ".join(problems) + "; nothing was unpacked")
    return BundleSource(tuple(files), tuple(headers))


class Reader:
    """The tar's bytes, across parts; each part's sha256 checked as its last byte is read, and the
    whole tar's when the stream ends. `drain()` reads what the tar reader left (its end)."""

    def __init__(self, source: BundleSource) -> None:
        self.source = source
        self.index = -1
        self.left: int | None = None  # bytes of this part still to read; None: a single tar
        self.fh: BinaryIO | None = None
        self.part_hash = hashlib.sha256()
        self.whole = hashlib.sha256()
        self._next()

    def _next(self) -> None:
        self.close()
        self.index += 1
        if self.index >= len(self.source.files):
            return
        fh = open(self.source.files[self.index], "rb")  # noqa: SIM115 (closed by _next, close)
        if self.source.headers:
            fh.seek(PART_HEADER)
            self.left = self.source.headers[self.index].size
        self.fh = fh
        self.part_hash = hashlib.sha256()

    @property
    def current(self) -> Path:
        return self.source.files[min(self.index, len(self.source.files) - 1)]

    def read(self, size: int = CHUNK) -> bytes:
        while self.fh is not None:
            if self.left == 0:
                self._check_part()
                self._next()
                continue
            data = self.fh.read(size if self.left is None else min(size, self.left))
            if not data:
                if self.left is not None:
                    raise BundleError(f"{self.current} is truncated; nothing was installed")
                self._next()
                continue
            self.whole.update(data)
            if self.left is not None:
                self.part_hash.update(data)
                self.left -= len(data)
            return data
        return b""

    def _check_part(self) -> None:
        header = self.source.headers[self.index]
        got = self.part_hash.hexdigest()
        if got != header.sha256:
            raise BundleError(
                f"{self.current} is corrupt (part {header.part} of {header.parts}: sha256 {got}, "
                f"its header says {header.sha256}); copy it again"
            )

    def drain(self) -> None:
        while self.read(CHUNK):
            pass
        if self.source.headers and self.whole.hexdigest() != self.source.headers[0].bundle:
            raise BundleError(f"{self.source.shown}: the parts do not make up the bundle")

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
