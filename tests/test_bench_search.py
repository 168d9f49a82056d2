"""provision bench --best: the search visits the settings that matter on this GPU, skips what
cannot help (with why), never calls a run that learnt nothing best, honours its budget, and its
JSON and table agree.

The fast tests run the real search, the real `provision bench` under it and a stand-in for the
environment's interpreter that answers as the payload does (its speeds a fixed table of the
settings it was given, like the H100's: XLA fastest, mixed_float16 fast but at chance); the host
is a stand-in machine whose nvidia-smi is a capture (an H200, or the same with compute capability
7.0). The slow test runs the search with real TensorFlow on the CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import tfvenv
from click.testing import CliRunner
from fakehost import H200, SMI_QUERY, FakeHost

from provision.bench_search import DEFAULT, Setting, Trial, choose_best, learns
from provision.cli.commands import cli
from provision.matrix import load

# The stand-in payload: images/s from the settings it is given; mixed_float16 is the fastest
# alone and learns nothing (accuracy 0.10: chance); per-replica batch 512 runs out of memory.
PAYLOAD = r"""
import json, os, sys, time
argv = sys.argv[sys.argv.index("bench") + 1:]
opt = {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
prec, norm, jit = opt["precision"], opt.get("batchnorm", "default"), opt.get("jit") == "on"
batch = int(opt.get("batch-per-replica", "128"))
speed = 600.0 * (1.9 if norm == "fused" else 1.0) * (3.3 if jit else 1.0)
speed *= {"float32": 1.0, "mixed_bfloat16": 1.5 if jit else 0.9, "mixed_float16": 4.0}[prec]
speed *= 1.05 if batch == 256 else 1.0
steps = int(opt.get("steps", "30"))
slow_start = batch == 256 and steps < 60  # learns only when it trains longer
accuracy = 0.10 if prec == "mixed_float16" or slow_start else 0.85
report = {"schema": 2, "tool": "provision-bench", "tensorflow": "2.22.0rc0",
          "software": {"tensorflow": "2.22.0rc0", "keras": os.environ.get("FAKE_KERAS", "3.16.0")},
          "settings": opt, "task": {"kind": "synthetic", "chance": 0.1, "description": "synthetic"},
          "runs": [], "failed": [], "skipped": [], "messages": []}
where = {"gpus": 1, "precision": prec}
if batch >= 512:
    report["failed"].append(dict(where, error="ResourceExhaustedError: out of memory"))
else:
    report["runs"].append(dict(where, images_per_s=round(speed, 1), first_step_s=9.0,
                               accuracy=accuracy, at_chance=accuracy < 0.15))
with open(opt["json"], "w") as fh:
    json.dump(report, fh)
"""


def fake_env(tmp_path: Path, name: str = "tf222") -> Path:
    """An environment's interpreter stand-in, in a folder named as the environment."""
    exe = tmp_path / name / "bin" / "python"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!{sys.executable}\n{PAYLOAD}")
    exe.chmod(0o755)
    return exe


def gpu_host(tmp_path: Path, capability: str = "9.0") -> dict[str, str]:
    """A stand-in machine with one H200 (or the same GPU at another compute capability)."""
    host = FakeHost(tmp_path / "host", tmp_path / "libs")
    query = (H200 / "nvidia-smi-query.csv").read_text().replace(", 9.0, ", f", {capability}, ")
    host.nvidia_smi({SMI_QUERY: (query, 0)}, captures=H200)
    host.write("/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU\n")
    env = {k: v for k, v in host.env.items() if v is not None}
    return {**env, "PROVISION_HOST_ROOT": str(host.root), "PROVISION_NO_NVML": "1"}


def search(tmp_path: Path, *args: str, **env: str) -> tuple[Any, dict[str, Any]]:
    python = fake_env(tmp_path)
    done = CliRunner().invoke(
        cli, ["bench", "--best", "--python", str(python), *args, "--json"],
        env={**gpu_host(tmp_path, env.pop("capability", "9.0")), **env},
    )  # fmt: skip
    return done, json.loads(done.stdout) if done.stdout.startswith("{") else {}


def labels(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["label"], t["status"]) for t in doc["searches"][0]["trials"]]


def test_search_visits_each_setting_then_combinations_then_batch(tmp_path: Path) -> None:
    done, doc = search(tmp_path)
    assert done.exit_code == 0, done.output
    assert labels(doc) == [
        ("defaults", "ran"),
        ("batchnorm fused", "ran"),
        ("XLA", "ran"),
        ("mixed_bfloat16", "ran"),
        ("mixed_float16", "ran"),  # the fastest so far, at chance: a second look
        ("mixed_float16, 90 steps", "ran"),  # at chance again: no combination takes it
        ("batchnorm fused, XLA", "ran"),  # the most promising first: 1.9 x 3.3
        ("batchnorm fused, XLA, mixed_bfloat16", "ran"),  # x 0.9, as bfloat16 alone was
        ("XLA, mixed_bfloat16", "ran"),
        ("batchnorm fused, mixed_bfloat16", "ran"),
        ("batchnorm fused, XLA, mixed_bfloat16, batch 256", "ran"),  # at chance in 30 steps
        ("batchnorm fused, XLA, mixed_bfloat16, batch 256, 90 steps", "ran"),  # learns, pays
        ("batchnorm fused, XLA, mixed_bfloat16, batch 512", "failed"),  # out of memory
    ]
    (result,) = doc["searches"]
    assert result["best"] == "batchnorm fused, XLA, mixed_bfloat16, batch 256, 90 steps"
    assert result["best_command"] == (
        "provision bench tf222 --precision mixed_bfloat16 --batch-per-replica 256 --steps 90 "
        "--jit --strategy default --batchnorm fused"
    )
    best = next(t for t in result["trials"] if t["label"] == result["best"])
    assert result["speedup"] == pytest.approx(best["images_per_s"] / 600.0, abs=1e-3)
    oom = result["trials"][-1]
    assert "out of memory" in oom["reason"]
    # Each trial carries its report, as `provision bench --json` writes it.
    assert all(t["report"]["hardware"]["gpus"][0]["compute_capability"] == "9.0"
               for t in result["trials"] if t["status"] == "ran")  # fmt: skip


def test_a_fast_run_that_learns_nothing_is_never_called_best(tmp_path: Path) -> None:
    """mixed_float16 alone is the fastest single setting (2,400 images/s) and at chance."""
    _done, doc = search(tmp_path)
    trials = {t["label"]: t for t in doc["searches"][0]["trials"]}
    f16 = trials["mixed_float16"]
    assert f16["images_per_s"] > trials["batchnorm fused"]["images_per_s"]
    assert f16["at_chance"] and not f16["learns"]
    assert doc["searches"][0]["best"] != "mixed_float16"
    table = CliRunner().invoke(
        cli, ["bench", "--best", "--python", str(fake_env(tmp_path / "t"))],
        env=gpu_host(tmp_path / "t"),
    )  # fmt: skip
    line = next(ln for ln in table.stdout.splitlines() if ln.strip().startswith("mixed_float16"))
    assert "at chance: it learnt nothing" in line and "best" not in line


def test_json_and_table_agree(tmp_path: Path) -> None:
    _done, doc = search(tmp_path)
    shown = CliRunner().invoke(
        cli, ["bench", "--best", "--python", str(fake_env(tmp_path / "t"))],
        env=gpu_host(tmp_path / "t"),
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    rows = {}
    for line in shown.stdout.splitlines():
        cells = line.strip().split("  ")
        cells = [c.strip() for c in cells if c.strip()]
        if cells and cells[0] in {t["label"] for t in doc["searches"][0]["trials"]}:
            rows[cells[0]] = cells
    for t in doc["searches"][0]["trials"]:
        if t["status"] == "ran":
            assert rows[t["label"]][1] == f"{t['images_per_s']:,.1f}", t["label"]
            assert rows[t["label"]][4] == f"{t['accuracy']:.3f}"
    best = doc["searches"][0]
    assert f"best: {best['best']}: " in shown.stdout
    assert f"{best['speedup']:.2f}x the defaults" in shown.stdout
    assert shown.stdout.rstrip().endswith(best["best_command"])
    assert "hardware: 1 x NVIDIA H200 (140 GiB), driver 580.159.04" in shown.stdout


def test_no_bfloat16_before_ampere_and_no_fused_batchnorm_on_keras2(tmp_path: Path) -> None:
    done, doc = search(tmp_path, capability="7.0", FAKE_KERAS="2.13.1")
    assert done.exit_code == 0, done.output
    trials = {t["label"]: t for t in doc["searches"][0]["trials"]}
    assert trials["mixed_bfloat16"]["status"] == "skipped"
    assert "no bfloat16 tensor cores before Ampere" in trials["mixed_bfloat16"]["reason"]
    assert trials["mixed_bfloat16"]["report"] is None  # nothing ran for it
    assert trials["batchnorm fused"]["reason"] == "Keras 2's BatchNormalization is fused already"
    assert trials["mixed_float16"]["status"] == "ran"  # Volta has float16 tensor cores
    assert not any("bfloat16" in label for label in list(trials)[5:])


def test_the_budget_bounds_the_search(tmp_path: Path) -> None:
    """Each trial takes 4 s; with 10 s the defaults and a single setting or two run, the rest
    is skipped with the time left and needed."""
    _done, doc = search(tmp_path, "--budget", "10", FAKE_SLEEP="4")
    (result,) = doc["searches"]
    ran = [t for t in result["trials"] if t["status"] == "ran"]
    assert 1 <= len(ran) <= 3
    assert result["seconds"] <= 10 + 5  # one trial may start just inside the budget
    over = [t for t in result["trials"] if "over the search's budget" in (t["reason"] or "")]
    assert over and all(t["report"] is None for t in over)
    assert result["best"] is not None  # the defaults learnt: always a best


def test_options_the_search_chooses_are_refused(tmp_path: Path) -> None:
    python = fake_env(tmp_path)
    for args, message in (
        (["--precision", "float32"], "--best tries --precision itself"),
        (["--jit"], "--best tries --jit/--no-jit itself"),
        (["--gpus", "2"], "--best searches on one GPU"),
        (["--markdown"], "--best runs its own trials: it takes no --markdown"),
    ):
        done = CliRunner().invoke(cli, ["bench", "--best", "--python", str(python), *args])
        assert done.exit_code == 2, (args, done.output)
        assert message in done.output


def test_learns_is_judged_against_the_defaults() -> None:
    def trial(accuracy: float, speed: float, setting: Setting = DEFAULT) -> Trial:
        t = Trial(setting, "x", "cmd", "ran", images_per_s=speed, accuracy=accuracy, chance=0.1)
        t.at_chance = accuracy < 0.15
        return t

    default = trial(0.9, 100)
    assert learns(trial(0.6, 200), default)  # 0.5 of 0.8 over chance kept: 0.50 and more
    assert not learns(trial(0.45, 200), default)
    assert not learns(trial(0.12, 900), default)  # at chance
    assert learns(trial(0.3, 50), trial(0.12, 100))  # defaults at chance: above chance is enough
    fast_at_chance = trial(0.1, 900, Setting(precision="mixed_float16"))
    slow = trial(0.8, 150, Setting(xla=True))
    default.learns, slow.learns = True, True
    assert choose_best([default, fast_at_chance, slow]) is slow


@pytest.mark.slow
def test_search_on_the_cpu_with_real_tensorflow(tmp_path: Path) -> None:
    """The whole search with TensorFlow 2.21 on one virtual CPU device: mixed precisions are
    skipped (emulated on a CPU), small_cnn has no BatchNormalization, XLA runs; every trial that
    ran has its report, and the best learnt."""
    python = tfvenv.ensure(load().newest)
    done = CliRunner().invoke(
        cli, ["bench", "--best", "--python", str(python), "--cpu-devices", "1", "--model",
              "small_cnn", "--image-size", "8", "--batch-per-replica", "16", "--steps", "60",
              "--warmup", "4", "--budget", "240", "--json"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output[-3000:]
    (result,) = json.loads(done.stdout)["searches"]
    trials = {t["label"]: t for t in result["trials"]}
    assert trials["defaults"]["status"] == "ran" and trials["defaults"]["learns"]
    assert trials["defaults"]["accuracy"] > 0.2  # twice chance: it learnt
    for precision in ("mixed_bfloat16", "mixed_float16"):
        assert "emulated on a CPU" in trials[precision]["reason"]
    assert trials["batchnorm fused"]["reason"] == "small_cnn has no BatchNormalization"
    assert trials["XLA"]["status"] in ("ran", "failed", "skipped")
    best = next(t for t in result["trials"] if t["label"] == result["best"])
    assert best["learns"] and best["report"]["runs"][0]["images_per_s"] == best["images_per_s"]
    assert result["seconds"] <= 240 + 120


def test_a_saved_search_shows_again(tmp_path: Path) -> None:
    _done, doc = search(tmp_path)
    saved = tmp_path / "search.json"
    saved.write_text(json.dumps(doc))
    again = CliRunner().invoke(cli, ["bench", "--report", str(saved), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == doc
    table = CliRunner().invoke(cli, ["bench", "--report", str(saved)])
    best = doc["searches"][0]
    assert f"best: {best['best']}: " in table.stdout and best["best_command"] in table.stdout
    report = tmp_path / "report.json"
    report.write_text(json.dumps(best["trials"][0]["report"]))
    mixed = CliRunner().invoke(cli, ["bench", "--report", str(saved), "--report", str(report)])
    assert mixed.exit_code == 2 and "not both" in mixed.output


def test_a_search_plots_each_environment_at_its_defaults_and_its_best(tmp_path: Path) -> None:
    """--plot with --best (and with --report of saved searches): a PNG, written in place; two
    saved searches make one summary table with a row each."""
    plot = tmp_path / "best.png"
    done = CliRunner().invoke(
        cli, ["bench", "--best", "--python", str(fake_env(tmp_path)), "--plot", str(plot)],
        env=gpu_host(tmp_path),
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {plot}" in done.stdout
    saved = tmp_path / "saved.json"
    _done, doc = search(tmp_path / "again")
    saved.write_text(json.dumps(doc))
    other = json.loads(json.dumps(doc))
    other["searches"][0]["environment"] = "tf221"
    (tmp_path / "other.json").write_text(json.dumps(other))
    again = tmp_path / "again.png"
    shown = CliRunner().invoke(
        cli, ["bench", "--report", str(saved), "--report", str(tmp_path / "other.json"),
              "--plot", str(again)],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    assert again.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = shown.stdout.split("each environment at its defaults and at its best")[1]
    rows = [ln.split()[0] for ln in summary.splitlines()[2:] if ln.startswith("  ")]
    assert rows == ["tf222", "tf221"], summary
    python = str(fake_env(tmp_path / "d"))
    refused = CliRunner().invoke(
        cli, ["bench", "--best", "--python", python, "--plot", str(tmp_path)],
        env=gpu_host(tmp_path / "d"),
    )  # fmt: skip
    assert refused.exit_code == 2 and "is a directory" in refused.output


def test_a_precision_that_learns_only_on_its_second_look_joins_the_combinations() -> None:
    from provision.bench_search.plan import combinations

    def ran(setting: Setting, speed: float, learnt: bool) -> Trial:
        t = Trial(setting, "x", "cmd", "ran", images_per_s=speed, accuracy=0.8, chance=0.1)
        t.learns = learnt
        return t

    f16 = Setting(precision="mixed_float16")
    trials = [
        ran(DEFAULT, 100, True),
        ran(Setting(xla=True), 300, True),
        ran(f16, 120, False),  # at chance in the search's steps
        ran(Setting(precision="mixed_float16", steps=90), 110, True),  # learnt when longer
    ]
    assert Setting(precision="mixed_float16", xla=True) in combinations(trials)
    assert Setting(precision="mixed_float16", xla=True) not in combinations(trials[:3])


@pytest.mark.parametrize(
    "signal_number, code, word", [(2, 130, "interrupted"), (15, 143, "terminated")]
)
def test_ctrl_c_or_sigterm_shows_the_trials_that_finished(
    tmp_path: Path, signal_number: int, code: int, word: str
) -> None:
    """The stand-in takes 2 s a trial; a signal once the second trial has started: the table
    holds the trials that finished, says how the search ended, and the exit code is the
    signal's."""
    import os
    import signal
    import subprocess
    import time

    python = fake_env(tmp_path)
    env = {**os.environ, **gpu_host(tmp_path), "FAKE_SLEEP": "2", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "provision", "bench", "--best", "--python", str(python)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the second trial has started
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith("[2] ") or not line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.Signals(signal_number))
    out, rest = proc.communicate(timeout=60)
    err = "".join(seen) + rest
    assert proc.returncode == code, (out, err)
    assert f"provision: {word}" in err
    assert f"search {word} after" in out and "defaults" in out
    assert "best: " in out  # the defaults learnt: the best so far is named
    if signal_number == 2:  # --json says it too
        proc = subprocess.Popen(
            [sys.executable, "-m", "provision", "bench", "--best", "--json", "--python",
             str(python)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True,
        )  # fmt: skip
        assert proc.stderr is not None
        for line in iter(proc.stderr.readline, ""):  # until the second trial has started
            if line.startswith("[2] "):
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        (search,) = json.loads(out)["searches"]
        assert search["stopped"] == "interrupted" and search["trials"][0]["label"] == "defaults"
