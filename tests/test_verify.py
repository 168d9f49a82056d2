"""provision verify and the smoke test: what they judge, how they fail, and the real thing on CPU.

Fast tests run the smoke test (the payload's zipapp, as verify runs it) for real where TensorFlow
is not needed (an interpreter without it; a venv whose `tensorflow` hangs or dies on import) and
check the judging against real reports and logs in tests/fixtures/ (reports/README.md says how
they were made and how to add more).
Tests marked slow build real TensorFlow venvs (tests/tfvenv.py: the oldest matrix release this
machine's Pythons can run besides 2.13, and the newest) and verify them in CPU mode.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tfvenv
from click.testing import CliRunner

from provision import matrix as matrix_module
from provision import render as render_module
from provision import verify
from provision.cli import present as cli_present
from provision.cli.commands import cli
from provision.errors import VerifyError
from provision.install import prefix_hooks
from provision.matrix.spec import GpuPolicy, expected, resolve
from provision.payload import cudalibs, elf, judgements
from provision.payload import report as schema
from provision.payload_app import payload_argv, payload_env

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPORTS = sorted((FIXTURES / "reports").glob("*.json"))
LOGS = sorted((FIXTURES / "logs").glob("*.txt"))
GPU_ONLY = {"cuda_libraries", "cudart", "cudnn", "gpus", "gpu_policy", "memory"}


FAULT_VAR = "PROVISION_SMOKE_FAULT"  # the payload's fault injection: hang:<check>, crash:<check>


def run_smoke(python: str | Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """The payload's smoke test with `python`, as verify runs it (its folders under the run's
    own: TensorFlow's autograph files, Keras's); (exit status, JSON report)."""
    with tempfile.TemporaryDirectory(prefix="provision-test-") as folder:
        done = subprocess.run(
            payload_argv(Path(python), "smoke", ["--json", *args], Path(folder)),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **payload_env(Path(folder)), **(env or {})},
        )
    return done.returncode, json.loads(done.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def spec_expected(report: dict[str, Any]) -> dict[str, Any]:
    """The spec a fixture's environment was made for: its release and path, at the Python it ran."""
    exp = report["expected"]
    python = ".".join(str(report["environment"]["python"]).split(".")[:2])
    gpu = GpuPolicy(exp.get("gpu_memory"), exp.get("gpus"))
    spec = resolve(
        matrix_module.load(), exp["tf_version"], exp.get("path") or "pip", python, None, gpu
    )
    return expected(spec)


# --- pure judgments --------------------------------------------------------------------------

TF221_TARGETS = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]


@pytest.mark.parametrize(
    ("cc", "targets", "minimum", "status", "words"),
    [
        ("9.0", TF221_TARGETS, "6.0", "pass", "PTX compute_90"),  # H200 with TF 2.21
        ("8.6", TF221_TARGETS, "6.0", "pass", "native kernels (sm_80)"),  # SASS of the same major
        ("8.9", TF221_TARGETS, "6.0", "pass", "sm_89"),
        ("10.0", TF221_TARGETS, "6.0", "warn", "newer than every target"),  # Blackwell
        ("12.0", TF221_TARGETS, "6.0", "warn", "CUDA_ERROR_INVALID_PTX"),
        ("5.2", TF221_TARGETS, "6.0", "fail", "below this release's minimum 6.0"),
        ("3.7", ["sm_50", "sm_60", "compute_80"], None, "fail", "no kernel image"),
        (
            "9.0",
            ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"],
            "3.5",
            "warn",
            "compute_80",
        ),
    ],
)
def test_compute_capability_against_the_build(
    cc: str, targets: list[str], minimum: str | None, status: str, words: str
) -> None:
    got, reason = judgements.judge_compute(cc, targets, minimum)
    assert got == status
    assert words in reason


@pytest.mark.parametrize(
    ("found", "want", "status"),
    [
        ("9.3.0", "9.3", "pass"),
        ("9.5.1", "9.3", "warn"),  # newer minor: runs, but the pin is not held
        ("9.1.0", "9.3", "fail"),  # older than built for: "Loaded runtime CuDNN library ..."
        ("8.9.7", "9.3", "fail"),
        ("12.5", "12.5", "pass"),
        ("11.8", "12.5", "fail"),
        ("12.5", None, "pass"),
    ],
)
def test_loaded_library_version_against_the_spec(found: str, want: str | None, status: str) -> None:
    assert judgements.judge_library_version("cuDNN", found, want)[0] == status


def test_sonames_come_from_tensorflows_own_cuda_config() -> None:
    reports = {p.name: load(p)["environment"] for p in REPORTS if p.name.startswith("cpu-tf2.")}
    cuda12 = reports["cpu-tf2.21-pip-py3.12-pass.json"]
    cuda11 = reports["cpu-tf2.13-pip-pass.json"]
    assert cudalibs.sonames(cuda12["cuda_config"], cuda12["build_info"]) == {
        "cudart": "libcudart.so.12",
        "cublas": "libcublas.so.12",
        "cublasLt": "libcublasLt.so.12",
        "cufft": "libcufft.so.11",
        "curand": "libcurand.so.10",
        "cusolver": "libcusolver.so.11",  # cuSOLVER 11 ships with CUDA 12
        "cusparse": "libcusparse.so.12",
        "cudnn": "libcudnn.so.9",
    }
    assert (
        cudalibs.sonames(cuda11["cuda_config"], cuda11["build_info"])["cudart"]
        == "libcudart.so.11.0"
    )
    # A build without cuda_config.h falls back to its CUDA major's sonames.
    for env in (cuda11, cuda12):
        assert cudalibs.sonames({}, env["build_info"]) == cudalibs.sonames(
            env["cuda_config"], env["build_info"]
        )


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_tensorflows_real_log_on_a_cpu_host_is_all_benign(log: Path) -> None:
    text = log.read_text()
    on_cpu = judgements.classify_log(text, gpu_host=False)
    assert judgements.judge_log(on_cpu)[0] == "pass", on_cpu
    assert on_cpu["benign"]["oneDNN notice"] >= 1
    # The same "no driver" lines on a host that has a GPU are the problem itself.
    on_gpu = judgements.classify_log(text, gpu_host=True)
    assert judgements.judge_log(on_gpu)[0] == "fail"
    assert any("Could not find cuda drivers" in line for line in on_gpu["problems"])


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("2023-01-01 10:00:00.123456: E tensorflow/compiler/xla/stream_executor/cuda/cuda_dnn.cc:"
         "417] Loaded runtime CuDNN library: 8.1.0 but source was compiled with: 8.6.0.", "fail"),
        ("W0000 00:00:1.5  12 nvptx_compiler.cc:760] Couldn't invoke ptxas --version", "fail"),
        ("E0000 00:00:1.5  12 gpu.cc:1] libdevice not found at ./libdevice.10.bc", "fail"),
        ("W0000 00:00:1.5  12 nvptx_compiler.cc:1] Falling back to the CUDA driver for PTX "
         "compilation; ptxas does not support CC 9.0", "warn"),
        ("E0000 00:00:1.5  12 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to "
         "register factory for plugin cuDNN when one has already been registered", "pass"),
        ("2023-01-01 10:00:00.1: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT "
         "Warning: Could not find TensorRT", "pass"),
        ("W0000 00:00:1.5  12 something_new.cc:1] an unexpected warning", "warn"),
    ],
)  # fmt: skip
def test_log_lines_are_classified(line: str, status: str) -> None:
    assert judgements.judge_log(judgements.classify_log(line + "\n", gpu_host=True))[0] == status


def test_runpath_is_read_from_the_elf_file(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a shared object with a RUNPATH")
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 1; }\n")
    lib = tmp_path / "sub" / "libx.so"
    lib.parent.mkdir()
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(lib), str(src),
         "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../nvidia/cublas/lib:/opt/elsewhere"],
        check=True,
    )  # fmt: skip
    kind, dirs = elf.search_path(str(lib))
    assert kind == "RUNPATH"
    assert dirs == [str(tmp_path / "nvidia" / "cublas" / "lib"), "/opt/elsewhere"]


# --- the smoke test as a program, without TensorFlow -----------------------------------------


def test_without_tensorflow_the_report_says_why_and_fails() -> None:
    code, report = run_smoke(sys.executable)  # the project's venv has no TensorFlow
    assert code == 1
    assert report["schema"] == schema.SCHEMA and report["schema_version"] == schema.SCHEMA_VERSION
    checks = by_name(report)
    assert list(checks) == list(schema.CHECKS)
    assert checks["tf_version"]["status"] == "fail"
    assert "No module named 'tensorflow'" in checks["tf_version"]["reason"]
    assert {c["status"] for n, c in checks.items() if n not in ("tf_version", "logs")} == {"skip"}
    assert report["summary"]["failed"] == 1 and report["summary"]["status"] == "fail"
    assert report["environment"]["python"] == "{}.{}.{}".format(*sys.version_info[:3])


def test_the_smoke_test_runs_on_python_3_8() -> None:
    """TF 2.13 environments may run Python 3.8: the payload's zipapp must run there too."""
    from provision import tools

    py38 = next(iter(tools.python_candidates("3.8")), None)
    if py38 is None:
        pytest.skip("no Python 3.8 on this machine")
    code, report = run_smoke(py38, "--checks", "tf_version,xla")
    assert code == 1
    assert report["environment"]["python"].startswith("3.8.")
    assert [c["name"] for c in report["checks"]] == ["tf_version", "xla"]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            payload_argv(Path(sys.executable), "smoke", argv, tmp_path),
            capture_output=True,
            text=True,
        )

    bad = run("--checks", "tf_version,nope")
    assert bad.returncode == 2 and "unknown check(s) nope" in bad.stderr
    missing = run("--expected", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "cannot read --expected" in missing.stderr


def fake_tensorflow(tmp_path: Path, body: str) -> Path:
    """The interpreter of a venv whose `tensorflow` package runs `body` (a hang, a crash) on
    import: installed in its site-packages, because the payload runs isolated (-I ignores
    PYTHONPATH)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    pkg = Path(site) / "tensorflow"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    return python


def test_an_import_that_hangs_becomes_a_failure_with_its_reason(tmp_path: Path) -> None:
    python = fake_tensorflow(tmp_path, "import time\ntime.sleep(600)\n")
    code, report = run_smoke(python, "--setup-timeout", "2")  # run_smoke's 600 s: a safety net
    assert code == 1
    reason = by_name(report)["tf_version"]["reason"]
    assert reason == "while importing TensorFlow: did not finish within 2 s (a hang)"


def test_an_import_that_dies_names_the_signal(tmp_path: Path) -> None:
    python = fake_tensorflow(
        tmp_path,
        """
        import os, sys
        sys.stderr.write("E0000 00:00:1.5  12 fake.cc:1] about to abort\\n")
        os.abort()
        """,
    )
    code, report = run_smoke(python, "--checks", "tf_version,logs")
    assert code == 1
    reason = by_name(report)["tf_version"]["reason"]
    assert reason.startswith(
        "while importing TensorFlow: the test process died (killed by SIGABRT)"
    )
    assert "about to abort" in reason


def test_verify_passes_the_specs_expectations_to_the_payload(tmp_path: Path) -> None:
    """No copy of the smoke test lives in the environment: verify hands the packaged payload the
    spec's expectations in a file, and the report says what it was compared against."""
    m = matrix_module.load()
    want = expected(resolve(m, "2.13", "pip"))
    report = verify.run_smoke(Path(sys.executable), expected=want, timeout=30)
    assert report["expected"] == want
    assert by_name(report)["tf_version"]["status"] == "fail"  # no TensorFlow here
    assert verify.run_smoke(Path(sys.executable), timeout=30)["expected"] == {}
    override = tmp_path / "override.json"
    override.write_text(json.dumps({"tf_version": "9.9.9"}))
    code, report = run_smoke(sys.executable, "--checks", "tf_version", "--expected", str(override))
    assert (code, report["expected"]) == (1, {"tf_version": "9.9.9"})


def test_verify_with_an_interpreter_runs_the_payload_through_the_cli() -> None:
    code, out, _ = invoke("verify", "--python", sys.executable, "--json", "--timeout", "60")
    assert code == 1
    result = json.loads(out)
    assert result["ok"] is False and result["python"] == sys.executable
    assert result["report"]["environment"]["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    failed = {c["name"]: c["reason"] for c in result["checks"] if c["status"] == "fail"}
    assert list(failed) == ["tf_version"]
    assert "No module named 'tensorflow'" in failed["tf_version"]


def test_the_gpu_policy_is_in_the_runtime_only_when_asked_for() -> None:
    """The memory limit and visible devices travel as runtime.env values; the hook shipped in the
    package applies them (tests/test_hooks.py runs it)."""
    m = matrix_module.load()
    for memory, present in ((None, False), ("growth", True), ("2048", True)):
        files = render_module.render(resolve(m, "2.21", "pip", gpu=GpuPolicy(memory, None)), m)
        assert ("PROVISION_GPU_MEMORY=" in files["hooks/runtime.env"]) is present, memory
    files = render_module.render(resolve(m, "2.21", "pip", gpu=GpuPolicy("2048", "0")), m)
    assert "PROVISION_GPU_MEMORY='2048'" in files["hooks/runtime.env"]
    assert "PROVISION_GPUS='0'" in files["hooks/runtime.env"]


# --- comparing reports with the spec ---------------------------------------------------------


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_fixture_reports_verify_as_their_names_say(path: Path) -> None:
    """A fixture ending in -pass.json verifies against the matrix's spec; -fail.json does not,
    and every failure it has gives a reason; a library that cannot be opened is named."""
    report = load(path)
    result = verify.compare(
        report, spec_expected(report), require_gpu=report["summary"]["require_gpu"]
    )
    assert result.ok is path.stem.endswith("-pass"), [o.reason for o in result.failures]
    assert all(o.reason for o in result.failures)
    libs = by_name(report).get("cuda_libraries", {})
    for soname in libs.get("details", {}).get("cannot_open", []):
        assert soname in libs["reason"]
    text = "\n".join(cli_present.verify_lines(result))
    notes = [", ".join(o.name for o in result.failures), result.cpu_only]
    shown = "; ".join(n for n in notes if n)
    assert text.splitlines()[-1] == ("verify: PASS" if result.ok else "verify: FAIL") + (
        f" ({shown})" if shown else ""
    )
    assert bool(result.cpu_only) is not bool(report["environment"].get("gpus"))
    json.dumps(result.as_json())


def test_the_target_dir_report_names_libcusolver() -> None:
    """TF 2.21 and NVIDIA's wheels installed with `pip install --target`: TensorFlow's own
    search path (libtensorflow_framework's RUNPATH) has no cusolver folder (seen on the H200)."""
    report = load(FIXTURES / "reports" / "cpu-tf2.21-target-dir-require-gpu-fail.json")
    libs = by_name(report)["cuda_libraries"]
    assert libs["status"] == "fail"
    assert libs["details"]["cannot_open"] == ["libcusolver.so.11"]
    assert libs["reason"].startswith("cannot open libcusolver.so.11: not found; it is at ")
    assert "put it on LD_LIBRARY_PATH" in libs["reason"]


def passing_report() -> dict[str, Any]:
    return load(FIXTURES / "reports" / "cpu-tf2.21-pip-py3.12-pass.json")


def test_the_spec_is_checked_again_against_the_facts() -> None:
    report = passing_report()
    want = spec_expected(report)
    assert verify.compare(report, want).ok
    drifted = copy.deepcopy(report)
    drifted["environment"]["tensorflow"] = "2.20.0"
    drifted["environment"]["python"] = "3.11.9"
    drifted["environment"]["build_info"]["cuda_version"] = "12.3"
    result = verify.compare(drifted, want)
    assert not result.ok
    failed = {o.name: o.reason for o in result.failures}
    assert failed["tensorflow"] == "TensorFlow 2.20.0, the spec says 2.21.0"
    assert failed["python"] == "Python 3.11.9, the spec says 3.12"
    assert failed["build"] == "built with CUDA 12.3, the spec says 12.5"
    # The smoke test was rendered for another spec: verify says so, and judges by the new one.
    stale = copy.deepcopy(report)
    stale["expected"]["tf_version"] = "2.20.0"
    outcome = {o.name: o for o in verify.compare(stale, want).findings}["rendering"]
    assert outcome.status == "warn" and "tf_version: '2.20.0' -> '2.21.0'" in outcome.reason


def test_loaded_runtime_versions_are_judged_against_the_spec() -> None:
    report = copy.deepcopy(passing_report())
    for check in report["checks"]:
        if check["name"] == "cudnn":
            check["details"]["version"] = "9.1.0"
    failed = {o.name: o.reason for o in verify.compare(report, spec_expected(report)).failures}
    assert "cuDNN 9.1.0 is loaded, older than the 9.3" in failed["cudnn_version"]


def test_require_gpu_turns_a_cpu_report_into_a_failure() -> None:
    report = passing_report()
    assert verify.compare(report, spec_expected(report)).ok
    result = verify.compare(report, spec_expected(report), require_gpu=True)
    assert [o.name for o in result.failures] == ["gpu_required"]
    assert not verify.compare(report, None, require_gpu=True).ok


def test_reports_that_cannot_be_judged_are_refused() -> None:
    with pytest.raises(VerifyError, match="not a smoke-test report"):
        verify.compare({"schema": "something-else"})
    newer = dict(passing_report(), schema_version=schema.SCHEMA_VERSION + 1)
    with pytest.raises(VerifyError, match="upgrade provision"):
        verify.compare(newer)
    odd = copy.deepcopy(passing_report())
    odd["checks"][0]["status"] = "maybe"
    odd["checks"] = [c for c in odd["checks"] if c["name"] != "xla"]
    failed = {o.name: o.reason for o in verify.compare(odd).failures}
    assert failed["tf_version"].startswith("unknown status 'maybe'")
    assert failed["xla"] == "missing from the report"


# --- the command -----------------------------------------------------------------------------


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_verify_needs_a_name_or_an_interpreter() -> None:
    code, _, err = invoke("verify")
    assert code == 2
    assert err.splitlines()[-1] == "Error: give an environment NAME, --prefix DIR or --python EXE"


def test_verify_of_an_environment_that_is_not_rendered(tmp_path: Path) -> None:
    code, _, err = invoke("verify", "tf2.13-pip", "--out", str(tmp_path))
    assert code == 2
    assert f"no environment 'tf2.13-pip' in {tmp_path}" in err and "render it" in err


def test_verify_of_an_environment_that_is_not_built(tmp_path: Path) -> None:
    assert invoke("render", "--tf", "2.13", "--path", "pip", "--out", str(tmp_path))[0] == 0
    code, _, err = invoke(
        "verify", "tf2.13-pip", "--out", str(tmp_path), env={"PROVISION_HOME": str(tmp_path / "h")}
    )
    assert code == 2  # as run, kernel, check and remove say it (tests/test_environment.py)
    assert err.strip() == (
        "provision: error: tf2.13-pip is not built on this machine (provision list shows what "
        "is); build it with provision install tf2.13-pip"
    )


# --- real TensorFlow, CPU mode (slow) ---------------------------------------------------------


def releases() -> list[str]:
    m = matrix_module.load()
    return sorted({"2.13", m.newest.tf}, key=lambda v: tuple(map(int, v.split("."))))


@dataclasses.dataclass(frozen=True)
class TfEnv:
    tf: str  # the release, X.Y
    name: str  # envs/<name>, rendered under `out`
    out: Path
    prefix: Path  # the real venv

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"


@pytest.fixture(scope="module", params=releases())
def tf_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TfEnv:
    """A real TensorFlow venv (built when missing) and its environment directory."""
    m = matrix_module.load()
    release = m.release(request.param)
    python = tfvenv.ensure(release)
    out = tmp_path_factory.mktemp(f"envs-{release.tf}")
    spec = resolve(m, release.tf, "pip", tfvenv.python_for(release))
    args = (
        "render",
        "--tf",
        release.tf,
        "--path",
        "pip",
        "--python",
        spec.python,
        "--out",
        str(out),
    )
    code, _, err = invoke(*args)
    assert code == 0, err
    return TfEnv(release.tf, spec.name, out, python.parent.parent)


@pytest.mark.slow
def test_cpu_mode_verify_with_real_tensorflow(tf_env: TfEnv, tmp_path: Path) -> None:
    argv = ["verify", tf_env.name, "--out", str(tf_env.out), "--prefix", str(tf_env.prefix)]
    scratch = tmp_path / "tmp"  # the temporary folder verify and TensorFlow see
    scratch.mkdir()
    keras_home = tfvenv.user_keras_home(tmp_path)  # a Keras 3 user's: JAX, float16, channels_first
    done = subprocess.run(
        [sys.executable, "-m", "provision", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(scratch), "KERAS_HOME": str(keras_home)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert list(scratch.iterdir()) == []  # autograph's files and the payload went with verify
    assert sorted(p.name for p in keras_home.iterdir()) == ["keras.json"]
    assert (keras_home / "keras.json").read_text() == tfvenv.USER_KERAS_JSON  # left as it was
    result = json.loads(done.stdout)
    assert result["ok"] is True
    checks = by_name(result["report"])
    for name, check in checks.items():
        # frameworks: no PyTorch or JAX in this venv (tests/test_packages.py has one)
        want = "skip" if name in GPU_ONLY or name == "frameworks" else "pass"
        assert check["status"] == want, (name, check["reason"])
    assert checks["frameworks"]["reason"] == "no PyTorch or JAX in the environment"
    assert checks["mirrored_strategy"]["details"]["replicas"] == 2
    assert checks["mirrored_strategy"]["details"]["max_disagreement"] == 0.0
    fp16, bf16 = checks["mixed_float16"]["details"], checks["mixed_bfloat16"]["details"]
    assert (fp16["compute_dtype"], fp16["variable_dtype"]) == ("float16", "float32")
    assert "LossScaleOptimizer" in fp16["optimizer"] and fp16["loss_scale"] > 1
    assert (bf16["compute_dtype"], bf16["variable_dtype"]) == ("bfloat16", "float32")
    assert checks["xla"]["details"]["hlo_chars"] > 0
    assert {f["name"] for f in result["findings"]} >= {"tensorflow", "python", "build"}
    assert all(f["status"] == "pass" for f in result["findings"])


@pytest.mark.slow
def test_a_hang_in_one_check_fails_it_and_the_rest_still_run(tf_env: TfEnv) -> None:
    code, report = run_smoke(
        tf_env.python, "--timeout", "5", "--checks", "cuda_build,mixed_float16,mixed_bfloat16,xla",
        env={FAULT_VAR: "hang:mixed_float16"},
    )  # fmt: skip
    assert code == 1
    checks = by_name(report)
    assert checks["mixed_float16"]["reason"] == (
        "did not finish within 5 s (a hang); the checks after it ran in a new process"
    )
    assert [checks[c]["status"] for c in ("cuda_build", "mixed_bfloat16", "xla")] == ["pass"] * 3


def purelib(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(done.stdout.strip())


@pytest.mark.slow
def test_the_memory_limit_hook_applies_after_tensorflow_imports(
    tf_env: TfEnv, tmp_path: Path
) -> None:
    """The hooks as install puts them, in a venv that sees the TensorFlow venv's packages (a .pth),
    so the cached venv stays as it is; nothing activated, no variable set by the test."""
    from provision import environment

    m = matrix_module.load()
    release = m.release(tf_env.tf)
    out = tmp_path / "envs"
    code, _, err = invoke(
        "render", "--tf", release.tf, "--path", "pip", "--python", tfvenv.python_for(release),
        "--name", "lim", "--gpu-memory", "1024", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    env_dir = environment.load(out / "lim")
    venv = tmp_path / "venv"
    subprocess.run([str(tf_env.python), "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_dir = purelib(python)
    (site_dir / "00-tensorflow-venv.pth").write_text(f"{purelib(tf_env.python)}\n")
    prefix_hooks.install_hooks(env_dir, venv)
    probe = subprocess.run(
        [str(python), "-I", "-c",
         "import tensorflow, provision_env_hook as h; print(h.state['limit_mib'], h.state['gpus'],"
         " h.state['error'])"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert probe.stdout.split() == ["1024", "0", "None"], probe.stderr[-2000:]
    want = tmp_path / "expected.json"
    want.write_text(json.dumps(expected(env_dir.spec)))
    args = ("--checks", "gpu_policy", "--expected", str(want))
    code, report = run_smoke(python, *args)
    check = report["checks"][0]
    assert (check["status"], code) == ("pass", 0), check["reason"]
    assert "asks for 1024 MiB" in check["reason"]
    env = {"PROVISION_GPU_MEMORY_LIMIT_MIB": "1024"}
    _, report = run_smoke(tf_env.python, *args, env=env)  # no hook in this environment
    assert report["checks"][0]["reason"].startswith(
        "the start-up hook provision_env_hook was not loaded"
    )


@pytest.mark.slow
def test_real_cuda_runtime_and_cudnn_versions_are_read(tmp_path: Path) -> None:
    """NVIDIA's real libcudart and libcudnn (from their wheels) on LD_LIBRARY_PATH: the versions
    are read with cudaRuntimeGetVersion / cudnnGetVersion and judged; an older runtime fails, and
    a cuDNN dispatcher without its sub-libraries (it aborts when asked) is reported, not fatal."""
    from fakes import nvidia

    m = matrix_module.load()
    release = m.newest
    cuda, cudnn = m.cuda_of(release), m.cudnn_of(release)
    if cudnn.major < 9:
        pytest.skip("the dispatcher's sub-library below is cuDNN 9's libcudnn_graph")
    python = tfvenv.ensure(release)
    want = expected(resolve(m, release.tf, "pip", tfvenv.python_for(release)))
    exp_file = tmp_path / "expected.json"
    exp_file.write_text(json.dumps(want))
    members = ["nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/lib/libcudnn_graph.so.9"]
    libcudnn = nvidia.wheel_members(nvidia.cudnn_wheel(cudnn), members) / "nvidia/cudnn/lib"
    older = dataclasses.replace(cuda, version=f"{cuda.major}.1")
    for runtime_of, graph, status in ((cuda, True, "pass"), (older, False, "fail")):
        runtime = nvidia.cuda_runtime(runtime_of)
        libs = tmp_path / f"libs-{runtime_of.version}"
        libs.mkdir()
        shutil.copy(runtime.path, libs / runtime.soname)
        for lib in ("libcudnn.so.9", "libcudnn_graph.so.9") if graph else ("libcudnn.so.9",):
            shutil.copy(libcudnn / lib, libs)
        code, report = run_smoke(
            python, "--expected", str(exp_file), "--checks", "cuda_libraries,cudart,cudnn",
            env={"LD_LIBRARY_PATH": str(libs)},
        )  # fmt: skip
        checks = by_name(report)
        cudart, cudnn_check = checks["cudart"], checks["cudnn"]
        assert cudart["details"]["version"] == runtime_of.version
        assert cudart["details"]["path"] == str(libs / runtime.soname)
        assert cudart["status"] in (("pass", "skip") if status == "pass" else ("fail",))
        assert cudnn_check["status"] == "skip"  # no GPU: TensorFlow loads no cuDNN
        if graph:
            assert cudnn_check["details"]["version"].startswith(cudnn.version + ".")
        else:
            assert "cannot read the version of" in cudnn_check["reason"]
            assert "sub-libraries" in cudnn_check["reason"]
        assert "libcusolver.so.11" in checks["cuda_libraries"]["reason"]
        assert code == (0 if status == "pass" else 1)
