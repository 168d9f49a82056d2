"""Offline bundles (issue 12, Speed), as ratios in one run, on a committed pip-path lock.

    python tests/bench/bench_bundle.py [--env tf2.13-pip] [--repeat 2] [--work DIR] [--json FILE]

- build: `provision bundle NAME` from a warm cache (every file already there: no download) against
  `pip download --no-deps --require-hashes -r requirements.lock` for the lock's Python and
  platform with a warm pip cache (pip still asks the index for each project). Target <= 1.2x.
- install: `provision install --from-bundle B --no-verify` (checks the bundle, unpacks it, builds
  the venv with uv and no index, installs the hooks, registers; in `unshare -n` when it works)
  against `python -m venv V && V/bin/pip install --no-index --find-links DIR --require-hashes
  --no-deps -r requirements.lock` of the same wheels. Both start cold: a fresh venv, an empty uv
  cache. Target <= 1.1x.
- size: the bundle on disk against the sum of its members (tar headers and padding).
The runs alternate; each figure is the fastest of --repeat. Exits 1 when a target is missed.
The first run downloads the lock's wheels (2.2 GB for tf2.13-pip) into WORK/cache.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_TARGET, INSTALL_TARGET = 1.2, 1.1


def run(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:5])} ... failed:\n{done.stderr[-2000:]}")
    return time.monotonic() - start


def offline_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    ok = unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0
    return [unshare, "-n"] if ok and unshare else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="tf2.13-pip")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from provision import environment
    from provision.bundle import bundle_fetch
    from provision.bundle.make import host_glibc

    env = environment.load(ROOT / "envs" / args.env)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-bundle-"))
    cache, pip_cache = work / "cache", work / "pip-cache"
    provision = [sys.executable, "-m", "provision"]
    bundle_argv = [*provision, "bundle", args.env, "--out", str(ROOT / "envs"), "-q",
                   "--cache-dir", str(cache), "-o"]  # fmt: skip
    target = bundle_fetch.BundleMachine(env.python, env.python, "x86_64", host_glibc(), "linux-64")
    download_argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
                     "-r", str(env.lock), "--disable-pip-version-check", "--quiet",
                     *bundle_fetch.pip_platform_args(target, env.python), "-d"]  # fmt: skip
    pip_env = {"PIP_CACHE_DIR": str(pip_cache)}
    wheels = work / "wheels"
    print(f"warming the caches in {work} (untimed) ...", flush=True)
    run([*bundle_argv, str(work / "warm.tar")])
    run([*download_argv, str(wheels)], pip_env)
    (work / "warm.tar").unlink()

    builds: list[float] = []
    downloads: list[float] = []
    installs: list[float] = []
    pips: list[float] = []
    bundle = work / "b.tar"
    base_python = shutil.which(f"python{env.python}") or sys.executable
    for i in range(args.repeat):
        shutil.rmtree(work / "d", ignore_errors=True)
        downloads.append(run([*download_argv, str(work / "d")], pip_env))
        bundle.unlink(missing_ok=True)
        builds.append(run([*bundle_argv, str(bundle)]))
        home = work / f"home-{i}"
        uv_cache = work / f"uv-{i}"
        installs.append(
            run(
                [
                    *offline_prefix(),
                    *provision,
                    "install",
                    "--from-bundle",
                    str(bundle),
                    "--no-verify",
                    "-q",
                ],
                {"PROVISION_HOME": str(home), "UV_CACHE_DIR": str(uv_cache)},
            )
        )
        venv = work / f"venv-{i}"
        start = time.monotonic()
        run([base_python, "-m", "venv", str(venv)])
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--find-links",
             str(wheels), "--require-hashes", "--no-deps", "-r", str(env.lock),
             "--disable-pip-version-check", "--quiet"])  # fmt: skip
        pips.append(time.monotonic() - start)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(uv_cache, ignore_errors=True)

    manifest = json.loads(
        subprocess.run(
            ["tar", "-xOf", str(bundle), "provision-bundle/manifest.json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    members = sum(m["size"] for m in manifest["members"])
    size = bundle.stat().st_size
    build, download, install, pip = min(builds), min(downloads), min(installs), min(pips)
    rows = [
        ("build from a warm cache", build, "pip download (warm pip cache)", download, BUILD_TARGET),
        ("install --from-bundle", install, "venv + pip install --no-index", pip, INSTALL_TARGET),
    ]
    ok = True
    print(f"{args.env}: {len(manifest['members'])} members")
    for what, ours, other, theirs, goal in rows:
        ratio = ours / theirs
        ok &= ratio <= goal
        verdict = "ok" if ratio <= goal else "MISSED"
        print(f"  {what:<25} {ours:7.1f} s   {other:<31} {theirs:7.1f} s   "
              f"{ratio:.2f}x (target <= {goal}x) {verdict}")  # fmt: skip
    print(f"  size: bundle {size / 1e6:,.1f} MB, members {members / 1e6:,.1f} MB "
          f"(+{(size - members) / 1e3:,.1f} kB, {100 * (size / members - 1):.3f} %)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({
            "env": args.env, "build_s": builds, "pip_download_s": downloads,
            "install_s": installs, "pip_install_s": pips, "bundle_bytes": size,
            "member_bytes": members, "ok": ok,
        }, indent=2) + "\n")  # fmt: skip
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
