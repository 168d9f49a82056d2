"""provision export NAME DIR --modulefile: an Lmod module file for an environment built into a
shared prefix, loaded by Debian's real Lmod (`apt-get install lmod`) in a bash of its own:
`module load` puts the environment's bin first on PATH, `module unload` takes it off again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from clitools import run_cli
from tinyindex import Env, Index

from provision import modulefile
from provision.registry import Record

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


def record(prefix: str) -> Record:
    return Record(
        name="tf2.21-pip", env_dir="/srv/envs/tf2.21-pip", path="pip", tf="2.21.0",
        python="3.12", prefix=prefix, interpreter=f"{prefix}/bin/python", installer="uv",
        lock_sha256="0" * 64, built_at=0.0,
    )  # fmt: skip


def test_the_module_file_names_the_prefix_and_escapes_it() -> None:
    text = modulefile.text(record('/shared/envs/a "b"\\c'), "12.5.1", "9.3.0.75")
    assert 'prepend_path("PATH", "/shared/envs/a \\"b\\"\\\\c/bin")' in text
    assert 'family("provision_env")' in text
    assert 'whatis("Version: 2.21.0")' in text
    assert text == modulefile.text(record('/shared/envs/a "b"\\c'), "12.5.1", "9.3.0.75")


def test_an_environment_not_built_here_is_refused(env: Env, tmp_path: Path) -> None:
    code, out = run_cli("export", "tiny", str(tmp_path / "x"), "--out", str(env.out),
                        "--modulefile")  # fmt: skip
    assert code == 2 and "provision install tiny --prefix" in out, out
    assert not (tmp_path / "x").exists()


def lmod(script: str) -> subprocess.CompletedProcess[str]:
    """script in a bash that has sourced Lmod's init, as a login shell on a cluster has."""
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f"source {LMOD_INIT}\n{script}"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.skipif(not LMOD_INIT.exists(), reason="Lmod is not installed (apt-get install lmod)")
def test_module_load_puts_the_shared_environment_on_path(
    index: Index, env: Env, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    shared = tmp_path / "shared" / "tiny"
    code, out = run_cli("install", "tiny", "--out", str(env.out), "--prefix", str(shared))
    assert code == 0, out
    code, out = run_cli("export", "tiny", str(tmp_path / "export"), "--out", str(env.out),
                        "--modulefile")  # fmt: skip
    assert code == 0, out
    modules = tmp_path / "export" / "modulefiles"
    assert sorted(p.name for p in modules.iterdir()) == ["tiny.lua"]
    done = lmod(
        f"module use {modules}\nmodule load tiny\ncommand -v python\n"
        "python -c 'import provision_tiny; print(provision_tiny.VERSION)'\n"
        'module unload tiny\necho "after: $PATH"'
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{shared}/bin/python"
    assert lines[1] == "1.0"
    assert lines[2] == "after: /usr/bin:/bin"
    assert "error" not in done.stderr.lower(), done.stderr
    shutil.rmtree(shared)
