"""provision bench: the benchmark runs for real on CPU with virtual devices; reports and plots.

The slow tests use cached real TensorFlow venvs (tests/tfvenv.py): 2.21 (Keras 3) and, for the
comparison, 2.13 (Keras 2). The H200 reports committed in tests/fixtures/bench/ (schema 1, made
before reports named their hardware) are checked for the invariants every report must hold and
still load, compare and plot.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import click
import pytest
import tfvenv
from click.testing import CliRunner
from fakehost import H200, SMI_QUERY, FakeHost

from provision import bench
from provision.cli import bench_report
from provision.cli.commands import cli
from provision.host.topology import parse_topo, summarise
from provision.matrix import load
from provision.payload import bench_schema
from provision.progress import Event

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
H200_REPORTS = sorted(FIXTURES.glob("bench-*.json"))
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


def _without(args: list[str], flag: str) -> list[str]:
    """args without one option and its value: provision refuses an option given twice."""
    at = args.index(flag)
    return args[:at] + args[at + 2 :]


H200_HARDWARE = {
    "gpus": [
        {"index": i, "name": "NVIDIA H200", "memory_mib": 143771, "compute_capability": "9.0"}
        for i in (0, 1)
    ],
    "driver": "580.159.04",
    "driver_cuda": "13.0",
    "source": "nvml",
    "interconnect": {"kind": "NVLink", "links": {"0-1": "NV18"}, "source": "nvidia-smi topo -m"},
    "cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+", "cores": 32},
}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0], "corrupt IHDR"
    return width, height


def check_report(report: dict[str, Any]) -> None:
    assert report["schema"] in (1, 2) and report["tool"] == "provision-bench"
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
        assert row["tflops"] > 0 and row["precision"] in bench_schema.PRECISIONS


def h200_v2(name: str = "bench-resnet50-224.json", env: str = "tf2.21-pip") -> dict[str, Any]:
    """A committed H200 report as schema 2 says it: with its hardware, software and command."""
    report = bench_schema.upgrade(json.loads((FIXTURES / name).read_text()))
    report.update(
        hardware=copy.deepcopy(H200_HARDWARE),
        environment={"name": env, "python": f"/envs/{env}/bin/python"},
        command=f"provision bench {env} --gpus 1,2 --image-size 224",
        software={
            "tensorflow": "2.21.0",
            "keras": "3.13.1",
            "python": "3.12.3",
            "build": {"cuda": "12.5.1", "cudnn": "9"},
            "loaded": {"cudart": {"version": "12.5"}, "cudnn": {"version": "9.3.0"}},
        },
    )
    return report


# -- reports: schema, upgrade, table, markdown, plot (no TensorFlow) ----------------------------


@pytest.mark.parametrize("path", H200_REPORTS, ids=lambda p: p.stem)
def test_committed_h200_reports_hold_the_invariants(path: Path) -> None:
    report = json.loads(path.read_text())
    check_report(report)
    assert report["tensorflow"] == "2.21.0"
    assert all(d.startswith("/job:localhost") or "GPU" in d for d in report["devices"])
    (upgraded,) = bench_schema.read(report)
    check_report(upgraded)
    assert upgraded["hardware"] is None and upgraded["settings"]["loop"] == "fit"
    assert upgraded["settings"]["jit"] == ("on" if report["settings"]["jit"] else "off")


def test_two_gpu_scaling_measured_on_h200_is_near_linear() -> None:
    runs = json.loads((FIXTURES / "bench-resnet50-224.json").read_text())["runs"]
    two = next(r for r in runs if r["gpus"] == 2 and r["precision"] == "float32")
    assert two["efficiency"] > 0.85


def test_reports_without_hardware_still_load_and_say_so(tmp_path: Path) -> None:
    plot = tmp_path / "old.png"
    result = bench_report.with_plot(bench.load([FIXTURES / "bench-resnet50-224.json"], plot), plot)
    text = "\n".join(bench_report.result_lines(result))
    assert "hardware: not recorded (devices: /device:GPU:0, /device:GPU:1)" in text
    assert "task: not recorded (schema 1)" in text
    assert png_size(tmp_path / "old.png") == (720, 480)


def test_table_header_names_the_hardware_and_the_software_as_loaded() -> None:
    lines = bench_report.lines([h200_v2()])
    assert lines[0] == (
        "hardware: 2 x NVIDIA H200 (140 GiB), driver 580.159.04 (supports CUDA 13.0), "
        "NVLink (NV18), CPU Intel(R) Xeon(R) Platinum 8480+ (32 cores)"
    )
    assert lines[1] == (
        "TensorFlow 2.21.0, Keras 3.13.1, CUDA runtime 12.5 (built for 12.5.1), "
        "cuDNN 9.3.0 (built for 9), Python 3.12.3"
    )
    assert lines[2].startswith(
        "settings: model resnet50, px 224, batch/replica 128, loop fit, jit off"
    )
    head = next(ln for ln in lines if "images/s" in ln).split()
    assert head[:3] == ["devices", "precision", "images/s"] and "environment" not in head


def test_several_environments_make_one_table_against_one_baseline() -> None:
    old = h200_v2(env="tf2.13-pip")
    old["software"].update(tensorflow="2.13.1", keras="2.13.1")
    for run in old["runs"]:
        run["images_per_s"] *= 2
    new = h200_v2(env="tf2.21-pip")
    lines = bench_report.lines([old, new])
    assert lines[1].startswith("tf2.13-pip: TensorFlow 2.13.1, Keras 2.13.1")
    assert lines[2].startswith("tf2.21-pip: TensorFlow 2.21.0, Keras 3.13.1")
    rows = [ln.split() for ln in lines if ln.startswith("  tf2.")]
    assert [(r[0], r[1], r[2]) for r in rows[:2]] == [
        ("tf2.13-pip", "1", "float32"),
        ("tf2.13-pip", "2", "float32"),
    ]
    first_new = next(r for r in rows if r[0] == "tf2.21-pip")
    assert first_new[-2] == "0.50"  # half of tf2.13-pip's 1 x float32, the one baseline
    assert "speed-up is relative to tf2.13-pip 1 x float32" in lines


def test_settings_that_differ_become_columns() -> None:
    a = h200_v2()
    b = h200_v2("bench-mlp-xla.json")
    lines = bench_report.lines([a, b])
    head = next(ln for ln in lines if "images/s" in ln).split()
    assert head[:4] == ["model", "px", "batch/replica", "jit"]
    settings = next(ln for ln in lines if ln.startswith("settings: "))
    assert "model" not in settings and "loop fit" in settings


def test_markdown_findings_carry_each_rows_command() -> None:
    md = bench_report.markdown([h200_v2()])
    assert md[0].startswith("| TensorFlow / Keras | devices | precision | images/s")
    assert md[0].endswith("| command |")
    assert md[2].startswith("| 2.21.0 / 3.13.1 | 1 | float32 | 799.0 |")
    assert md[2].endswith("| `provision bench tf2.21-pip --gpus 1,2 --image-size 224` |")
    assert md[-1].startswith("hardware: 2 x NVIDIA H200")


def test_plot_has_a_line_per_environment_and_precision(tmp_path: Path) -> None:
    out = tmp_path / "compare.png"
    bench_report.write_plot([h200_v2(env="tf2.13-pip"), h200_v2()], out)
    assert png_size(out) == (720, 480)


def test_a_set_of_reports_round_trips(tmp_path: Path) -> None:
    result = bench.BenchResult((h200_v2(env="a"), h200_v2(env="b")))
    doc = result.as_json()
    assert doc["tool"] == "provision-bench-set" and len(doc["reports"]) == 2
    (tmp_path / "set.json").write_text(json.dumps(doc))
    again = bench.load([tmp_path / "set.json"])
    assert [bench_report.label(r) for r in again.reports] == ["a", "b"]
    assert bench.BenchResult((h200_v2(),)).as_json()["tool"] == "provision-bench"


def test_not_a_report_is_refused() -> None:
    with pytest.raises(bench_schema.ReportError, match="not a provision-bench report"):
        bench_schema.upgrade({"tool": "other"})
    with pytest.raises(bench_schema.ReportError, match="schema 9"):
        bench_schema.upgrade({"tool": "provision-bench", "schema": 9})


def test_cli_shows_saved_reports_as_json_markdown_and_table(tmp_path: Path) -> None:
    files = [FIXTURES / "bench-resnet50-224.json", FIXTURES / "bench-resnet50-32.json"]
    args = [w for f in files for w in ("--report", str(f))]
    done = CliRunner().invoke(cli, ["bench", *args, "--json"])
    assert done.exit_code == 0, done.output
    assert [r["settings"]["image_size"] for r in json.loads(done.stdout)["reports"]] == [224, 32]
    md = CliRunner().invoke(cli, ["bench", *args, "--markdown"])
    assert md.exit_code == 0 and md.stdout.startswith("| TensorFlow / Keras | px | batch/replica")
    table = CliRunner().invoke(cli, ["bench", *args])
    assert table.exit_code == 0 and "hardware: not recorded" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--report", "r.json", "envA"], "give no NAME or --python"),
        (["--steps", "5", "--steps-per-execution", "2"], "5 is not a multiple of"),
        (["--warmup", "3", "--steps-per-execution", "2", "--steps", "4"], "--warmup"),
        (["--strategy", "default", "--gpus", "1,2"], "runs on one device"),
        (["--data", "numpy"], "'numpy' is not one of"),
        (["--loop", "keras"], "'keras' is not one of"),
        (["--data-format", "nhwc"], "'nhwc' is not one of"),
        (["--steps-per-execution", "0"], "0 is not in the range"),
    ],
)
def test_bench_options_are_checked_before_anything_runs(args: list[str], message: str) -> None:
    done = CliRunner().invoke(cli, ["bench", "--python", "/nonexistent/bin/python", *args])
    assert done.exit_code == 2, done.output
    assert message in done.output


def test_unknown_environment_is_one_line() -> None:
    result = CliRunner().invoke(cli, ["bench", "nope", "--out", "/nonexistent-envs"])
    assert result.exit_code == 2  # a name that names nothing: a usage error
    assert result.output.count("\n") == 1 and "provision: error:" in result.output


def test_no_name_and_no_python_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["bench"])
    assert result.exit_code == 2
    assert "--python" in result.output


def test_the_recorded_command_names_what_differs_from_the_defaults() -> None:
    options = bench.BenchOptions(jit="on", steps=20, loop="custom")
    assert bench.command_line(["tf2.21-pip", "tf2.13-pip"], options) == (
        "provision bench tf2.21-pip tf2.13-pip --steps 20 --jit --loop custom"
    )
    off = dataclasses.replace(options, jit="off")
    assert bench.command_line(["x"], off).count("--no-jit") == 1


def test_the_options_default_to_the_payloads_defaults_and_to_the_clis() -> None:
    """One set of defaults: the typed options, the payload's schema and the command's flags."""
    from provision.cli.bench_cmd import bench_cmd

    made = dict(bench.BenchOptions().items())
    assert made == {k: v for k, v in bench_schema.DEFAULTS.items() if k in made}
    ctx = click.Context(bench_cmd)
    for param in bench_cmd.params:
        if param.name in made and param.name not in ("jit", "optimizer_jit"):
            given = param.get_default(ctx)
            unset = given is None or type(given).__name__ == "Sentinel"  # click 8.2: UNSET
            assert (None if unset else given) == made[param.name], param.name
    # the order of the options is the command's: flags and recorded command lines follow it
    order = [p.name for p in bench_cmd.params if p.name in made]
    assert order == list(made)


def test_progress_events_of_a_comparison_name_the_environment() -> None:
    seen: list[Event] = []
    events = bench._Events(seen.append, "tf2.13-pip")
    prefix = bench_schema.EVENT
    for ev in (
        {"event": "config", "index": 1, "total": 2, "gpus": 1, "precision": "float32"},
        {"event": "first_step", "gpus": 1, "precision": "float32", "seconds": 12.34},
        {"event": "result", "gpus": 1, "precision": "float32", "images_per_s": 1437.0,
         "accuracy": 0.91, "seconds": 40},
        {"event": "skipped", "gpus": 4, "precision": "float32", "reason": "needs 4 GPUs"},
        {"event": "warn", "text": "XLA compiles"},
    ):  # fmt: skip
        events(prefix + json.dumps(ev), True)
    assert [e.text for e in seen] == [
        "[1/2] tf2.13-pip 1 x float32 ...",
        "tf2.13-pip 1 x float32: first step 12.3 s (tracing, compiling)",
        "tf2.13-pip 1 x float32: 1,437.0 images/s, accuracy 0.910 (40 s)",
        "tf2.13-pip 4 x float32: skipped: needs 4 GPUs",
        "tf2.13-pip: XLA compiles",
    ]
    assert [e.kind for e in seen] == ["step", "info", "done", "done", "warn"]


def fake_python(folder: Path, body: str) -> Path:
    """An interpreter stand-in: a shell script that answers `python -I payload.pyz bench ...`."""
    exe = folder / "bin" / "python"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


def test_an_environment_that_fails_does_not_stop_the_others(tmp_path: Path) -> None:
    fixture = FIXTURES / "bench-resnet50-224.json"
    event = bench_schema.EVENT + json.dumps(
        {"event": "config", "index": 1, "total": 1, "gpus": 1, "precision": "float32"}
    )
    good = fake_python(
        tmp_path / "good-env",
        f"echo '{event}' >&2\n"
        'while [ $# -gt 0 ]; do [ "$1" = --json ] && cp ' + f"'{fixture}'" + ' "$2"; shift; done\n',
    )
    bad = fake_python(tmp_path / "bad-env", "echo 'ImportError: no tensorflow' >&2; exit 1\n")
    done = CliRunner().invoke(
        cli, ["bench", "--python", str(bad), "--python", str(good), "--json", "--gpus", "1,2"]
    )
    assert done.exit_code == 1, done.output  # one environment gave no report
    doc = json.loads(done.stdout)
    assert doc["errors"] == [
        {"environment": "bad-env", "error": "the benchmark failed (exit 1): ImportError: no "
         "tensorflow"}
    ]  # fmt: skip
    (report,) = doc["reports"]
    assert report["environment"] == {"name": "good-env", "python": str(good)}
    assert report["command"] == f"provision bench --python {bad} --python {good} --gpus 1,2"
    assert report["hardware"]["cpu"]["cores"] >= 1  # read on this host, added to the report
    assert "[1/1] good-env 1 x float32 ..." in done.stderr
    assert "bad-env: the benchmark failed (exit 1)" in done.stderr


# -- hardware: NVML / nvidia-smi and nvidia-smi topo -m ------------------------------------------


def test_topology_of_two_h200s_is_nvlink() -> None:
    links = parse_topo((FIXTURES / "topo-h200x2.txt").read_text())
    assert links == {"0-1": "NV18"}
    assert summarise(links, 2).describe() == "NVLink (NV18)"


def test_topology_of_four_pcie_gpus_and_a_nic() -> None:
    links = parse_topo((FIXTURES / "topo-pcie4.txt").read_text())
    assert links == {"0-1": "PIX", "0-2": "SYS", "0-3": "SYS", "1-2": "SYS", "1-3": "SYS",
                     "2-3": "PHB"}  # fmt: skip
    assert summarise(links, 4).describe() == "PCIe (PHB, PIX, SYS)"
    assert summarise({"0-1": "NV4", "0-2": "SYS", "1-2": "SYS"}, 3).kind == "NVLink and PCIe"
    assert summarise({}, 2).kind == "unknown" and summarise({}, 1).kind == "one GPU"


def _two_h200s(tmp_path: Path, topo: str | None) -> dict[str, str]:
    host = FakeHost(tmp_path, tmp_path / "libs")
    query = (H200 / "nvidia-smi-query.csv").read_text()
    second = query.splitlines()[1].replace("0, NVIDIA", "1, NVIDIA").replace(":06.0", ":07.0")
    answers = {SMI_QUERY: (query.rstrip("\n") + "\n" + second + "\n", 0)}
    if topo is not None:
        answers["topo -m"] = (topo, 0)
    host.nvidia_smi(answers, captures=H200)
    host.write("/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU\nprocessor\t: 1\n")
    env = {k: v for k, v in host.env.items() if v is not None}
    return {**env, "PROVISION_HOST_ROOT": str(host.root), "PROVISION_NO_NVML": "1"}


def test_hardware_is_read_from_nvidia_smi_and_its_topology(tmp_path: Path) -> None:
    hw = bench.hardware(_two_h200s(tmp_path, (FIXTURES / "topo-h200x2.txt").read_text()))
    assert [g["name"] for g in hw["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert hw["gpus"][0]["memory_mib"] == 143771 and hw["gpus"][0]["compute_capability"] == "9.0"
    assert (hw["driver"], hw["driver_cuda"], hw["source"]) == ("580.159.04", "13.0", "nvidia-smi")
    assert hw["interconnect"]["kind"] == "NVLink" and hw["interconnect"]["links"] == {"0-1": "NV18"}
    assert hw["cpu"] == {"model": "Test CPU", "cores": 2}


def test_hardware_says_why_the_interconnect_is_unknown(tmp_path: Path) -> None:
    hw = bench.hardware(_two_h200s(tmp_path, None))  # this nvidia-smi cannot answer topo -m
    assert hw["interconnect"]["kind"] == "unknown"
    assert "no capture for: topo -m" in hw["interconnect"]["detail"]
    assert len(hw["gpus"]) == 2


# -- real TensorFlow on the CPU ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return tfvenv.ensure(load().newest)


@pytest.fixture(scope="module")
def tf213_python() -> Path:
    return tfvenv.ensure(load().release("2.13"))


def payload_report(python: Path, tmp_path: Path, *args: str, **env: str) -> dict[str, Any]:
    """The payload's own report, run as provision runs it (python -I zipapp bench, its folders
    under the run's own: TensorFlow's autograph files, Keras's)."""
    from provision.payload_app import payload_argv, payload_env

    out = tmp_path / "report.json"
    run = Path(tempfile.mkdtemp(prefix="payload-", dir=tmp_path))
    done = subprocess.run(
        payload_argv(python, "bench", ["--json", str(out), *args], run),
        capture_output=True, text=True, timeout=900,
        env={**os.environ, **payload_env(run), **env},
    )  # fmt: skip
    assert out.is_file(), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    return report


@pytest.mark.slow
def test_cpu_run_with_virtual_devices_reports_and_plots(
    tf_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plot = tmp_path / "out" / "speedup.png"
    scratch = tmp_path / "tmp"  # the temporary folder bench and TensorFlow see
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    keras_home = tfvenv.user_keras_home(tmp_path)  # JAX, float16: not read, not rewritten
    monkeypatch.setenv("KERAS_HOME", str(keras_home))
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
    report = json.loads(result.stdout)
    check_report(report)
    assert [(r["gpus"], r["precision"]) for r in report["runs"]] == [
        (1, "float32"),
        (2, "float32"),
        (1, "mixed_bfloat16"),
        (2, "mixed_bfloat16"),
    ]
    assert report["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert report["failed"] == [] and report["skipped"] == []
    assert report["schema"] == 2 and report["hardware"]["cpu"]["cores"] >= 1
    assert report["environment"]["python"] == str(tf_python)
    assert report["command"].startswith(f"provision bench --python {tf_python} --gpus 1,2")
    sw = report["software"]
    assert sw["tensorflow"] == "2.21.0" and sw["keras"].startswith("3.")
    assert sw["build"]["cuda"] and sw["loaded"] == {"cudart": None, "cudnn": None}  # no GPU here
    assert report["task"]["kind"] == "synthetic" and report["task"]["chance"] == 0.1
    assert png_size(plot)[0] > 0
    assert list(scratch.iterdir()) == []  # autograph's files and the payload went with bench
    assert (keras_home / "keras.json").read_text() == tfvenv.USER_KERAS_JSON
    assert sorted(p.name for p in keras_home.iterdir()) == ["keras.json"]


@pytest.mark.slow
def test_two_environments_in_one_run_one_table_json_clean(
    tf_python: Path, tf213_python: Path, tmp_path: Path
) -> None:
    """Keras 2 against Keras 3: one table, progress on stderr, stdout one JSON document."""
    plot = tmp_path / "compare.png"
    argv = [sys.executable, "-m", "provision", "bench", "--python", str(tf213_python),
            "--python", str(tf_python), "--gpus", "1,2,4", "--precision", "float32", "--json",
            "--plot", str(plot), *SMALL]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["tool"] == "provision-bench-set" and doc["errors"] == []
    old, new = doc["reports"]
    assert (old["software"]["keras"][:2], new["software"]["keras"][:2]) == ("2.", "3.")
    for r in (old, new):
        assert [run["gpus"] for run in r["runs"]] == [1, 2]
        assert r["skipped"] == [
            {"gpus": 4, "precision": "float32", "reason": "needs 4 virtual CPU devices; "
             "this host has 2"}
        ]  # fmt: skip
    assert "environment 1/2: tf2.13.1-py3.11" in done.stderr
    assert "1 x float32: about" in done.stderr  # the estimate after the first steps
    assert png_size(plot)[0] > 0
    (tmp_path / "set.json").write_text(done.stdout)
    shown = CliRunner().invoke(cli, ["bench", "--report", str(tmp_path / "set.json")])
    lines = shown.stdout.splitlines()
    rows = [ln.split()[0] for ln in lines if ln.startswith("  tf2.") and ":" not in ln]
    assert rows == ["tf2.13.1-py3.11"] * 2 + ["tf2.21.0-py3.12"] * 2
    assert sum(": skipped: needs 4 virtual CPU devices" in ln for ln in lines) == 2


@pytest.mark.slow
@pytest.mark.parametrize("which", ["2.21", "2.13"])
def test_each_option_changes_what_runs(
    which: str, tf_python: Path, tf213_python: Path, tmp_path: Path
) -> None:
    """Two runs that differ in every option: each option's setting is recorded, and what it does
    is seen (XLA's compiled modules, the model's input shape and dtype, the dataset's ops, the
    number of executions, the strategy)."""
    python = tf_python if which == "2.21" else tf213_python
    common = ["--model", "small_cnn", "--image-size", "8", "--cpu-devices", "1", "--gpus", "1",
              "--warmup", "2", "--steps", "4", "--matmul-n", "64"]  # fmt: skip
    off_dir, on_dir = tmp_path / "xla-off", tmp_path / "xla-on"
    plain = payload_report(
        python, tmp_path, *common, "--precision", "float32", "--jit", "off", "--loop", "fit",
        "--data", "tf.data", "--steps-per-execution", "1", "--strategy", "default",
        "--batch-per-replica", "8", XLA_FLAGS=f"--xla_dump_to={off_dir}",
    )  # fmt: skip
    other = payload_report(
        python, tmp_path, *common, "--precision", "mixed_bfloat16", "--jit", "on", "--loop",
        "custom", "--data", "synthetic-tensor", "--steps-per-execution", "2", "--data-format",
        "channels_first", "--batch-per-replica", "16", XLA_FLAGS=f"--xla_dump_to={on_dir}",
    )  # fmt: skip
    (a,), (b,) = plain["runs"], other["runs"]
    sa, sb = plain["settings"], other["settings"]
    assert (sa["jit"], sb["jit"]) == ("off", "on")
    assert (a["xla"], b["xla"]) == (False, True)
    assert not off_dir.exists() or not list(off_dir.iterdir())  # nothing compiled by XLA
    assert any(p.name.startswith("module_") for p in on_dir.iterdir())
    assert (sa["loop"], sb["loop"]) == ("fit", "custom")
    assert (a["custom_traces"], b["custom_traces"]) == (None, 1)  # our tf.function, traced once
    assert (sa["data"], sb["data"]) == ("tf.data", "synthetic-tensor")
    assert "PrefetchDataset" in a["pipeline"] and "ShuffleDatasetV3" in a["pipeline"]
    assert b["pipeline"] == []  # one batch, placed on the device once: no dataset at all
    assert (sa["steps_per_execution"], sb["steps_per_execution"]) == (1, 2)
    assert (a["executions"], b["executions"]) == (6, 3) and a["timed_steps"] == b["timed_steps"]
    assert (sa["data_format"], sb["data_format"]) == ("channels_last", "channels_first")
    assert (a["input_shape"], b["input_shape"]) == ([8, 8, 3], [3, 8, 8])
    assert (a["compute_dtype"], b["compute_dtype"]) == ("float32", "bfloat16")
    assert (a["strategy"], b["strategy"]) == ("_DefaultDistributionStrategy", "MirroredStrategy")
    assert (a["global_batch"], b["global_batch"]) == (8, 16)


@pytest.mark.slow
def test_accuracy_rises_far_above_chance_on_the_synthetic_task(
    tf_python: Path, tmp_path: Path
) -> None:
    report = payload_report(
        tf_python, tmp_path, "--model", "mlp", "--width", "64", "--image-size", "8",
        "--cpu-devices", "1", "--precision", "float32", "--batch-per-replica", "32",
        "--warmup", "4", "--steps", "40", "--matmul-n", "64",
    )  # fmt: skip
    (run,) = report["runs"]
    assert report["task"]["chance"] == 0.1 and "smooth pattern" in report["task"]["description"]
    assert run["accuracy"] > 0.5, run


@pytest.mark.slow
def test_a_configuration_estimated_too_long_is_skipped(tf_python: Path) -> None:
    """Its first step ends within the bound (a second or two), its estimate (100,000 steps of
    milliseconds each) does not (the first step's own bound: test_bench_bounds.py)."""
    result = CliRunner().invoke(
        cli, ["bench", "--python", str(tf_python), "--precision", "float32",
              *_without(SMALL, "--steps"), "--max-seconds", "120", "--steps", "100000", "--json"],
    )  # fmt: skip
    assert result.exit_code == 1  # nothing ran
    (skipped,) = json.loads(result.stdout)["skipped"]
    assert "exceeds --max-seconds 120" in skipped["reason"]


@pytest.mark.slow
def test_more_devices_than_the_host_has_are_skipped(tf_python: Path) -> None:
    result = CliRunner().invoke(
        cli, ["bench", "--python", str(tf_python), "--gpus", "1,4", "--precision", "float32",
              *SMALL],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "4 x float32: skipped: needs 4 virtual CPU devices; this host has 2" in result.stdout


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


@pytest.mark.slow
def test_device_script_runs_its_matrix_and_resumes(
    tf_python: Path, tf213_python: Path, tmp_path: Path
) -> None:
    """tests/gpu/device_bench.sh on the CPU with a tiny model: a report per line and release, the
    lines that depend on another run only when it did (the cached rerun after XLA at batch 32,
    not the run without autotuning), one table, the markdown findings and the two releases'
    plot; run again, it skips what is done."""
    script = Path(__file__).parent / "gpu" / "device_bench.sh"
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PROVISION": f"{sys.executable} -m provision",
        "STEPS": "4",
        "WARMUP": "2",
        "BENCH_ARGS": "--model small_cnn --image-size 8 --batch-per-replica 8 --cpu-devices 1",
        "ONLY": "^(base|bn-none|xla32|xla32-cached|xla32-noautotune)$",
    }
    argv = ["bash", str(script), str(out), str(tf213_python), str(tf_python)]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout + first.stderr
    old, new = tf213_python.parent.parent.name, tf_python.parent.parent.name
    assert sorted(p.name for p in out.glob("*.json")) == sorted(
        [f"{old}--base.json", f"{old}--bn-none.json", f"{old}--xla32.json", f"{new}--base.json",
         f"{new}--bn-none.json", f"{new}--xla32.json", f"{new}--xla32-cached.json"]
    )  # fmt: skip
    cached = json.loads((out / f"{new}--xla32-cached.json").read_text())
    assert cached["settings"]["xla_cache"] == str(out / "xla-cache")
    assert list((out / "xla-cache").iterdir())  # TensorFlow's persistent cache was written
    flags = cached["xla_environment"]["XLA_FLAGS"]
    assert f"--xla_gpu_per_fusion_autotune_cache_dir={out}/autotune-cache" in flags
    findings = (out / "findings.txt").read_text()
    assert findings.startswith("hardware: ") and "batchnorm" in findings and "XLA cache" in findings
    md = (out / "findings.md").read_text().splitlines()
    rows = [ln for ln in md if ln.startswith("| 2.")]
    assert len(rows) == 1 + 1 + 2 + 1 + 1 + 1 + 1  # 2.13 compiles XLA in two precisions
    assert all("`provision bench --python " in ln for ln in rows)
    assert png_size(out / "two-releases.png")[0] > 0
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count(": done before") == 7, again.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("which", "how", "layers"),
    [
        ("2.21", "fused", ["FusedBatchNormalization x53"]),
        ("2.21", "none", []),
        ("2.13", "unfused", ["BatchNormalization(fused=False) x53"]),
    ],
)
def test_batchnorm_option_rebuilds_resnet50s_normalisation(
    which: str, how: str, layers: list[str], tf_python: Path, tf213_python: Path, tmp_path: Path
) -> None:
    """--batchnorm: ResNet50's 53 BatchNormalization layers as asked (Keras 3 given TensorFlow's
    fused kernel, Keras 2 its unfused ops, or none), and the model still trains."""
    python = tf_python if which == "2.21" else tf213_python
    report = payload_report(
        python, tmp_path, "--model", "resnet50", "--image-size", "32", "--batch-per-replica",
        "4", "--steps", "2", "--warmup", "1", "--cpu-devices", "1", "--precision", "float32",
        "--strategy", "default", "--matmul-n", "64", "--batchnorm", how,
    )  # fmt: skip
    (run,) = report["runs"]
    assert report["settings"]["batchnorm"] == how
    assert run["batchnorm_layers"] == layers


@pytest.mark.slow
@pytest.mark.parametrize("which", ["2.21", "2.13"])
def test_profile_lists_the_op_types_that_took_the_time(
    which: str, tf_python: Path, tf213_python: Path, tmp_path: Path
) -> None:
    """--profile: 2.21's profiler summarises its trace (on this CPU host: the host's op types);
    2.13's has no such tool, and the report says so and where the trace is."""
    python = tf_python if which == "2.21" else tf213_python
    report = payload_report(
        python, tmp_path, "--model", "small_cnn", "--image-size", "8", "--cpu-devices", "1",
        "--precision", "float32", "--steps", "2", "--warmup", "1", "--matmul-n", "64",
        "--profile", str(tmp_path / "trace"),
        "--optimizer-jit", "off" if which == "2.13" else "auto",
    )  # fmt: skip
    (run,) = report["runs"]
    traced = run["profile"]
    assert traced["folder"] == str(tmp_path / "trace" / "1xfloat32") and traced["steps"] == 5
    assert list((tmp_path / "trace").rglob("*.xplane.pb"))
    if which == "2.21":
        assert traced["error"] is None and traced["top"][0]["where"] == "Host"
        assert sum(r["percent"] for r in traced["top"]) <= 100.0
        assert any(m.startswith("1 x float32: profile (host self-time, 5 steps): ")
                   for m in report["messages"])  # fmt: skip
    else:
        assert traced["top"] == [] and "cannot summarise" in traced["error"]
        assert run["optimizer_xla"] is False


@pytest.mark.slow
def test_keras3_refuses_optimizer_jit_for_that_configuration_only(
    tf_python: Path, tmp_path: Path
) -> None:
    report = payload_report(
        tf_python, tmp_path, *SMALL, "--precision", "float32", "--optimizer-jit", "on",
        "--matmul-n", "64",
    )  # fmt: skip
    assert report["runs"] == []
    (failed,) = report["failed"]
    assert failed["error"].startswith("--optimizer-jit: Keras 3's optimizers have no jit_compile")
