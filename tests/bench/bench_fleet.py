"""Roll-out time of `provision fleet`: 8 namespace hosts against 1, and Ansible's cost per host
against a plain local install + verify (issue 13, Scale). Needs root (tests/fleethosts.py).

    python tests/bench/bench_fleet.py [--hosts 8] [--json FILE]

The environment is a pip environment locked to a small real wheel (tests/tinyindex.py), so what
is measured is provision's and Ansible's own work, not TensorFlow's download. Each figure is a
fresh set of hosts (provision is installed on each first) and then the same run again (nothing
to do: changed=0), with Ansible's default forks. The local baseline is `provision install` +
`provision verify` of the same lock on this machine. Target: N hosts within 2x one host.
Prints a table (and --json FILE); exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import fakehost  # noqa: E402
import fleethosts  # noqa: E402
from clitools import run_cli  # noqa: E402
from tinyindex import TINY, Env, build_wheel, pip_release  # noqa: E402

TARGET = 2.0


def gpu(base: Path, cache: Path) -> fakehost.FakeHost:
    h = fakehost.FakeHost(base, cache)
    h.kernel_module("555.42.06")
    h.driver_libs("555.42.06")
    h.nvidia_smi(captures=fakehost.HOSTS / "a6000-555")
    h.python(pip_release()[1])
    return h


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    return time.monotonic() - t0, done.stdout + done.stderr


def fleet_runs(
    work: Path, envs: Path, index: fleethosts.Index, n: int, env: dict[str, str]
) -> list[float]:
    """A fresh lab of n hosts: the first run, then the same run again."""
    libs = work / f"libs-{n}"
    libs.mkdir()
    with fleethosts.lab(work / f"lab-{n}", libs) as lab:
        for i in range(n):
            lab.add(f"host{i + 1}", gpu, index.url)
        report = work / f"report-{n}"
        argv = [sys.executable, "-m", "provision", "fleet", "tiny", "--out", str(envs),
                "--inventory", str(lab.inventory()), "--report-dir", str(report)]  # fmt: skip
        times = []
        for _ in range(2):
            seconds, out = timed(argv, env, work)
            data = json.loads((report / "fleet.json").read_text())
            if any(h["result"] not in ("ready", "verify failed") for h in data["hosts"]):
                sys.exit(f"bench: a host failed:\n{out[-3000:]}")
            times.append(seconds)
        return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    reason = fleethosts.unavailable()
    if reason:
        sys.exit(f"bench: {reason}")
    tf, python = pip_release()
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    cache = Path(os.environ.get("PROVISION_TEST_CACHE", Path.home() / ".cache/provision-tests"))
    served = work / "index"
    served.mkdir()
    for wheel in fleethosts.provision_wheels(cache, python).glob("*.whl"):
        shutil.copyfile(wheel, served / wheel.name)
    envs = work / "envs"
    env = {**os.environ, "PROVISION_HOME": str(work / "home")}
    try:
        with fleethosts.serve(served) as index:
            code, text = run_cli("render", "--tf", tf, "--path", "pip", "--python", python,
                                 "--name", "tiny", "--out", str(envs))  # fmt: skip
            assert code == 0, text
            wheel = build_wheel(served, "1.0")
            sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
            Env(envs, "tiny", work / "home").lock(f"{TINY}==1.0 \\\n    --hash=sha256:{sha}\n")
            local_env = {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index.url}
            base = [sys.executable, "-m", "provision"]
            t_install, _ = timed([*base, "install", "tiny", "--out", str(envs)], local_env, work)
            t_verify, _ = timed([*base, "verify", "tiny", "--out", str(envs)], local_env, work)
            local = t_install + t_verify
            one = fleet_runs(work, envs, index, 1, env)
            many = fleet_runs(work, envs, index, args.hosts, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        ("local install + verify (no Ansible)", local, ""),
        ("fleet, 1 host, first run", one[0], f"{one[0] - local:+.1f} s over local"),
        ("fleet, 1 host, second run (changed=0)", one[1], ""),
        (f"fleet, {args.hosts} hosts, first run", many[0], f"{many[0] / one[0]:.2f}x one host"),
        (f"fleet, {args.hosts} hosts, second run", many[1], f"{many[1] / one[1]:.2f}x one host"),
    ]
    for name, seconds, note in rows:
        print(f"{name:<42} {seconds:7.1f} s  {note}")
    ratio = max(many[0] / one[0], many[1] / one[1])
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"target: {args.hosts} hosts within {TARGET}x one host: {verdict} ({ratio:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps({n: round(s, 2) for n, s, _ in rows}, indent=2) + "\n")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
