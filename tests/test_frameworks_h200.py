"""TensorFlow and PyTorch in one environment on an H200, and TensorFlow 2.21 and JAX in one on an
H100, each built from a bundle with no network (tests/gpu/device_frameworks.sh, reports in
tests/fixtures/h200-frameworks and h100-frameworks-jax), judged here again against the
environment it was built from; and the judgement of libraries the lock moved."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from provision import environment, verify
from provision.lock.userlock import locked_libraries
from provision.payload import judgements

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "fixtures" / "h200-frameworks"
H100_JAX = ROOT / "tests" / "fixtures" / "h100-frameworks-jax"


def test_the_h200_report_passes_with_torch_on_the_gpu_and_the_locks_libraries() -> None:
    env = environment.load(H200 / "tf2.20-torch")
    assert [p.name for p in env.packages()] == ["torch"]
    assert locked_libraries(env) == {"cuda": "12.8", "cudnn": "9.10"}
    report = json.loads((H200 / "verify.json").read_text())["report"]
    judged = verify.compare(report, verify.expected_of(env), require_gpu=True, name=env.name)
    assert judged.ok and not judged.cpu_only, [f"{o.name}: {o.reason}" for o in judged.failures]
    findings = {o.name: o for o in judged.findings}
    for name in ("cudart_version", "cudnn_version", "gpu0_compute"):
        assert findings[name].status == "pass", findings[name].reason
    assert "as the lock holds" in findings["cudnn_version"].reason
    checks = {c["name"]: c for c in report["checks"]}
    frameworks = checks["frameworks"]
    assert frameworks["status"] == "pass"
    torch = frameworks["details"]["torch"]
    assert torch["gpus"] == 1 and torch["cudnn"] == "9.10.2" and torch["matmul_max_error"] < 1e-3
    folders = {os.path.dirname(p) for p in frameworks["details"]["cudnn_copies"]}
    assert len(folders) == 1 and folders == {os.path.dirname(checks["cudnn"]["details"]["path"])}


def test_the_h100_report_passes_with_jax_on_the_gpu_and_the_locks_cudnn() -> None:
    """TensorFlow 2.21 pairs with no torch on the index (provision matrix pairs torch), with JAX
    0.12.0.1: cuDNN moves 9.3 -> 9.28 within its and-cuda range, and TensorFlow still passes."""
    env = environment.load(H100_JAX / "tf2.21-jax")
    assert [p.name for p in env.packages()] == ["jax"]
    assert locked_libraries(env) == {"cuda": "12.5", "cudnn": "9.28"}
    report = json.loads((H100_JAX / "verify.json").read_text())["report"]
    judged = verify.compare(report, verify.expected_of(env), require_gpu=True, name=env.name)
    assert judged.ok and not judged.cpu_only, [f"{o.name}: {o.reason}" for o in judged.failures]
    findings = {o.name: o for o in judged.findings}
    assert "9.28.0 is loaded, as the lock holds" in findings["cudnn_version"].reason
    checks = {c["name"]: c for c in report["checks"]}
    assert {c["status"] for c in report["checks"]} <= {"pass", "warn", "skip"}
    frameworks = checks["frameworks"]
    jax = frameworks["details"]["jax"]
    assert jax["gpus"] == 1 and jax["cudnn"] == "9.28.0" and jax["matmul_max_error"] < 1e-3
    assert jax["conv"] == 36.0  # ones through a 3x3x4 kernel
    folders = {os.path.dirname(p) for p in frameworks["details"]["cudnn_copies"]}
    assert folders == {os.path.dirname(checks["cudnn"]["details"]["path"])}
    # The same host before the check asked JAX for float32: its TF32 default failed the matmul.
    before = (H100_JAX / "verify-before-highest.txt").read_text()
    assert "FAIL  frameworks         jax's GPU matmul is wrong" in before


@pytest.mark.parametrize(
    ("fixture", "order", "other"),
    [
        (H200, "tf-first", "torch"),
        (H200, "torch-first", "torch"),
        (H100_JAX, "tf-first", "jax"),
        (H100_JAX, "jax-first", "jax"),
    ],
)
def test_one_process_ran_both_on_the_gpu_with_one_copy_of_each_library(
    fixture: Path, order: str, other: str
) -> None:
    seen = json.loads((fixture / f"one-process-{order}.json").read_text())
    assert seen["LD_LIBRARY_PATH"] is None  # the interpreter alone, under env -i
    assert seen["tensorflow"]["matmul_on"].endswith("GPU:0")
    assert seen["tensorflow"]["conv_on"].endswith("GPU:0")
    if other == "torch":
        assert seen["torch"]["matmul_on"] == "cuda:0" and seen["torch"]["cudnn"] == 91002
    else:
        assert seen["jax"]["matmul_on"] == "[CudaDevice(id=0)]"
        assert seen["jax"]["conv_on"] == "{CudaDevice(id=0)}"
    assert seen["tensorflow"]["conv_centre"] == seen[other]["conv_centre"] == 72.0
    for lib in ("libcudnn", "libcublas", "libcudart", "libnccl"):
        names = [os.path.basename(p) for p in seen[lib]]
        assert len(names) == len(set(names)), f"{lib} loaded twice: {seen[lib]}"
        assert len({os.path.dirname(p) for p in seen[lib]}) == 1


@pytest.mark.parametrize(
    ("found", "locked", "status"),
    [("9.10.2", "9.10", "pass"), ("9.3.0", "9.10", "fail"), ("12.8", "12.8", "pass")],
)
def test_a_library_the_lock_moved_is_judged_against_the_lock(
    found: str, locked: str, status: str
) -> None:
    got, reason = judgements.judge_locked_version("cuDNN", found, locked)
    assert got == status
    assert ("as the lock holds" in reason) == (status == "pass")


def test_a_lock_that_moved_nothing_names_no_libraries() -> None:
    assert locked_libraries(environment.load(ROOT / "envs" / "tf2.20-pip")) == {}
