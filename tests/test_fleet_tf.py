"""provision fleet to a host that ends "ready": real TensorFlow, installed and verified there.

The committed envs/tf2.13-pip (a copy) and its 49 locked wheels (TensorFlow 2.13.1 and NVIDIA's
CUDA wheels, 2.2 GB), taken from the cache the real-TensorFlow bundle test fills (downloaded once,
with their locked hashes), served by the test's index to one namespace host (tests/fleethosts.py).
The host has a stand-in RTX A6000 on driver 555 for the doctor (a host with no driver at all is
refused: the release needs one) and no real GPU, so the smoke test runs TensorFlow on the CPU,
which verify accepts because the environment does not require a GPU. Nothing after the doctor is
a stand-in: uv installs the real wheels from the index, and the smoke test imports TensorFlow and
trains with it in the host's own session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import fleethosts
import pytest
from bundletools import cache_root

from provision import environment, tools
from provision.bundle import bundle_fetch
from provision.bundle.make import host_glibc

ROOT = Path(__file__).resolve().parent.parent
NAME = "tf2.13-pip"
NEEDS = 5_000_000_000  # bytes free: TensorFlow and NVIDIA's libraries unpacked in uv's cache
REASON = fleethosts.unavailable()
if REASON is None and shutil.which("ansible-playbook") is None:
    beside = Path(sys.executable).parent / "ansible-playbook"
    REASON = None if beside.exists() else "ansible-core is not installed (pip install -e '.[test]')"
pytestmark = [pytest.mark.skipif(REASON is not None, reason=REASON or ""), pytest.mark.slow]


def serve_locked_wheels(env: environment.EnvDir, into: Path) -> fleethosts.Index:
    """`into` holds (links to) every wheel of the lock and of provision's dependencies; the index
    that serves it knows the locked wheels' sha256 from the cache, so it never hashes 2.2 GB."""
    target = bundle_fetch.BundleMachine(env.python, env.python, "x86_64", host_glibc(), "linux-64")
    cache = bundle_fetch.BundleCache(cache_root().with_name("bundle-cache-tf"))
    items = bundle_fetch.lock_wheels(env.lock, target, cache, lambda line: None)
    deps = fleethosts.provision_wheels(cache_root().parent, env.python)
    into.mkdir()
    for path in [*(i.path for i in items), *sorted(deps.glob("*.whl"))]:
        if not (into / path.name).exists():
            (into / path.name).symlink_to(path.resolve())
    index = fleethosts.Index(into)
    for item in items:
        st = (into / item.path.name).stat()
        index.hashes[(item.path.name, st.st_size, st.st_mtime_ns)] = item.sha256
    return index


def test_a_host_with_real_tensorflow_ends_ready(tmp_path: Path) -> None:
    committed = environment.load(ROOT / "envs" / NAME)
    if not tools.has_python(committed.python):
        pytest.skip(f"needs Python {committed.python} on this machine (the hosts share it)")
    free = shutil.disk_usage(tmp_path).free
    if free < NEEDS:
        pytest.skip(f"needs {NEEDS / 1e9:.0f} GB free under {tmp_path} for the host's venv and uv "
                    f"cache; {free / 1e9:.1f} GB are")  # fmt: skip
    t0 = time.monotonic()
    envs = tmp_path / "envs"
    shutil.copytree(committed.root, envs / NAME)
    env = environment.load(envs / NAME)
    served = serve_locked_wheels(env, tmp_path / "index")
    source = tmp_path / "source"  # provision as it is now: the wheel the host gets
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "provision", source / "provision", ignore=skip)
    shutil.copytree(ROOT / "templates", source / "templates", ignore=skip)
    prepared = time.monotonic() - t0

    libs = tmp_path / "libs"
    libs.mkdir()
    with fleethosts.lab(tmp_path / "lab", libs) as lab, fleethosts.serving(served) as index:
        host = lab.add("lab-tf", lambda b, c: fleethosts.a6000(b, c, env.python), index.url)
        try:
            reports = tmp_path / "reports"
            scrub = ("PROVISION_HOST_ROOT", "VIRTUAL_ENV", "ANSIBLE_CONFIG")
            control = {k: v for k, v in os.environ.items() if k not in scrub}
            control |= {"PROVISION_HOME": str(tmp_path / "control-home"),
                        "PYTHONPATH": str(source)}  # fmt: skip
            t1 = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "provision", "fleet", NAME, "--out", str(envs),
                 "--inventory", str(lab.inventory()), "--report-dir", str(reports)],
                capture_output=True, text=True, timeout=900, env=control, cwd=tmp_path,
                check=False,
            )  # fmt: skip
            rolled = time.monotonic() - t1
            out = done.stdout + done.stderr
            data = json.loads((reports / "fleet.json").read_text())
            assert done.returncode == 0, out
            assert [(h["host"], h["result"]) for h in data["hosts"]] == [("lab-tf", "ready")], out
            steps = [(s["step"], s["status"]) for s in data["hosts"][0]["steps"]]
            assert steps == [
                ("setup", "changed"), ("doctor", "ok"), ("install", "changed"),
                ("gpu policy", "ok"), ("verify", "ok"),
            ], out  # fmt: skip
            assert data["hosts"][0]["detail"] == "smoke test passed (CPU only: no NVIDIA driver)"
            verify = json.loads((reports / "hosts" / "lab-tf" / "verify.json").read_text())
            assert verify["rc"] == 0 and verify["report"]["ok"] is True
            assert verify["report"]["report"]["environment"]["tensorflow"] == "2.13.1"
            assert verify["report"]["cpu_only"] == "CPU only: no NVIDIA driver"
            assert "lab-tf" in out[out.index("host  ") :] and "ready" in out
            print(f"\nprepared {prepared:.1f} s; rolled out to a ready host in {rolled:.1f} s")
            for s in data["hosts"][0]["steps"]:
                print(f"  {s['step']:<10} {s['status']:<8} {s['seconds']:6.1f} s  {s['detail']}")
        finally:
            shutil.rmtree(host.home, ignore_errors=True)  # the venv and uv's cache: GBs
