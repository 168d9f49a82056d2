"""`provision create` with no release: the doctor's verdicts on the fake hosts of tests/fakehost.py
(an old driver with a Kepler GPU, a Blackwell GPU, an H200, no GPU, Linux aarch64) decide which
release and path it builds, and it says why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import fakehost
import pytest
from click.testing import CliRunner
from fakehost import FakeGpu, FakeHost

from provision import matrix
from provision.cli.commands import cli
from provision.doctor.choose import choose
from provision.doctor.diagnosis import Diagnosis
from provision.errors import UnsupportedCombination
from provision.matrix import Release

M = matrix.load()


@pytest.fixture(scope="session")
def lib_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fake-libs")


@pytest.fixture
def make(tmp_path: Path, lib_cache: Path) -> Callable[..., FakeHost]:
    def build(builder: Callable[..., FakeHost] | None = None, **kw: Any) -> FakeHost:
        base = tmp_path / f"host{len(list(tmp_path.iterdir()))}"
        base.mkdir()
        return builder(base, lib_cache, **kw) if builder else FakeHost(base, lib_cache)

    return build


def diagnosis(h: FakeHost, **env: str) -> Diagnosis:
    _, report = h.doctor_json(**env)
    return Diagnosis.from_json(report)


def newest(pred: Callable[[Release], bool]) -> Release:
    return [r for r in M.finals if pred(r)][-1]


def test_no_gpu_picks_for_the_cpu(make: Callable[..., FakeHost]) -> None:
    choice = choose(diagnosis(make()), M)
    assert (choice.tf, choice.path, choice.gpu) == (M.newest.tf, "pip", False)
    assert len(choice.why) == 2
    assert choice.why[0].startswith("no usable NVIDIA GPU here (no NVIDIA driver on this host")
    assert "for the CPU" in choice.why[1]
    # a path given is kept
    assert choose(diagnosis(make()), M, "conda").path == "conda"


def newest_runnable(d: Diagnosis) -> str:
    """The newest final release with a runs/fix verdict on any path (what doctor says)."""
    ok = {v.tf for v in d.verdicts if v.status in ("runs", "fix")}
    return [r.tf for r in M.finals if r.tf in ok][-1]


def test_kepler_on_an_old_driver_gets_the_newest_release_built_for_it(
    make: Callable[..., FakeHost],
) -> None:
    # driver 470 (CUDA 11.4) and a Tesla K80 (3.7): CUDA 11 releases with sm_35 kernels only
    d = diagnosis(make(fakehost.k80, nvml=True))
    choice = choose(d, M)
    assert (choice.tf, choice.gpu) == (newest_runnable(d), True)
    rel = M.release(choice.tf)
    assert M.cuda_of(rel).major == 11 and rel.compute_min == "3.5"
    assert choice.path == "conda"  # the default path first, when it can
    assert len(choice.why) == 1
    assert choice.why[0].startswith(f"picked TensorFlow {rel.tf} ({rel.pin}) on the conda path")
    assert "Tesla K80 (3.7)" in choice.why[0] and f"; {M.newest.tf} cannot: " in choice.why[0]


def test_old_driver_with_a_modern_gpu(make: Callable[..., FakeHost]) -> None:
    """Driver 470 on an A100: CUDA 12 releases are out of reach (driver too old), and CUDA 11.8
    ones only through minor-version compatibility, where the compute_80 PTX cannot be JIT-ed."""
    h = make()
    h.kernel_module("470.256.02")
    h.driver_libs("470.256.02")
    h.nvml("470.256.02", "11.4", [FakeGpu("NVIDIA A100-SXM4-80GB", "8.0", 81920)])
    d = diagnosis(h)
    choice = choose(d, M)
    assert (choice.tf, choice.gpu) == (newest_runnable(d), True)
    assert M.cuda_of(M.release(choice.tf)).version == "11.2"
    assert "driver 470.256.02 supports CUDA <= 11.4" in choice.why[0]


def test_blackwell_says_what_ptx_jit_and_ptxas_need(make: Callable[..., FakeHost]) -> None:
    choice = choose(diagnosis(make(fakehost.blackwell, nvml=True)), M)
    assert (choice.tf, choice.gpu) == (M.newest.tf, True)
    assert len(choice.why) == 2
    line = choice.why[1]
    assert "NVIDIA B200 (sm_100) is newer than TensorFlow" in line
    assert "JIT-compiles the compute_90 code" in line
    cuda = M.cuda_of(M.newest).full
    assert f"ptxas must be from a CUDA that knows sm_100, newer than the CUDA {cuda}" in line


def test_prereleases_only_with_pre(make: Callable[..., FakeHost]) -> None:
    pre = [r for r in M.releases if r.prerelease]
    if not pre:
        pytest.skip("the matrix has no pre-release row")
    h = make()
    assert choose(diagnosis(h), M).tf == M.newest.tf
    assert choose(diagnosis(h), M, pre=True).tf == pre[-1].tf


def test_aarch64_says_its_wheels_are_cpu_only(make: Callable[..., FakeHost]) -> None:
    h = make()
    h.write("/proc/sys/kernel/arch", "aarch64\n")
    with pytest.raises(UnsupportedCombination) as err:
        choose(diagnosis(h), M)
    text = str(err.value)
    assert "Linux aarch64: TensorFlow's wheels there are CPU-only builds" in text
    assert f"pip install tensorflow=={M.newest.pin}`" in text
    # through the CLI: one line, exit 1, nothing written
    out = h.root.parent / "envs"
    env = {**h.env, "PROVISION_HOST_ROOT": str(h.root)}
    res = CliRunner().invoke(cli, ["-q", "create", "--out", str(out)], env=env)
    assert res.exit_code == 1, res.output
    assert res.output.startswith("provision: error: this host is Linux aarch64")
    assert "[and-cuda]==" not in res.output and not out.exists()


def test_an_explicit_release_is_not_second_guessed(make: Callable[..., FakeHost]) -> None:
    h = make()
    env = {**h.env, "PROVISION_HOST_ROOT": str(h.root)}
    out = h.root.parent / "envs"
    res = CliRunner().invoke(cli, ["-q", "create", "--tf", "1.99", "--out", str(out)], env=env)
    assert res.exit_code != 0 and "auto:" not in res.output
