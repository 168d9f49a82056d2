"""Progress of long steps: on stderr, plain lines without a terminal, rich with one; -q silences it,
-v adds every installer line; --json's stdout stays one JSON document.

The install tests build a real venv from a real wheel of 4 MB served on 127.0.0.1 (tests/tinyindex:
uv prints its downloads of a file that size), through the real CLI in a fresh process.
"""

from __future__ import annotations

import functools
import io
import json
import subprocess
from pathlib import Path

import clitools
from tinyindex import Env, Index

from provision import bench
from provision.cli.presenter import Presenter
from provision.progress import Event
from provision.toolout import InstallerLines

provision = functools.partial(clitools.provision, timeout=300, stdin=subprocess.DEVNULL)


def test_install_shows_the_download_with_size_and_rate_on_stderr(index: Index, env: Env) -> None:
    env.lock(index.add("1.0", payload=4_000_000))
    done = provision("install", env.name, "--out", str(env.out), "--json")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # stdout is the JSON document alone
    lines = done.stderr.splitlines()
    assert "  uv pip install" in lines, done.stderr
    downloaded = [ln for ln in lines if ln.startswith("  downloaded provision-tiny")]
    assert downloaded, done.stderr
    assert " MiB in " in downloaded[0] and downloaded[0].endswith("MiB/s)"), downloaded[0]
    assert any(ln.startswith("  Installed 1 package") for ln in lines), done.stderr


def test_quiet_shows_nothing_and_verbose_shows_every_installer_line(index: Index, env: Env) -> None:
    env.lock(index.add("1.0", payload=4_000_000))
    quiet = provision("-q", "install", env.name, "--out", str(env.out), "--force")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout.startswith("built ")
    loud = provision("-v", "install", env.name, "--out", str(env.out), "--force")
    assert loud.returncode == 0, loud.stderr
    assert "+ provision-tiny==1.0" in loud.stderr  # uv's own line, a detail
    both = provision("-q", "-v", "list")
    assert both.returncode == 2 and "give -q or -v, not both" in both.stderr


def test_installer_lines_become_downloads_with_size_and_rate() -> None:
    seen: list[Event] = []
    ticks = iter([10.0, 12.0, 20.0, 24.0, 30.0])
    lines = InstallerLines(seen.append, clock=lambda: next(ticks))
    lines("Downloading tensorflow (524.2MiB)", True)  # uv
    lines(" Downloaded tensorflow", True)
    lines("  Downloading numpy-1.24.3-cp311-cp311-manylinux.whl (17.3 MB)", False)  # pip
    lines("Installing collected packages: numpy", False)
    lines("[cudnn] unpacking cudnn-linux-x86_64-8.6.0.163_cuda11-archive.tar.xz", False)
    lines("warning: /usr/local/cuda-11.8 exists and is not ours", True)
    downloads = [e for e in seen if e.kind == "download"]
    assert [(e.text, e.size, e.seconds) for e in downloads] == [
        ("tensorflow", int(524.2 * 1024**2), 2.0),
        ("numpy", 17_300_000, 4.0),
    ]
    assert (
        Event("info", "[cudnn] unpacking cudnn-linux-x86_64-8.6.0.163_cuda11-archive.tar.xz")
        in seen
    )
    assert Event("warn", "/usr/local/cuda-11.8 exists and is not ours") in seen
    assert Event("detail", "Installing collected packages: numpy") in seen


def test_plain_presenter_lines_and_verbosity() -> None:
    out = io.StringIO()
    shown = Presenter(1, out, rich=False)
    shown(Event("step", "[3/4] install  ..."))
    shown(Event("download", "tensorflow", size=524 * 1024**2, seconds=10.0))
    shown(Event("detail", "uv's own chatter"))
    shown(Event("warn", "float16 on CPU devices is emulated"))
    shown(Event("done", "[3/4] install  ok"))
    assert out.getvalue().splitlines() == [
        "[3/4] install  ...",
        "  downloaded tensorflow, 524.0 MiB in 10.0 s (52.4 MiB/s)",
        "  warning: float16 on CPU devices is emulated",
        "[3/4] install  ok",
    ]
    silent = io.StringIO()
    Presenter(0, silent, rich=False)(Event("warn", "x"))
    assert silent.getvalue() == ""


def test_rich_presenter_on_a_terminal_shows_the_step_and_its_lines() -> None:
    out = io.StringIO()
    shown = Presenter(1, out, rich=True)
    shown(Event("step", "[3/4] install  ..."))
    shown(Event("info", "downloading tensorflow (524.2 MiB)"))
    shown(Event("done", "[3/4] install  ok 12.0 s"))
    shown.close()
    text = out.getvalue()
    assert "downloading tensorflow (524.2 MiB)" in text and "[3/4] install  ok 12.0 s" in text


def test_bench_warns_before_mixed_precision_on_cpu_devices() -> None:
    opts = bench.BenchOptions
    slow = bench.slow_warnings(opts(cpu_devices=2, precision="float32,mixed_float16"))
    assert len(slow) == 1 and "mixed_float16 on CPU devices" in slow[0]
    assert bench.slow_warnings(opts(cpu_devices=2, precision="float32")) == []
    assert bench.slow_warnings(opts(cpu_devices=0, precision="mixed_float16")) == []


def test_bench_events_announce_each_configuration_and_warn_on_a_long_one() -> None:
    from provision.payload.bench_run import EVENT

    seen: list[Event] = []
    events = bench._Events(seen.append)
    events(EVENT + json.dumps({"event": "config", "index": 2, "total": 6, "gpus": 2,
                               "precision": "mixed_float16"}), True)  # fmt: skip
    events(EVENT + json.dumps({"event": "estimate", "gpus": 2, "precision": "mixed_float16",
                               "seconds": 1020.0, "step_s": 30.0}), True)  # fmt: skip
    assert seen[0] == Event("step", "[2/6] 2 x mixed_float16 ...")
    assert seen[1] == Event("info", "2 x mixed_float16: about 17 min to go (30.00 s a step)")
    assert seen[2].kind == "warn" and "will take about 17 min" in seen[2].text


def test_create_json_keeps_stdout_clean_and_progress_on_stderr(tmp_path: Path) -> None:
    """create stops at render (an unknown release is refused before anything is written), and
    with --json its stdout is still one JSON document."""
    out = tmp_path / "envs"
    done = provision("create", "--tf", "2.13", "--path", "pip", "--python", "3.99",
                     "--out", str(out), "--json")  # fmt: skip
    assert done.returncode in (1, 2), done.stderr
    assert done.stdout == "" or json.loads(done.stdout)
    assert not out.exists()
