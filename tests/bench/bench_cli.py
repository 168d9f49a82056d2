"""Wall-clock benchmark of whole `provision` commands, each a fresh process (issue 2, section 6).

    .venv/bin/python tests/bench/bench_cli.py [--runs 15]

Targets: `provision --help` and `provision matrix --json` take at most 3x as long as the baseline
`python -c "import click, jinja2"` measured in the same run; `provision render --all` (into an
empty temporary directory) takes under 1 s. Commands run round-robin, so load on the machine hits
all of them alike; the figure is the median. Prints a table; exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELP_RATIO = 3.0
RENDER_SECONDS = 1.0


def _provision() -> list[str]:
    """The console script users run, next to this interpreter; `-m provision` without one."""
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.exists() else [sys.executable, "-m", "provision"]


@dataclass
class Bench:
    name: str
    argv: Callable[[Path], list[str]]  # gets a fresh empty directory for each run
    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        sys.exit(f"bench: {' '.join(argv)} failed (exit {proc.returncode}): {tail}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (disk cache)")
    args = parser.parse_args()

    prov = _provision()
    benches = [
        Bench(
            "baseline: python -c 'import click, jinja2'",
            lambda _: [sys.executable, "-c", "import click, jinja2"],
        ),
        Bench("provision --help", lambda _: [*prov, "--help"]),
        Bench("provision matrix --json", lambda _: [*prov, "matrix", "--json"]),
        Bench(
            "provision render --all --out TMP",
            lambda d: [*prov, "render", "--all", "--out", str(d / "envs")],
        ),
    ]
    scratch = Path(tempfile.mkdtemp(prefix="provision-bench-"))
    try:
        for i in range(args.warmup + args.runs):
            for n, bench in enumerate(benches):
                folder = scratch / f"{i}-{n}"
                folder.mkdir()
                elapsed = _time(bench.argv(folder))
                if i >= args.warmup:
                    bench.times.append(elapsed)
                shutil.rmtree(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    base = benches[0].median
    rows = [("command", "median s", "min s", "x baseline", "target", "ok")]
    failed = 0
    for bench in benches:
        ratio = bench.median / base
        if bench is benches[0]:
            target, ok = "-", True
        elif bench.name.startswith("provision render"):
            target, ok = f"< {RENDER_SECONDS:g} s", bench.median < RENDER_SECONDS
        else:
            target, ok = f"<= {HELP_RATIO:g}x", ratio <= HELP_RATIO
        failed += not ok
        rows.append(
            (
                bench.name,
                f"{bench.median:.3f}",
                f"{min(bench.times):.3f}",
                f"{ratio:.2f}",
                target,
                "yes" if ok else "NO",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(f"{args.runs} runs each (after {args.warmup} warm-up), Python {sys.version.split()[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
