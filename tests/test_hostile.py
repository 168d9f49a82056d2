"""Hostile values, each refused with one line (issue 23, items 4, 5 and 8): the corpus of
tests/hostile.py, run in-process with Click's CliRunner (an escaping exception is a failure) in
the world of tests/badinput.py (real files, a rendered and locked pip environment `tiny`), plus
a rendered conda environment `tinyconda` and a folder that holds provision's install marker.

Each case asserts: exit 1 or 2 as the case says; stderr is one error line (`provision: error: ...`
or Click's usage format), no traceback; the error names what the case is about (its `expect`);
nothing printed holds a hostile header's command (its `absent`); and nothing under the world
changed (the case's own prepared files aside).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import badinput
import hostile
import pytest
from badinput import World
from click.testing import CliRunner
from hostile import Case

from provision.cli.commands import cli

CASES = hostile.cases()


def test_the_corpus_is_at_least_as_large_as_the_bad_input_corpus() -> None:
    assert len(CASES) >= len(badinput.cases()), (len(CASES), len(badinput.cases()))


def _prepare(case: Case, world: World) -> None:
    if case.prepare == "interpreters":
        hostile.write_interpreters(world)
    elif case.prepare.startswith("bundle:"):
        number = int(case.prepare.split(":")[1])
        field, value = hostile.BUNDLES[number]
        hostile.write_bundle(world.root / "bundles" / f"{number}.tar", field, value)
    elif case.prepare.startswith("wheelhouse:"):
        hostile.write_wheelhouse(world, case.prepare.split(":", 1)[1])
    elif case.prepare == "files":
        hostile.write_files(world)
    elif case.prepare.startswith("edit:"):
        hostile.apply_edit(world, case.prepare.split(":", 1)[1])


def check(case: Case, code: int, stderr: str, stdout: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert code in case.codes, f"exit {code}, expected {sorted(case.codes)}: {stderr}"
    if any(ln.startswith("Usage: ") for ln in lines):
        errors = [ln for ln in lines if ln.startswith("Error: ")]
        assert code == 2 and len(errors) == 1 and lines[-1] == errors[0], stderr
    else:
        errors = [ln for ln in lines if ln.startswith("provision: error: ")]
        assert len(errors) == 1 and lines == errors, stderr
    said = errors[0].lower()
    assert any(e.lower() in said for e in case.expect), f"{case.expect} not in: {errors[0]}"
    for text in case.absent:
        assert text not in stderr and text not in stdout, (text, stderr, stdout)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_value(case: Case, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    if case.prepare == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads every folder: an unreadable PROVISION_HOME needs another user")
    _prepare(case, world)
    env = world.env(case)  # type: ignore[arg-type]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(world.cwd)
    before = world.snapshot()
    result = CliRunner().invoke(cli, ["-q", *world.argv(case)], env=env)  # type: ignore[arg-type]
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not escaped, f"{type(result.exception).__name__}: {result.exception}"
    check(case, result.exit_code, result.stderr, result.stdout)
    after = world.snapshot()
    assert after == before, sorted(set(after.items()) ^ set(before.items()))[:5]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("hostile")
    with badinput.world(root) as w:
        res = CliRunner().invoke(
            cli,
            ["render", "--tf", "2.13", "--path", "conda", "--name", "tinyconda",
             "--out", w.tokens["@envs@"]],
            env={"PROVISION_HOME": str(root / "home")},
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        prefix = root / "aprefix"
        prefix.mkdir()
        (prefix / ".provision-install.json").write_text('{"state": "complete"}\n')
        unreadable = root / "unreadable"
        (unreadable / "registry").mkdir(parents=True)
        unreadable.chmod(0)
        w.tokens["@prefix@"] = str(prefix)
        w.tokens["@unreadable@"] = str(unreadable)
        try:
            yield w
        finally:
            unreadable.chmod(0o755)
