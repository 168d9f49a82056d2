"""The one table layout of the CLI's plain-text output (environments, fleets, the matrix, the
doctor's verdicts, benchmarks): cells padded to their column's width, two spaces apart, no
trailing blanks. Plain text on purpose: it reads the same in a terminal, a log and a cron mail,
and golden files compare it byte for byte."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def columns(
    rows: Sequence[Sequence[str]],
    *,
    indent: str = "",
    right: Collection[int] = (),
    rule: bool = False,
) -> list[str]:
    """rows[0] is the header when rule is set (a line of dashes follows it); columns whose index
    is in right are right-aligned (numbers)."""
    count = len(rows[0]) if rows else 0
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(count)]

    def line(row: Sequence[str]) -> str:
        cells = zip(row, widths, strict=False)
        return indent + "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(cells)
        )

    lines = [line(row).rstrip() for row in rows]
    if rule and lines:
        lines.insert(1, indent + "  ".join("-" * w for w in widths))
    return lines
