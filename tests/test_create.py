"""provision create: render -> lock -> install -> verify, for real, on this machine.

The slow tests build environments with real TensorFlow from the package index (pip path, in a
temporary --out and PROVISION_HOME; uv's and pip's caches are the user's, shared between runs so a
second run of the suite is fast) and, on the conda path, against a local conda-forge-like channel
holding this host's real CPython and NVIDIA's real CUDA runtime and cuDNN libraries
(tests/realconda.py), with TensorFlow from the index. The fast tests cover the ways create stops.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import clitools
import pytest

from provision import matrix, tools
from provision.create import VERIFY_MARKER
from provision.install.owned import MARKER
from provision.install.place import state_of

provision = functools.partial(clitools.provision, timeout=1800)


def summary(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    data: dict[str, object] = json.loads(done.stdout)
    return data


def statuses(data: dict[str, object]) -> list[tuple[str, str]]:
    steps = data["steps"]
    assert isinstance(steps, list)
    return [(s["step"], s["status"]) for s in steps]


def snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file: 'changes nothing' means this stays equal."""
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                st = path.stat()
                out[str(path)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {"PROVISION_HOME": str(tmp_path / "home")}


def _pip_release() -> str:
    m = matrix.load()
    for rel in m.releases:
        if rel.pip_wheels or rel.and_cuda:
            return rel.tf
    pytest.skip("the matrix has no release on the pip path")


# -- where create stops -------------------------------------------------------------------------


def test_hand_edited_environment_is_not_overwritten(tmp_path: Path, home: dict[str, str]) -> None:
    tf = _pip_release()
    out = tmp_path / "envs"
    first = provision("render", "--tf", tf, "--path", "pip", "--out", str(out), env=home)
    assert first.returncode == 0, first.stderr
    (env_dir,) = out.iterdir()
    readme = env_dir / "requirements.in"
    readme.write_text(readme.read_text() + "# local notes\n")
    done = provision("create", "--tf", tf, "--path", "pip", "--out", str(out), "--json", env=home)
    assert done.returncode == 1
    data = summary(done)
    assert statuses(data) == [("render", "failed")]
    assert f"{env_dir.as_posix()}/requirements.in" in str(data["error"])
    assert "--force" in str(data["hint"])
    assert "[1/4] render" in done.stderr and "requirements.in" in done.stderr
    assert readme.read_text().endswith("# local notes\n")
    assert not (env_dir / "requirements.lock").exists()


def test_failing_lock_stops_before_install(tmp_path: Path, home: dict[str, str]) -> None:
    tf = _pip_release()
    dead = {
        **home, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_CONFIG_FILE": os.devnull,
        "UV_HTTP_RETRIES": "0", "UV_CACHE_DIR": str(tmp_path / "uv"),
    }  # fmt: skip
    done = provision(
        "create", "--tf", tf, "--path", "pip", "--out", str(tmp_path / "envs"), "--json", env=dead
    )
    assert done.returncode == 1
    data = summary(done)
    assert statuses(data) == [("render", "done"), ("lock", "failed")]
    assert "the package index" in str(data["hint"])
    assert "provision: what to do:" in done.stderr
    # install never started: the home holds at most provision's caches (the render's templates)
    home_dir = tmp_path / "home"
    assert not home_dir.exists() or [p.name for p in home_dir.iterdir()] == ["cache"]


def test_a_python_this_host_lacks_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    rel = next(r for r in matrix.load().releases if r.pip_wheels or r.and_cuda)
    absent = rel.python[0]
    # A host with no pyenv and nothing but the system's own interpreters on PATH.
    bare = {"PATH": "/usr/bin:/bin", "PYENV_ROOT": str(tmp_path / "no-pyenv")}
    if any(Path(d, f"python{absent}").exists() for d in ("/usr/bin", "/bin")):
        pytest.skip(f"this host's /usr/bin has Python {absent}")
    out = tmp_path / "envs"
    done = provision("create", "--tf", rel.tf, "--path", "pip", "--python", absent,
                     "--out", str(out), env=bare)  # fmt: skip
    assert done.returncode == 1
    assert f"Python {absent} is not installed on this host" in done.stderr
    assert not out.exists()


def test_channel_is_for_the_conda_path(tmp_path: Path) -> None:
    done = provision(
        "create", "--tf", _pip_release(), "--path", "pip", "--channel", "file:///x",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2 and "conda path only" in done.stderr


def test_unknown_release_is_one_line(tmp_path: Path) -> None:
    done = provision("create", "--tf", "1.0", "--path", "pip", "--out", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "not in the matrix" in done.stderr


# -- real environments ------------------------------------------------------------------------


def _pip_cases() -> list[str]:
    m = matrix.load()
    return list(dict.fromkeys(["2.13", m.newest.tf]))


@pytest.mark.slow
@pytest.mark.parametrize("tf", _pip_cases())
def test_create_pip_builds_verified_tensorflow(
    tmp_path: Path, home: dict[str, str], tf: str
) -> None:
    release = matrix.load().release(tf)
    out = tmp_path / "envs"
    done = provision("create", "--tf", tf, "--path", "pip", "--out", str(out), "--json", env=home)
    assert done.returncode == 0, done.stderr
    data = summary(done)
    assert statuses(data) == [(s, "done") for s in ("render", "lock", "install", "verify")]
    for line in ("[1/4] render", "[2/4] lock", "[3/4] install", "[4/4] verify"):
        assert line in done.stderr
    python = Path(str(data["python"]))
    version = subprocess.run(
        [python, "-c", "import sys, tensorflow as t; print(t.__version__, *sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    ).stdout.split()  # fmt: skip
    # The default Python: the newest the release supports that this host has.
    have = [v for v in release.python if tools.python_candidates(v)]
    assert version == [release.pin, *have[-1].split(".")]
    prefix = Path(str(data["prefix"]))
    assert state_of(prefix) == "complete"
    assert json.loads((prefix / VERIFY_MARKER).read_text())["ok"] is True

    env_dir = out / str(data["name"])
    before = snapshot(env_dir, prefix)
    again = provision("create", "--tf", tf, "--path", "pip", "--out", str(out), "--json", env=home)
    assert again.returncode == 0, again.stderr
    assert statuses(summary(again)) == [
        (s, "skipped") for s in ("render", "lock", "install", "verify")
    ]
    assert snapshot(env_dir, prefix) == before


@pytest.mark.slow
def test_create_prerelease_pip_builds_and_verifies(tmp_path: Path, home: dict[str, str]) -> None:
    """A pre-release row (`matrix update --pre`) builds and verifies with --pre, on the CPU here;
    without --pre it is refused before anything is written."""
    rows = [r for r in matrix.load().releases if r.prerelease]
    if not rows:
        pytest.skip("the matrix has no pre-release row")
    rel, out = rows[-1], tmp_path / "envs"
    refused = provision("create", "--tf", rel.tf, "--path", "pip", "--out", str(out), env=home)
    assert refused.returncode == 1 and "add --pre" in refused.stderr and not out.exists()
    done = provision(
        "create", "--tf", rel.tf, "--pre", "--path", "pip", "--out", str(out), "--json", env=home
    )
    assert done.returncode == 0, done.stderr
    data = summary(done)
    assert statuses(data) == [(s, "done") for s in ("render", "lock", "install", "verify")]
    prefix = Path(str(data["prefix"]))
    assert json.loads((prefix / VERIFY_MARKER).read_text())["ok"] is True
    lock = (out / str(data["name"]) / "requirements.lock").read_text()
    assert f"tensorflow=={rel.pin}" in lock and "# Pre-releases allowed for these only" in lock


@pytest.mark.slow
def test_create_force_rebuilds_and_verifies_again(tmp_path: Path, home: dict[str, str]) -> None:
    tf = matrix.load().newest.tf
    out = tmp_path / "envs"
    first = provision("create", "--tf", tf, "--path", "pip", "--out", str(out), "--json", env=home)
    assert first.returncode == 0, first.stderr
    prefix = Path(str(summary(first)["prefix"]))
    marker = (prefix / MARKER).stat().st_mtime_ns
    forced = provision(
        "create", "--tf", tf, "--path", "pip", "--out", str(out), "--json", "--force", env=home
    )
    assert forced.returncode == 0, forced.stderr
    assert statuses(summary(forced)) == [
        ("render", "skipped"), ("lock", "done"), ("install", "done"), ("verify", "done"),
    ]  # fmt: skip
    assert (prefix / MARKER).stat().st_mtime_ns != marker


@pytest.mark.slow
def test_create_conda_against_a_local_channel(
    real_conda_channel: tuple, tmp_path: Path, home: dict[str, str]
) -> None:
    """The conda path end to end: conda packages from the local channel (real CPython, real
    libcudart and libcudnn), TensorFlow from the package index, verified in CPU mode."""
    spec, channel = real_conda_channel
    out = tmp_path / "envs"
    env = {**home, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = (
        "create", "--tf", spec.release.tf, "--path", "conda", "--python", spec.python,
        "--out", str(out), "--channel", channel.url, "--solver", "builtin", "--json",
    )  # fmt: skip
    done = provision(*args, env=env)
    assert done.returncode == 0, done.stderr
    data = summary(done)
    assert statuses(data) == [(s, "done") for s in ("render", "lock", "install", "verify")]
    prefix = Path(str(data["prefix"]))
    assert (prefix / "lib" / "libcudart.so.12").exists() or (
        prefix / "lib" / "libcudart.so.11.0"
    ).exists()
    report = json.loads((prefix / VERIFY_MARKER).read_text())["report"]
    checks = {c["name"]: c for c in report["report"]["checks"]}
    assert checks["tf_version"]["status"] == "pass"
    # The versions the libraries report, read by the smoke test inside the environment.
    assert checks["cudart"]["status"] == "pass", checks["cudart"]
    assert checks["cudnn"]["status"] in ("pass", "skip"), checks["cudnn"]
    again = provision(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert statuses(summary(again)) == [
        (s, "skipped") for s in ("render", "lock", "install", "verify")
    ]


KERNEL_CODE = """
import json, os, sys
import tensorflow as tf
import provision_env_hook as hook
print(json.dumps({
    "prefix": sys.prefix,
    "devices": [d.device_type for d in tf.config.list_physical_devices()],
    "loaded": len(hook.state["loaded"]),
    "activated": "VIRTUAL_ENV" in os.environ,
}))
"""


def _run_in_kernel(kernel_name: str, code: str) -> dict[str, object]:
    """Start the kernel as Jupyter does (jupyter_client), run code, return what it printed."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name=kernel_name, startup_timeout=180)
    printed: list[str] = []

    def collect(msg: dict[str, object]) -> None:
        content = msg["content"]
        if msg["msg_type"] == "stream" and isinstance(content, dict):
            printed.append(str(content["text"]))

    try:
        reply = kc.execute_interactive(code, output_hook=collect, timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    data: dict[str, object] = json.loads("".join(printed).strip().splitlines()[-1])
    return data


@pytest.mark.slow
def test_an_environment_works_without_activation_and_as_a_jupyter_kernel(
    tmp_path: Path, home: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """create --jupyter, then the interpreter alone (as IDEs and cron run it), `provision kernel`
    and a real kernel started through jupyter_client: TensorFlow imports, the environment's CUDA
    libraries are loaded by its own start-up hook, nothing was activated."""
    tf = "2.13"
    if not tools.has_python(matrix.load().release(tf).python[-1]):
        pytest.skip(f"TensorFlow {tf} needs Python {matrix.load().release(tf).python[-1]} here")
    jupyter = {"JUPYTER_DATA_DIR": str(tmp_path / "jupyter"), "JUPYTER_PATH": ""}
    env = {**home, **jupyter}
    out = tmp_path / "envs"
    done = provision("create", "--tf", tf, "--path", "pip", "--jupyter", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    gpu_host = Path("/proc/driver/nvidia/version").exists()
    if not gpu_host:
        assert "ready (CPU only: no NVIDIA driver) at" in last
    prefix = Path(home["PROVISION_HOME"]) / "envs" / f"tf{tf}-pip"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    verified = provision(
        "verify", "--python", str(prefix / "bin" / "python"), cwd=elsewhere, timeout=900,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.strip().splitlines()[-1].startswith("verify: PASS")

    kernel = provision("kernel", f"tf{tf}-pip", env=env)
    assert kernel.returncode == 0, kernel.stderr
    spec = json.loads(
        (tmp_path / "jupyter" / "kernels" / f"provision-tf{tf}-pip" / "kernel.json").read_text()
    )
    assert spec["argv"][0] == str(prefix / "bin" / "python")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    seen = _run_in_kernel(f"provision-tf{tf}-pip", KERNEL_CODE)
    assert seen["prefix"] == str(prefix) and seen["activated"] is False
    assert "CPU" in seen["devices"]  # type: ignore[operator]
    assert int(str(seen["loaded"])) >= 5  # NVIDIA's CUDA wheels, loaded by the hook
    if gpu_host:
        assert "GPU" in seen["devices"]  # type: ignore[operator]
