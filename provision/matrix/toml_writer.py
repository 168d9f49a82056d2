"""The one writer of the matrix data file: rows become TOML text in the file's own layout, the
file is edited block by block (comments and hand formatting elsewhere stay as they are), the
result is read back by the matrix's one reader (`parse`) and only then replaces the file
atomically. A result that does not validate is never written.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from provision.errors import MatrixError
from provision.matrix import Matrix, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

Value = str | bool | int | Sequence[str] | Mapping[str, str]
Row = Mapping[str, Value]
_HEADER = re.compile(r"^\[\[?([A-Za-z_.]+)\]\]?\s*$")


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _value(value: Value, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_string(k)} = {_string(v)}" for k, v in value.items()) + " }"
    items = [_string(v) for v in value]
    one_line = f"{key} = [" + ", ".join(items) + "]"
    if len(one_line) <= 99:
        return "[" + ", ".join(items) + "]"
    return "[\n" + "".join(f"    {i},\n" for i in items) + "]"


def block(table: str, row: Row) -> str:
    """`[[table]]` and its keys in the row's order; a non-empty dict becomes a `[table.key]`
    subtable after the keys (the layout of the hand-written rows)."""
    lines = [f"[[{table}]]"]
    subtables = []
    for key, value in row.items():
        if isinstance(value, Mapping) and value:
            subtables.append(
                f"[{table}.{key}]\n"
                + "".join(f"{_string(k)} = {_string(v)}\n" for k, v in value.items())
            )
            continue
        lines.append(f"{key} = {_value(value, key)}")
    return "\n".join(lines) + "\n" + "".join(subtables)


@dataclass
class _Segment:
    """One table of the file: comments and blank lines before it, its header, its body."""

    lead: list[str]
    lines: list[str]

    @property
    def table(self) -> str:
        m = _HEADER.match(self.lines[0]) if self.lines else None
        return m.group(1) if m else ""

    def get(self, key: str) -> str | None:
        for line in self.lines[1:]:
            m = re.match(rf"^{re.escape(key)}\s*=\s*\"(.*)\"\s*$", line)
            if m:
                return m.group(1)
        return None

    def text(self) -> str:
        return "".join(self.lead + self.lines)


def _segments(text: str) -> list[_Segment]:
    out: list[_Segment] = [_Segment([], [])]
    pending: list[str] = []
    for line in text.splitlines(keepends=True):
        bare = line.strip()
        if _HEADER.match(bare):
            out.append(_Segment(pending, [line]))
            pending = []
        elif not bare or bare.startswith("#"):
            pending.append(line)
        else:
            out[-1].lines.extend(pending)
            pending = []
            out[-1].lines.append(line)
    out.append(_Segment(pending, []))
    return out


class Draft:
    """The data file's text being edited; `result()` validates it."""

    def __init__(self, text: str) -> None:
        self.segments = _segments(text)

    def text(self) -> str:
        return "".join(s.text() for s in self.segments)

    def _last(self, table: str) -> int:
        idx = [i for i, s in enumerate(self.segments) if s.table.split(".")[0] == table]
        if not idx:
            raise MatrixError(f"the matrix has no [[{table}]] table to add to")
        return idx[-1]

    def _find(self, table: str, key: str, value: str) -> tuple[int, int] | None:
        """Start and end (exclusive) of a row and its subtables."""
        for i, seg in enumerate(self.segments):
            if seg.table == table and seg.get(key) == value:
                end = i + 1
                while end < len(self.segments) and self.segments[end].table.startswith(table + "."):
                    end += 1
                return i, end
        return None

    def has(self, table: str, key: str, value: str) -> bool:
        return self._find(table, key, value) is not None

    def put(self, table: str, key: str, row: Row) -> None:
        """Replace the row whose `key` equals the new row's, or add it after the table's last."""
        new = _segments("\n" + block(table, row))[1:-1]
        found = self._find(table, key, str(row[key]))
        if found:
            start, end = found
            new[0].lead = self.segments[start].lead
            self.segments[start:end] = new
        else:
            at = self._last(table) + 1
            self.segments[at:at] = new

    def drop(self, table: str, key: str, value: str) -> None:
        found = self._find(table, key, value)
        if found:
            del self.segments[found[0] : found[1]]

    def result(self) -> tuple[str, Matrix]:
        text = self.text()
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise MatrixError(f"the updated matrix is not TOML ({exc}); nothing written") from exc
        return text, parse(raw)
