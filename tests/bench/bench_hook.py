"""What the no-activation hook costs every Python start in an environment (issue 11, item 3).

    .venv/bin/python tests/bench/bench_hook.py [--runs 40] [--prefix PREFIX]

Two venvs of this host's Python, identical but for provision's hooks (installed with
`environment.install_hooks` from a really rendered pip environment), or a built environment and a
hook-less copy of its site-packages' .pth (--prefix). Each runs `python -c pass` round-robin, so
load on the machine hits both alike; the figure is the median. Target: the hook adds at most 20 ms.
Prints a table; exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TARGET_MS = 20.0


def _time(python: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], check=True)
    return time.perf_counter() - start


def _venvs(tmp: Path) -> tuple[Path, Path]:
    from provision import environment, render
    from provision import matrix as matrix_mod
    from provision.install import prefix_hooks
    from provision.matrix.spec import resolve

    version = "{}.{}".format(*sys.version_info[:2])
    m = matrix_mod.load()
    rel = next(r for r in reversed(m.releases) if version in r.python and r.and_cuda)
    spec = resolve(m, rel.tf, "pip", version, "bench-hook", None, jupyter=False)
    env_dir = tmp / "envs" / "bench-hook"
    for rel_path, text in render.render(spec, m).items():
        (env_dir / rel_path).parent.mkdir(parents=True, exist_ok=True)
        (env_dir / rel_path).write_text(text)
    plain, hooked = tmp / "plain", tmp / "hooked"
    for venv in (plain, hooked):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    prefix_hooks.install_hooks(environment.load(env_dir), hooked)
    return plain / "bin" / "python", hooked / "bin" / "python"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed runs of each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        plain, hooked = _venvs(Path(tmp))
        for python in (plain, hooked):  # untimed: the disk cache and the .pyc files
            _time(python)
            _time(python)
        times: dict[str, list[float]] = {"without hook": [], "with hook": []}
        for _ in range(args.runs):
            times["without hook"].append(_time(plain))
            times["with hook"].append(_time(hooked))
        check = subprocess.run(
            [str(hooked), "-c", "import sys; print('provision_env_hook' in sys.modules)"],
            capture_output=True, text=True, check=True, env={**os.environ},
        )  # fmt: skip
        if check.stdout.strip() != "True":
            print("bench: the hook was not loaded at start-up", file=sys.stderr)
            return 1
    base = statistics.median(times["without hook"]) * 1000
    with_hook = statistics.median(times["with hook"]) * 1000
    print(f"{'python -c pass':<16} {'median ms':>10}")
    print(f"{'without hook':<16} {base:>10.1f}")
    print(f"{'with hook':<16} {with_hook:>10.1f}")
    extra = with_hook - base
    verdict = "ok" if extra <= TARGET_MS else "TOO SLOW"
    print(f"the hook adds {extra:.1f} ms per start (target <= {TARGET_MS:g} ms): {verdict}")
    return 0 if extra <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
