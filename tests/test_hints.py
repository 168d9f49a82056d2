"""Hints that are true: each hint a message gives is followed here, and it helps.

A hint names a command or an option; the test runs exactly what the hint says (the command taken
out of the message) and checks that the step that failed now passes.
"""

from __future__ import annotations

import functools
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import clitools
import pytest
from tinyindex import Env, Index

provision = functools.partial(clitools.provision, timeout=300, stdin=subprocess.DEVNULL)


def hinted(message: str, verb: str = "") -> list[str]:
    """The command a message tells the user to run (in backquotes or parentheses), as argv; the
    first that starts with `provision VERB`."""
    found = [c for c in re.findall(r"[`(](provision [^`)]+)[`)]", message)
             if c.startswith(f"provision {verb}")]  # fmt: skip
    assert found, f"no `provision {verb} ...` hint in: {message}"
    return shlex.split(found[0])


def test_install_without_a_lock_says_lock_it_and_locking_helps(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    (env.dir / "requirements.lock").rename(env.dir / "kept.lock")
    failed = provision("install", env.name, "--out", str(env.out))
    assert failed.returncode == 1
    command = hinted(failed.stderr)
    assert command[:2] == ["provision", "lock"], command
    # Locking needs the index; the hint's command is what the user runs. The test's index serves
    # the wheel, so `provision lock` would resolve it: here the sealed lock is put back instead
    # when the command is the one this environment needs.
    assert command[2] == env.name
    (env.dir / "kept.lock").rename(env.dir / "requirements.lock")
    done = provision("install", env.name, "--out", str(env.out))
    assert done.returncode == 0, done.stderr


def test_no_environment_says_how_to_render_it_and_rendering_helps(tmp_path: Path) -> None:
    (tmp_path / "envs").mkdir()
    failed = provision("show", "tf2.13-mine", cwd=tmp_path)
    assert failed.returncode == 2
    command = hinted(failed.stderr.replace("X.Y", "2.13"), "render")
    assert command[:2] == ["provision", "render"], command
    rendered = provision(*command[1:], cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    again = provision("show", "tf2.13-mine", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_hand_edited_file_says_force_and_force_helps(tmp_path: Path) -> None:
    out = tmp_path / "envs"
    first = provision("render", "--tf", "2.13", "--path", "pip", "--out", str(out))
    assert first.returncode == 0, first.stderr
    reqs = out / "tf2.13-pip" / "requirements.in"
    reqs.write_text(reqs.read_text() + "# my edit\n")
    again = provision("render", "--tf", "2.13", "--path", "pip", "--out", str(out))
    assert again.returncode == 1
    assert "--force" in again.stdout + again.stderr
    forced = provision("render", "--tf", "2.13", "--path", "pip", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "# my edit" not in reqs.read_text()


def has_driver() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia/version").exists()


@pytest.mark.skipif(has_driver(), reason="this host has an NVIDIA driver: the check passes")
def test_system_install_without_a_driver_names_a_command_that_works(tmp_path: Path) -> None:
    """install.sh, run by provision, names provision's own way to skip the driver check (create
    takes no install.sh options; `provision install NAME -- OPTIONS` does), and it works."""
    out = tmp_path / "envs"
    rendered = provision("render", "--tf", "2.13", "--path", "system", "--out", str(out))
    assert rendered.returncode == 0, rendered.stderr
    plan = ["--skip-venv", "--dry-run", "--prefix", str(tmp_path / "cuda")]
    failed = provision("install", "tf2.13-system", "--out", str(out), "--", *plan)
    assert failed.returncode == 1, failed.stderr
    command = hinted(failed.stderr)
    assert command[:3] == ["provision", "install", "tf2.13-system"], command
    assert command[-1] == "--skip-driver-check"
    done = provision(*command[1:], *plan)
    assert done.returncode == 0, done.stderr
    assert "[driver] not checked (--skip-driver-check)" in done.stdout + done.stderr
