"""Where a test run's time went: tables per test file and per marker, from pytest's JUnit XML.

    .venv/bin/python -m pytest --junitxml=run.xml ...           # .ci/run keeps one per CI run
    .venv/bin/python tests/tools/durations.py run.xml             # per marker, then per file
    .venv/bin/python tests/tools/durations.py run.xml --slowest 25
    .venv/bin/python tests/tools/durations.py before.xml after.xml    # two runs side by side
    .venv/bin/python tests/tools/durations.py run.xml --json
    .venv/bin/python tests/tools/durations.py run.xml --counts        # 3504 passed, 0 failed, ...

A test's time is pytest's (set-up, call and tear-down: a session fixture's build is charged to the
first test that asks for it). Its file and markers come from the properties tests/conftest.py
records for each test (`file`, `markers`: slow, index, container, gpu); a test with several markers
counts under each, and "unmarked" holds those with none. XML written without them (another
project's, or an older run's) still gives files, from each test's class name, and its markers
are "not recorded".
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

MARKERS = ("slow", "index", "container", "gpu")
UNMARKED = "unmarked"
UNKNOWN = "not recorded"


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    markers: tuple[str, ...] | None  # None: the run did not record them
    seconds: float
    outcome: str  # passed, failed, error or skipped


@dataclass
class Row:
    tests: int = 0
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0
    slowest: float = 0.0

    def add(self, case: Case) -> None:
        self.tests += 1
        self.skipped += case.outcome == "skipped"
        self.failed += case.outcome in ("failed", "error")
        self.seconds += case.seconds
        self.slowest = max(self.slowest, case.seconds)


def _file_from_classname(classname: str) -> str:
    """tests.test_x.TestY -> tests/test_x.py: the parts up to the first module named test_*."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_") or part.endswith("_test"):
            return "/".join(parts[: i + 1]) + ".py"
    return "/".join(parts) + ".py"


def read(path: Path) -> tuple[list[Case], float]:
    """The test cases of one run, and the run's wall time as pytest reported it."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    cases: list[Case] = []
    wall = 0.0
    for suite in suites:
        wall += float(suite.get("time") or 0)
        for case in suite.iter("testcase"):
            props = {p.get("name"): p.get("value", "") for p in case.iter("property")}
            classname = case.get("classname", "")
            file = props.get("file") or case.get("file") or _file_from_classname(classname)
            markers = tuple(props["markers"].split()) if "markers" in props else None
            outcome = "passed"
            for tag in ("skipped", "failure", "error"):
                if case.find(tag) is not None:
                    outcome = {"failure": "failed"}.get(tag, tag)
            module = file.removesuffix(".py").replace("/", ".")
            within = classname.removeprefix(module).lstrip(".").replace(".", "::")
            cases.append(
                Case(
                    name="::".join(filter(None, [file, within, case.get("name", "")])),
                    file=file,
                    markers=markers,
                    seconds=float(case.get("time") or 0),
                    outcome=outcome,
                )
            )
    return cases, wall


def by_marker(cases: list[Case]) -> dict[str, Row]:
    rows = {name: Row() for name in (*MARKERS, UNMARKED)}
    for case in cases:
        if case.markers is None:
            keys: tuple[str, ...] = (UNKNOWN,)
        else:
            keys = tuple(m for m in case.markers if m in MARKERS) or (UNMARKED,)
        for key in keys:
            rows.setdefault(key, Row()).add(case)
    return rows


def by_file(cases: list[Case]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for case in cases:
        rows.setdefault(case.file, Row()).add(case)
    return dict(sorted(rows.items(), key=lambda kv: (-kv[1].seconds, kv[0])))


def total(cases: list[Case]) -> Row:
    row = Row()
    for case in cases:
        row.add(case)
    return row


def _table(title: str, headers: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]

    def fmt(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([title, fmt(headers), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def _one_run(key: str, rows: dict[str, Row], whole: Row) -> str:
    headers = [key, "tests", "skipped", "failed", "seconds", "share", "slowest"]
    lines = [
        [
            name,
            str(row.tests),
            str(row.skipped),
            str(row.failed),
            f"{row.seconds:.1f}",
            f"{100 * row.seconds / whole.seconds:.1f}%" if whole.seconds else "-",
            f"{row.slowest:.1f}",
        ]
        for name, row in rows.items()
    ]
    lines.append(
        [
            "all",
            str(whole.tests),
            str(whole.skipped),
            str(whole.failed),
            f"{whole.seconds:.1f}",
            "100.0%",
            f"{whole.slowest:.1f}",
        ]
    )
    return _table(f"per {key}", headers, lines)


def _two_runs(key: str, before: dict[str, Row], after: dict[str, Row], totals: list[Row]) -> str:
    headers = [key, "tests before", "tests after", "s before", "s after", "change"]
    names = list(after) + [name for name in before if name not in after]
    lines = []
    for name, (old, new) in [(n, (before.get(n, Row()), after.get(n, Row()))) for n in names] + [
        ("all", (totals[0], totals[1]))
    ]:
        change = f"{new.seconds - old.seconds:+.1f}"
        lines.append(
            [
                name,
                str(old.tests),
                str(new.tests),
                f"{old.seconds:.1f}",
                f"{new.seconds:.1f}",
                change,
            ]
        )
    return _table(f"per {key}", headers, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml", nargs="+", type=Path, help="JUnit XML of a run; two to compare")
    parser.add_argument("--slowest", type=int, default=0, metavar="N", help="also the N slowest")
    parser.add_argument("--json", action="store_true", help="the tables as one JSON object")
    parser.add_argument(
        "--counts", action="store_true", help="only pytest's closing counts: N passed, N failed"
    )
    args = parser.parse_args(argv)
    if len(args.xml) > 2:
        parser.error("one run, or two to compare")
    try:
        runs = [read(path) for path in args.xml]
    except (OSError, ET.ParseError) as exc:
        print(f"durations: error: {exc}", file=sys.stderr)
        return 1

    if args.counts:
        for cases, _ in runs:
            whole = total(cases)
            passed = whole.tests - whole.failed - whole.skipped
            print(f"{passed} passed, {whole.failed} failed, {whole.skipped} skipped")
        return 0
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "xml": str(path),
                        "wall_seconds": wall,
                        "all": asdict(total(cases)),
                        "marker": {k: asdict(v) for k, v in by_marker(cases).items()},
                        "file": {k: asdict(v) for k, v in by_file(cases).items()},
                        "slowest": [asdict(c) for c in _slowest(cases, args.slowest)],
                    }
                    for path, (cases, wall) in zip(args.xml, runs, strict=True)
                ],
                indent=2,
            )
        )
        return 0

    for path, (cases, wall) in zip(args.xml, runs, strict=True):
        whole = total(cases)
        print(f"{path}: {whole.tests} tests, {whole.seconds:.1f} s in tests, {wall:.1f} s wall")
    print()
    if len(runs) == 1:
        cases = runs[0][0]
        whole = total(cases)
        print(_one_run("marker", by_marker(cases), whole))
        print()
        print(_one_run("file", by_file(cases), whole))
        if args.slowest:
            print()
            print(f"the {args.slowest} slowest")
            for case in _slowest(cases, args.slowest):
                print(f"{case.seconds:9.1f} s  {case.outcome:7}  {case.name}")
    else:
        (old, _), (new, _) = runs
        totals = [total(old), total(new)]
        print(_two_runs("marker", by_marker(old), by_marker(new), totals))
        print()
        print(_two_runs("file", by_file(old), by_file(new), totals))
    return 0


def _slowest(cases: list[Case], n: int) -> list[Case]:
    return sorted(cases, key=lambda c: -c.seconds)[:n]


if __name__ == "__main__":
    sys.exit(main())
