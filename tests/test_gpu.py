"""Real GPU tests (`-m gpu`): what provision reads and runs on a host with NVIDIA GPUs.

They skip with a reason where there is no NVIDIA driver (every build machine); tests/gpu/README.md
says where they ran and what they saw. The verify test needs an interpreter with TensorFlow's CUDA
build: PROVISION_GPU_PYTHON names it (an environment built by provision, or any venv).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import clitools
import pytest

pytestmark = pytest.mark.gpu


def nvidia_smi(*query: str) -> list[str]:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        pytest.skip("no nvidia-smi: this host has no NVIDIA driver")
    done = subprocess.run([tool, *query], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"nvidia-smi fails here: {done.stderr.strip() or done.stdout.strip()}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


provision = functools.partial(clitools.provision, timeout=900)


def test_doctor_reads_the_gpus_and_driver_nvidia_smi_reports() -> None:
    rows = nvidia_smi("--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader")
    done = provision("doctor", "--json")
    report = json.loads(done.stdout)
    host = report["host"]
    assert [g["name"] for g in host["gpus"]] == [r.split(", ")[0] for r in rows], host["gpus"]
    assert [g["compute_capability"] for g in host["gpus"]] == [r.split(", ")[2] for r in rows]
    assert host["driver"]["version"] == rows[0].split(", ")[1]
    assert host["driver"]["kernel_module"] in ("", host["driver"]["version"])  # no reboot due
    # Some release runs here: a host with a working driver is never refused everything.
    assert any(v["status"] != "cannot" for v in report["verdicts"]), report["verdicts"]


def test_doctor_on_a_gpu_host_names_no_gpu_problem_for_the_newest_release() -> None:
    nvidia_smi("-L")
    done = provision("doctor", "--json")
    report = json.loads(done.stdout)
    newest = [v for v in report["verdicts"] if v["path"] == "pip"][-1]
    assert newest["status"] in ("runs", "fix"), newest  # the driver and GPU are not the problem
    assert not any("driver" in r or "compute capability" in r for r in newest["reasons"]), newest


def test_verify_require_gpu_passes_with_a_tensorflow_interpreter() -> None:
    nvidia_smi("-L")
    python = os.environ.get("PROVISION_GPU_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("PROVISION_GPU_PYTHON does not name an interpreter with TensorFlow")
    done = provision("verify", "--python", python, "--require-gpu", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, [c for c in report["checks"] if c["status"] == "fail"]
    gpus = next(c for c in report["checks"] if c["name"] == "gpus")
    assert gpus["status"] == "pass"
