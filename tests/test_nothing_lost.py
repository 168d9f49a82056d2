"""What a user does is not lost or silently undone, on a real TensorFlow environment (slow): a
break stays found after a smoke test that did not vouch for it; an environment of the same name
made in another folder does not replace it; `pip` inside `run` does not reach the host's Python.

One environment, created as the README's newcomer does (`create --tf 2.13 --path pip`), shared
by the tests of this module; each test leaves it as it found it.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import clitools
import pytest

from provision import tools

TF = "2.13"
PYTHON = "3.11"
NAME = f"tf{TF}-pip"

provision = functools.partial(clitools.provision, timeout=1800)


@dataclass(frozen=True)
class Real:
    home: dict[str, str]  # PROVISION_HOME
    out: Path  # the envs/ folder it was rendered into
    prefix: Path

    def run(self, *args: str | Path, cwd: Path | None = None) -> tuple[int, str, str]:
        done = provision(*args, env=self.home, cwd=cwd)
        return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Real]:
    if not tools.python_candidates(PYTHON):
        pytest.skip(f"TensorFlow {TF} needs Python {PYTHON}, which this host does not have")
    base = tmp_path_factory.mktemp("nothing-lost")
    home = {"PROVISION_HOME": str(base / "home")}
    done = provision("create", "--tf", TF, "--path", "pip", "--python", PYTHON, "--out",
                     base / "envs", "--json", env=home, cwd=base)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["name"] == NAME
    yield Real(home, base / "envs", Path(str(data["python"])).parent.parent)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_a_smoke_test_on_the_cpu_does_not_make_a_break_the_new_baseline(
    real: Real, tmp_path: Path
) -> None:
    (lib,) = real.prefix.glob("lib/python*/site-packages/nvidia/cudnn/lib/libcudnn_ops_train.so.8")
    aside = tmp_path / lib.name
    shutil.move(lib, aside)
    try:
        code, out, _ = real.run("check", NAME)
        assert code == 1 and "BREAKS  library " in out and "libcudnn_ops_train.so.8" in out, out
        # The smoke test passes (on the CPU here, which never loads that library; on a GPU it
        # need not load it either): the break is not its new baseline.
        code, out, _ = real.run("check", NAME, "--verify")
        assert code == 1, out
        assert "verify: PASS" in out and "new baseline" not in out
        (kept,) = [ln.strip() for ln in out.splitlines() if "baseline kept" in ln]
        assert kept.startswith(f"{NAME}: baseline kept, still broken: library ")
        assert "does not vouch for it); fix: " in kept
        assert kept.endswith(f"fix: `provision install {NAME} --force`, then "
                             f"`provision check {NAME} --verify`")  # fmt: skip
        assert "need attention" in out.splitlines()[-1]
        # Nor does `verify` itself, which passes, and says so.
        code, out, _ = real.run("verify", NAME)
        assert code == 0 and "verify: PASS" in out and "baseline kept, still broken" in out, out
        code, out, _ = real.run("check", NAME)
        assert code == 1 and "BREAKS  library " in out, out  # still found
    finally:
        shutil.move(aside, lib)
    # The right file put back is no change: the baseline was never moved.
    code, out, _ = real.run("check", NAME)
    assert code == 0 and f"{NAME}: unchanged since" in out, out


@pytest.mark.slow
def test_create_in_another_folder_does_not_replace_the_readmes_environment(
    real: Real, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    marker = (real.prefix / ".provision-install.json").read_bytes()
    code, out, err = real.run("create", "--tf", TF, "--path", "pip", "--python", PYTHON,
                              "--with", "pandas", cwd=project)  # fmt: skip
    assert code == 1, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"provision: error: {NAME} is already built here ({real.prefix}) from ")
    assert line.endswith(f"pass --replace to rebuild {NAME} from {project / 'envs' / NAME}")
    assert list(project.iterdir()) == []  # nothing rendered
    assert (real.prefix / ".provision-install.json").read_bytes() == marker
    # add from there (no --out) does not rewrite the README's directory either.
    code, out, err = real.run("add", NAME, "pandas", cwd=project)
    assert code == 2 and "outside this folder" in err, out + err
    code, out, _ = real.run("check", NAME)
    assert code == 0 and f"{NAME}: unchanged since" in out, out


@pytest.mark.slow
def test_pip_in_run_does_not_install_into_the_hosts_python(real: Real, tmp_path: Path) -> None:
    assert not (real.prefix / "bin" / "pip").exists()  # uv built it: no pip of its own
    host = tmp_path / "bin"
    host.mkdir()
    ran = tmp_path / "host-pip-ran"
    (host / "pip").write_text(f"#!/bin/sh\ntouch {ran}\n")  # the host's pip, as PATH finds it
    (host / "pip").chmod(0o755)
    done = provision("run", NAME, "--", "pip", "install", "six", cwd=tmp_path,
                     env={**real.home, "PATH": f"{host}:{os.environ['PATH']}"})  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"`provision add {NAME} PKG`" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not ran.exists()


@pytest.mark.slow
def test_create_no_verify_builds_without_the_smoke_test(real: Real) -> None:
    name = "tf2.13-unverified"
    argv = ["create", "--tf", TF, "--path", "pip", "--python", PYTHON, "--name", name]
    code, out, err = real.run(*argv, "--out", real.out, "--no-verify", "--json")
    assert code == 0, err
    steps = {s["step"]: s for s in json.loads(out)["steps"]}
    assert steps["verify"]["status"] == "skipped"
    assert steps["verify"]["detail"].startswith("not run (--no-verify): `provision verify ")
    listed = {e["name"]: e for e in json.loads(real.run("list", "--json")[1])}
    assert listed[name]["last_verify"] is None, listed[name]  # the smoke test never ran
    code, out, _ = real.run(*argv, "--out", real.out, "--no-verify")
    assert code == 0 and out.strip().endswith(")") and f"{name}: built, not verified" in out
    assert real.run("remove", name)[0] == 0
