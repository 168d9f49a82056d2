"""provision bench under the environment's GPU policy, and with its first step (an XLA compile)
bounded: real TensorFlow 2.21 on the CPU (tests/tfvenv.py), through the CLI.

The policy is applied by one piece of code (provision/payload/gpu_policy.py) for the start-up
hook, the smoke test and the benchmark. This host has no GPU, so PROVISION_GPU_POLICY_DEVICE=CPU
applies it to the CPU's physical device: a limit becomes a logical device configuration there,
and TensorFlow enforces on it the rules that broke `provision bench` on an H200 (configuration
before initialisation, once). A compile that never ends is PROVISION_BENCH_FAULT's
hang-first-step: the first step of that precision sleeps until it is killed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import clitools
import pytest
import tfvenv
from click.testing import CliRunner

from provision import environment
from provision.cli.commands import cli
from provision.install import prefix_hooks
from provision.matrix import load
from provision.payload import gpu_policy

SMALL = ["--model", "small_cnn", "--image-size", "8", "--batch-per-replica", "8", "--steps", "2",
         "--warmup", "1", "--cpu-devices", "2"]  # fmt: skip
CPU0 = "/physical_device:CPU:0"
ON_CPU = {"PROVISION_GPU_POLICY_DEVICE": "CPU"}


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return tfvenv.ensure(load().newest)


def purelib(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(done.stdout.strip())


@pytest.fixture(scope="module")
def hooked(tf_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a venv hooked as `provision install` hooks an environment rendered with
    --gpu-memory 4096, seeing the cached TensorFlow venv's packages through a .pth."""
    release = load().newest
    tmp = tmp_path_factory.mktemp("hooked")
    rendered = CliRunner().invoke(
        cli, ["render", "--tf", release.tf, "--path", "pip", "--python",
              tfvenv.python_for(release), "--name", "lim", "--gpu-memory", "4096", "--out",
              str(tmp / "envs")],
    )  # fmt: skip
    assert rendered.exit_code == 0, rendered.output
    venv = tmp / "venv"
    subprocess.run([str(tf_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    (purelib(python) / "00-tensorflow-venv.pth").write_text(f"{purelib(tf_python)}\n")
    prefix_hooks.install_hooks(environment.load(tmp / "envs" / "lim"), venv)
    return python


def bench_json(python: Path, *args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    """`provision bench --python PYTHON ARGS --json` as a user runs it: exit, report, stderr."""
    done = clitools.provision(
        "bench", "--python", str(python), *args, "--json", timeout=900, env=env
    )
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.mark.slow
def test_bench_keeps_the_limit_the_start_up_hook_set(hooked: Path) -> None:
    """The hook configured the device when TensorFlow was imported; the benchmark finds it
    configured and sets nothing (memory growth there is what TensorFlow refuses: "Cannot set
    memory growth on device when virtual devices configured")."""
    code, report, err = bench_json(hooked, "--precision", "float32", *SMALL, **ON_CPU)
    assert code == 0, err[-3000:]
    assert report["gpu_policy"] == {
        "policy": "limit",
        "limit_mib": 4096,
        "devices": {CPU0: "1 logical device"},
        "set_by": {CPU0: "provision_env_hook"},
        "errors": [],
    }
    line = (
        "GPU memory: 1 logical device on 1 device(s), set by provision_env_hook (asked for: a "
        "limit of 4096 MiB per GPU)"
    )
    assert line in report["messages"] and line in err  # said once, as it starts
    assert err.count(line) == 1
    assert [r["precision"] for r in report["runs"]] == ["float32"]
    assert "virtual devices configured" not in err


@pytest.mark.slow
def test_gpu_memory_growth_overrides_the_environments_limit_and_says_so(hooked: Path) -> None:
    code, report, err = bench_json(
        hooked, "--precision", "float32", "--gpu-memory", "growth", *SMALL, **ON_CPU
    )
    assert code == 0, err[-3000:]
    assert report["settings"]["gpu_memory"] == "growth"
    policy = report["gpu_policy"]  # the hook kept what the benchmark set: no limit
    assert (policy["policy"], policy["devices"], policy["set_by"]) == (
        "growth",
        {CPU0: "default"},
        {},
    )
    line = "--gpu-memory growth: memory growth, whatever GPU policy the environment sets"
    assert line in report["messages"]
    assert " --gpu-memory growth" in report["command"]


@pytest.mark.slow
def test_bench_applies_the_policy_itself_where_no_hook_did(tf_python: Path) -> None:
    env = {**ON_CPU, gpu_policy.LIMIT_VAR: "4096"}
    code, report, err = bench_json(tf_python, "--precision", "float32", *SMALL, **env)
    assert code == 0, err[-3000:]
    assert report["gpu_policy"]["set_by"] == {CPU0: "the benchmark"}
    assert report["gpu_policy"]["errors"] == []
    bad = {**ON_CPU, gpu_policy.LIMIT_VAR: "lots"}
    code, report, err = bench_json(tf_python, "--precision", "float32", *SMALL, **bad)
    assert code == 0, err[-3000:]
    assert report["gpu_policy"]["errors"] == [
        f"{gpu_policy.LIMIT_VAR}='lots' is not a number of MiB"
    ]


ORDER = """
import json, os, sys
import tensorflow as tf
import provision_env_hook as hook, provision_gpu_policy as policy
out = {"hook": hook.state["policy"]}
out["again"] = policy.apply(tf, growth_by_default=True, by="a second call")
float(tf.reduce_sum(tf.ones([4])))  # TensorFlow initialises
os.environ[policy.LIMIT_VAR] = ""
cpu = tf.config.list_physical_devices("CPU")[0]
try:
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError as exc:
    out["tensorflow_refuses"] = str(exc)
print(json.dumps(out))
"""

LATE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import tensorflow as tf
import gpu_policy
float(tf.reduce_sum(tf.ones([4])))  # TensorFlow initialised before the policy
print(json.dumps(gpu_policy.apply(tf, growth_by_default=True, by="too late")))
"""


@pytest.mark.slow
def test_a_second_application_is_a_no_op_and_a_late_one_an_error_not_a_crash(
    hooked: Path, tf_python: Path
) -> None:
    done = subprocess.run(
        [str(hooked), "-I", "-c", ORDER], capture_output=True, text=True, timeout=300,
        env={**os.environ, **ON_CPU},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["hook"]["set_by"] == {CPU0: "provision_env_hook"}
    assert out["again"]["set_by"] == {CPU0: "provision_env_hook"}  # found set, left alone
    assert out["again"]["errors"] == []
    assert "cannot be modified after being initialized" in out["tensorflow_refuses"]
    payload = Path(gpu_policy.__file__).parent
    late = subprocess.run(
        [str(tf_python), "-c", LATE, str(payload)], capture_output=True, text=True, timeout=300,
        env={**os.environ, **ON_CPU, gpu_policy.LIMIT_VAR: "4096"},
    )  # fmt: skip
    assert late.returncode == 0, late.stderr[-3000:]
    record = json.loads(late.stdout)
    assert record["devices"] == {CPU0: "default"} and record["set_by"] == {}
    (error,) = record["errors"]
    assert error.startswith(CPU0 + ": ") and "after being initialized" in error


@pytest.mark.slow
def test_a_first_step_past_max_seconds_is_stopped_and_the_run_goes_on(
    tf_python: Path, tmp_path: Path
) -> None:
    """float32's first step never ends: it is killed at --max-seconds with progress meanwhile,
    recorded as "compile over 3 s", and mixed_bfloat16 runs after it."""
    code, report, err = bench_json(
        tf_python, "--precision", "float32,mixed_bfloat16", "--max-seconds", "3", *SMALL,
        PROVISION_BENCH_FAULT="hang-first-step:float32", TMPDIR=str(tmp_path),
    )  # fmt: skip
    assert code == 0, err[-3000:]
    (skipped,) = report["skipped"]
    assert skipped["precision"] == "float32"
    assert skipped["reason"].startswith("compile over 3 s: the first step")
    assert [r["precision"] for r in report["runs"]] == ["mixed_bfloat16"]
    assert "1 x float32: first step running " in err  # progress while it compiles
    assert "1 x float32: skipped: compile over 3 s" in err
    assert report["matmul"] and report["software"]["tensorflow"] == "2.21.0"
    assert not list(tmp_path.glob("provision-bench-part-*"))  # each child's file is gone
    shown = tmp_path / "report.json"
    shown.write_text(json.dumps(report))
    table = CliRunner().invoke(cli, ["bench", "--report", str(shown)])
    assert "1 x float32: skipped: compile over 3 s" in table.stdout
