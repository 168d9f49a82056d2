"""How provision is installed: as the README says on a stock Linux, with `uv tool install .` and
`pipx install .`, and what it says about other systems.

The install tests build provision from this checkout into a temporary tool folder (their packages
come from the index: marked `index` and `slow`), then use the installed command to build a small
pip environment (tests/tinyindex.py): under `uv tool install`, pip is not there to import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tinyindex import Env, Index

from provision import __version__
from provision.cli.args import platform_note

ROOT = Path(__file__).resolve().parent.parent


def uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def use_installed(provision: Path, index: Index, env: Env, tool_env: dict[str, str]) -> None:
    version = run([str(provision), "--version"], tool_env)
    assert version.returncode == 0 and __version__ in version.stdout, version.stderr
    env.lock(index.add("1.0"))
    done = run([str(provision), "install", env.name, "--out", str(env.out)],
               {**tool_env, **os.environ, "PATH": tool_env["PATH"]})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "No module named" not in done.stderr


@pytest.mark.slow
def test_uv_tool_install_gives_a_working_provision(tmp_path: Path, index: Index, env: Env) -> None:
    tool = uv()
    if tool is None:
        pytest.skip("uv is not installed")
    bin_dir = tmp_path / "bin"
    tool_env = {**os.environ, "UV_TOOL_DIR": str(tmp_path / "tools"),
                "UV_TOOL_BIN_DIR": str(bin_dir), "PIP_INDEX_URL": "",
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    tool_env.pop("PIP_INDEX_URL")  # the tool's own packages come from the real index
    done = run([tool, "tool", "install", "--no-config", str(ROOT)], tool_env)
    assert done.returncode == 0, done.stderr
    use_installed(bin_dir / "provision", index, env, tool_env)


@pytest.mark.slow
def test_pipx_install_gives_a_working_provision(tmp_path: Path, index: Index, env: Env) -> None:
    pipx = shutil.which("pipx")
    if pipx is None:
        pytest.skip("pipx is not installed (apt-get install pipx)")
    bin_dir = tmp_path / "bin"
    tool_env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(bin_dir),
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    tool_env.pop("PIP_INDEX_URL", None)
    tool_env.pop("PIP_CONFIG_FILE", None)
    done = run([pipx, "install", str(ROOT)], tool_env)
    assert done.returncode == 0, done.stderr
    use_installed(bin_dir / "provision", index, env, tool_env)


def test_the_package_says_it_is_for_linux() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"Operating System :: POSIX :: Linux"' in text


@pytest.mark.parametrize("platform", ["win32", "darwin", "cygwin"])
def test_doctor_says_linux_only_elsewhere(platform: str) -> None:
    note = platform_note(platform)
    assert note is not None and note.startswith("provision runs on Linux only")
    assert ("WSL2" in note) == (platform in ("win32", "cygwin"))
    assert platform_note("linux") is None


def test_doctor_prints_the_note_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """On another system the note is the first thing on stderr (the report follows on stdout)."""
    from click.testing import CliRunner

    from provision.cli import commands as cli_module

    monkeypatch.setattr(cli_module, "sys", type("S", (), {"platform": "win32", "exit": sys.exit}))
    result = CliRunner().invoke(cli_module.cli, ["doctor", "--json"])
    assert result.stderr.startswith("provision: note: provision runs on Linux only"), result.stderr
