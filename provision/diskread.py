"""The one way provision reads a file it did not just write: a regular file only (never a FIFO, a
device or a folder, which could hang or never end), at most so many bytes, strict UTF-8, and JSON
no deeper than a limit. Whatever is wrong comes back as `Unreadable` (a ValueError, so callers that
already turn bad contents into their own message keep doing so), naming the file and the bound.
A file that is not there stays FileNotFoundError, and other OS errors stay OSError.

The bottom of the import graph: this module imports nothing of provision's.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

KIB = 1 << 10
MIB = 1 << 20
SMALL = 4 * MIB  # records, markers, manifests: a few KiB in practice
DEPTH = 64  # nesting of JSON objects and lists; provision's own files use fewer than 10


class Unreadable(ValueError):
    """A file provision will not read: not a regular file, too large, not UTF-8, nested too deep."""


def kind(mode: int) -> str:
    """What a file's mode says it is, in words."""
    for test, words in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def read_bytes(path: Path | str, limit: int = SMALL) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. The file's kind is judged before it
    is opened (a FIFO would block the open) and again on the open file (it may have changed)."""
    shown = str(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(f"{shown} is {kind(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{shown} is {kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise Unreadable(f"{shown} is {st.st_size} bytes; provision reads at most {limit}")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(f"{shown} is over {limit} bytes; provision reads at most {limit}")
    return data


def decode(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{shown} is not UTF-8 text (byte {exc.start})") from None


def read_text(path: Path | str, limit: int = SMALL) -> str:
    """A regular file of at most `limit` bytes, as UTF-8 text (universal newlines, as open())."""
    text = decode(read_bytes(path, limit), str(path))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def text_or_none(path: Path | str, limit: int = SMALL) -> str | None:
    """read_text, or None when the file is missing, unreadable, not a file or too large."""
    try:
        return read_text(path, limit)
    except (OSError, Unreadable):
        return None


def loads_json(data: bytes | str, shown: str, depth: int = DEPTH) -> object:
    """Parsed JSON of at most `depth` levels of objects and lists; Unreadable otherwise."""
    text = decode(data, shown) if isinstance(data, bytes) else data
    too_deep = _deeper_than(text, depth)
    if too_deep:
        raise Unreadable(f"{shown} is nested deeper than {depth} levels")
    try:
        return json.loads(text)
    except RecursionError:  # cannot happen after the scan; kept as a second guard
        raise Unreadable(f"{shown} is nested deeper than {depth} levels") from None
    except ValueError as exc:
        raise Unreadable(f"{shown} is not JSON ({exc})") from None


def read_json(path: Path | str, limit: int = SMALL, depth: int = DEPTH) -> object:
    """A regular file of at most `limit` bytes of UTF-8 JSON, at most `depth` levels deep."""
    return loads_json(read_bytes(path, limit), str(path), depth)


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _deeper_than(text: str, depth: int) -> bool:
    """Whether brackets outside strings nest deeper than `depth` (one pass of a regular
    expression over strings and brackets; the rest of the text is skipped by the scanner)."""
    if text.count("[") + text.count("{") <= depth:
        return False
    level = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            level += 1
            if level > depth:
                return True
        elif c in "]}":
            level -= 1
    return False
