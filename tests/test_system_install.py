"""The system path: provision's static install-system.sh, run for real under a prefix in tmp_path
(no root needed), with an environment's system.env (rendered from the matrix) as its --vars.

NVIDIA's runfile and cuDNN archive are replaced by fakes of the same names and layout
(tests/fakes/nvidia.py) holding NVIDIA's real libcudart and libcudnn, and nvidia-smi by a fake that
reports a chosen driver. Since the fakes' checksums are not NVIDIA's, most tests render system.env
from a spec whose checksums are the fakes' (dataclasses.replace);
test_real_matrix_vars_refuse_the_fakes checks that the script, given the system.env rendered from
the matrix itself, refuses them before running anything.

The venv step is skipped (--skip-venv) except in the venv tests, which install a tiny pinned
package through the script's PROVISION_VENV_PACKAGE variable, and one slow test with the real
TensorFlow pin.
"""

from __future__ import annotations

import dataclasses
import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpserve
import pytest
from fakes.nvidia import Artifacts, build_cudnn_archive, elf_soname, sha256_file

from provision import matrix as matrix_module
from provision import render as render_module
from provision.install.build import system_script
from provision.matrix import Matrix
from provision.matrix.spec import EnvSpec, all_specs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = system_script()
TEMPLATE = ROOT / "templates" / "system" / "system.env.j2"
VARS = "system.env"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
REAL = matrix_module.load()
FIXTURE = matrix_module.load(Path(__file__).resolve().parent / "golden" / "matrix.toml")
TINY = "six==1.17.0"  # the venv tests' stand-in for TensorFlow: 11 kB, pure Python
IMPORT_TF = "import tensorflow as tf; print(tf.__version__)"


def system_specs(m: Matrix) -> list[EnvSpec]:
    return [s for s in all_specs(m) if s.path == "system"]


def install_cases(m: Matrix) -> list[EnvSpec]:
    """The newest system-path release per CUDA major with a cuDNN wheel to take libraries from."""
    newest: dict[int, EnvSpec] = {}
    for spec in system_specs(m):
        if spec.cudnn.pip:
            newest[spec.cuda.major] = spec
    return [newest[k] for k in sorted(newest)]


CASES = install_cases(REAL)
SPEC = CASES[0]  # the CUDA 11 row (cuDNN from nvidia-cudnn-cu11): driver, checksum, venv tests


def render_vars(spec: EnvSpec, folder: Path, m: Matrix = REAL) -> Path:
    """The environment's system.env, rendered into `folder` (the script's --vars)."""
    folder.mkdir(parents=True, exist_ok=True)
    env_vars = folder / VARS
    env_vars.write_text(render_module.render(spec, m)[VARS])
    return env_vars


def with_checksums(spec: EnvSpec, art: Artifacts, *, runfile: str = "sha256") -> EnvSpec:
    """The spec with the fakes' checksums in place of NVIDIA's ("md5": the runfile by md5 only)."""
    sha, md5 = (art.runfile_sha256, "") if runfile == "sha256" else ("", art.runfile_md5)
    cuda = dataclasses.replace(spec.cuda, runfile_sha256=sha, runfile_md5=md5)
    cudnn = dataclasses.replace(spec.cudnn, sha256=art.cudnn_sha256)
    return dataclasses.replace(spec, cuda=cuda, cudnn=cudnn)


def host_path(*first: Path) -> str:
    """PATH with `first` in front and without any directory that holds a real nvidia-smi."""
    keep = [
        d for d in os.environ["PATH"].split(os.pathsep) if d and not Path(d, "nvidia-smi").exists()
    ]
    return os.pathsep.join([*map(str, first), *keep])


@dataclasses.dataclass(frozen=True)
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout + self.stderr


def run_script(
    env_vars: Path | None,
    *args: str | Path,
    path: str,
    tmp: Path,
    env: dict[str, str] | None = None,
) -> Run:
    """bash install-system.sh --vars ENV_VARS ARGS... (no --vars when env_vars is None)."""
    full = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LD_LIBRARY_PATH", "XLA_FLAGS", "CUDA_HOME", "PROVISION_VENV_PACKAGE")
        and not k.startswith("FAKE_CUDA_")
    }
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)
    full.update(PATH=path, TMPDIR=str(scratch), no_proxy="127.0.0.1,localhost", **(env or {}))
    given = ["--vars", str(env_vars)] if env_vars is not None else []
    done = subprocess.run(
        ["bash", str(SCRIPT), *given, *map(str, args)],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under root (directories too): mtime, size, mode, link target."""
    found: dict[str, tuple[int, int, int, str]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        link = os.readlink(path) if path.is_symlink() else ""
        found[path.relative_to(root).as_posix()] = (st.st_mtime_ns, st.st_size, st.st_mode, link)
    return found


@pytest.fixture
def art(nvidia_artifacts: Callable[..., Artifacts]) -> Artifacts:
    return nvidia_artifacts(SPEC.cuda, SPEC.cudnn)


@pytest.fixture
def env_vars(tmp_path: Path, art: Artifacts) -> Path:
    """system.env of SPEC with the fakes' checksums."""
    return render_vars(with_checksums(SPEC, art), tmp_path / "env")


@pytest.fixture
def ok_path(fake_nvidia_smi: Callable[..., Path]) -> str:
    """PATH with an nvidia-smi reporting exactly the toolkit's minimum driver."""
    return host_path(fake_nvidia_smi(SPEC.cuda.driver_min))


def local_files(art: Artifacts) -> list[str | Path]:
    return ["--runfile", art.runfile, "--cudnn-archive", art.cudnn_archive]


# --- the script and the variables file as text ---------------------------------------------------


def test_script_and_template_write_no_version() -> None:
    """Every version comes from the matrix: neither the script nor the template holds a number."""
    for source in (SCRIPT, TEMPLATE):
        found = re.findall(r"\b\d+\.\d+\b", source.read_text())
        assert found == [], source


def test_the_script_is_in_the_package_and_passes_bash_n_and_shellcheck() -> None:
    assert SCRIPT == ROOT / "provision" / "scripts" / "install-system.sh"
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert not (ROOT / "templates" / "system" / "install.sh.j2").exists()
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    lint = subprocess.run([str(SHELLCHECK), str(SCRIPT)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def expected_vars(spec: EnvSpec) -> dict[str, str]:
    return {
        "VARS_SCHEMA": "1",
        "ENV_NAME": spec.name,
        "TF_PIN": spec.release.pin,
        "PYTHON_VERSION": spec.python,
        "PYTHON_SUPPORTED": " ".join(spec.release.python),
        "PIP_REQUIREMENTS": " ".join(spec.pip_requirements),
        "CUDA_VERSION": spec.cuda.version,
        "CUDA_FULL": spec.cuda.full,
        "CUDA_MAJOR": str(spec.cuda.major),
        "DRIVER_MIN": spec.cuda.driver_min,
        "DRIVER_COMPAT_MIN": spec.cuda.driver_compat_min,
        "RUNFILE_NAME": spec.cuda.runfile,
        "RUNFILE_URL": spec.cuda.runfile_url,
        "RUNFILE_SHA256": spec.cuda.runfile_sha256,
        "RUNFILE_MD5": spec.cuda.runfile_md5,
        "CUDNN_FULL": spec.cudnn.full,
        "CUDNN_MAJOR": str(spec.cudnn.major),
        "CUDNN_ARCHIVE_NAME": spec.cudnn.archive,
        "CUDNN_URL": spec.cudnn.url,
        "CUDNN_SHA256": spec.cudnn.sha256,
    }


def test_every_system_release_renders_variables_the_script_accepts(tmp_path: Path) -> None:
    """system.env of every system release: the header, nothing but plain KEY=value lines (a POSIX
    shell reads the same values from it), no install.sh any more, and the script takes it."""
    cases = [(label, m, spec) for label, m in (("real", REAL), ("fixture", FIXTURE))
             for spec in system_specs(m)]  # fmt: skip
    count = 0
    for label, m, spec in cases:
        files = render_module.render(spec, m)
        assert "install.sh" not in files
        env_vars = render_vars(spec, tmp_path / label / spec.name, m)
        lines = env_vars.read_text().splitlines()
        assert lines[0].startswith("# Generated by provision")
        assignments = [line for line in lines if not line.startswith("#")]
        want = expected_vars(spec)
        assert assignments == [f"{k}={shlex.quote(v)}" for k, v in want.items()]
        values = " ".join(f'"${key}"' for key in want)
        shown = subprocess.run(
            ["sh", "-c", f'. "$1" && printf "%s\\n" {values}', "sh", str(env_vars)],
            env={},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert shown.splitlines() == list(want.values())
        helped = run_script(env_vars, "--help", path=host_path(), tmp=tmp_path)
        assert helped.rc == 0, helped.out
        for value in (spec.name, spec.cuda.runfile, spec.cudnn.archive, spec.cuda.driver_min):
            assert value in helped.stdout
        count += 1
    assert count >= 2


def test_help_and_usage_errors(tmp_path: Path) -> None:
    env_vars = render_vars(SPEC, tmp_path / "env")
    shown = run_script(env_vars, "--help", path=host_path(), tmp=tmp_path)
    assert shown.rc == 0
    for option in (
        "--vars FILE",
        "--prefix DIR",
        "--runfile FILE",
        "--cudnn-archive FILE",
        "--dry-run",
        "--skip-driver-check",
        "--download-dir DIR",
        "--python EXE",
        "--skip-venv",
    ):
        assert option in shown.stdout
    assert SPEC.cuda.driver_min in shown.stdout and SPEC.cuda.driver_compat_min in shown.stdout
    assert f"/usr/local/cuda-{SPEC.cuda.version}" in shown.stdout
    generic = run_script(None, "--help", path=host_path(), tmp=tmp_path)
    assert generic.rc == 0 and "Usage: install-system.sh --vars FILE [options]" in generic.stdout
    assert SPEC.cuda.driver_min not in generic.stdout
    bad = run_script(env_vars, "--frobnicate", path=host_path(), tmp=tmp_path)
    assert (bad.rc, bad.stderr) == (2, "error: unknown option: --frobnicate (see --help)\n")
    missing = run_script(env_vars, "--prefix", path=host_path(), tmp=tmp_path)
    assert missing.rc == 2 and "--prefix needs a value" in missing.stderr
    spaced = run_script(env_vars, "--prefix", tmp_path / "a b", path=host_path(), tmp=tmp_path)
    assert spaced.rc == 2 and "must not contain whitespace" in spaced.stderr


# --- the variables file: refused, with one line and exit 2, before anything happens --------------


def test_no_vars_file_is_a_usage_error(tmp_path: Path, ok_path: str) -> None:
    prefix = tmp_path / "prefix"
    none = run_script(None, "--prefix", prefix, path=ok_path, tmp=tmp_path)
    assert (none.rc, none.stdout) == (2, "")
    assert none.stderr == (
        "error: --vars FILE is required: the environment's system.env (envs/NAME/system.env) "
        "(see --help)\n"
    )
    folder = render_vars(SPEC, tmp_path / "env").parent
    given_dir = run_script(folder, "--prefix", prefix, path=ok_path, tmp=tmp_path)
    assert given_dir.rc == 2 and f"--vars {folder}/system.env" in given_dir.stderr
    absent = run_script(tmp_path / "nowhere.env", "--prefix", prefix, path=ok_path, tmp=tmp_path)
    assert absent.rc == 2
    assert absent.stderr == f"error: --vars {tmp_path}/nowhere.env: no such readable file\n"
    assert not prefix.exists()


MARK = "PWNED"  # a file the vars file's code would create, had it run


def _set(key: str, raw: str) -> Callable[[str], str]:
    """An edit of system.env: KEY's line becomes KEY=RAW (RAW exactly as written in the file)."""
    return lambda text: re.sub(rf"(?m)^{key}=.*$", lambda _: f"{key}={raw}", text)


def _append(line: str) -> Callable[[str], str]:
    return lambda text: text + line + "\n"


def _drop(*keys: str) -> Callable[[str], str]:
    return lambda text: "".join(
        line for line in text.splitlines(keepends=True) if line.split("=")[0] not in keys
    )


BAD_VARS = {
    "missing": (_drop("CUDA_MAJOR", "RUNFILE_MD5"), "lacks CUDA_MAJOR, RUNFILE_MD5; re-render"),
    "malformed": (_set("CUDA_MAJOR", "eleven"), ":{CUDA_MAJOR}: CUDA_MAJOR=eleven is malformed"),
    "not-a-version": (_set("DRIVER_MIN", "'520 61'"), "DRIVER_MIN='520 61' is malformed"),
    "quoted-command": (
        _set("ENV_NAME", f"'$(touch {MARK})'"),
        f":{{ENV_NAME}}: ENV_NAME='$(touch {MARK})' is malformed",
    ),
    "bare-command": (
        _set("TF_PIN", f"$(touch {MARK})"),
        f"TF_PIN=$(touch {MARK}) is not one shell word as provision writes it",
    ),
    "double-quoted-command": (
        _set("RUNFILE_URL", f'"https://x/`touch {MARK}`/a.run"'),
        'RUNFILE_URL="https://x/`touch',
    ),
    "command-in-a-url": (
        _set("CUDNN_URL", f"'https://x/$(touch {MARK})/a.tar.xz'"),
        "CUDNN_URL='https://x/$(touch",
    ),
    "a-command-line": (_append(f"touch {MARK}"), f"not a KEY=value line: touch {MARK}"),
    "unknown": (_append("LD_PRELOAD=/tmp/evil.so"), "unknown variable LD_PRELOAD"),
    "twice": (_append("TF_PIN=1"), "TF_PIN is set twice (also on line {TF_PIN})"),
    "pip-option": (
        _set("PIP_REQUIREMENTS", "'--index-url=http://evil tensorflow'"),
        "PIP_REQUIREMENTS='--index-url=http://evil tensorflow' is malformed",
    ),
    "path-in-a-name": (_set("RUNFILE_NAME", "../../etc/passwd"), "RUNFILE_NAME=../../etc/passwd"),
    "inconsistent": (_set("CUDA_FULL", "1.2.3"), "CUDA_FULL 1.2.3 is not of CUDA_VERSION"),
    "url-of-another-file": (_set("RUNFILE_URL", "https://x/y.run"), "does not end in /cuda_"),
    "unsupported-python": (_set("PYTHON_VERSION", "2.7"), "PYTHON_VERSION 2.7 is not among"),
    "schema": (_set("VARS_SCHEMA", "2"), "VARS_SCHEMA is 2, but this install-system.sh reads 1"),
    "crlf": (lambda text: text.replace("\n", "\r\n"), "VARS_SCHEMA=1? is not one shell word"),
}


@pytest.mark.parametrize("case", list(BAD_VARS))
def test_a_bad_vars_file_is_refused_before_anything_happens(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str, case: str
) -> None:
    edit, message = BAD_VARS[case]
    text = env_vars.read_text()
    line_of = {
        line.split("=")[0]: str(n)
        for n, line in enumerate(text.splitlines(), 1)
        if line[:1].isupper()
    }
    env_vars.write_text(edit(text))
    prefix = tmp_path / "prefix"
    done = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--skip-venv",
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
        # Values of the same names in the environment are no substitute for the file's.
        env={"CUDA_MAJOR": str(SPEC.cuda.major), "RUNFILE_MD5": SPEC.cuda.runfile_md5},
    )
    assert (done.rc, done.stdout) == (2, ""), done.out
    assert done.stderr.startswith(f"error: {env_vars}")
    assert message.format(**line_of) in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not prefix.exists()
    assert list(tmp_path.rglob(MARK)) == [] and not Path(MARK).exists()
    helped = run_script(env_vars, "--help", path=ok_path, tmp=tmp_path)
    assert (helped.rc, helped.stderr) == (2, done.stderr)  # --help with --vars checks it too


def test_values_in_quoted_pieces_are_joined_into_one_word(
    tmp_path: Path, art: Artifacts, ok_path: str
) -> None:
    """Any quoting a POSIX shell would read as the same single word, e.g. 'tf'2.13-system."""
    env_vars = render_vars(with_checksums(SPEC, art), tmp_path / "env")
    name = SPEC.name
    edited = _set("ENV_NAME", f"'{name[:2]}'{name[2:]}")(env_vars.read_text())
    env_vars.write_text(_set("TF_PIN", f"{SPEC.release.pin}''")(edited))
    done = run_script(
        env_vars, "--prefix", tmp_path / "p", "--dry-run", "--skip-venv", *local_files(art),
        path=ok_path, tmp=tmp_path,
    )  # fmt: skip
    assert done.rc == 0, done.out
    assert done.stdout.startswith(f"{name}: TensorFlow {SPEC.release.pin}, CUDA")


# --- the driver check ----------------------------------------------------------------------------


def older_than(version: str) -> str:
    major = int(version.split(".")[0])
    return f"{major - 1}.99.01"


def test_driver_older_than_the_compat_floor_is_refused(
    tmp_path: Path, env_vars: Path, art: Artifacts, fake_nvidia_smi: Callable[..., Path]
) -> None:
    old = older_than(SPEC.cuda.driver_compat_min)
    prefix = tmp_path / "prefix"
    done = run_script(
        env_vars,
        "--prefix",
        prefix,
        *local_files(art),
        path=host_path(fake_nvidia_smi(old)),
        tmp=tmp_path,
    )
    assert done.rc == 1
    assert f"NVIDIA driver {old} is too old" in done.stderr
    assert f">= {SPEC.cuda.driver_min}" in done.stderr
    assert f">= {SPEC.cuda.driver_compat_min}" in done.stderr
    assert not prefix.exists()


def test_driver_in_the_compat_range_proceeds_with_a_warning(
    tmp_path: Path, env_vars: Path, art: Artifacts, fake_nvidia_smi: Callable[..., Path]
) -> None:
    if SPEC.cuda.driver_compat_min == SPEC.cuda.driver_min:
        pytest.skip("this CUDA row has no minor-version-compatibility range")
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--dry-run",
        *local_files(art),
        path=host_path(fake_nvidia_smi(SPEC.cuda.driver_compat_min)),
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    assert "minor-version compatibility" in done.stdout
    assert f"older than {SPEC.cuda.driver_min}" in done.stderr


needs_no_driver = pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this host has an NVIDIA kernel module"
)


@needs_no_driver
def test_a_missing_program_is_named_before_anything_is_written(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    # A PATH holding every program of this host but xz: NVIDIA's cuDNN archives are .tar.xz.
    bin_dir = tmp_path / "bin-without-xz"
    bin_dir.mkdir()
    for d in reversed(ok_path.split(os.pathsep)):
        for exe in Path(d).glob("*") if Path(d).is_dir() else []:
            if exe.name != "xz" and os.access(exe, os.X_OK) and not exe.is_dir():
                (bin_dir / exe.name).unlink(missing_ok=True)
                (bin_dir / exe.name).symlink_to(exe.resolve())
    prefix = tmp_path / "prefix"
    files = local_files(art)
    done = run_script(env_vars, "--prefix", prefix, *files, path=str(bin_dir), tmp=tmp_path)
    assert done.rc == 1, done.out
    assert "missing program(s): xz (package xz-utils)" in done.stderr
    assert not prefix.exists()
    dry = run_script(
        env_vars, "--prefix", prefix, "--dry-run", *files, path=str(bin_dir), tmp=tmp_path
    )
    assert dry.rc == 0, dry.out
    assert "missing program(s): xz (package xz-utils); a real run would stop here" in dry.out
    assert not prefix.exists()


def test_no_driver_is_refused_with_the_reason(
    tmp_path: Path, env_vars: Path, art: Artifacts
) -> None:
    prefix = tmp_path / "prefix"
    done = run_script(
        env_vars, "--prefix", prefix, *local_files(art), path=host_path(), tmp=tmp_path
    )
    assert done.rc == 1
    assert "no NVIDIA driver found (nvidia-smi is not installed" in done.stderr
    assert f">= {SPEC.cuda.driver_min}" in done.stderr and "--skip-driver-check" in done.stderr
    assert not prefix.exists()


@needs_no_driver
def test_failing_nvidia_smi_is_refused_with_its_message(
    tmp_path: Path, env_vars: Path, art: Artifacts, fake_nvidia_smi: Callable[..., Path]
) -> None:
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        *local_files(art),
        path=host_path(fake_nvidia_smi(None)),
        tmp=tmp_path,
    )
    assert done.rc == 1
    assert "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate" in done.stderr


def test_skip_driver_check_builds_without_a_driver(
    tmp_path: Path, env_vars: Path, art: Artifacts
) -> None:
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--skip-venv",
        "--skip-driver-check",
        *local_files(art),
        path=host_path(),
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    assert "[driver] not checked (--skip-driver-check)" in done.stdout
    assert (tmp_path / "prefix" / f"cuda-{SPEC.cuda.version}" / "lib64").is_dir()


# --- checksums: refused before anything runs -----------------------------------------------------


def test_real_matrix_vars_refuse_the_fakes(tmp_path: Path, art: Artifacts, ok_path: str) -> None:
    """system.env as rendered from the matrix: NVIDIA's checksums, which the fakes cannot match."""
    env_vars = render_vars(SPEC, tmp_path / "env")
    prefix, log = tmp_path / "prefix", tmp_path / "runfile.log"
    done = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--skip-venv",
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
        env={"FAKE_CUDA_RUNFILE_LOG": str(log)},
    )
    assert done.rc == 1
    if SPEC.cuda.runfile_sha256 or SPEC.cuda.runfile_md5:
        assert f"checksum mismatch for {art.runfile}" in done.stderr
    else:  # the matrix has no published checksum yet: refused too, and says how to override
        assert f"the matrix records no checksum for {SPEC.cuda.runfile}" in done.stderr
        assert "--allow-unverified" in done.stderr
    assert "nothing was installed" in done.stderr
    assert not prefix.exists() and not log.exists()


@pytest.mark.parametrize("wrong", ["runfile", "cudnn"])
def test_any_mismatch_is_refused_before_the_runfile_runs(
    tmp_path: Path, art: Artifacts, ok_path: str, wrong: str
) -> None:
    spec = with_checksums(SPEC, art)
    bogus = "0" * 64
    if wrong == "runfile":
        spec = dataclasses.replace(spec, cuda=dataclasses.replace(spec.cuda, runfile_sha256=bogus))
        bad_file = art.runfile
    else:
        spec = dataclasses.replace(spec, cudnn=dataclasses.replace(spec.cudnn, sha256=bogus))
        bad_file = art.cudnn_archive
    env_vars = render_vars(spec, tmp_path / "env")
    prefix, log = tmp_path / "prefix", tmp_path / "runfile.log"
    done = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--skip-venv",
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
        env={"FAKE_CUDA_RUNFILE_LOG": str(log)},
    )
    assert done.rc == 1
    assert (
        f"checksum mismatch for {bad_file}: sha256 {sha256_file(bad_file)}, "
        f"but the matrix says {bogus}" in done.stderr
    )
    assert not prefix.exists() and not log.exists()
    assert list((tmp_path / "scratch").iterdir()) == []


def test_md5_is_used_when_the_matrix_has_no_sha256(
    tmp_path: Path, art: Artifacts, ok_path: str
) -> None:
    env_vars = render_vars(with_checksums(SPEC, art, runfile="md5"), tmp_path / "env")
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--skip-venv",
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    assert f"[verify] {SPEC.cuda.runfile}: md5 ok" in done.stdout
    assert f"[verify] {SPEC.cudnn.archive}: sha256 ok" in done.stdout


def test_no_checksum_needs_allow_unverified(tmp_path: Path, art: Artifacts, ok_path: str) -> None:
    spec = dataclasses.replace(
        SPEC,
        cuda=dataclasses.replace(SPEC.cuda, runfile_sha256="", runfile_md5=""),
        cudnn=dataclasses.replace(SPEC.cudnn, sha256=art.cudnn_sha256),
    )
    env_vars = render_vars(spec, tmp_path / "env")
    prefix = tmp_path / "prefix"
    args = ("--prefix", prefix, "--skip-venv", *local_files(art))
    refused = run_script(env_vars, *args, path=ok_path, tmp=tmp_path)
    assert refused.rc == 1 and "Pass --allow-unverified" in refused.stderr
    assert not prefix.exists()
    done = run_script(env_vars, *args, "--allow-unverified", path=ok_path, tmp=tmp_path)
    assert done.rc == 0, done.out
    assert f"using {art.runfile} unverified (--allow-unverified)" in done.stderr


# --- the install itself --------------------------------------------------------------------------


@pytest.mark.parametrize("spec", CASES, ids=[s.name for s in CASES])
def test_install_under_a_prefix_then_nothing_to_do(
    spec: EnvSpec,
    tmp_path: Path,
    nvidia_artifacts: Callable[..., Artifacts],
    fake_nvidia_smi: Callable[..., Path],
) -> None:
    art = nvidia_artifacts(spec.cuda, spec.cudnn)
    env_vars = render_vars(with_checksums(spec, art), tmp_path / "env")
    prefix, log = tmp_path / "prefix", tmp_path / "runfile.log"
    path = host_path(fake_nvidia_smi(spec.cuda.driver_min))
    env = {"FAKE_CUDA_RUNFILE_LOG": str(log)}
    first = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--skip-venv",
        *local_files(art),
        path=path,
        tmp=tmp_path,
        env=env,
    )
    assert first.rc == 0, first.out
    home = prefix / f"cuda-{spec.cuda.version}"
    lib = home / "lib64"

    # The runfile ran once, toolkit only, into the prefix.
    (argv,) = log.read_text().splitlines()
    assert argv.startswith(
        f"--silent --toolkit --toolkitpath={home} --no-man-page --override --tmpdir="
    )
    assert "--driver" not in argv

    # Real libraries, their sonames in place (NVIDIA's links kept), in NVIDIA's tree layout.
    assert lib.is_symlink() and (home / "bin" / "ptxas").is_file()
    cudnn_lib = lib / f"libcudnn.so.{spec.cudnn.major}"
    assert elf_soname(cudnn_lib) == cudnn_lib.name
    assert cudnn_lib.resolve().name == "libcudnn.so." + ".".join(spec.cudnn.full.split(".")[:3])
    cudarts = sorted(lib.glob(f"libcudart.so.{spec.cuda.major}*"), key=lambda p: len(p.name))
    assert elf_soname(cudarts[-1]) == cudarts[0].name  # the soname link points at the real file
    header = (home / "include" / "cudnn_version.h").read_text()
    assert f"#define CUDNN_MAJOR {spec.cudnn.major}" in header
    assert "[check] libcudnn.so." in first.stdout and "[check] libcudart.so." in first.stdout

    # Loader and login-shell configuration.
    conf = prefix / "etc" / "ld.so.conf.d" / f"provision-cuda-{spec.cuda.version}.conf"
    assert conf.read_text().splitlines()[1:] == [str(lib)]
    profile = prefix / "etc" / "profile.d" / f"provision-cuda-{spec.cuda.version}.sh"
    # Sourced twice, over a user's XLA flags: one with glob characters (a hidden file here would
    # match it), and a data dir of some other toolkit, which the toolkit sourced last replaces.
    (tmp_path / ".hidden").touch()
    shown = subprocess.run(
        [
            "sh",
            "-c",
            f'. "{profile}"; . "{profile}"; printf "%s\\n" "$PATH" "$LD_LIBRARY_PATH" "$XLA_FLAGS"',
        ],
        env={
            "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": "/opt/other",
            "XLA_FLAGS": "--xla_dump_hlo_pass_re=.* --xla_gpu_cuda_data_dir=/opt/old-cuda",
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown == [
        f"{home}/bin:/usr/bin:/bin",
        f"{lib}:/opt/other",
        f"--xla_dump_hlo_pass_re=.* --xla_gpu_cuda_data_dir={home}",
    ]
    lint = subprocess.run(
        [str(SHELLCHECK), "-s", "sh", str(profile)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout

    # Again: every step is done, nothing changes, and it says so.
    before = snapshot(prefix)
    again = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--skip-venv",
        *local_files(art),
        path=path,
        tmp=tmp_path,
        env=env,
    )
    assert again.rc == 0, again.out
    assert snapshot(prefix) == before
    assert len(log.read_text().splitlines()) == 1
    for step in ("toolkit", "cudnn", "ld.so.conf", "profile.d", "ldconfig"):
        assert f"[{step}] nothing to do" in again.stdout
    assert again.stdout.endswith(f"nothing to do: {spec.name} is installed and up to date\n")
    assert "[verify]" not in again.stdout  # the downloads are not even needed any more


def test_dry_run_writes_nothing(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    prefix = tmp_path / "prefix"
    done = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--skip-venv",
        "--dry-run",
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    home = prefix / f"cuda-{SPEC.cuda.version}"
    assert (
        f"[toolkit] would run: sh {SPEC.cuda.runfile} --silent --toolkit --toolkitpath={home} "
        "--no-man-page --override" in done.stdout
    )
    assert f"[cudnn] would unpack {SPEC.cudnn.archive}" in done.stdout
    assert f"[ld.so.conf] would write {prefix}/etc/ld.so.conf.d/" in done.stdout
    assert done.stdout.endswith("dry run: nothing was changed\n")
    assert not prefix.exists()
    assert list((tmp_path / "scratch").iterdir()) == []


def test_dry_run_of_a_system_wide_install_names_the_system_paths(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    toolkit = Path(f"/usr/local/cuda-{SPEC.cuda.version}")
    if toolkit.exists():
        pytest.skip(f"{toolkit} exists on this host")
    done = run_script(
        env_vars, "--dry-run", "--skip-venv", *local_files(art), path=ok_path, tmp=tmp_path
    )
    assert done.rc == 0, done.out
    assert f"--toolkitpath={toolkit}" in done.stdout
    assert f"would write /etc/ld.so.conf.d/provision-cuda-{SPEC.cuda.version}.conf" in done.stdout
    assert "[ldconfig] would run: " in done.stdout and " -n " not in done.stdout
    assert not toolkit.exists()


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"
)
def test_system_wide_install_without_root_is_refused() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # pytest's own tmp_path is private to root
        Path(tmp).chmod(0o755)
        env_vars = render_vars(SPEC, Path(tmp) / "env")
        Path(tmp, "env").chmod(0o755)
        script = Path(shutil.copy(SCRIPT, tmp))  # the checkout may be private to root too
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "bash",
                str(script),
                "--vars",
                str(env_vars),
                "--skip-venv",
            ],
            capture_output=True,
            text=True,
            env={"PATH": host_path()},
            check=False,
        )
    assert done.returncode == 1
    assert "installing into / needs root: run it with sudo, or pass --prefix DIR" in done.stderr


def test_an_interrupted_toolkit_install_is_redone(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    prefix = tmp_path / "prefix"
    args = ("--prefix", prefix, "--skip-venv", *local_files(art))
    crashed = run_script(
        env_vars, *args, path=ok_path, tmp=tmp_path, env={"FAKE_CUDA_RUNFILE_CRASH": "1"}
    )
    assert crashed.rc == 1
    assert "the CUDA runfile failed (exit 137)" in crashed.stderr
    home = prefix / f"cuda-{SPEC.cuda.version}"
    assert (home / "version.json").exists() and not (home / "lib64").exists()  # half unpacked
    assert not (prefix / "etc").exists()
    done = run_script(env_vars, *args, path=ok_path, tmp=tmp_path)
    assert done.rc == 0, done.out
    assert "[toolkit] a previous run was interrupted while installing the toolkit" in done.stdout
    assert (home / "lib64" / f"libcudnn.so.{SPEC.cudnn.major}").exists()
    assert list((tmp_path / "scratch").iterdir()) == []  # the runfile's scratch space is cleaned up


def test_a_toolkit_installed_by_someone_else_is_used(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    home = tmp_path / "prefix" / f"cuda-{SPEC.cuda.version}"
    subprocess.run(
        ["sh", str(art.runfile), "--silent", "--toolkit", f"--toolkitpath={home}"],
        check=True,
        capture_output=True,
    )
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--skip-venv",
        "--cudnn-archive",
        art.cudnn_archive,
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    assert "(not installed by this script; using it)" in done.stdout
    assert "[verify] " + SPEC.cuda.runfile not in done.stdout  # no runfile needed, none fetched


def test_an_older_archive_layout_is_unpacked(tmp_path: Path, art: Artifacts, ok_path: str) -> None:
    """Older cuDNN shipped `cudnn-<cuda>-linux-x64-v<full>.tgz` holding cuda/include, cuda/lib64."""
    old_name = f"cudnn-{SPEC.cuda.version}-linux-x64-v{SPEC.cudnn.full}.tgz"
    url = SPEC.cudnn.url.rsplit("/", 1)[0] + "/" + old_name
    cudnn = dataclasses.replace(SPEC.cudnn, archive=old_name, url=url)
    archive = build_cudnn_archive(tmp_path / "old", cudnn)
    spec = with_checksums(dataclasses.replace(SPEC, cudnn=cudnn), Artifacts(art.runfile, archive))
    env_vars = render_vars(spec, tmp_path / "env")
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--skip-venv",
        "--runfile",
        art.runfile,
        "--cudnn-archive",
        archive,
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    lib = (
        tmp_path
        / "prefix"
        / f"cuda-{SPEC.cuda.version}"
        / "lib64"
        / f"libcudnn.so.{SPEC.cudnn.major}"
    )
    assert elf_soname(lib) == lib.name


def test_an_archive_of_another_cudnn_version_is_refused(
    tmp_path: Path, art: Artifacts, ok_path: str
) -> None:
    from fakes.nvidia import linux_wheels

    project = SPEC.cudnn.pip.partition("==")[0]
    others = [
        w.version
        for w in linux_wheels(project)
        if w.version.split(".")[0] == str(SPEC.cudnn.major) and w.version != SPEC.cudnn.full
    ]
    archive = build_cudnn_archive(tmp_path / "other", SPEC.cudnn, wheel_version=others[0])
    spec = with_checksums(SPEC, Artifacts(art.runfile, archive))
    env_vars = render_vars(spec, tmp_path / "env")
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--skip-venv",
        "--runfile",
        art.runfile,
        "--cudnn-archive",
        archive,
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 1
    got = ".".join(others[0].split(".")[:3])
    want = ".".join(SPEC.cudnn.full.split(".")[:3])
    assert f"holds cuDNN {got}, not {want}" in done.stderr
    assert not (
        tmp_path / "prefix" / f"cuda-{SPEC.cuda.version}" / "include" / "cudnn_version.h"
    ).exists()


# --- downloads -----------------------------------------------------------------------------------


class _RangeServer(http.server.ThreadingHTTPServer):
    folder: Path
    requests: list[tuple[str, str]]


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves files from server.folder with Range support (curl -C - resumes against it)."""

    server: _RangeServer

    def do_GET(self) -> None:
        path = self.server.folder / self.path.lstrip("/")
        wanted = self.headers.get("Range", "")
        self.server.requests.append((self.path, wanted))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = int(m.group(1)) if (m := re.fullmatch(r"bytes=(\d+)-", wanted)) else 0
        if start >= len(data) and wanted:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.end_headers()
            return
        self.send_response(206 if wanted else 200)
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_RangeServer]:
    with httpserve.Server(_RangeHandler, server_class=_RangeServer, daemon_threads=False) as served:
        srv = served.httpd
        assert isinstance(srv, _RangeServer)
        srv.folder = tmp_path / "served"  # set before the first request: none comes before yield
        srv.folder.mkdir()
        srv.requests = []
        yield srv


def served_spec(spec: EnvSpec, art: Artifacts, server: _RangeServer) -> EnvSpec:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    spec = with_checksums(spec, art)
    return dataclasses.replace(
        spec,
        cuda=dataclasses.replace(spec.cuda, runfile_url=f"{base}/{spec.cuda.runfile}"),
        cudnn=dataclasses.replace(spec.cudnn, url=f"{base}/{spec.cudnn.archive}"),
    )


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
def test_downloads_resume_and_are_verified(
    tmp_path: Path, art: Artifacts, ok_path: str, server: _RangeServer
) -> None:
    shutil.copy(art.runfile, server.folder)
    shutil.copy(art.cudnn_archive, server.folder)
    env_vars = render_vars(served_spec(SPEC, art, server), tmp_path / "env")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    half = art.runfile.stat().st_size // 2
    (downloads / f"{SPEC.cuda.runfile}.part").write_bytes(art.runfile.read_bytes()[:half])
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--skip-venv",
        "--download-dir",
        downloads,
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    assert (f"/{SPEC.cuda.runfile}", f"bytes={half}-") in server.requests  # resumed, not restarted
    assert sorted(p.name for p in downloads.iterdir()) == sorted(
        [SPEC.cuda.runfile, SPEC.cudnn.archive]
    )
    assert (downloads / SPEC.cuda.runfile).read_bytes() == art.runfile.read_bytes()
    assert f"[verify] {SPEC.cuda.runfile}: sha256 ok" in done.stdout


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
def test_a_failing_download_fails_clearly_and_installs_nothing(
    tmp_path: Path, art: Artifacts, ok_path: str, server: _RangeServer
) -> None:
    shutil.copy(art.runfile, server.folder)  # the cuDNN archive is missing: HTTP 404
    env_vars = render_vars(served_spec(SPEC, art, server), tmp_path / "env")
    prefix = tmp_path / "prefix"
    done = run_script(env_vars, "--prefix", prefix, "--skip-venv", path=ok_path, tmp=tmp_path)
    assert done.rc == 1
    assert re.search(
        r"error: download failed \(exit 22\): http://127\.0\.0\.1:\d+/"
        + re.escape(SPEC.cudnn.archive),
        done.stderr,
    )
    assert not (prefix / f"cuda-{SPEC.cuda.version}").exists()
    assert not (prefix / "etc").exists()


# --- the venv ------------------------------------------------------------------------------------


def test_venv_with_a_pinned_package_then_nothing_to_do(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    prefix = tmp_path / "prefix"
    args = ("--prefix", prefix, "--python", sys.executable, *local_files(art))
    env = {"PROVISION_VENV_PACKAGE": TINY}
    first = run_script(env_vars, *args, path=ok_path, tmp=tmp_path, env=env)
    assert first.rc == 0, first.out
    venv = prefix / "venvs" / SPEC.name
    got = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import six; print(six.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert got.stdout.strip() == TINY.partition("==")[2]
    assert f"[venv] {venv} has six {TINY.partition('==')[2]}" in first.stdout
    before = snapshot(prefix)
    again = run_script(env_vars, *args, path=ok_path, tmp=tmp_path, env=env)
    assert again.rc == 0, again.out
    assert f"[venv] nothing to do: {venv} has six" in again.stdout
    assert snapshot(prefix) == before


def test_the_venv_comes_from_the_lock_next_to_the_vars_file_else_its_requirements(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    args = ("--prefix", tmp_path / "prefix", "--python", sys.executable, "--dry-run")
    unlocked = run_script(env_vars, *args, *local_files(art), path=ok_path, tmp=tmp_path)
    assert unlocked.rc == 0, unlocked.out
    assert f"and pip install {' '.join(SPEC.pip_requirements)} (missing)" in unlocked.stdout
    lock = env_vars.parent / "requirements.lock"
    lock.write_text(f"{TINY} --hash=sha256:{'0' * 64}\n")
    locked = run_script(env_vars, *args, *local_files(art), path=ok_path, tmp=tmp_path)
    assert locked.rc == 0, locked.out
    assert f"and pip install --require-hashes -r {lock} (missing)" in locked.stdout
    assert not (tmp_path / "prefix").exists()


def test_venv_from_the_lock_with_hashes(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), TINY],
        check=True,
    )
    (wheel,) = wheels.iterdir()
    lock = env_vars.parent / "requirements.lock"
    args = ("--prefix", tmp_path / "prefix", "--python", sys.executable, *local_files(art))
    env = {"PROVISION_VENV_PACKAGE": TINY}

    lock.write_text(f"{TINY} --hash=sha256:{'0' * 64}\n")
    refused = run_script(env_vars, *args, path=ok_path, tmp=tmp_path, env=env)
    assert refused.rc == 1
    assert "--require-hashes -r" in refused.stdout
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in refused.stderr

    lock.write_text(f"{TINY} --hash=sha256:{sha256_file(wheel)}\n")
    done = run_script(env_vars, *args, path=ok_path, tmp=tmp_path, env=env)
    assert done.rc == 0, done.out
    assert "[venv] a previous" not in done.stdout
    assert f"has six {TINY.partition('==')[2]}" in done.stdout


def test_a_python_the_release_does_not_support_is_refused(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    fake = tmp_path / "python-too-old"
    fake.write_text('#!/bin/sh\necho "2.7"\n')
    fake.chmod(0o755)
    done = run_script(
        env_vars,
        "--prefix",
        tmp_path / "prefix",
        "--python",
        fake,
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 1
    assert (
        f"is Python 2.7; TensorFlow {SPEC.release.pin} supports Python "
        f"{' '.join(SPEC.release.python)}" in done.stderr
    )
    assert not (tmp_path / "prefix").exists()


@pytest.mark.slow
def test_venv_with_the_real_tensorflow_pin(
    tmp_path: Path, env_vars: Path, art: Artifacts, ok_path: str
) -> None:
    """No override: `tensorflow==<pin>` from the index, imported with the toolkit's paths."""
    python = shutil.which(f"python{SPEC.python}")
    if python is None:
        pytest.skip(f"no python{SPEC.python} on this host")
    prefix = tmp_path / "prefix"
    done = run_script(
        env_vars,
        "--prefix",
        prefix,
        "--python",
        python,
        *local_files(art),
        path=ok_path,
        tmp=tmp_path,
    )
    assert done.rc == 0, done.out
    venv_python = prefix / "venvs" / SPEC.name / "bin" / "python"
    profile = prefix / "etc" / "profile.d" / f"provision-cuda-{SPEC.cuda.version}.sh"
    shown = subprocess.run(
        [
            "sh",
            "-c",
            f'. "{profile}"; exec "{venv_python}" -c "{IMPORT_TF}"',
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert shown.stdout.strip().splitlines()[-1] == SPEC.release.pin
