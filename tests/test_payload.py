"""The payload (provision/payload) and how it ships (provision/payload_app): one zipapp, built the
same way every time, run by an environment's interpreter from Python 3.8 on; and the parts of it
the host shares: the one GPU-target parser, the one ELF reader, the one cuDNN/CUDA decoder.

The smoke test's own behaviour (reports, hangs, crashes) is tested in test_verify.py, the
benchmark's in test_bench.py.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from provision import payload_app
from provision.payload import cudalibs, elf, targets
from provision.payload.targets import CodeTarget

PAYLOAD = Path(payload_app.__file__).with_name("payload")
PYTHONS = ("3.8", "3.13")  # the oldest an environment may run (TF 2.13), and a new one


# --- GPU build targets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("sm_80", CodeTarget("sm", 8, 0)),
        ("sm_89", CodeTarget("sm", 8, 9)),
        ("sm_90a", CodeTarget("sm", 9, 0, "a")),  # Hopper's arch-specific features (wgmma)
        ("sm_100", CodeTarget("sm", 10, 0)),  # Blackwell: 10.0, not 1.0
        ("sm_100a", CodeTarget("sm", 10, 0, "a")),
        ("sm_120", CodeTarget("sm", 12, 0)),
        ("sm_120f", CodeTarget("sm", 12, 0, "f")),
        ("compute_90", CodeTarget("compute", 9, 0)),  # PTX for 9.0
        (" compute_35 ", CodeTarget("compute", 3, 5)),
    ],
)
def test_build_targets_are_read_as_compute_capabilities(name: str, target: CodeTarget) -> None:
    assert targets.parse(name) == target
    assert target.name == name.strip()


@pytest.mark.parametrize("name", ["hopper", "sm_9", "sm_90x", "sm90", "compute_", "lto_90", ""])
def test_what_is_not_a_build_target(name: str) -> None:
    assert targets.parse(name) is None


@pytest.mark.parametrize(
    ("name", "native", "jit"),
    [
        ("sm_80", [(8, 0), (8, 6), (8, 9)], []),  # SASS: same major, equal or newer minor
        ("sm_90a", [(9, 0)], []),  # arch-specific: that GPU only
        ("sm_100", [(10, 0), (10, 3)], []),
        ("sm_100a", [(10, 0)], []),
        ("sm_100f", [(10, 0), (10, 3)], []),  # family-specific: the 10.x family
        ("compute_90", [], [(9, 0), (10, 0), (10, 3), (12, 0)]),  # PTX: any equal or newer GPU
        ("compute_90a", [], [(9, 0)]),
    ],
)
def test_which_gpus_a_target_serves(
    name: str, native: list[tuple[int, int]], jit: list[tuple[int, int]]
) -> None:
    gpus = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0)]
    target = targets.parse(name)
    assert target is not None
    assert [cc for cc in gpus if target.native_on(cc)] == native
    assert [cc for cc in gpus if target.jit_on(cc)] == jit


# --- the ELF reader ------------------------------------------------------------------------------


def _mapped(stem: str) -> Path:
    """A shared object this very process has loaded, found in /proc/self/maps."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(None, 5)[-1]
        if path.startswith("/") and Path(path).name.startswith(stem):
            return Path(path)
    pytest.skip(f"no {stem}* mapped into this process (not a glibc Linux?)")


def test_the_elf_reader_on_this_machines_libc() -> None:
    libc = _mapped("libc.so")
    info = elf.read(str(libc))
    assert info is not None
    assert info.soname == "libc.so.6" and info.bits == 64
    if shutil.which("readelf") is None:
        pytest.skip("no readelf to compare with")
    dynamic = subprocess.run(
        ["readelf", "-d", "-h", "-W", str(libc)], capture_output=True, text=True, check=True
    ).stdout
    assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic) == list(info.needed)
    assert re.findall(r"\(SONAME\)\s+Library soname: \[(.+?)\]", dynamic) == [info.soname]
    machine = re.search(r"Machine:\s+(.+)", dynamic)
    names = {62: "X86-64", 183: "AArch64", 21: "PowerPC64"}
    assert machine is not None and names.get(info.machine, "?") in machine.group(1)


def test_the_elf_reader_on_a_python_extension() -> None:
    """An extension module: NEEDED only where the build linked something, never a SONAME."""
    import _ctypes

    if not getattr(_ctypes, "__file__", None):
        pytest.skip("_ctypes is built into this interpreter")
    info = elf.read(str(_ctypes.__file__))
    assert info is not None and info.soname == ""
    assert all(name.startswith("lib") or name.startswith("ld-") for name in info.needed)


def test_rpath_and_runpath_with_origin(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build shared objects with")
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 1; }\n")
    for name, tags in (("runpath", "--enable-new-dtags"), ("rpath", "--disable-new-dtags")):
        lib = tmp_path / name / f"lib{name}.so"
        lib.parent.mkdir()
        subprocess.run(
            [cc, "-shared", "-fPIC", "-o", str(lib), str(src), f"-Wl,-soname,lib{name}.so.1",
             f"-Wl,{tags},-rpath,$ORIGIN/../nvidia/cublas/lib:/opt/elsewhere:/opt/elsewhere"],
            check=True,
        )  # fmt: skip
        info = elf.read(str(lib))
        assert info is not None and info.soname == f"lib{name}.so.1"
        raw = "$ORIGIN/../nvidia/cublas/lib:/opt/elsewhere:/opt/elsewhere"
        assert (info.runpath, info.rpath) == ((raw, None) if name == "runpath" else (None, raw))
        kind, dirs = elf.search_path(str(lib))
        assert kind == name.upper()
        assert dirs == [str(tmp_path / "nvidia" / "cublas" / "lib"), "/opt/elsewhere"]


def test_what_is_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "libfake.so.1"
    text.write_text("INPUT(libfake.so.1.2)\n")  # a linker script, as some libfoo.so are
    truncated = tmp_path / "libcut.so"
    truncated.write_bytes(_mapped("libc.so").read_bytes()[:80])
    for path in (text, tmp_path / "missing.so"):
        assert elf.read(str(path)) is None
        assert elf.search_path(str(path)) == ("", [])
    cut = elf.read(str(truncated))
    assert cut is None or cut.soname == ""


# --- the CUDA runtime and cuDNN version decoders -------------------------------------------------


@pytest.mark.parametrize(
    ("value", "version"),
    [(7605, "7.6.5"), (8100, "8.1.0"), (8907, "8.9.7"), (90300, "9.3.0"), (91001, "9.10.1")],
)
def test_cudnn_get_version_is_decoded(value: int, version: str) -> None:
    assert cudalibs.cudnn_version(value) == version


@pytest.mark.parametrize(("value", "version"), [(11020, "11.2"), (12050, "12.5"), (13000, "13.0")])
def test_cuda_runtime_get_version_is_decoded(value: int, version: str) -> None:
    assert cudalibs.cudart_version(value) == version


def test_cudnn_version_header() -> None:
    header = (
        "#ifndef CUDNN_VERSION_H_\n#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 3\n"
        "#define CUDNN_PATCHLEVEL 0\n"
        "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n"
    )
    assert cudalibs.cudnn_header_version(cudalibs.header_defines(header)) == "9.3.0"
    no_patch = header.replace("#define CUDNN_PATCHLEVEL 0\n", "")
    assert cudalibs.cudnn_header_version(cudalibs.header_defines(no_patch)) is None


# --- the zipapp ----------------------------------------------------------------------------------


def test_the_payload_imports_only_itself_and_the_standard_library() -> None:
    """Relative imports between its modules, nothing else of provision, no third-party module
    (TensorFlow, NumPy and matplotlib only inside functions, in the environment)."""
    stdlib = set(sys.stdlib_module_names)
    for path in sorted(PAYLOAD.glob("*.py")):
        text = path.read_text()
        for node in ast.parse(text).body:
            if isinstance(node, ast.Import):
                assert {a.name.split(".")[0] for a in node.names} <= stdlib, path.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert str(node.module).split(".")[0] in stdlib, (path.name, node.module)
        assert len(text.splitlines()) < 400, path.name


def test_the_zipapp_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    one = payload_app.write_zipapp(tmp_path / "a" / "smoke-test.pyz")
    two = payload_app.write_zipapp(tmp_path / "b" / "smoke-test.pyz")
    assert one.read_bytes() == two.read_bytes() == payload_app.zipapp(tmp_path).read_bytes()
    assert one.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert os.access(one, os.X_OK)
    with zipfile.ZipFile(one) as zf:
        names = zf.namelist()
        assert names == sorted(names) and names[0] == "__main__.py"
        assert {n.split("/")[-1] for n in names[1:]} == {p.name for p in PAYLOAD.glob("*.py")}
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert re.fullmatch(r"[0-9a-f]{64}", payload_app.digest())


def test_the_zipapp_goes_into_the_run_s_own_folder(tmp_path: Path) -> None:
    path = payload_app.zipapp(tmp_path)
    assert (
        path.parent == tmp_path and path.read_bytes() == payload_app.zipapp(tmp_path).read_bytes()
    )
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind


def test_payload_argv_runs_isolated(tmp_path: Path) -> None:
    argv = payload_app.payload_argv(Path("/env/bin/python"), "bench", ["--gpus", "2"], tmp_path)
    assert argv == ["/env/bin/python", "-I", str(tmp_path / "provision-payload.pyz"), "bench",
                    "--gpus", "2"]  # fmt: skip


def test_the_working_directory_cannot_shadow_the_payload(tmp_path: Path) -> None:
    (tmp_path / "provision_payload").mkdir()
    (tmp_path / "provision_payload" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    (tmp_path / "json.py").write_text("raise SystemExit('shadowed')\n")
    done = subprocess.run(
        payload_app.payload_argv(
            Path(sys.executable), "smoke", ["--json", "--checks", "xla"], tmp_path
        ),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["checks"][0]["name"] == "xla"


def _python(version: str) -> str:
    from provision import tools

    found = next(iter(tools.python_candidates(version)), None)
    if found is None:
        pytest.skip(f"no Python {version} on this machine")
    return str(found)


@pytest.mark.parametrize("version", PYTHONS)
def test_the_zipapp_runs_without_tensorflow(version: str, tmp_path: Path) -> None:
    python = _python(version)
    done = subprocess.run(
        payload_app.payload_argv(Path(python), "smoke", ["--json"], tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["environment"]["python"].startswith(version + ".")
    first = report["checks"][0]
    assert first["name"] == "tf_version" and first["status"] == "fail"
    assert "TensorFlow could not be imported" in first["reason"]
    assert "No module named 'tensorflow'" in first["reason"]
    bench = subprocess.run(
        payload_app.payload_argv(Path(python), "bench", ["--gpus", "x"], tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (bench.returncode, bench.stderr) == (
        1,
        "benchmark: error: --gpus takes counts like 1,2,4, not 'x'\n",
    )


def test_usage_of_the_zipapp(tmp_path: Path) -> None:
    zipapp = str(payload_app.zipapp(tmp_path))
    for argv, code, words in (
        ([], 2, "{smoke,bench}"),
        (["nope"], 2, "{smoke,bench}"),
        (["smoke", "--help"], 0, "--require-gpu"),
        (["bench", "--help"], 0, "--cpu-devices"),
    ):
        done = subprocess.run(
            [sys.executable, "-I", zipapp, *argv], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == code, argv
        assert words in done.stdout + done.stderr, argv


def test_a_tensorflow_version_however_it_is_spelled() -> None:
    """TensorFlow's own __version__ of a pre-release is '2.22.0-rc0'; the package is 2.22.0rc0."""
    from provision.payload.judgements import same_version

    assert same_version("2.22.0-rc0", "2.22.0rc0")
    assert same_version("2.15.0.post1", "2.15.0post1") and same_version("2.13.1", "2.13.1")
    assert not same_version("2.22.0-rc1", "2.22.0rc0") and not same_version("2.22.0", "2.22.0rc0")
    assert not same_version("", "2.22.0") and not same_version(None, "")


def test_cuda_config_h_is_read_past_its_include_guard() -> None:
    """A bare `#define GUARD_H_` ends at its line: the define after it is not its value (the
    CUDA version of cuda_config.h was lost this way, and since 2.22 only that header has it)."""
    header = (
        "#ifndef CUDA_CUDA_CONFIG_H_\n#define CUDA_CUDA_CONFIG_H_\n\n"
        '#define TF_CUDA_VERSION "12.5.1"\n#define TF_CUDNN_VERSION "9"\n'
        '#define TF_CUDA_TOOLKIT_PATH ""\n\n#define TF_CUDA_COMPUTE_CAPABILITIES 60, 70, 90\n'
    )
    found = cudalibs.header_defines(header)
    assert found["TF_CUDA_VERSION"] == "12.5.1" and found["TF_CUDNN_VERSION"] == "9"
    assert found["CUDA_CUDA_CONFIG_H_"] == "" and found["TF_CUDA_TOOLKIT_PATH"] == ""
    assert found["TF_CUDA_COMPUTE_CAPABILITIES"] == "60, 70, 90"


def test_a_failed_configuration_is_named_by_what_tensorflow_said_last() -> None:
    """A TensorFlow error's first line is only its header ('Graph execution error:', as an H200
    run recorded); the reason comes after the frames, and that is what the report keeps."""
    from provision.payload.bench_config import failure_line

    text = (
        "Graph execution error:\n\nDetected at node StatefulPartitionedCall defined at (most "
        'recent call last):\n  File "/env/bin/train.py", line 3, in <module>\n\n  File '
        '"keras/trainer.py", line 9, in fit\n\nlibdevice not found at ./libdevice.10.bc\n'
        "\t [[{{node StatefulPartitionedCall}}]] [Op:__inference_multi_step_on_iterator_5678]\n"
    )
    assert failure_line(text, "InternalError") == (
        "Graph execution error: libdevice not found at ./libdevice.10.bc"
    )
    keras = (
        "Unable to automatically build the model. Please build it yourself before calling fit. "
        "A model is 'built' when its variables have been created.\nException encountered:\n"
        "'Exception encountered when calling FusedBatchNormalization.call().\n\n"
        "\x1b[1m'FusedBatchNormalization' object has no attribute 'renorm'\x1b[0m\n\n"
        "Arguments received by FusedBatchNormalization.call():\n  \u2022 training=False'"
    )
    assert failure_line(keras, "RuntimeError") == (
        "Unable to automatically build the model. "
        "'FusedBatchNormalization' object has no attribute 'renorm'"
    )
    assert failure_line("out of memory\nmore", "ResourceExhaustedError") == "out of memory"
    assert failure_line("  \n", "ValueError") == "ValueError"
    assert len(failure_line("x" * 1000, "E")) == 300
