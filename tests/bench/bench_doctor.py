"""How long `provision doctor` takes on this host, as users run it (a fresh process each time).

    .venv/bin/python tests/bench/bench_doctor.py [--runs N] [--root DIR] [--limit SECONDS]

Prints each run's wall time, the median, and the slowest probe of the last run; exits 1 when the
median exceeds --limit (default 3 s, the budget for a host without a GPU). With --root, the doctor
reads a stand-in host (tests/fakehost.py builds them) instead of this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", help="a stand-in host root (PROVISION_HOST_ROOT)")
    parser.add_argument("--limit", type=float, default=3.0, help="seconds allowed for the median")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.root:
        env["PROVISION_HOST_ROOT"] = args.root
    times: list[float] = []
    report: dict[str, object] = {}
    for _ in range(args.runs):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "provision", "doctor", "--json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        times.append(time.perf_counter() - started)
        if done.returncode not in (0, 1):
            print(done.stderr, file=sys.stderr)
            return 2
        report = json.loads(done.stdout)
    host = report["host"]
    assert isinstance(host, dict)
    print("runs:   " + " ".join(f"{t:.3f}" for t in times) + " s")
    print(f"median: {statistics.median(times):.3f} s (limit {args.limit:g} s)")
    print(
        f"gpus:   {len(host['gpus'])}; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    for probe in sorted(host["probes"], key=lambda p: -p["seconds"]):
        print(f"  {probe['name']:<13}{probe['status']:<9}{probe['seconds']:.3f} s")
    return 0 if statistics.median(times) <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
