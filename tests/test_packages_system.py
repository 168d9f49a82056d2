"""The user's packages on the system path: `provision add` and `drop` sync the venv that the
environment's own install-system.sh made (no marker of provision's in it), in place.

Real: provision render, lock (uv), install (install-system.sh with NVIDIA-shaped fake runfile and
cuDNN archive holding NVIDIA's real libraries, checksummed), add and drop (uv) against a local
package index of small real wheels; the toolkit goes under the test's --prefix.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import localchannel
import pytest
from clitools import build_lock_held
from clitools import run_cli as cli
from tinyindex import reseal, system_release

from provision import environment, matrix
from provision.matrix import spec

NAME = "sys"
EXTRA = ["matplotlib==3.8.0", "pillow==10.0.0", "pandas==2.2.0", "numpy==1.24.3"]
REQUIRES = {"matplotlib==3.8.0": ["pillow>=8"], "pandas==2.2.0": ["numpy>=1.23.2"]}


@pytest.fixture
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvidia_artifacts: Callable[..., object]
) -> Iterator[tuple[Path, Path, object]]:
    """(envs folder, --prefix, the fake NVIDIA artifacts), with pip and uv pointed at a local index
    that holds the release's TensorFlow pin and the packages a user adds."""
    if shutil.which("xz") is None:
        pytest.skip("xz is not installed: install-system.sh unpacks cuDNN archives with it")
    tf, python = system_release()
    s = spec.resolve(matrix.load(), tf, "system", python)
    art = nvidia_artifacts(s.cuda, s.cudnn)
    pins = [r for r in s.pip_requirements if "==" in r]
    root = localchannel.simple_index(tmp_path / "index", [*pins, *EXTRA], REQUIRES)
    server = localchannel.Server(root)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    out = tmp_path / "envs"
    code, text = cli("render", "--tf", tf, "--path", "system", "--python", python,
                     "--name", NAME, "--out", str(out), "--with", "pandas")  # fmt: skip
    assert code == 0, text
    # The fakes' checksums where the matrix's are, sealed as render would have written them.
    system_env = out / NAME / "system.env"
    values = {"RUNFILE_SHA256": art.runfile_sha256,  # type: ignore[attr-defined]
              "RUNFILE_MD5": "", "CUDNN_SHA256": art.cudnn_sha256}  # type: ignore[attr-defined]  # fmt: skip
    text = system_env.read_text()
    for key, value in values.items():
        text = re.sub(rf"(?m)^{key}=.*$", f"{key}={value}" if value else f"{key}=''", text)
    system_env.write_text(text)
    reseal(out / NAME, "system.env")
    yield out, tmp_path / "root", art
    server.stop()


def site(venv: Path) -> set[str]:
    """The distributions installed in a venv, by name."""
    (lib,) = (venv / "lib").glob("python3*/site-packages")
    return {p.name.split("-")[0].lower() for p in lib.glob("*.dist-info")}


def install(out: Path, prefix: Path, art: object) -> tuple[int, str]:
    """`provision install NAME` of the system path, from the world's runfile and cuDNN archive."""
    return cli(
        "install", NAME, "--out", str(out), "--prefix", str(prefix), "--",
        "--runfile", str(art.runfile),  # type: ignore[attr-defined]
        "--cudnn-archive", str(art.cudnn_archive),  # type: ignore[attr-defined]
        "--skip-driver-check",
    )  # fmt: skip


def test_add_and_drop_sync_the_venv_install_system_made(
    world: tuple[Path, Path, object],
) -> None:
    out, prefix, art = world
    code, text = cli("lock", NAME, "--out", str(out))
    assert code == 0, text
    code, text = install(out, prefix, art)
    assert code == 0, text
    venv = prefix / "venvs" / NAME
    assert {"tensorflow", "pandas", "numpy"} <= site(venv)
    env = environment.load(out / NAME)
    assert not env.kind.owns_prefix  # the script's venv: provision keeps no marker in it

    code, text = cli("add", NAME, "matplotlib", "--out", str(out), "--no-verify")
    assert code == 0, text
    assert re.search(r"synced .* \(2 installed or changed, 0 removed\)", text), text
    assert {"matplotlib", "pillow", "pandas", "tensorflow"} <= site(venv)
    lock = (out / NAME / "requirements.lock").read_text()
    assert "matplotlib==3.8.0" in lock and "pillow==10.0.0" in lock

    code, text = cli("drop", NAME, "pandas", "--out", str(out), "--no-verify")
    assert code == 0, text
    assert "- pandas 2.2.0" in text, text
    assert "pandas" not in site(venv) and {"matplotlib", "tensorflow"} <= site(venv)
    # TensorFlow's pins are not the user's to drop; the toolkit under the prefix is untouched.
    code, text = cli("drop", NAME, "tensorflow", "--out", str(out))
    assert code == 2 and "TensorFlow's own pins" in text
    assert list((prefix / f"cuda-{env.spec.cuda.version}" / "lib64").glob("libcudart.so.*"))
    # The venv is what the lock says: the drift check finds nothing moved.
    code, text = cli("check", NAME)
    assert "pandas" not in text and "matplotlib" not in text, text
    # One command at a time in the venv: while one holds it, add and install wait, then refuse.
    with build_lock_held(venv):
        code, text = cli("add", NAME, "pandas", "--out", str(out), "--no-verify")
        assert code == 1 and "another provision command is building or changing" in text, text
        code, text = install(out, prefix, art)
        assert code == 1 and "another provision command is building or changing" in text, text
    assert "pandas" not in site(venv)
