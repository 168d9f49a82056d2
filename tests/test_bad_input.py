"""A generated corpus of bad invocations: every command, every option, hostile values.

The cases are generated from each command's Click parameters (tests/badinput.py says how) and a
list of hostile values: empty and blank strings, names and paths longer than the file system allows
(NAME_MAX, PATH_MAX), digits that are not ASCII, control characters, shell syntax, files where
directories belong and directories where files belong, paths under a file, read-only directories
(chattr +i as root), PROVISION_HOME as a file or read-only, an interpreter that cannot run. Each
case asserts:
- exit 2 for a usage error (a value that can never be right), 1 or 2 for a failure the user can
  act on (a read-only directory, a file in the way);
- stderr is exactly one line, `provision: error: ...` or Click's usage format
  (`Usage:` / `Try ...` / `Error: ...`); no traceback anywhere;
- nothing written or left behind: the case's folders, its PROVISION_HOME, its TMPDIR and its
  working directory are the same before and after;
- a value that reaches a shell runs nothing (the marker file of `$(touch ...)` never appears).

The corpus runs in-process with Click's CliRunner (an exception escaping is a failure), with `-q`
so that stderr holds the error alone; a sample runs through real processes, without `-q`, where
progress may come first but the error line is the last line and nothing else is printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import badinput
import pytest
from badinput import Case, World
from click.testing import CliRunner

from provision.cli.commands import cli

CASES = badinput.cases()


def test_the_corpus_is_large_and_covers_every_command() -> None:
    assert len(CASES) >= 500, len(CASES)
    from provision.cli.commands import cli as group

    covered = {c.argv[0] for c in CASES}
    assert set(group.commands) <= covered, set(group.commands) - covered
    assert len({c.id for c in CASES}) == len(CASES)


def check(case: Case, world: World, code: int, stderr: str, *, progress_allowed: bool) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert code in case.codes, f"exit {code}, expected {case.codes}: {stderr}"
    usage = any(ln.startswith("Usage: ") for ln in lines)
    if usage:  # Click's own format: Usage, Try, Error (and nothing else)
        assert code == 2, stderr
        errors = [ln for ln in lines if ln.startswith("Error: ")]
        assert len(errors) == 1, stderr
        assert lines[-1].startswith("Error: ") and len(lines) <= 4, stderr
        return
    errors = [ln for ln in lines if ln.startswith("provision: error: ")]
    assert len(errors) == 1, stderr
    tail = lines[lines.index(errors[0]) :]
    # create adds what to do on a line of its own, after the error
    assert tail[1:] in ([], [ln for ln in tail[1:] if ln.startswith("provision: what to do: ")])
    if not progress_allowed:
        assert lines == tail, stderr
    message = errors[0].removeprefix("provision: error: ")
    assert len(message) > 20 and "\n" not in message, message
    assert "Errno" not in message and "PosixPath(" not in message, message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_invocation(case: Case, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    if world.needs_read_only(case) and not world.read_only:
        pytest.skip("no read-only folder can be made here (root without chattr +i)")
    env = world.env(case)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(world.cwd)
    before = world.snapshot()
    result = CliRunner().invoke(cli, ["-q", *world.argv(case)], env=env, catch_exceptions=True)
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not escaped, f"{type(result.exception).__name__}: {result.exception}"
    check(case, world, result.exit_code, result.stderr, progress_allowed=False)
    assert world.snapshot() == before, "the failed command wrote or left something"
    assert not world.pwned.exists(), "a value reached a shell"


SAMPLE = CASES[:: max(1, len(CASES) // 30)]


@pytest.mark.parametrize("case", SAMPLE, ids=[c.id for c in SAMPLE])
def test_bad_invocation_in_a_real_process(case: Case, world: World) -> None:
    if world.needs_read_only(case) and not world.read_only:
        pytest.skip("no read-only folder can be made here (root without chattr +i)")
    env = {**os.environ, **world.env(case)}
    before = world.snapshot()
    done = subprocess.run(
        [sys.executable, "-m", "provision", *world.argv(case)],
        capture_output=True, text=True, env=env, cwd=world.cwd, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    check(case, world, done.returncode, done.stderr, progress_allowed=True)
    assert world.snapshot() == before
    assert not world.pwned.exists()


def test_a_read_only_directory_is_really_read_only(world: World) -> None:
    """As root, chmod alone does not stop a write: the read-only cases would test nothing, so
    they skip where chattr +i is not possible (a container build), and say so."""
    if not world.read_only:
        pytest.skip("no read-only folder can be made here (root without chattr +i)")
    with pytest.raises(OSError):
        (Path(world.rodir) / "probe").write_text("x")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with badinput.world(tmp_path_factory.mktemp("bad-input")) as w:
        yield w
