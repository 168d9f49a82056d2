"""Wall-clock of the whole CPU-mode `provision verify`, TensorFlow's import included (issue 5).

    .venv/bin/python tests/bench/bench_verify.py [--runs 3] [--limit 15] [--tf 2.13 --tf 2.21]

For each release (default: 2.13 and the matrix's newest) it renders the pip environment into a
temporary directory and runs `provision verify NAME --prefix VENV` as a fresh process, --runs
times, against the cached real venv of tests/tfvenv.py (built first when missing: minutes). It
prints each run's wall and CPU seconds (the CPU figure shows how much of the wall time was lost to
other load on the machine), the TensorFlow import time the report gives, and the median; it exits
1 when a release's median wall time exceeds --limit seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tfvenv  # noqa: E402

from provision import matrix  # noqa: E402
from provision.matrix.spec import resolve  # noqa: E402

LIMIT = 15.0


def provision_argv() -> list[str]:
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.exists() else [sys.executable, "-m", "provision"]


def one_run(name: str, out: Path, prefix: Path) -> tuple[float, float, dict[str, object]]:
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run(
        [*provision_argv(), "verify", name, "--out", str(out), "--prefix", str(prefix), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    if done.returncode != 0:
        raise SystemExit(f"verify {name} failed (exit {done.returncode}):\n{done.stdout[-2000:]}")
    return wall, cpu, json.loads(done.stdout)


def main() -> int:
    m = matrix.load()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--limit", type=float, default=LIMIT, help="seconds (default %(default)g)")
    p.add_argument("--tf", action="append", help="release X.Y (repeatable)")
    args = p.parse_args()
    over = []
    for tf in args.tf or sorted(
        {"2.13", m.newest.tf}, key=lambda v: [int(x) for x in v.split(".")]
    ):
        release = m.release(tf)
        python = tfvenv.ensure(release)
        spec = resolve(m, release.tf, "pip", tfvenv.python_for(release))
        with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
            out = Path(tmp)
            subprocess.run(
                [*provision_argv(), "render", "--tf", release.tf, "--path", "pip",
                 "--python", spec.python, "--out", str(out)],
                check=True, capture_output=True,
            )  # fmt: skip
            walls = []
            for i in range(args.runs):
                wall, cpu, result = one_run(spec.name, out, python.parent.parent)
                report = result["report"]
                assert isinstance(report, dict)
                imported = report["environment"].get("tf_import_seconds")
                print(
                    f"TF {release.pin:<7} run {i + 1}: {wall:5.1f} s wall, {cpu:5.1f} s CPU, "
                    f"TensorFlow import {imported} s, verify ok={result['ok']}"
                )
                walls.append(wall)
        median = statistics.median(walls)
        verdict = "ok" if median <= args.limit else "OVER"
        print(f"TF {release.pin:<7} median {median:.1f} s wall (limit {args.limit:g} s): {verdict}")
        if median > args.limit:
            over.append(release.pin)
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} CPUs")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
