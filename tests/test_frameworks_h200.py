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


@pytest.mark.parametrize(
    ("fixture", "name", "other", "locked", "cudnn"),
    [
        # TensorFlow 2.20.0 and torch 2.10.0: cuDNN 9.3 -> 9.10.2, CUDA 12.5 -> 12.8.
        (H200, "tf2.20-torch", "torch", {"cuda": "12.8", "cudnn": "9.10"}, "9.10.2"),
        # TensorFlow 2.21 pairs with no torch on the index (provision matrix pairs torch); with
        # JAX 0.12.0.1 cuDNN moves 9.3 -> 9.28 within its and-cuda range.
        (H100_JAX, "tf2.21-jax", "jax", {"cuda": "12.5", "cudnn": "9.28"}, "9.28.0"),
    ],
)
def test_the_gpu_report_passes_with_both_frameworks_on_the_gpu_and_the_locks_libraries(
    fixture: Path, name: str, other: str, locked: dict[str, str], cudnn: str
) -> None:
    env = environment.load(fixture / name)
    assert [p.name for p in env.packages()] == [other]
    assert locked_libraries(env) == locked
    report = json.loads((fixture / "verify.json").read_text())["report"]
    judged = verify.compare(report, verify.expected_of(env), require_gpu=True, name=env.name)
    assert judged.ok and not judged.cpu_only, [f"{o.name}: {o.reason}" for o in judged.failures]
    findings = {o.name: o for o in judged.findings}
    for check in ("cudart_version", "cudnn_version", "gpu0_compute"):
        assert findings[check].status == "pass", findings[check].reason
    assert f"{cudnn} is loaded, as the lock holds" in findings["cudnn_version"].reason
    checks = {c["name"]: c for c in report["checks"]}
    frameworks = checks["frameworks"]
    assert frameworks["status"] == "pass"
    seen = frameworks["details"][other]
    assert seen["gpus"] == 1 and seen["cudnn"] == cudnn and seen["matmul_max_error"] < 1e-3
    folders = {os.path.dirname(p) for p in frameworks["details"]["cudnn_copies"]}
    assert len(folders) == 1 and folders == {os.path.dirname(checks["cudnn"]["details"]["path"])}


def test_jax_is_asked_for_a_float32_matmul() -> None:
    """The H100 before the check asked JAX for Precision.HIGHEST: its TF32 default failed the
    matmul (0.033 off); after, 8.4e-5, and its convolution right."""
    before = (H100_JAX / "verify-before-highest.txt").read_text()
    assert "FAIL  frameworks         jax's GPU matmul is wrong" in before
    report = json.loads((H100_JAX / "verify.json").read_text())["report"]
    jax = next(c for c in report["checks"] if c["name"] == "frameworks")["details"]["jax"]
    assert jax["matmul_max_error"] < 1e-4 and jax["conv"] == 36.0  # ones through 3x3x4


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
