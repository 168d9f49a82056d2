"""Install time of `provision install`, against uv and pip on the same lock (issue 4, Speed).

    .venv/bin/python tests/bench/bench_install.py [--tf 2.13] [--repeat 3] [--no-cold] [--no-conda]

pip path: the environment is rendered and locked once (real TensorFlow from the package index);
then, into a fresh prefix each time,
  - `provision install NAME --prefix P` (what users run; it installs with uv),
  - `uv venv` + `uv pip install --require-hashes --no-deps -r requirements.lock` (the baseline),
  - `python -m venv` + `pip install --require-hashes --no-deps -r requirements.lock` (for scale),
each with a cold package cache (an empty cache directory per run) and a warm one (a cache filled
by an untimed run first). provision and uv alternate, so load on the machine hits both alike; the
figure is the fastest of --repeat runs. Target: provision within 1.2x of uv, cold and warm.
conda path: the conda part of the newest release whose cuDNN comes from the channel, installed by
`provision install` (conda-lock + provision's built-in solver) from a local channel holding real
CPython and NVIDIA libraries (tests/realconda.py), with an empty and with a filled package cache.
Reported, no target (there is no other conda installer on this machine to compare with).
Prints a table (and --json FILE); exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

TARGET = 1.2


def provision_argv() -> list[str]:
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.exists() else [sys.executable, "-m", "provision"]


def run(argv: Sequence[str | os.PathLike[str]], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, argv[:4]))} ... failed:\n{done.stderr[-2000:]}")


def timed(action: Callable[[], None], before: Callable[[], None]) -> float:
    before()
    start = time.monotonic()
    action()
    return time.monotonic() - start


def fresh(path: Path) -> Callable[[], None]:
    def clear() -> None:
        shutil.rmtree(path, ignore_errors=True)

    return clear


class PipBench:
    def __init__(self, work: Path, tf: str) -> None:

        self.work, self.out = work, work / "envs"
        run([*provision_argv(), "render", "--tf", tf, "--path", "pip", "--out", self.out])
        (self.name,) = [p.name for p in self.out.iterdir()]
        run([*provision_argv(), "lock", self.name, "--out", self.out])
        from provision import environment, tools
        from provision.install import installers

        env = environment.load(self.out / self.name)
        self.lock = env.lock.absolute()
        self.python = tools.find_python(env.python)
        self.uv = tools.uv_or_none() or "uv"
        self.index = installers.uv_index_args()
        self.prefix = work / "prefix"

    def ours(self, cache: Path) -> Callable[[], None]:
        env = {"UV_CACHE_DIR": str(cache), "PROVISION_HOME": str(self.work / "home")}
        argv = [*provision_argv(), "install", self.name, "--out", self.out, "--prefix", self.prefix]
        return lambda: run(argv, env)

    def uv_baseline(self, cache: Path) -> Callable[[], None]:
        def go() -> None:
            run(
                [
                    self.uv,
                    "venv",
                    "--quiet",
                    "--cache-dir",
                    cache,
                    "--python",
                    self.python,
                    self.prefix,
                ]
            )
            run([
                self.uv, "pip", "install", "--quiet", "--cache-dir", cache, "--python",
                self.prefix / "bin" / "python", "--require-hashes", "--no-deps", "-r", self.lock,
                *self.index,
            ])  # fmt: skip

        return go

    def pip_baseline(self, cache: Path) -> Callable[[], None]:
        def go() -> None:
            run([self.python, "-m", "venv", self.prefix])
            run(
                [self.prefix / "bin" / "python", "-m", "pip", "install", "--quiet",
                 "--require-hashes", "--no-deps", "-r", self.lock],
                {"PIP_CACHE_DIR": str(cache)},
            )  # fmt: skip

        return go


def bench_pip(work: Path, tf: str, repeat: int, cold: bool) -> dict[str, float]:
    b = PipBench(work, tf)
    results: dict[str, float] = {}
    clear = fresh(b.prefix)
    caches = work / "caches"
    if cold:
        ours, uv = [], []
        for i in range(repeat):
            pair = [("ours", b.ours, ours), ("uv", b.uv_baseline, uv)]
            for label, make, sink in pair if i % 2 == 0 else reversed(pair):
                cache = caches / f"cold-{label}-{i}"
                sink.append(timed(make(cache), clear))
                shutil.rmtree(cache, ignore_errors=True)
        results["pip path, cold cache: provision install"] = min(ours)
        results["pip path, cold cache: uv venv + uv pip install"] = min(uv)
        pip_cache = caches / "pip-cold"
        results["pip path, cold cache: venv + pip install"] = timed(
            b.pip_baseline(pip_cache), clear
        )
    warm = caches / "warm"
    timed(b.uv_baseline(warm), clear)  # fills the cache, untimed
    ours, uv = [], []
    for i in range(repeat):
        pair = [(b.ours, ours), (b.uv_baseline, uv)]
        for make, sink in pair if i % 2 == 0 else reversed(pair):
            sink.append(timed(make(warm), clear))
    results["pip path, warm cache: provision install"] = min(ours)
    results["pip path, warm cache: uv venv + uv pip install"] = min(uv)
    if cold:
        pip_warm = caches / "pip-cold"
        results["pip path, warm cache: venv + pip install"] = timed(b.pip_baseline(pip_warm), clear)
    clear()
    return results


def bench_conda(work: Path, repeat: int) -> dict[str, float]:
    import realconda
    import yaml

    from provision import matrix

    m = matrix.load()
    spec = realconda.e2e_spec(m)
    if spec is None:
        print("bench: no conda release fits this host; conda path skipped", file=sys.stderr)
        return {}
    channel = realconda.build(work / "channel", m, spec)
    out = work / "conda-envs"
    run([*provision_argv(), "render", "--tf", spec.release.tf, "--path", "conda", "--python",
         spec.python, "--name", "bench", "--out", out])  # fmt: skip
    # The conda part only: the pip part (TensorFlow) is the pip path's figure above.
    env_file = out / "bench" / "environment.yml"
    data = yaml.safe_load(env_file.read_text())
    data["dependencies"] = [d for d in data["dependencies"] if not isinstance(d, dict)]
    env_file.write_text(yaml.safe_dump(data, sort_keys=False))
    caches = work / "conda-caches"
    env = {"XDG_CACHE_HOME": str(caches / "lock"), "PROVISION_HOME": str(work / "home")}
    run([*provision_argv(), "lock", "bench", "--out", out, "--channel", channel.url,
         "--solver", "builtin"], env)  # fmt: skip
    prefix = work / "conda-prefix"
    argv = [
        *provision_argv(),
        "install",
        "bench",
        "--out",
        out,
        "--prefix",
        prefix,
        "--solver",
        "builtin",
    ]
    cold = []
    for i in range(repeat):
        cache = {**env, "XDG_CACHE_HOME": str(caches / f"cold-{i}")}
        cold.append(timed(lambda c=cache: run(argv, c), fresh(prefix)))  # type: ignore[misc]
    warm_env = {**env, "XDG_CACHE_HOME": str(caches / "cold-0")}
    warm = [timed(lambda: run(argv, warm_env), fresh(prefix)) for _ in range(repeat)]
    shutil.rmtree(prefix, ignore_errors=True)
    label = f"conda path ({spec.name}, conda part, {len(_packages(out / 'bench'))} packages)"
    return {f"{label}, cold cache: provision install": min(cold),
            f"{label}, warm cache: provision install": min(warm)}  # fmt: skip


def _packages(env_dir: Path) -> list[str]:
    import yaml

    data = yaml.safe_load((env_dir / "conda-lock.yml").read_text())
    return [p["name"] for p in data.get("package") or []]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tf", default="2.13", help="release for the pip path (default: the anchor's)")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure; the fastest counts")
    p.add_argument("--no-cold", dest="cold", action="store_false", help="skip cold-cache runs")
    p.add_argument("--no-conda", dest="conda", action="store_false", help="skip the conda path")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        work = Path(tmp)
        figures = bench_pip(work, args.tf, args.repeat, args.cold)
        if args.conda:
            figures.update(bench_conda(work, args.repeat))
    width = max(len(k) for k in figures)
    for key, seconds in figures.items():
        print(f"{key:<{width}}  {seconds:7.2f} s")
    missed = []
    for kind in ("cold", "warm"):
        ours = figures.get(f"pip path, {kind} cache: provision install")
        uv = figures.get(f"pip path, {kind} cache: uv venv + uv pip install")
        if ours is None or uv is None:
            continue
        ratio = ours / uv
        verdict = "ok" if ratio <= TARGET else "MISSED"
        print(
            f"pip path, {kind} cache: provision / uv = {ratio:.2f} (target <= {TARGET}) {verdict}"
        )
        if ratio > TARGET:
            missed.append(kind)
    if args.json:
        args.json.write_text(json.dumps({"seconds": figures, "target": TARGET}, indent=2) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
