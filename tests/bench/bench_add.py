"""`provision add NAME PKG` against `uv pip install PKG` into a copy of the same prefix (issue 21).

    python tests/bench/bench_add.py NAME [--package matplotlib] [--json FILE]

NAME is a built pip-path environment (e.g. `provision create --tf 2.13 --path pip`). The
baseline copies its prefix to a temporary folder and runs `uv pip install PKG` there (uv
resolves and installs, its cache warm); then `provision add NAME PKG --no-verify` runs on the
environment itself (the user's file, the lock with the smallest change, the sync with hashes
checked), then `provision drop NAME PKG --no-verify` puts the environment back. A first round
warms uv's cache and is not counted; then --rounds rounds (default 3), and the ratio of the median
wall times is printed. Target: add <= 1.2x the baseline. Exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clitools

TARGET = 1.2

provision = functools.partial(clitools.provision, "-q")


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} failed: {done.stderr.strip()[-400:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--package", default="matplotlib")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from provision import environment, tools
    from provision.install.installers import uv_index_args

    found = environment.find(args.name)
    if found.record is None:
        sys.exit(f"{args.name} is not built here")
    prefix = Path(found.record.prefix)
    uv = tools.uv()
    baselines, adds, dropped = [], [], True
    with tempfile.TemporaryDirectory(dir=prefix.parent, prefix=".bench-add-") as tmp:
        copy = Path(tmp) / prefix.name
        python = str(copy / "bin" / "python")
        env = {**os.environ, "VIRTUAL_ENV": str(copy)}
        base = [uv, "pip", "install", "--python", python, *uv_index_args(), args.package]
        for round_ in range(args.rounds + 1):  # round 0 warms uv's cache, and is not counted
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(prefix, copy, symlinks=True)
            os.sync()  # the copy's gigabytes written out first: not the baseline's to wait on
            seconds = timed(base, env)
            start = time.monotonic()
            done = provision("add", args.name, args.package, "--no-verify")
            added = time.monotonic() - start
            if done.returncode != 0:
                sys.exit(f"provision add failed: {done.stderr.strip()}")
            back = provision("drop", args.name, args.package, "--no-verify")
            dropped = dropped and back.returncode == 0
            if back.returncode != 0:
                sys.exit(f"provision drop failed: {back.stderr.strip()}")
            if round_:
                baselines.append(seconds)
                adds.append(added)
    baseline, added = statistics.median(baselines), statistics.median(adds)
    ratio = added / baseline
    report = {
        "package": args.package,
        "rounds": args.rounds,
        "uv_pip_install_s": [round(x, 2) for x in baselines],
        "provision_add_s": [round(x, 2) for x in adds],
        "ratio": round(ratio, 2),
        "target": TARGET,
        "dropped_again": dropped,
    }
    print(json.dumps(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if ratio > TARGET:
        sys.exit(f"provision add took {ratio:.2f}x uv pip install (target {TARGET}x)")


if __name__ == "__main__":
    main()
