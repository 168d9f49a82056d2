"""provision bench: the benchmark runs for real on CPU with virtual devices; reports and plots.

The slow tests use a cached real TensorFlow venv (tests/tfvenv.py). The H200 reports committed in
tests/fixtures/bench/ are checked for the invariants every report must hold.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
import tfvenv
from click.testing import CliRunner

from provision import bench
from provision.cli import cli
from provision.matrix import load

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
SMALL = [
    "--model",
    "small_cnn",
    "--image-size",
    "8",
    "--batch-per-replica",
    "8",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--cpu-devices",
    "2",
]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0], "corrupt IHDR"
    return width, height


def check_report(report: dict) -> None:
    assert report["schema"] == 1 and report["tool"] == "provision-bench"
    assert report["runs"], "no configuration ran"
    base = [r for r in report["runs"] if r["gpus"] == 1 and r["precision"] == "float32"]
    for run in report["runs"]:
        assert run["images_per_s"] > 0 and run["step_ms"] > 0 and run["epoch_s"] > 0
        assert 0.0 <= run["accuracy"] <= 1.0
        assert run["global_batch"] % run["gpus"] == 0
        if base:
            want = run["images_per_s"] / base[0]["images_per_s"]
            assert run["speedup"] == pytest.approx(want, rel=1e-2)
    for row in report["matmul"]:
        assert row["tflops"] > 0 and row["precision"] in {
            "float32",
            "mixed_float16",
            "mixed_bfloat16",
        }


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_committed_h200_reports_hold_the_invariants(path: Path) -> None:
    report = json.loads(path.read_text())
    check_report(report)
    assert report["tensorflow"] == "2.21.0"
    assert all(d.startswith("/job:localhost") or "GPU" in d for d in report["devices"])


def test_h200_report_plots(tmp_path: Path) -> None:
    report = json.loads((FIXTURES / "bench-resnet50-224.json").read_text())
    out = tmp_path / "scaling.png"
    bench.write_plot(report, out)
    width, height = png_size(out)
    assert (width, height) == (720, 480)


def test_two_gpu_scaling_measured_on_h200_is_near_linear() -> None:
    runs = json.loads((FIXTURES / "bench-resnet50-224.json").read_text())["runs"]
    two = next(r for r in runs if r["gpus"] == 2 and r["precision"] == "float32")
    assert two["efficiency"] > 0.85


def test_unknown_environment_is_one_line() -> None:
    result = CliRunner().invoke(cli, ["bench", "nope", "--out", "/nonexistent-envs"])
    assert result.exit_code == 2  # a name that names nothing: a usage error
    assert result.output.count("\n") == 1 and "provision: error:" in result.output


def test_no_name_and_no_python_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["bench"])
    assert result.exit_code == 2
    assert "--python" in result.output


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return tfvenv.ensure(load().newest)


@pytest.mark.slow
def test_cpu_run_with_virtual_devices_reports_and_plots(tf_python: Path, tmp_path: Path) -> None:
    plot = tmp_path / "out" / "speedup.png"
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "--python",
            str(tf_python),
            "--gpus",
            "1,2",
            "--precision",
            "float32,mixed_bfloat16",
            "--json",
            "--plot",
            str(plot),
            *SMALL,
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    check_report(report)
    assert [(r["gpus"], r["precision"]) for r in report["runs"]] == [
        (1, "float32"),
        (2, "float32"),
        (1, "mixed_bfloat16"),
        (2, "mixed_bfloat16"),
    ]
    assert report["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert report["failed"] == []
    assert png_size(plot)[0] > 0


@pytest.mark.slow
def test_more_devices_than_the_host_has_is_refused(tf_python: Path) -> None:
    result = CliRunner().invoke(cli, ["bench", "--python", str(tf_python), "--gpus", "1,4", *SMALL])
    assert result.exit_code == 1
    assert "asked for 4 virtual CPU devices but this host has 2" in result.output


@pytest.mark.slow
def test_indivisible_global_batch_is_adjusted_with_a_message(tf_python: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "--python",
            str(tf_python),
            "--gpus",
            "2",
            "--precision",
            "float32",
            "--global-batch",
            "9",
            *SMALL,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "global batch 9 is not divisible by 2 replicas; using 8" in result.output
