"""Two environments of one name from two directories: the one built is never replaced unless the
user asks (--replace), and its directory is never rewritten by add, drop or lock run from
elsewhere without --out. Real venvs from the small wheel (tests/tinyindex.py); the same on a
real TensorFlow environment is in tests/test_nothing_lost.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clitools import run_cli
from tinyindex import Env

from provision import registry


def copy_of(env: Env, base: Path) -> Path:
    """The same environment directory in another project: another envs/."""
    other = base / "envs"
    shutil.copytree(env.dir, other / env.name)
    return other


def test_install_from_another_directory_is_refused_unless_replace(
    built: Env, tmp_path: Path
) -> None:
    other = copy_of(built, tmp_path / "project")
    marker = (built.prefix / ".provision-install.json").read_bytes()
    code, out = run_cli("install", built.name, "--out", str(other), "--force")
    assert code == 1, out
    (line,) = out.strip().splitlines()
    assert line == (
        f"provision: error: tiny is already built here ({built.prefix}) from {built.dir}; "
        f"provision will not replace it with {other / 'tiny'}: give this one another name "
        f"(--name), or pass --replace to rebuild tiny from {other / 'tiny'}"
    )
    assert (built.prefix / ".provision-install.json").read_bytes() == marker  # untouched
    assert registry.get("tiny").env_dir == str(built.dir)  # type: ignore[union-attr]
    code, out = run_cli("install", built.name, "--out", str(other), "--replace")
    assert code == 0, out
    assert registry.get("tiny").env_dir == str(other / "tiny")  # type: ignore[union-attr]
    # And now the first one is the other one.
    code, out = run_cli("install", built.name, "--out", str(built.out))
    assert code == 1 and f"from {other / 'tiny'}; provision will not replace it" in out, out


def test_create_from_another_directory_writes_nothing(built: Env, tmp_path: Path) -> None:
    manifest = json.loads((built.dir / "provision.json").read_text())["request"]
    out = tmp_path / "project" / "envs"
    code, text = run_cli(
        "create", "--tf", manifest["tf"], "--path", "pip", "--python", manifest["python"],
        "--name", "tiny", "--out", str(out), "--with", "six",
    )  # fmt: skip
    assert code == 1, text
    assert "tiny is already built here" in text and "pass --replace" in text, text
    assert not out.exists()  # refused before anything was rendered


def test_add_drop_and_lock_from_elsewhere_do_not_rewrite_the_records_directory(
    built: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    lock = (built.dir / "requirements.lock").read_bytes()
    for argv in (["add", "tiny", "six"], ["drop", "tiny", "six"], ["lock", "tiny"]):
        code, out = run_cli(*argv)
        assert code == 2, out
        (line,) = out.strip().splitlines()
        assert line.endswith(
            f"tiny was made from {built.dir}, outside this folder, and would rewrite its "
            f"packages.in and lock there; run it in {built.out.parent} or pass --out {built.out}"
        ), line
    assert (built.dir / "requirements.lock").read_bytes() == lock
    assert not (built.dir / "packages.in").exists()
    assert run_cli("lock", "tiny", "--check")[0] == 0  # reading is fine from anywhere
    (built.dir / "notes").mkdir()
    monkeypatch.chdir(built.dir / "notes")  # inside it: the user's own, as below
    code, out = run_cli("lock", "tiny")
    assert code == 1 and "does not hold what the matrix pins" in out, out
    (built.dir / "notes").rmdir()
    # From inside the project it is the user's own (the small wheel's lock cannot really be
    # made again: the lock runs, and fails for that reason, not for where it was run).
    monkeypatch.chdir(built.dir)
    code, out = run_cli("lock", "tiny")
    assert code == 1 and "does not hold what the matrix pins" in out, out
