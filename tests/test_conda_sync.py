"""`provision add` and `drop` on the conda path, for real: conda-lock re-locks against a local
channel, then the built prefix is synced in place (conda packages linked by rattler, the pip half
by uv, each checked against the lock), and a failure puts the prefix, the user's file and the lock
back as they were."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import localchannel as lc
import pytest
import yaml
from clitools import run_cli
from tinyindex import TINY, Index

from provision.install import owned
from provision.install.place import state_of
from provision.matrix.spec import EnvSpec

NAME = "conda-sync"
DEMO = "provision-conda-demo"


def demo_channel(root: Path) -> lc.Channel:
    """A noarch Python package the user adds from a channel of theirs, and one whose archive
    changed after it was indexed (its checksum no longer matches)."""
    py = ("python >=3.8",)
    pkgs = [
        lc.Package(DEMO, "1.0", subdir="noarch", noarch="python", depends=py,
                   files={"site-packages/provision_conda_demo/__init__.py": "VERSION = '1.0'\n"}),
        lc.Package("provision-conda-broken", "1.0", subdir="noarch", noarch="python", depends=py,
                   files={"site-packages/provision_conda_broken/__init__.py": "X = 1\n"}),
    ]  # fmt: skip
    channel = lc.build_channel(root, pkgs)
    archive = channel.archive("provision-conda-broken")
    archive.write_bytes(archive.read_bytes() + b"\0")
    return channel


def linked(prefix: Path) -> set[str]:
    """The names of the conda packages linked in the prefix."""
    return {json.loads(p.read_text())["name"] for p in (prefix / "conda-meta").glob("*.json")}


def site(prefix: Path) -> set[str]:
    sp = next((prefix / "lib").glob("python*/site-packages"))
    return {p.name for p in sp.iterdir() if not p.name.startswith("__")}


def rendered(spec: EnvSpec, channels: list[lc.Channel], tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch, *options: str) -> Path:  # fmt: skip
    """envs/NAME rendered for spec on the conda path, on these local channels, its pip half empty
    (TensorFlow itself is what tests/test_create.py installs): a hand edit of a rendered file, so
    install needs --force. The folder of the environment directories."""
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "envs"
    code, text = run_cli(
        "render", "--tf", spec.release.tf, "--path", "conda", "--python", spec.python,
        "--name", NAME, "--out", str(out), *options,
    )  # fmt: skip
    assert code == 0, text
    env_file = out / NAME / "environment.yml"
    data = yaml.safe_load(env_file.read_text())
    data["channels"] = [c.url for c in channels]
    data["dependencies"] = [d for d in data["dependencies"] if not isinstance(d, dict)]
    env_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


@pytest.mark.slow
def test_add_and_drop_sync_a_conda_prefix_in_place_and_a_failure_puts_it_back(
    real_conda_channel: tuple[EnvSpec, lc.Channel], index: Index, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    spec, channel = real_conda_channel
    extra = demo_channel(tmp_path / "demo-channel")
    out = rendered(spec, [channel, extra], tmp_path, monkeypatch)
    index.add("1.0")
    locked = subprocess.run(
        [sys.executable, "-m", "provision", "lock", NAME, "--out", str(out), "--solver", "builtin"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert locked.returncode == 0, locked.stderr
    code, text = run_cli(
        "install", NAME, "--out", str(out), "--solver", "builtin", "--force", "--json"
    )
    assert code == 0, text
    prefix = Path(json.loads(text)["prefix"])
    assert state_of(prefix) == "complete"
    base = linked(prefix)
    assert DEMO not in base and owned.foreign(prefix) == []

    # A package from the index: the pip half, installed by uv into the conda Python.
    code, text = run_cli("add", NAME, f"pypi: {TINY}==1.0", "--out", str(out), "--no-verify")
    assert code == 0, text
    assert f"+ {TINY} 1.0" in text
    assert re.search(r"synced .* \(1 installed or changed, 0 removed\)", text), text
    assert "provision_tiny" in site(prefix) and linked(prefix) == base

    # A conda package: linked by rattler; nothing else moves, nothing else is fetched.
    code, text = run_cli("add", NAME, DEMO, "--out", str(out), "--no-verify")
    assert code == 0, text
    assert f"+ {DEMO} 1.0" in text and f"{TINY}" not in text.split("synced")[0], text
    assert linked(prefix) == base | {DEMO}
    assert "provision_conda_demo" in site(prefix) and "provision_tiny" in site(prefix)
    assert owned.foreign(prefix) == []  # provision's list of what it installed followed
    lock_text = (out / NAME / "conda-lock.yml").read_text()
    code, text = run_cli("lock", NAME, "--out", str(out), "--check")
    assert code == 0, text

    # A package whose archive is not the one indexed: refused at its checksum, and the user's
    # file, the lock and the prefix stay as they were.
    files = {p: p.read_bytes() for p in (out / NAME / "packages.in", out / NAME / "conda-lock.yml")}
    before = (linked(prefix), site(prefix))
    code, text = run_cli("add", NAME, "provision-conda-broken", "--out", str(out), "--no-verify")
    assert code == 1 and "md5" in text and "does not match" in text, text
    assert {p: p.read_bytes() for p in files} == files
    assert (linked(prefix), site(prefix)) == before and owned.foreign(prefix) == []

    # Drop both: the conda package is unlinked and the pip one uninstalled; the base stays.
    code, text = run_cli("drop", NAME, DEMO, TINY, "--out", str(out), "--no-verify")
    assert code == 0, text
    assert f"- {DEMO} 1.0" in text and f"- {TINY} 1.0" in text
    assert linked(prefix) == base
    assert not {"provision_conda_demo", "provision_tiny"} & site(prefix)
    assert owned.foreign(prefix) == []
    assert (out / NAME / "conda-lock.yml").read_text() != lock_text
    code, text = run_cli("check", NAME)
    assert DEMO not in text and TINY not in text, text  # what provision dropped is no drift

    # A break that stood before an add is not the add's to vouch for: the baseline stays and
    # check goes on saying it (a library of the lock deleted by hand, then an add).
    code, text = run_cli("add", NAME, f"pypi: {TINY}==1.0", "--out", str(out), "--no-verify")
    assert code == 0 and "baseline kept" not in text, text
    lib = next(prefix.rglob("libprovisiontiny.so.1"))
    lib.unlink()
    code, text = run_cli("add", NAME, DEMO, "--out", str(out), "--no-verify")
    assert code == 0 and f"{NAME}: baseline kept, still broken: library " in text, text
    code, text = run_cli("check", NAME)
    assert code == 1 and "BREAKS" in text and "libprovisiontiny.so.1" in text, text


LIB, APP, OTHER, NEEDS2 = (f"provision-conda-{n}" for n in ("lib", "app", "other", "needs2"))


def moving_channel(root: Path, stage: int) -> lc.Channel:
    """The user's channel: an app on a library; then (stage 1) a newer library and a package that
    needs it; then (stage 2) a newer `other`, as conda-forge moves on between locks."""
    pkgs = [
        lc.Package(LIB, "1.0", subdir="noarch"),
        lc.Package(APP, "1.0", subdir="noarch", depends=(LIB,)),
        lc.Package(OTHER, "1.0", subdir="noarch"),
    ]
    if stage >= 1:
        pkgs += [
            lc.Package(LIB, "2.0", subdir="noarch"),
            lc.Package(NEEDS2, "1.0", subdir="noarch", depends=(f"{LIB} >=2",)),
        ]
    if stage >= 2:
        pkgs.append(lc.Package(OTHER, "1.1", subdir="noarch"))
    return lc.build_channel(root, pkgs)


def locked_conda(lock: Path) -> dict[str, str]:
    data = yaml.safe_load(lock.read_text())
    return {p["name"]: p["version"] for p in data["package"] if p["manager"] == "conda"}


@pytest.mark.slow
def test_a_conda_relock_keeps_the_previous_choices_and_moves_only_what_a_change_needs(
    real_conda_channel: tuple[EnvSpec, lc.Channel], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from provision import tools

    if not tools.solver("auto").endswith("provision-conda"):
        pytest.skip("a host conda is on PATH: add re-locks with it, and it solves afresh")
    spec, channel = real_conda_channel
    mine = moving_channel(tmp_path / "mine", 0)
    out = rendered(spec, [channel, mine], tmp_path, monkeypatch, "--with", APP)
    lock = out / NAME / "conda-lock.yml"
    code, text = run_cli("lock", NAME, "--out", str(out), "--solver", "builtin")
    assert code == 0, text
    first = locked_conda(lock)
    assert first[LIB] == "1.0" and first[APP] == "1.0"

    # The channel moves on: a plain re-lock keeps every choice, byte for byte.
    moving_channel(tmp_path / "mine", 1)
    before = lock.read_bytes()
    code, text = run_cli("lock", NAME, "--out", str(out), "--solver", "builtin")
    assert code == 0, text
    assert lock.read_bytes() == before

    # Adding a package that needs nothing new moves nothing else.
    code, text = run_cli("add", NAME, OTHER, "--out", str(out), "--no-verify")
    assert code == 0, text
    assert f"+ {OTHER} 1.0" in text and LIB not in text, text
    assert locked_conda(lock) == {**first, OTHER: "1.0"}

    # One that needs the newer library moves it, and only it.
    code, text = run_cli("add", NAME, NEEDS2, "--out", str(out), "--no-verify")
    assert code == 0, text
    assert f"{LIB} 1.0 -> 2.0" in text and f"+ {NEEDS2} 1.0" in text, text
    assert locked_conda(lock) == {**first, OTHER: "1.0", NEEDS2: "1.0", LIB: "2.0"}
    code, text = run_cli("drop", NAME, NEEDS2, "--out", str(out), "--no-verify")
    assert code == 0, text
    assert locked_conda(lock)[LIB] == "2.0"  # kept: still allowed, and the smallest change

    # `other` moves on; a re-lock keeps it, --upgrade-package moves it and nothing else.
    moving_channel(tmp_path / "mine", 2)
    code, text = run_cli("lock", NAME, "--out", str(out), "--solver", "builtin")
    assert code == 0, text
    assert locked_conda(lock)[OTHER] == "1.0"
    code, text = run_cli(
        "lock", NAME, "--out", str(out), "--solver", "builtin", "--upgrade-package", OTHER
    )
    assert code == 0, text
    assert locked_conda(lock) == {**first, OTHER: "1.1", LIB: "2.0"}
    # ... and names a package of the user's: TensorFlow's own dependencies are refused.
    code, text = run_cli("lock", NAME, "--out", str(out), "--upgrade-package", "python")
    assert code == 2 and "not one of your conda packages" in text, text
