"""Environments as users use them: found by name from any directory, listed, shown, run in,
removed, exported, and told apart from copies. Real venvs from a small real wheel served by the
test's own index (tests/test_install.py), through the real CLI.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import clitools
import pytest
from clitools import run_cli
from tinyindex import Env

from provision import environment
from provision.install.owned import MARKER

ROOT = Path(__file__).resolve().parent.parent


provision = functools.partial(clitools.provision, timeout=300, env={"PYTHONPATH": str(ROOT)})


def test_nothing_built_yet_says_how_to_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    code, out = run_cli("list")
    assert code == 0 and "no environments built yet (provision create --tf X.Y" in out
    assert run_cli("list", "--json") == (0, "[]\n")
    assert not (tmp_path / "home").exists()  # listing writes nothing


def test_a_built_environment_is_found_by_name_from_any_directory(
    built: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no envs/ here: only the registry knows where tiny lives
    code, out = run_cli("list")
    assert code == 0, out
    row = next(line for line in out.splitlines() if line.startswith("tiny "))
    assert str(built.prefix) in row and " pip " in row and "never verified" in row
    code, out = run_cli("show", "tiny")
    assert code == 0, out
    assert f"directory    {built.dir}" in out and f"prefix       {built.prefix}" in out
    assert f"activate     . {built.prefix}/bin/activate" in out
    data = json.loads(run_cli("list", "--json")[1])
    assert [(d["name"], d["state"], d["prefix"]) for d in data] == [
        ("tiny", "built", str(built.prefix))
    ]
    # A second install of the same lock from anywhere changes nothing and keeps the record.
    code, out = run_cli("install", "tiny")
    assert code == 0 and "nothing to do" in out


def test_run_executes_inside_the_environment_with_its_exit_code(built: Env, tmp_path: Path) -> None:
    home = {"PROVISION_HOME": str(built.home)}
    os.environ.update(home)
    try:
        done = provision(
            "run", "tiny", "--", "python", "-c",
            "import os, sys, provision_tiny; print(sys.prefix, os.environ['VIRTUAL_ENV'])",
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [str(built.prefix), str(built.prefix)]
        # The activation's policy applies: the fixture renders --gpus 0 --gpu-memory growth.
        done = provision(
            "run", "tiny", "--", "sh", "-c",
            'echo "$CUDA_VISIBLE_DEVICES $TF_FORCE_GPU_ALLOW_GROWTH"; exit 7', cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 7 and done.stdout.split() == ["0", "true"]
        done = provision("run", "tiny", "--", "no-such-program-here", cwd=tmp_path)
        assert done.returncode == 2 and "no-such-program-here: no such command" in done.stderr
        done = provision("run", "tiny", cwd=tmp_path)
        assert done.returncode == 2 and "Missing argument" in done.stderr
    finally:
        for key in home:
            os.environ.pop(key)


def test_pip_in_run_never_falls_through_to_the_hosts(built: Env, tmp_path: Path) -> None:
    """uv built tiny: it has no pip, and the pip on PATH is another's (here a stand-in that
    leaves a mark when it runs)."""
    host = tmp_path / "host-bin"
    host.mkdir()
    ran = tmp_path / "host-pip-ran"
    for name in ("pip", "pip3"):
        (host / name).write_text(f"#!/bin/sh\ntouch {ran}\n")
        (host / name).chmod(0o755)
    env = {"PROVISION_HOME": str(built.home), "PATH": f"{host}:{os.environ['PATH']}"}
    for pip in ("pip", "pip3"):
        done = clitools.provision("run", "tiny", "--", pip, "install", "six", env=env,
                                  cwd=tmp_path, timeout=120)  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line == (
            f"provision: error: {pip}: tiny has no pip of its own (uv built it); the {pip} on "
            f"PATH ({host / pip}) would act outside it: add packages with `provision add tiny "
            f"PKG` (locked with TensorFlow), or run `uv pip install --python "
            f"{built.prefix}/bin/python PKG` (by hand, unlocked)"
        )
    assert not ran.exists()
    # A pip the environment has is its own, and runs; a path given in full is the user's choice.
    own = built.prefix / "bin" / "pip"
    own.write_text(f"#!/bin/sh\necho own pip > {tmp_path / 'own'}\n")
    own.chmod(0o755)
    try:
        done = clitools.provision("run", "tiny", "--", "pip", "--version", env=env, timeout=120)
        assert done.returncode == 0 and (tmp_path / "own").read_text() == "own pip\n"
    finally:
        own.unlink()
    done = clitools.provision("run", "tiny", "--", str(host / "pip"), env=env, timeout=120)
    assert done.returncode == 0 and ran.exists()


def test_an_unknown_or_unbuilt_name_exits_2_in_every_command(env: Env, tmp_path: Path) -> None:
    """One exit code per kind of error: a name this machine does not have is a usage error (2)
    wherever it is given; tiny here is rendered, not built."""
    dest = str(tmp_path / "copy")
    takes_a_name = [
        ["install", "@"], ["lock", "@"], ["add", "@", "six"], ["drop", "@", "six"],
        ["verify", "@"], ["show", "@"], ["remove", "@"], ["run", "@", "--", "true"],
        ["kernel", "@"], ["export", "@", dest], ["check", "@"], ["bench", "@"], ["bundle", "@"],
        ["fleet", "@", "--inventory", os.devnull],
    ]  # fmt: skip
    for argv in takes_a_name:
        code, out = run_cli(*[a.replace("@", "nope") for a in argv])
        assert code == 2, (argv, out)
    out_ = ["--out", str(env.out)]
    for argv in (["verify", "tiny", *out_], ["run", *out_, "tiny", "--", "true"],
                 ["kernel", "tiny", *out_], ["check", "tiny"], ["remove", "tiny"],
                 ["bench", "tiny", *out_], ["bench", "--best", "tiny", *out_]):  # fmt: skip
        code, out = run_cli(*argv)
        assert code == 2 and ("tiny is not built" in out or "registered" in out), (argv, out)


def test_remove_deletes_only_what_provision_built(built: Env) -> None:
    code, out = run_cli("remove", "tiny")
    assert code == 0, out
    assert f"removed {built.prefix}" in out
    assert not built.prefix.exists()
    assert (built.dir / "requirements.lock").is_file()  # the reviewed inputs and lock stay
    assert run_cli("list")[1].startswith("no environments built yet")
    code, out = run_cli("remove", "tiny")
    assert code == 2 and "tiny is not registered" in out


def test_remove_leaves_a_prefix_that_is_not_provisions(built: Env) -> None:
    (built.prefix / MARKER).unlink()
    code, out = run_cli("remove", "tiny")
    assert code == 0, out
    assert f"left {built.prefix}: it has no provision build marker" in out
    assert (built.prefix / "bin" / "python").exists()


def test_remove_keep_prefix(built: Env) -> None:
    code, out = run_cli("remove", "tiny", "--keep-prefix")
    assert code == 0 and "left" in out and "--keep-prefix" in out
    assert (built.prefix / "bin" / "python").exists()


def test_verify_by_name_from_anywhere_records_its_result(
    built: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No TensorFlow in the small environment: verify runs, fails on it, and says so; the
    registry keeps the result, which list, show and doctor report."""
    monkeypatch.chdir(tmp_path)
    code, out = run_cli("verify", "tiny", "--timeout", "60")
    assert code == 1, out
    assert "verify: FAIL" in out and "tensorflow" in out
    assert "CPU only: no NVIDIA driver)" in out.splitlines()[-1]
    row = next(line for line in run_cli("list")[1].splitlines() if line.startswith("tiny "))
    assert " FAIL " in row and " CPU " in row
    shown = run_cli("show", "tiny")[1]
    assert "verify       FAIL" in shown
    code, out = run_cli("doctor", "--json")
    registered = json.loads(out)["registered"]
    assert [r["name"] for r in registered] == ["tiny"]
    assert registered[0]["last_verify"].startswith("FAIL")
    assert any(str(built.prefix) in line for line in run_cli("doctor")[1].splitlines())


def test_a_copied_environment_directory_is_refused_until_rendered_under_its_name(
    built: Env,
) -> None:
    copy = built.out / "my-copy"
    shutil.copytree(built.dir, copy)
    for argv in (["install", "my-copy"], ["lock", "my-copy"], ["verify", "my-copy"]):
        code, out = run_cli(*argv, "--out", str(built.out))
        assert code == 1, (argv, out)
        assert "was rendered for 'tiny', not 'my-copy' (a copied directory?)" in out
        assert "--name my-copy" in out
    assert not (built.home / "envs" / "my-copy").exists()


def test_a_hand_edited_runtime_is_refused_by_install(built: Env) -> None:
    runtime = built.dir / environment.RUNTIME
    runtime.write_text(runtime.read_text() + "PROVISION_GPUS='1'\n")
    code, out = run_cli("install", "tiny", "--out", str(built.out))
    assert code == 1 and "hooks/runtime.env changed since provision rendered it" in out
    assert "--force" in out


def test_names_that_could_escape_are_usage_errors(tmp_path: Path) -> None:
    for name in ("../x", "a/b", ".hidden", ""):
        code, out = run_cli("show", name, "--out", str(tmp_path))
        assert code == 2, (name, out)
        assert "is not usable" in out


def test_schema_1_manifests_are_still_read(tmp_path: Path) -> None:
    """The provision.json render wrote before the environment had an owner."""
    folder = tmp_path / "tf2.13-pip"
    folder.mkdir()
    (folder / "provision.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "files": {},
                "request": {
                    "tf": "2.13",
                    "path": "pip",
                    "python": "3.11",
                    "name": "tf2.13-pip",
                    "gpu_memory": None,
                    "gpus": "0",
                },
            }
        )
    )
    found = environment.load(folder)
    assert (found.name, found.path, found.python, found.request.gpus) == (
        "tf2.13-pip",
        "pip",
        "3.11",
        "0",
    )
    assert found.spec.release.pin.startswith("2.13")
    (folder.parent / "renamed").mkdir()
    shutil.copy(folder / "provision.json", folder.parent / "renamed" / "provision.json")
    with pytest.raises(environment.ManifestError, match="a copied directory"):
        environment.load(folder.parent / "renamed")


def test_export_is_self_contained(built: Env, tmp_path: Path) -> None:
    dest = tmp_path / "export"
    code, out = run_cli("export", "tiny", str(dest), "--out", str(built.out))
    assert code == 0, out
    names = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert {"README.md", "provision.json", "requirements.lock", "requirements.in"} <= set(names)
    assert {"smoke-test.pyz", "hooks/runtime.env", "hooks/provision_env_hook.py"} <= set(names)
    # The smoke test runs from the export with the environment's own interpreter: no TensorFlow
    # there, so its report says so, but it is a report.
    done = subprocess.run(
        [built.prefix / "bin" / "python", "-I", dest / "smoke-test.pyz", "smoke", "--json",
         "--timeout", "60"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["schema"] == "provision-smoke-report"
    assert report["environment"].get("tensorflow") is None
    code, out = run_cli("export", "tiny", str(dest), "--out", str(built.out))
    assert code == 2 and "exists" in out


H200 = ROOT / "tests" / "fixtures" / "h200-env"


def test_the_h200_reports_pass_with_no_activation_and_a_memory_limit() -> None:
    """tests/gpu/device_env.sh on an H200 (driver 580, no network): tf2.21-h200 built by
    `provision install` from its lock, verified with its bare interpreter (LD_LIBRARY_PATH held only
    the driver's folder), judged here again against the spec of the environment it was built from;
    the same environment as a Jupyter kernel and under an empty environment (cron) saw the GPU."""
    from provision import verify

    h200 = environment.load(H200 / "tf2.21-h200")
    data = json.loads((H200 / "verify-bare-python.json").read_text())
    report = data["report"]
    variables = report["environment"]["variables"]
    assert "VIRTUAL_ENV" not in variables and "site-packages" not in variables["LD_LIBRARY_PATH"]
    judged = verify.compare(report, verify.expected_of(h200), require_gpu=True, name=h200.name)
    assert judged.ok, [f"{o.name}: {o.reason}" for o in judged.failures]
    assert not judged.cpu_only
    findings = {o.name: o for o in judged.findings}
    assert findings["gpu0_compute"].status == "pass"
    assert findings["gpu_policy"].status == "pass"
    memory = next(c for c in report["checks"] if c["name"] == "memory")
    assert "hard limit 4096 MiB" in memory["reason"]
    for seen in (H200 / "kernel.json", H200 / "cron.json"):
        facts = json.loads(seen.read_text())
        assert facts["gpus"] == ["/physical_device:GPU:0"] and facts["limits_mib"] == [4096]
        assert facts["hook_loaded"] >= 10
    assert json.loads((H200 / "kernel.json").read_text())["activated"] is False


def test_a_registered_environment_whose_directory_is_gone_says_so(
    built: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.rmtree(built.dir)
    monkeypatch.chdir(tmp_path)
    # The build keeps the directory it was made from (tests/test_packages.py): show still works.
    code, out = run_cli("show", "tiny")
    assert code == 0 and str(built.prefix) in out, out
    # A build without that copy (an older provision's) says what to do.
    shutil.rmtree(built.prefix / "etc" / "provision" / "env")
    code, out = run_cli("show", "tiny")
    assert code == 2 and f"tiny is built at {built.prefix}, but the directory" in out
    assert "provision remove tiny" in out
    code, out = run_cli("remove", "tiny")  # the registry alone is enough to remove it
    assert code == 0 and f"removed {built.prefix}" in out
