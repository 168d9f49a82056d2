"""Wall-clock benchmarks of locking (issue 3, "Speed"); each command a fresh process, as users run.

    .venv/bin/python tests/bench/bench_lock.py [--runs 5] [--records 50000] [--skip-index]

1. conda: `provision lock` of the newest CUDA 12 conda environment against the local
   conda-forge-like channel (tests/localchannel.py) with the built-in solver, conda-lock's start-up
   included; its pip section resolves against a local index. Target: median <= 2 s.
2. solver: `provision-conda create --dry-run --json` alone on a synthetic channel of --records
   package records (a chain of version-ranged dependencies). Target: median <= 5 s.
3. pip: `provision lock` of the newest pip environment (tensorflow[and-cuda] + NVIDIA pins) against
   the real index from pip's configuration, vs. the same `uv pip compile` (same flags) run bare.
   Runs alternate so machine load hits both alike. Target: median ratio <= 1.5. --skip-index
   leaves it out.

Each benchmark runs once untimed first (warm caches), then --runs times. Prints the figures;
exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import localchannel  # noqa: E402

from provision import matrix  # noqa: E402
from provision.lock import pylock  # noqa: E402
from provision.matrix import kinds, spec  # noqa: E402
from provision.tools import solver as solver_exe  # noqa: E402

CONDA_SECONDS = 2.0
SOLVER_SECONDS = 5.0
PIP_RATIO = 1.5


def provision_exe() -> str:
    return str(Path(sys.executable).parent / "provision")


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          cwd=cwd, timeout=600)  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return elapsed


def render(out: Path, tf: str, path: str) -> str:
    subprocess.run([provision_exe(), "render", "--tf", tf, "--path", path, "--out", str(out)],
                   check=True, capture_output=True)  # fmt: skip
    return spec.resolve(matrix.load(), tf, path).name


def bench_conda(work: Path, runs: int) -> list[float]:
    m = matrix.load()
    tf = next(r.tf for r in reversed(m.releases) if m.cuda_of(r).major == 12)
    channel = localchannel.conda_forge_like(work / "channel", m)
    pins = {req for s in spec.all_specs(m) for req in s.pip_requirements if "==" in req}
    server = localchannel.Server(localchannel.simple_index(work / "index", sorted(pins)))
    try:
        name = render(work / "envs", tf, "conda")
        argv = [provision_exe(), "lock", name, "--out", str(work / "envs"), "--channel",
                channel.url, "--solver", "builtin", "--cache-dir", str(work / "cache")]  # fmt: skip
        env = {"PIP_INDEX_URL": f"{server.url}/simple"}
        timed(argv, env)
        times = [timed(argv, env) for _ in range(runs)]
    finally:
        server.stop()
    print(f"conda  provision lock {name} (local channel, built-in solver): "
          f"median {statistics.median(times):.2f} s, min {min(times):.2f} s "
          f"(target <= {CONDA_SECONDS:g} s)")  # fmt: skip
    return times


def bench_solver(work: Path, runs: int, records: int) -> list[float]:
    channel = localchannel.synthetic_repodata(work / "synthetic", records)
    argv = [solver_exe("builtin"), "create", "--prefix", str(work / "p"), "--dry-run", "--json",
            "--override-channels", "--channel", channel.url, "pkg00000"]  # fmt: skip
    env = {"CONDA_SUBDIR": "linux-64", "PROVISION_CONDA_CACHE": str(work / "solver-cache")}
    timed(argv, env)
    times = [timed(argv, env) for _ in range(runs)]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
    solved = done.stdout.count('"fn":')
    print(f"solver provision-conda on {records} records ({solved} packages in the solution): "
          f"median {statistics.median(times):.2f} s, min {min(times):.2f} s "
          f"(target <= {SOLVER_SECONDS:g} s)")  # fmt: skip
    return times


def bench_pip(work: Path, runs: int) -> float:
    m = matrix.load()
    tf = next(r.tf for r in reversed(m.releases) if kinds.of("pip").refusal(m, r) is None)
    out = work / "envs"
    name = render(out, tf, "pip")
    s = spec.resolve(m, tf, "pip")
    ours = [provision_exe(), "lock", name, "--out", str(out)]
    timed(ours)
    # The bare run is the very uv resolution provision makes (same flags, same as-of cutoff).
    lock_text = (out / name / "requirements.lock").read_text()
    requirements = pylock.requirement_lines((out / name / "requirements.in").read_text())
    extra = pylock.cutoff_args(requirements, pylock.read_as_of(lock_text))
    raw = pylock.uv_compile_argv(
        pylock.uv_bin(), s, s.platforms[0], work / "raw.txt", pylock.pip_index_url(), extra
    )
    env = {"UV_PYTHON_DOWNLOADS": "never"}
    timed(raw, env, out / name)
    mine, bare = [], []
    for _ in range(runs):
        mine.append(timed(ours))
        bare.append(timed(raw, env, out / name))
    ratio = statistics.median(mine) / statistics.median(bare)
    print(f"pip    provision lock {name}: median {statistics.median(mine):.2f} s; "
          f"bare uv pip compile: median {statistics.median(bare):.2f} s; "
          f"ratio {ratio:.2f} (target <= {PIP_RATIO:g})")  # fmt: skip
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--skip-index", action="store_true", help="leave out the pip benchmark")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lock-"))
    missed = []
    try:
        if statistics.median(bench_conda(work, args.runs)) > CONDA_SECONDS:
            missed.append("conda lock")
        if statistics.median(bench_solver(work, args.runs, args.records)) > SOLVER_SECONDS:
            missed.append("solver")
        if not args.skip_index and bench_pip(work, args.runs) > PIP_RATIO:
            missed.append("pip ratio")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if missed:
        print(f"missed: {', '.join(missed)}")
        sys.exit(1)
    print("all targets met")


if __name__ == "__main__":
    main()
