"""`provision doctor` against realistic fake hosts (tests/fakehost.py) and against this machine.

Expectations come from the matrix rows (driver minimums, compute capability, build targets), so
these tests follow the data as it is filled in; where the matrix has no row that a case needs,
the test says so and skips.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fakehost
import pytest
from fakehost import FakeHost
from packaging.version import Version

from provision import host, matrix
from provision.cli import doctor_report
from provision.doctor.diagnosis import Diagnosis
from provision.doctor.examine import matrix_digest
from provision.doctor.judge import diagnose
from provision.matrix import Release

M = matrix.load()
FIXTURES = Path(__file__).parent / "fixtures"
H200_REPORT = FIXTURES / "h200" / "doctor.json"


@pytest.fixture(scope="session")
def lib_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fakehost.compiler()
    return tmp_path_factory.mktemp("fake-libs")


@pytest.fixture
def make(tmp_path: Path, lib_cache: Path) -> Callable[..., FakeHost]:
    def build(builder: Callable[..., FakeHost] | None = None, **kw: Any) -> FakeHost:
        base = tmp_path / f"host{len(list(tmp_path.iterdir()))}"
        base.mkdir()
        return builder(base, lib_cache, **kw) if builder else FakeHost(base, lib_cache)

    return build


def verdicts(report: dict[str, Any], tf: str) -> dict[str, dict[str, Any]]:
    return {v["path"]: v for v in report["verdicts"] if v["tf"] == tf}


def offered(report: dict[str, Any], tf: str) -> list[dict[str, Any]]:
    return [v for v in verdicts(report, tf).values() if v["status"] != "n/a"]


def text_of(v: dict[str, Any]) -> str:
    return " ".join([*v["reasons"], *v["fixes"], *v["notes"]])


def cuda_of(rel: Release) -> Version:
    return Version(M.cuda_of(rel).version)


def releases(pred: Callable[[Release], bool], why: str) -> list[Release]:
    rows = [r for r in M.finals if pred(r)]
    if not rows:
        pytest.skip(f"the matrix has no release {why} yet")
    return rows


# --- no driver ---------------------------------------------------------------------------------


def test_no_driver_at_all(make: Callable[..., FakeHost]) -> None:
    h = make()
    code, report = h.doctor_json()
    assert code == 1 and report["ok"] is False
    assert report["host"]["gpus"] == [] and report["host"]["driver"]["version"] == ""
    assert any("no NVIDIA driver" in f["text"] for f in report["findings"])
    for rel in M.releases:
        for v in offered(report, rel.tf):
            assert v["status"] == "cannot"
            assert M.cuda_of(rel).driver_min in v["reasons"][0], v
    code, text = h.doctor("--tf", M.newest.tf)
    assert code == 1
    assert "no NVIDIA driver" in text
    assert f"TensorFlow {M.newest.tf}\n  cannot on every path" in text
    probes = {p["name"]: p["status"] for p in report["host"]["probes"]}
    assert probes["nvml"] == "absent" and probes["nvidia-smi"] == "absent"


# --- driver 470 / Tesla K80 --------------------------------------------------------------------


def test_driver_470_refuses_cuda12_releases_with_the_driver_needed(
    make: Callable[..., FakeHost],
) -> None:
    h = make(fakehost.k80, nvml=False)
    code, report = h.doctor_json(PROVISION_NO_NVML="1")
    drv = report["host"]["driver"]
    assert (drv["version"], drv["cuda"], drv["source"]) == ("470.256.02", "11.4", "nvidia-smi")
    smi = next(p for p in report["host"]["probes"] if p["name"] == "nvidia-smi")
    assert smi["status"] == "ok" and "cannot report compute capability" in smi["detail"]
    assert [g["compute_capability"] for g in report["host"]["gpus"]] == ["", ""]
    for rel in releases(lambda r: cuda_of(r).major >= 12, "on CUDA 12"):
        cuda = M.cuda_of(rel)
        for v in offered(report, rel.tf):
            assert v["status"] == "cannot", v
            assert "driver 470.256.02 supports CUDA <= 11.4" in v["reasons"][0]
            assert f"driver >= {cuda.driver_min}" in v["reasons"][0]
            assert cuda.driver_compat_min in v["reasons"][0]
    for rel in releases(
        lambda r: cuda_of(r) > Version("11.4") and cuda_of(r).major == 11, "on CUDA 11.5+"
    ):
        for v in offered(report, rel.tf):
            assert v["status"] != "cannot", v
            assert "minor-version compatibility" in text_of(v)
            assert "compute capability is unknown" in text_of(v)
    assert code == 0  # the CUDA 11 releases can run here
    code, text = h.doctor("--tf", M.newest.tf, PROVISION_NO_NVML="1")
    assert code == 1 and "supports CUDA <= 11.4" in text


def test_k80_below_the_minimum_compute_capability(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.k80, nvml=True)
    code, report = h.doctor_json()
    nvml = next(p for p in report["host"]["probes"] if p["name"] == "nvml")
    assert nvml["status"] == "ok", nvml
    gpus = report["host"]["gpus"]
    assert [(g["name"], g["compute_capability"], g["memory_mib"]) for g in gpus] == [
        ("Tesla K80", "3.7", 11441)
    ] * 2
    assert [(g["mig"], g["persistence"], g["uuid"]) for g in gpus] == [
        ("", "disabled", "GPU-0"),
        ("", "disabled", "GPU-1"),
    ]
    too_new = releases(
        lambda r: Version(r.compute_min) > Version("3.7"), "with a minimum above 3.7"
    )
    for rel in too_new:
        for v in offered(report, rel.tf):
            assert v["status"] == "cannot"
            assert (
                f"below TensorFlow {rel.tf}'s minimum compute capability {rel.compute_min}"
                in " ".join(v["reasons"])
            )
    for rel in releases(lambda r: Version(r.compute_min) <= Version("3.7"), "for Kepler"):
        for v in offered(report, rel.tf):
            assert "minimum compute capability" not in text_of(v)
    code, text = h.doctor("--tf", too_new[-1].tf)
    assert code == 1
    assert (
        f"GPU 1 (Tesla K80, compute capability 3.7) is below TensorFlow {too_new[-1].tf}'s minimum"
        in text
    )


# --- H200: driver 580, CUDA 13 libraries only --------------------------------------------------


def test_h200_needs_cuda12_libraries_and_says_how(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.h200)
    code, report = h.doctor_json(PROVISION_NO_NVML="1")
    hr = report["host"]
    assert (hr["driver"]["version"], hr["driver"]["cuda"], hr["driver"]["kernel_module"]) == (
        "580.159.04",
        "13.0",
        "580.159.04",
    )
    assert [
        (g["name"], g["compute_capability"], g["memory_mib"], g["uuid"]) for g in hr["gpus"]
    ] == [("NVIDIA H200", "9.0", 143771, "GPU-0")]
    assert "GPU-00000000-1111" not in json.dumps(report)  # UUIDs are anonymised
    libs = {(lib["kind"], lib["path"]): lib for lib in hr["libraries"]}
    cudart = libs["cudart", "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.96"]
    assert (cudart["version"], cudart["version_from"], cudart["soname"], cudart["loader_rank"]) == (
        "13.0.96",
        "file name",
        "libcudart.so.13",
        0,
    )
    system_cudnn = libs["cudnn", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0"]
    assert (system_cudnn["version"], system_cudnn["version_from"], system_cudnn["built_for"]) == (
        "9.14.0",
        "cudnnGetVersion",
        "13",
    )
    pip_cudnn = libs[
        "cudnn", "/usr/local/lib/python3.12/dist-packages/nvidia/cudnn/lib/libcudnn.so.9"
    ]
    assert (
        pip_cudnn["version"],
        pip_cudnn["version_from"],
        pip_cudnn["loader_rank"],
        pip_cudnn["env"],
    ) == ("9.19.0", "cudnnGetVersion", None, "/usr/local")
    assert any("cuDNN 9 is installed 2 times" in f["text"] for f in report["findings"])
    for rel in releases(lambda r: cuda_of(r).major == 12, "on CUDA 12"):
        vs = verdicts(report, rel.tf)
        system = vs["system"]
        python = "" if "3.12" in rel.python else f" --python {rel.python[-1]}"
        assert system["status"] == "fix"
        assert system["fixes"][-1] == f"provision create --tf {rel.tf} --path system{python}"
        assert any(
            "no libcudart.so.12 on the loader's path (found libcudart.so.13 13.0.96" in r
            for r in system["reasons"]
        )
        if M.cudnn_of(rel).major == 9:
            assert any("built for CUDA 13" in r for r in system["reasons"])
        if vs["pip"]["status"] != "n/a":
            assert vs["pip"]["status"] == "fix"
            assert vs["pip"]["fixes"][-1] == f"provision create --tf {rel.tf} --path pip{python}"
        assert "no native kernels" in text_of(system) or "has native kernels" not in text_of(system)
    assert not any(
        "driver" in " ".join(v["reasons"]) for v in report["verdicts"] if v["status"] == "cannot"
    ), "driver 580 supports every release's CUDA"
    assert code == 0
    code, text = h.doctor("--tf", M.newest.tf, PROVISION_NO_NVML="1")
    assert code == 0
    assert f"$ provision create --tf {M.newest.tf} --path system" in text
    assert (
        "NVIDIA H200, compute capability 9.0, 140.4 GiB, MIG disabled, persistence enabled" in text
    )


def test_cudnn_version_from_header_when_loading_is_off(make: Callable[..., FakeHost]) -> None:
    h = make()
    h.cudnn("/opt/cudnn/lib", "9.3.0", full_name=False, header=True)
    h.ld_conf("cudnn", "/opt/cudnn/lib")
    _, loaded = h.doctor_json()
    _, unloaded = h.doctor_json(PROVISION_NO_DLOPEN="1")
    got = [
        (lib["version"], lib["version_from"])
        for r in (loaded, unloaded)
        for lib in r["host"]["libraries"]
    ]
    assert got == [("9.3.0", "cudnnGetVersion"), ("9.3.0", "cudnn_version.h")]


# --- WSL2 --------------------------------------------------------------------------------------


def test_wsl2(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.wsl2)
    code, report = h.doctor_json(PROVISION_NO_NVML="1")
    hr = report["host"]
    assert hr["wsl"] is True and hr["wsl_lib"] == "/usr/lib/wsl/lib"
    assert (hr["driver"]["version"], hr["driver"]["cuda"], hr["driver"]["kernel_module"]) == (
        "566.36",
        "12.7",
        "",
    )
    assert [(g["name"], g["compute_capability"]) for g in hr["gpus"]] == [
        ("NVIDIA GeForce RTX 4090", "8.9")
    ]
    levels = {f["level"] for f in report["findings"] if "WSL" in f["text"]}
    assert levels == {"note"}, report["findings"]
    assert not any("kernel module" in f["text"] for f in report["findings"])
    for rel in releases(lambda r: cuda_of(r) <= Version("12.7"), "on CUDA <= 12.7"):
        for v in offered(report, rel.tf):
            assert "driver" not in " ".join(v["reasons"]), v
    assert code == 0


def test_wsl2_without_its_library_folder_on_the_loader_path(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.wsl2, loader_conf=False)
    code, report = h.doctor_json(PROVISION_NO_NVML="1")
    fix = "export LD_LIBRARY_PATH=/usr/lib/wsl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    assert any(f["fix"] == fix and f["level"] == "error" for f in report["findings"])
    runnable = [v for v in report["verdicts"] if v["status"] == "fix"]
    assert runnable and all(v["fixes"][0] == fix for v in runnable)
    assert code == 0


def test_wsl2_with_a_linux_driver_installed_inside(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.wsl2, linux_driver="550.120")
    _, report = h.doctor_json(PROVISION_NO_NVML="1")
    assert any(
        "Linux NVIDIA driver is installed inside WSL (libcuda.so.550.120)" in f["text"]
        for f in report["findings"]
    )


# --- kernel module and user-space driver differ -------------------------------------------------


def test_kernel_module_and_user_space_differ(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.mismatch)
    code, report = h.doctor_json()
    drv = report["host"]["driver"]
    assert (drv["kernel_module"], drv["user_space"]) == ("570.133.20", "580.95.05")
    probes = {p["name"]: p for p in report["host"]["probes"]}
    assert probes["nvml"]["status"] == "failed" and "mismatch" in probes["nvml"]["detail"]
    assert probes["nvidia-smi"]["status"] == "failed"
    assert "Driver/library version mismatch" in probes["nvidia-smi"]["detail"]
    reboot = [f for f in report["findings"] if f["fix"] == "sudo reboot"]
    assert (
        len(reboot) == 1
        and "kernel module 570.133.20 but user-space driver 580.95.05" in reboot[0]["text"]
    )
    runnable = [v for v in report["verdicts"] if v["status"] == "fix"]
    assert runnable and all(v["fixes"][0] == "sudo reboot" for v in runnable)
    assert code == 0
    _, text = h.doctor()
    assert "fix: sudo reboot" in text


# --- two cuDNN copies on the path; a host that is ready ------------------------------------------


def _lab_release() -> Release:
    # The lab host's driver is 555.42.06 (CUDA 12.5): the newest release it serves natively.
    rows = releases(
        lambda r: (
            cuda_of(r).major == 12 and cuda_of(r) <= Version("12.5") and M.cudnn_of(r).major >= 8
        ),
        "on CUDA 12.x <= 12.5",
    )
    return rows[-1]


def _lab(make: Callable[..., FakeHost], rel: Release, shadow: str = "") -> FakeHost:
    cuda, cudnn = M.cuda_of(rel), M.cudnn_of(rel)
    return make(
        fakehost.lab,
        cuda=f"{cuda.version}.82",
        cudnn=".".join(cudnn.full.split(".")[:3]),
        tensorflow=rel.pin,
        shadow_cudnn=shadow,
    )


def test_ready_host_runs_on_every_path(make: Callable[..., FakeHost]) -> None:
    rel = _lab_release()
    h = _lab(make, rel)
    code, report = h.doctor_json("--tf", rel.tf, PROVISION_NO_NVML="1")
    assert code == 0
    vs = verdicts(report, rel.tf)
    assert vs["system"]["status"] == "runs", vs["system"]
    assert "ready in ~/venvs/tf" in vs["system"]["notes"]
    assert vs["conda"]["status"] == "runs", vs["conda"]
    assert "ready in ~/miniconda3/envs/tf" in vs["conda"]["notes"]
    envs = {(e["prefix"], e["kind"], e["tensorflow"]) for e in report["host"]["environments"]}
    assert envs == {("~/venvs/tf", "venv", rel.pin), ("~/miniconda3/envs/tf", "conda", rel.pin)}
    assert "/home/lab" not in json.dumps(report)  # the home folder is anonymised


def test_two_cudnn_copies_on_the_path(make: Callable[..., FakeHost]) -> None:
    rel = _lab_release()
    cudnn = M.cudnn_of(rel)
    major, minor = (int(x) for x in cudnn.version.split("."))
    if minor == 0:
        pytest.skip(f"cuDNN {cudnn.version} has no older minor to shadow it with")
    old = f"{major}.{minor - 1}.0"
    h = _lab(make, rel, shadow=old)
    code, report = h.doctor_json("--tf", rel.tf, PROVISION_NO_NVML="1")
    conflict = [
        f
        for f in report["findings"]
        if f"copies of libcudnn.so.{major} on the loader's path" in f["text"]
    ]
    assert len(conflict) == 1 and conflict[0]["level"] == "warning"
    assert f"the loader takes /opt/cudnn/lib/libcudnn.so.{old}" in conflict[0]["text"]
    ranks = {
        lib["path"]: lib["loader_rank"]
        for lib in report["host"]["libraries"]
        if lib["kind"] == "cudnn"
    }
    assert ranks[f"/opt/cudnn/lib/libcudnn.so.{old}"] == 0
    assert (
        ranks[f"/usr/lib/x86_64-linux-gnu/libcudnn.so.{'.'.join(cudnn.full.split('.')[:3])}"] == 1
    )
    system = verdicts(report, rel.tf)["system"]
    assert system["status"] == "fix"
    assert any(
        f"the cuDNN the loader takes is {old}" in r and f"built with {cudnn.version}" in r
        for r in system["reasons"]
    )
    assert code == 0


def test_toolkit_off_the_loader_path_gets_the_ld_library_path_fix(
    make: Callable[..., FakeHost],
) -> None:
    rel = _lab_release()
    h = _lab(make, rel)
    h.at(f"/etc/ld.so.conf.d/cuda-{M.cuda_of(rel).version.replace('.', '-')}.conf").unlink()
    _, report = h.doctor_json("--tf", rel.tf, PROVISION_NO_NVML="1")
    system = verdicts(report, rel.tf)["system"]
    folder = f"/usr/local/cuda-{M.cuda_of(rel).version}/targets/x86_64-linux/lib"
    assert system["status"] == "fix"
    assert (
        f"libcudart.so.{M.cuda_of(rel).major} is in {folder}, which is not on the loader's path"
        in system["reasons"]
    )
    assert system["fixes"] == [
        f"export LD_LIBRARY_PATH={folder}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
    ]


def wheel_venv(make: Callable[..., FakeHost]) -> tuple[FakeHost, Any, str, Path]:
    """An H200 with a venv of the newest release with CUDA 12 wheels, its NVIDIA wheels in it:
    (host, release, its Python, the venv's site-packages)."""
    rel = releases(
        lambda r: cuda_of(r).major == 12 and bool(r.pip_wheels or r.and_cuda), "with CUDA 12 wheels"
    )[-1]
    h = make(fakehost.h200)
    python = rel.python[-1]
    site = h.venv("~/venvs/tf", python, tensorflow=rel.pin)
    cuda, cudnn = M.cuda_of(rel), M.cudnn_of(rel)
    h.pip_wheels(site, f"{cuda.version}.82", ".".join(cudnn.full.split(".")[:3]))
    return h, rel, python, site


def test_pip_environment_with_nvidia_wheels_runs(make: Callable[..., FakeHost]) -> None:
    h, rel, python, _ = wheel_venv(make)
    h.python(python)
    cuda, cudnn = M.cuda_of(rel), M.cudnn_of(rel)
    _, report = h.doctor_json("--tf", rel.tf, PROVISION_NO_NVML="1")
    pip = verdicts(report, rel.tf)["pip"]
    assert pip["status"] == "runs", pip
    assert pip["notes"][-1].startswith("ready in ~/venvs/tf; if TensorFlow lists no GPU there")
    assert f"~/venvs/tf/lib/python{python}/site-packages/nvidia/cudnn/lib" in pip["notes"][-1]
    wheel_cudnn = [
        lib
        for lib in report["host"]["libraries"]
        if lib["env"] == "~/venvs/tf" and lib["kind"] == "cudnn"
    ]
    # The wheel's own cuDNN, though the system's (9.14, asked first) has a sub-library of the
    # same soname: each library is asked in a process of its own.
    wheel = ".".join(cudnn.full.split(".")[:3])
    assert [(lib["version"], lib["version_from"], lib["built_for"]) for lib in wheel_cudnn] == [
        (wheel, "cudnnGetVersion", str(cuda.major))
    ]
    system_cudnn = [lib["version"] for lib in report["host"]["libraries"]
                    if not lib["env"] and lib["kind"] == "cudnn"]  # fmt: skip
    assert system_cudnn == ["9.14.0"] != [wheel]
    assert (
        verdicts(report, rel.tf)["system"]["status"] == "fix"
    )  # the system still has CUDA 13 only


def test_a_cudnn_whose_sub_library_does_not_load_costs_only_its_own_answer(
    make: Callable[..., FakeHost],
) -> None:
    """A wheel's libcudnn.so.9 without its libcudnn_graph.so.9 aborts the process that asks it
    (as NVIDIA's does): its version comes from elsewhere, and every other library still answers."""
    h, rel, _, site = wheel_venv(make)
    wheel = ".".join(M.cudnn_of(rel).full.split(".")[:3])
    sub = fakehost.cudnn_sub_library("9")
    for folder in (f"{site}/nvidia/cudnn/lib", fakehost.MULTIARCH):  # nowhere to be found
        for f in h.at(folder).glob(sub.split(".so")[0] + ".so*"):
            f.unlink()
    code, report = h.doctor_json("--tf", rel.tf, PROVISION_NO_NVML="1")
    found = {(lib["env"], lib["kind"]): lib for lib in report["host"]["libraries"]}
    mine, system = found[("~/venvs/tf", "cudnn")], found[("", "cudnn")]
    # not the system's header, which describes the system's cuDNN
    assert (mine["version"], mine["version_from"]) == (wheel, "package metadata"), mine
    assert system["version_from"] != "cudnnGetVersion", system
    runtime = found[("~/venvs/tf", "cudart")]  # asked after them, in the same child
    assert runtime["version_from"].startswith("cudaRuntimeGetVersion"), runtime
    assert code == 0


def test_libraries_and_ptxas_newer_than_the_driver(make: Callable[..., FakeHost]) -> None:
    rel = _lab_release()
    h = _lab(make, rel)
    h.toolkit("13.0.96", on_loader_path=False)
    _, report = h.doctor_json("--tf", rel.tf, PROVISION_NO_NVML="1")
    texts = [f["text"] for f in report["findings"] if f["level"] == "warning"]
    assert any(
        "libcudart.so.13.0.96 is CUDA 13.0.96, newer than this driver supports (CUDA 12.5)" in t
        for t in texts
    )
    assert any(
        "/usr/local/cuda-13.0/bin/ptxas is from CUDA 13.0, newer than the driver's CUDA 12.5" in t
        for t in texts
    )


# --- a GPU newer than a build's targets ----------------------------------------------------------


@pytest.mark.parametrize(
    "nvml", [False, True], ids=["rtx-pro-6000-cc12.0-nvidia-smi", "b200-cc10.0-nvml"]
)
def test_blackwell_gpu_newer_than_the_build_targets(
    make: Callable[..., FakeHost], nvml: bool
) -> None:
    h = make(fakehost.blackwell, nvml=nvml)
    _, report = h.doctor_json(**({} if nvml else {"PROVISION_NO_NVML": "1"}))
    gpu = report["host"]["gpus"][0]
    cc = Version(gpu["compute_capability"])
    assert cc.major in (10, 12) and report["host"]["driver"]["source"] == (
        "nvml" if nvml else "nvidia-smi"
    )
    checked = 0
    for rel in M.releases:
        sass = [
            t
            for t in rel.compute_targets
            if t.startswith("sm_") and t[3:].rstrip("af")[:-1] == str(cc.major)
        ]
        ptx = [
            t
            for t in rel.compute_targets
            if t.startswith("compute_") and Version(f"{t[8:-1]}.{t[-1]}") <= cc
        ]
        if sass or cuda_of(rel).major < 12:
            continue  # native kernels, or refused for Blackwell's driver long before (CUDA 11)
        checked += 1
        for v in offered(report, rel.tf):
            if ptx:
                assert v["status"] != "cannot", v
                assert f"JIT-compiles the compute_{ptx[-1][8:]} PTX" in text_of(v)
                assert "tensorflow/tensorflow#89272" in text_of(v)
            else:
                assert v["status"] == "cannot" and "newer than" in " ".join(v["reasons"])
    if not checked:
        pytest.skip("no CUDA 12 release in the matrix lacks native Blackwell kernels")
    # The same host against a build with no PTX at all: nothing can run it.
    rel = releases(lambda r: cuda_of(r).major == 12, "on CUDA 12")[-1]
    sass_only = dataclasses.replace(
        rel, compute_targets=tuple(t for t in rel.compute_targets if t.startswith("sm_"))
    )
    m = dataclasses.replace(M, releases=(*[r for r in M.releases if r.tf != rel.tf], sass_only))
    d = diagnose(host.HostReport.from_json(report["host"]), m, rel.tf)
    assert {v.status for v in d.verdicts if v.status != "n/a"} == {"cannot"}
    assert all(
        "which carry no PTX for it" in v.reasons[0] for v in d.verdicts if v.status == "cannot"
    )


# --- native Windows ----------------------------------------------------------------------------


def test_native_windows_refuses_releases_without_a_windows_gpu_build(
    make: Callable[..., FakeHost],
) -> None:
    _, report = make(fakehost.h200).doctor_json(PROVISION_NO_NVML="1")
    windows = dataclasses.replace(host.HostReport.from_json(report["host"]), os="windows")
    d = diagnose(windows, M)
    last = [r.tf for r in M.releases if r.windows_native_gpu]
    for v in d.verdicts:
        rel = M.release(v.tf)
        if v.status == "n/a":
            continue
        if not rel.windows_native_gpu:
            assert v.status == "cannot" and "native Windows" in v.reasons[0]
            if last:
                assert f"the last one with it is {last[-1]}" in v.reasons[0]
        elif v.path == "system":
            assert v.status == "cannot" and "Linux shell script" in v.reasons[0]
        else:
            assert not any("native Windows" in r for r in v.reasons)


# --- no probe can hang ---------------------------------------------------------------------------


def test_nvidia_smi_that_never_answers(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.h200)
    h.nvidia_smi(hang=True)
    done = h.doctor_process(
        "--json", timeout=30, PROVISION_NO_NVML="1", PROVISION_PROBE_TIMEOUT="1"
    )
    report = json.loads(done.stdout)
    probes = {p["name"]: p for p in report["host"]["probes"]}
    assert probes["nvidia-smi"]["status"] == "timeout", probes["nvidia-smi"]
    assert "did not finish within 1 s" in probes["nvidia-smi"]["detail"]
    assert probes["libraries"]["status"] == "ok"  # the others still report
    assert report["host"]["libraries"] and report["host"]["driver"]["kernel_module"] == "580.159.04"
    assert any("probe nvidia-smi timeout" in f["text"] for f in report["findings"])
    assert done.returncode == (0 if report["ok"] else 1)


# --- the report ----------------------------------------------------------------------------------


def test_json_round_trip_renders_the_same_report(make: Callable[..., FakeHost]) -> None:
    h = make(fakehost.h200)
    report = host.probe(
        root=h.root,
        env={k: v for k, v in h.env.items() if v is not None} | {"PROVISION_NO_NVML": "1"},
    )
    d = diagnose(report, M, None, matrix_digest())
    again = Diagnosis.from_json(json.loads(json.dumps(d.to_json())))
    assert again == d
    assert doctor_report.render(again, M) == doctor_report.render(d, M)


def test_unknown_release_is_one_line_and_exit_1(make: Callable[..., FakeHost]) -> None:
    done = make().doctor_process("--tf", "1.99")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("provision: error: TensorFlow 1.99 is not in the matrix")


@pytest.mark.skipif(
    not H200_REPORT.exists(),
    reason="no report from a real H200 yet (tests/fixtures/h200/doctor.json)",
)
def test_real_h200_report_makes_sense() -> None:
    data = json.loads(H200_REPORT.read_text())
    d = Diagnosis.from_json(data)
    h = d.host
    assert not h.stand_in and h.has_driver and h.os == "linux"
    assert h.gpus and all("H200" in g.name and g.compute_capability == "9.0" for g in h.gpus)
    assert all(g.uuid == f"GPU-{g.index}" for g in h.gpus)
    assert Version(h.driver.cuda) >= Version("12.0") and h.driver.source in ("nvml", "nvidia-smi")
    assert h.driver.kernel_module in ("", h.driver.version)
    text = doctor_report.render(d, M)
    assert "NVIDIA H200" in text and "Verdicts" in text
    # Today's matrix judging the same host: no driver or GPU refusal for a CUDA 12 release.
    now = diagnose(h, M, d.tf)
    for v in now.verdicts:
        if v.status == "cannot" and cuda_of(M.release(v.tf)).major == 12:
            raise AssertionError(f"an H200 with driver {h.driver.version} refused: {v}")
    if d.matrix_sha256 == matrix_digest():
        assert now.verdicts == d.verdicts and now.ok == d.ok == data["ok"]


# --- this machine --------------------------------------------------------------------------------


def test_doctor_on_this_machine_is_consistent() -> None:
    """How fast it is lives in tests/bench/bench_doctor.py, not in a unit test."""
    done = subprocess.run(
        [sys.executable, "-m", "provision", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = json.loads(done.stdout)
    assert done.returncode == (0 if report["ok"] else 1), done.stderr
    assert {p["name"] for p in report["host"]["probes"]} >= {
        "system",
        "nvml",
        "libraries",
        "ptxas",
        "environments",
    }
    assert not any(p["status"] in ("failed", "timeout") for p in report["host"]["probes"]), report[
        "host"
    ]["probes"]


# --- the verdicts, frozen ------------------------------------------------------------------------
# tests/golden/doctor/<case>.json holds `judge.diagnose(...).to_json()` for every fake host of
# tests/fakehost.py and every committed capture of a real host, judged against a frozen copy of the
# matrix (tests/golden/doctor/matrix.toml, so that an edit of the matrix data does not move them),
# with probe timings zeroed and provision's version blanked. A change in the doctor's code that
# changes a verdict, a finding or the report's JSON shows up here. After a deliberate change:
#     UPDATE_GOLDEN=1 /tmp/hostvenv/bin/python -m pytest tests/test_doctor.py -k golden
# and read the diff of tests/golden/doctor/ before committing it.

GOLDEN_DOCTOR = Path(__file__).parent / "golden" / "doctor"
GOLDEN_MATRIX = GOLDEN_DOCTOR / "matrix.toml"
NO_NVML = {"PROVISION_NO_NVML": "1"}


def _golden_lab(make: Callable[..., FakeHost], m: matrix.Matrix, shadow: bool = False) -> FakeHost:
    rel = [
        r
        for r in m.releases
        if m.cuda_of(r).major == 12
        and Version(m.cuda_of(r).version) <= Version("12.5")
        and m.cudnn_of(r).major >= 8
    ][-1]
    cuda, cudnn = m.cuda_of(rel), m.cudnn_of(rel)
    major, minor = cudnn.version.split(".")[:2]
    return make(
        fakehost.lab,
        cuda=f"{cuda.version}.82",
        cudnn=".".join(cudnn.full.split(".")[:3]),
        tensorflow=rel.pin,
        shadow_cudnn=f"{major}.{max(int(minor) - 1, 0)}.0" if shadow else "",
    )


def _golden_lab_toolkit_off_path(make: Callable[..., FakeHost], m: matrix.Matrix) -> FakeHost:
    h = _golden_lab(make, m)
    for conf in h.at("/etc/ld.so.conf.d").glob("cuda-12-*.conf"):
        conf.unlink()
    return h


def _golden_lab_cuda13_toolkit(make: Callable[..., FakeHost], m: matrix.Matrix) -> FakeHost:
    h = _golden_lab(make, m)
    h.toolkit("13.0.96", on_loader_path=False)
    return h


def _golden_h200_pip_venv(make: Callable[..., FakeHost], m: matrix.Matrix) -> FakeHost:
    rel = [r for r in m.releases if m.cuda_of(r).major == 12 and (r.pip_wheels or r.and_cuda)][-1]
    h = make(fakehost.h200)
    python = rel.python[-1]
    site = h.venv("~/venvs/tf", python, tensorflow=rel.pin)
    h.python(python)
    cuda, cudnn = m.cuda_of(rel), m.cudnn_of(rel)
    h.pip_wheels(site, f"{cuda.version}.82", ".".join(cudnn.full.split(".")[:3]))
    return h


def _golden_cudnn_header(make: Callable[..., FakeHost], m: matrix.Matrix) -> FakeHost:
    h = make()
    h.cudnn("/opt/cudnn/lib", "9.3.0", full_name=False, header=True)
    h.ld_conf("cudnn", "/opt/cudnn/lib")
    return h


# case -> (how to build the fake host, extra environment of the probe, judged as native Windows)
GOLDEN_HOSTS: dict[
    str, tuple[Callable[[Callable[..., FakeHost], matrix.Matrix], FakeHost], dict[str, str], bool]
] = {
    "no-driver": (lambda make, m: make(), {}, False),
    "k80-nvidia-smi": (lambda make, m: make(fakehost.k80, nvml=False), NO_NVML, False),
    "k80-nvml": (lambda make, m: make(fakehost.k80, nvml=True), {}, False),
    "h200": (lambda make, m: make(fakehost.h200), NO_NVML, False),
    "h200-native-windows": (lambda make, m: make(fakehost.h200), NO_NVML, True),
    "h200-pip-venv": (_golden_h200_pip_venv, NO_NVML, False),
    "blackwell-nvidia-smi": (lambda make, m: make(fakehost.blackwell, nvml=False), NO_NVML, False),
    "blackwell-nvml": (lambda make, m: make(fakehost.blackwell, nvml=True), {}, False),
    "wsl2": (lambda make, m: make(fakehost.wsl2), NO_NVML, False),
    "wsl2-no-loader-conf": (lambda make, m: make(fakehost.wsl2, loader_conf=False), NO_NVML, False),
    "wsl2-linux-driver": (
        lambda make, m: make(fakehost.wsl2, linux_driver="550.120"),
        NO_NVML,
        False,
    ),
    "mismatch": (lambda make, m: make(fakehost.mismatch), {}, False),
    "lab": (_golden_lab, NO_NVML, False),
    "lab-shadow-cudnn": (lambda make, m: _golden_lab(make, m, shadow=True), NO_NVML, False),
    "lab-toolkit-off-path": (_golden_lab_toolkit_off_path, NO_NVML, False),
    "lab-cuda13-toolkit": (_golden_lab_cuda13_toolkit, NO_NVML, False),
    "cudnn-header-no-dlopen": (_golden_cudnn_header, {"PROVISION_NO_DLOPEN": "1"}, False),
}
# Committed reports of real hosts: their host part is judged again.
GOLDEN_CAPTURES = {
    "capture-h200": FIXTURES / "h200" / "doctor.json",
    "capture-h200x2": FIXTURES / "h200" / "doctor-h200x2.json",
}


def _golden_json(d: Diagnosis) -> str:
    data: dict[str, Any] = json.loads(json.dumps(d.to_json()))
    data["provision"] = ""  # the version: not the doctor's judgement
    for p in data["host"]["probes"]:
        p["seconds"] = 0.0
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _check_golden(case: str, d: Diagnosis) -> None:
    got = _golden_json(d)
    file = GOLDEN_DOCTOR / f"{case}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        file.write_text(got, encoding="utf-8")
    assert file.exists(), f"no golden diagnosis for {case}; run UPDATE_GOLDEN=1 pytest {__file__}"
    assert got == file.read_text(encoding="utf-8"), f"the diagnosis of {case} changed"


@pytest.mark.parametrize("case", sorted(GOLDEN_HOSTS))
def test_golden_diagnosis_of_fake_hosts(make: Callable[..., FakeHost], case: str) -> None:
    build, extra, windows = GOLDEN_HOSTS[case]
    m = matrix.load(GOLDEN_MATRIX)
    h = build(make, m)
    env = {k: v for k, v in h.env.items() if v is not None} | extra
    report = host.probe(root=h.root, env=env)
    if windows:
        report = dataclasses.replace(report, os="windows")
    _check_golden(case, diagnose(report, m, None, matrix_digest(GOLDEN_MATRIX)))


@pytest.mark.parametrize("case", sorted(GOLDEN_CAPTURES))
def test_golden_diagnosis_of_captured_hosts(case: str) -> None:
    captured = Diagnosis.from_json(json.loads(GOLDEN_CAPTURES[case].read_text()))
    m = matrix.load(GOLDEN_MATRIX)
    for tf in (None, m.newest.tf):
        d = diagnose(captured.host, m, tf, matrix_digest(GOLDEN_MATRIX))
        _check_golden(case + (f"-tf{tf}" if tf else ""), d)
