"""Small truths (issue 23, item 8): CUDA's error codes in words, a CPU environment's status after
a GPU-only check, the doctor's spacing, and a build that changes nothing leaves its record alone.

The CUDA libraries here are real shared libraries compiled for the test (the C compiler of the
host), whose functions return the codes NVIDIA documents, loaded by the payload's own probes in a
process of their own, as the smoke test loads libcudart and libcuda.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import run_cli
from tinyindex import Env, Index

from provision import registry
from provision.payload import cudaerrors

CC = shutil.which("cc") or shutil.which("gcc")


def _library(folder: Path, soname: str, source: str) -> Path:
    if CC is None:
        pytest.skip("no C compiler on this host to build a library that returns CUDA's codes")
    folder.mkdir(parents=True, exist_ok=True)
    c = folder / f"{soname}.c"
    c.write_text(source)
    lib = folder / soname
    subprocess.run([CC, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(lib), str(c)],
                   check=True, capture_output=True)  # fmt: skip
    return lib


def test_the_table_says_error_35_in_nvidias_words() -> None:
    assert cudaerrors.explain(35) == (
        "35 (cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime "
        "version)"
    )
    assert "CUDA_ERROR_NO_DEVICE" in cudaerrors.explain(100, driver_api=True)
    assert cudaerrors.explain(12345).startswith("12345 (a CUDA error code this table")
    names = [name for name, _ in cudaerrors.RUNTIME.values()]
    assert len(names) == len(set(names)) >= 15


def test_cuda_runtime_error_35_is_explained(tmp_path: Path) -> None:
    lib = _library(
        tmp_path, "libcudart.so.12",
        "int cudaRuntimeGetVersion(int *v) { *v = 0; return 35; }\n",
    )  # fmt: skip
    probe = (
        "import sys\n"
        "from provision.payload import checks_build, probes\n"
        "for how in (lambda: checks_build._raw_version(sys.argv[1], 'cudart', False),\n"
        "            lambda: probes.loaded_version(sys.argv[1], 'cudart')):\n"
        "    try:\n"
        "        how()\n"
        "    except OSError as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(lib)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stderr
    for line in lines:
        assert (
            "cudaRuntimeGetVersion returned 35 (cudaErrorInsufficientDriver: CUDA driver " in line
        )
        assert "version is insufficient for CUDA runtime version)" in line


def test_cuinit_error_is_explained_and_still_read_as_no_gpu(tmp_path: Path) -> None:
    folder = tmp_path / "driver"
    _library(
        folder, "libcuda.so.1",
        "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }\n"
        "int cuInit(unsigned int flags) { return 100; }\n",
    )  # fmt: skip
    probe = "import json\nfrom provision.payload import probes as p\n"
    probe += "print(json.dumps(p.probe_driver()))"
    env = {**os.environ, "LD_LIBRARY_PATH": str(folder)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip
    info = json.loads(done.stdout)
    assert info["cuda"] == "12.4", done.stderr
    assert info["error"] == (
        "cuInit failed with CUDA error 100 (CUDA_ERROR_NO_DEVICE: no CUDA-capable device is "
        "detected)"
    )
    from provision.verify import cpu_only_reason

    report = {"environment": {"gpus": [], "driver": info}}
    assert cpu_only_reason(report) == "CPU only: the driver sees no GPU"


def _record(home: Path, name: str, **changes: object) -> registry.Record:
    python = Path(sys.executable)
    record = registry.Record(
        name=name, env_dir=str(home / "envs-dir" / name), path="pip", tf="2.13.1",
        python="3.11", prefix=str(python.parent.parent), interpreter=str(python),
        installer="uv", lock_sha256="0" * 64, built_at=time.time(), owned=False,
    )  # fmt: skip
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


def test_doctor_puts_a_space_after_a_long_environment_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    registry.put(_record(tmp_path, "tf2.13-pip"))
    registry.put(_record(tmp_path, "a-much-longer-name-than-sixteen"))
    _, out = run_cli("doctor")
    assert "built tf2.13-pip TensorFlow 2.13.1" in out, out
    assert "built a-much-longer-name-than-sixteen TensorFlow 2.13.1" in out, out


def test_a_cpu_environment_that_failed_only_require_gpu_is_shown_cpu_ok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What verify records after --require-gpu failed on a host with no GPU (and nothing else
    failed): list and doctor say the environment works on the CPU."""
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    last = registry.LastVerify(
        False, 0, "CPU ok; --require-gpu FAIL: gpus (CPU only: no NVIDIA driver)", time.time(),
        cpu_ok=True,
    )  # fmt: skip
    registry.put(_record(tmp_path, "tf2.13-pip", last_verify=last))
    _, out = run_cli("list")
    assert "CPU ok, GPU required: FAIL" in out, out
    _, out = run_cli("doctor")
    assert "CPU ok; --require-gpu FAIL: gpus" in out, out


def test_a_build_that_does_nothing_leaves_its_record_byte_for_byte(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 0, out
    record = env.home / "registry" / "tiny.json"
    before = (record.read_bytes(), record.stat().st_mtime_ns)
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 0 and "nothing to do" in out, out
    assert (record.read_bytes(), record.stat().st_mtime_ns) == before
    code, out = run_cli("install", "tiny", "--out", str(env.out), "--require-gpu")
    assert code == 2 and "--require-gpu applies to --from-bundle only" in out, out
    assert (record.read_bytes(), record.stat().st_mtime_ns) == before


@pytest.mark.slow
def test_verify_require_gpu_on_a_cpu_host_keeps_the_environment_cpu_ok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real TensorFlow venv on this host (no GPU): `verify --require-gpu` fails, and the record
    says that the environment works on the CPU; list shows it so."""
    import tfvenv

    from provision import matrix

    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this host has an NVIDIA driver: the case is a host without one")
    release = matrix.load().release("2.13")
    python = tfvenv.ensure(release)
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    out = tmp_path / "envs"
    version = tfvenv.python_for(release)
    code, text = run_cli(
        "render", "--tf", "2.13", "--path", "pip", "--python", version, "--name", "cpu",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, text
    registry.put(
        dataclasses.replace(
            _record(tmp_path, "cpu"),
            env_dir=str(out / "cpu"),
            prefix=str(python.parent.parent),
            interpreter=str(python),
        )
    )
    code, text = run_cli("verify", "cpu", "--out", str(out), "--require-gpu")
    assert code == 1, text
    last = registry.get("cpu").last_verify  # type: ignore[union-attr]
    assert last is not None and not last.ok and last.cpu_ok, last
    assert last.summary.startswith("CPU ok; --require-gpu FAIL: "), last.summary
    _, text = run_cli("list")
    assert "CPU ok, GPU required: FAIL" in text, text
