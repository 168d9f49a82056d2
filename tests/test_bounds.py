"""Everything provision reads has a bound, everything it waits on has one deadline, and nothing of
its own is left behind (issue 23).

A corpus of files provision reads back (registry records, provision.json, bench reports, bundle
manifests) replaced by what never ends or never parses: a FIFO, a link to /dev/zero, a file too
large, bytes that are not UTF-8, JSON nested thousands deep. Each is one error line (or, in a
listing, one broken row), never a hang or a traceback; the commands run as real processes under a
timeout that only a hang reaches. Then interpreters that never answer, or whose grandchild keeps
their output open; the temporary payload; fleet inventories that name no host.
"""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import clitools
import pytest
from clitools import run_cli
from tinyindex import Env, Index

from provision import diskread, environment, registry

HANG = 120  # seconds: only a hang gets near it


provision = functools.partial(clitools.provision, timeout=HANG, stdin=subprocess.DEVNULL)


def one_error(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, done.stderr
    errors = [ln for ln in lines if ln.startswith(("provision: error: ", "Error: "))]
    assert len(errors) == 1, done.stderr
    return errors[0]


# -- what a file can be instead of a small JSON object -------------------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _huge(path: Path) -> None:
    with open(path, "wb") as fh:
        fh.truncate(diskread.SMALL + 1)  # sparse: large, costs no disk


def _latin1(path: Path) -> None:
    path.write_bytes(b'{"name": "caf\xe9"}')


def _deep(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000)


def _deep_object(path: Path) -> None:
    path.write_text('{"a":' * 5000 + "1" + "}" * 5000)


def _folder(path: Path) -> None:
    path.mkdir()


BAD: dict[str, tuple[Callable[[Path], None], str]] = {
    "a FIFO": (_fifo, "is a FIFO"),
    "a link to /dev/zero": (_zero, "is a character device"),
    "too large": (_huge, "provision reads at most"),
    "not UTF-8": (_latin1, "is not UTF-8"),
    "nested 100,000 deep": (_deep, "nested deeper than"),
    "objects nested 5,000 deep": (_deep_object, "nested deeper than"),
    "a folder": (_folder, "is a folder"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_reader_bounds_kind_size_encoding_and_depth(case: str, tmp_path: Path) -> None:
    make, phrase = BAD[case]
    path = tmp_path / "x.json"
    make(path)
    with pytest.raises(diskread.Unreadable, match=phrase):
        diskread.read_json(path)


def test_the_reader_reads_what_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    value = {"a": [{"b": '[{"\\'}] * 3, "c": "\u00e9", "d": [[[[]]]]}
    path.write_text(json.dumps(value))
    assert diskread.read_json(path) == value
    with pytest.raises(FileNotFoundError):
        diskread.read_json(tmp_path / "none.json")


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_registry_record_that_never_ends_never_hangs_list_show_or_remove(
    case: str, tmp_path: Path
) -> None:
    make, phrase = BAD[case]
    home = tmp_path / "home"
    (home / "registry").mkdir(parents=True)
    make(home / "registry" / "bad.json")
    listed = provision("list", "--json", env={"PROVISION_HOME": str(home)})
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["name"] for r in rows] == ["bad"] and phrase in json.dumps(rows), rows
    for argv in (["show", "bad"], ["remove", "bad"]):
        done = provision(*argv, env={"PROVISION_HOME": str(home)})
        assert phrase in one_error(done, done.returncode), done.stderr
        assert done.returncode in (1, 2)
    bad = home / "registry" / "bad.json"
    assert bad.exists() or bad.is_symlink()  # a broken record is shown, not deleted


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_provision_json_that_never_ends_is_one_line(case: str, env: Env) -> None:
    make, phrase = BAD[case]
    manifest = env.dir / environment.MANIFEST
    manifest.unlink()
    make(manifest)
    done = provision("install", env.name, "--out", str(env.out))
    assert phrase in one_error(done), done.stderr
    assert not env.prefix.exists()


@pytest.mark.parametrize("case", sorted(BAD))
def test_bench_report_that_never_ends_is_one_line(case: str, tmp_path: Path) -> None:
    make, phrase = BAD[case]
    path = tmp_path / "report.json"
    make(path)
    done = provision("bench", "--report", str(path))
    assert done.returncode in (1, 2) and one_error(done, done.returncode)
    # Click says "is a directory"; a report set may be larger than a record (64 MiB)
    assert phrase in done.stderr or case in ("a folder", "too large"), done.stderr


def test_bench_report_of_dev_zero_is_one_line() -> None:
    done = provision("bench", "--report", "/dev/zero")
    assert "character device" in one_error(done, 2)


def _bundle_with_manifest(path: Path, data: bytes) -> None:
    from provision.bundlefile.bundle_format import MANIFEST, ROOT

    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(f"{ROOT}/{MANIFEST}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000 + b"]" * 100_000, b'{"format": "caf\xe9"}', b"\xff\xfe" * 100],
    ids=["deep", "latin-1", "garbage"],
)
def test_a_bundle_manifest_that_never_parses_is_one_line(data: bytes, tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar"
    _bundle_with_manifest(bundle, data)
    home = {"PROVISION_HOME": str(tmp_path / "h")}
    done = provision("install", "--from-bundle", str(bundle), env=home)
    assert "manifest is damaged" in one_error(done), done.stderr


# -- waits: one deadline, the whole process tree -------------------------------------------------


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _gone(pid_file: Path) -> bool:
    """The process whose pid the fake wrote is gone (a zombie counts as gone)."""
    pid = int(pid_file.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_verify_of_an_interpreter_that_never_answers_keeps_its_deadline(tmp_path: Path) -> None:
    exe = _script(tmp_path / "python", f"echo $$ > {tmp_path}/pid\nexec sleep 1000\n")
    started = time.monotonic()
    done = provision("verify", "--python", str(exe), "--timeout", "2")
    assert "did not answer within 2 s" in one_error(done), done.stderr
    assert time.monotonic() - started < HANG
    assert _gone(tmp_path / "pid")


def test_verify_is_not_held_by_a_grandchild_that_keeps_the_output_open(tmp_path: Path) -> None:
    # The grandchild writes its pid, then sleeps holding stdout and stderr; the interpreter is
    # real (it answers, and runs the smoke test, which fails for lack of TensorFlow).
    exe = _script(
        tmp_path / "python",
        f"sh -c 'echo $$ > {tmp_path}/pid; exec sleep 1000' &\nexec {sys.executable} \"$@\"\n",
    )
    done = provision("verify", "--python", str(exe), "--timeout", "5")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    deadline = time.monotonic() + 30
    while not _gone(tmp_path / "pid") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(tmp_path / "pid"), "the grandchild outlived verify"


# -- leftovers -----------------------------------------------------------------------------------


def test_verify_leaves_no_payload_in_the_temporary_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = provision(
        "verify", "--python", sys.executable, "--timeout", "30", env={"TMPDIR": str(tmp)}
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert list(tmp.iterdir()) == []


def test_bench_leaves_no_payload_in_the_temporary_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = provision("bench", "--python", sys.executable, "--steps", "1", "--warmup", "0",
                     "--timeout", "60", env={"TMPDIR": str(tmp)})  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert list(tmp.iterdir()) == []


INVENTORIES = {
    "empty": "",
    "a group with no host": "[lab]\n",
    "YAML with no host": "all:\n  hosts: {}\n",
    "garbage": "\x00\xff{{{ not an inventory\n[[[\n",
}


@pytest.mark.parametrize("case", sorted(INVENTORIES))
def test_fleet_with_an_inventory_of_no_host_writes_nothing(
    case: str, index: Index, env: Env, tmp_path: Path
) -> None:
    pytest.importorskip("ansible")
    env.lock(index.add("1.0"))
    inventory = tmp_path / "inventory"
    inventory.write_text(INVENTORIES[case], encoding="utf-8", errors="surrogateescape")
    reports = tmp_path / "reports"
    before = sorted(p.relative_to(env.dir) for p in env.dir.rglob("*"))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, out = run_cli("fleet", env.name, "--out", str(env.out), "--inventory",
                            str(inventory), "--report-dir", str(reports))  # fmt: skip
    finally:
        os.chdir(cwd)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "inventory" in lines[0], out
    assert sorted(p.relative_to(env.dir) for p in env.dir.rglob("*")) == before
    assert not reports.exists() and not (tmp_path / "fleet-reports").exists()
    assert registry.get(env.name) is None


@pytest.mark.parametrize("case", ["a FIFO", "a link to /dev/zero", "a folder"])
@pytest.mark.parametrize("rel", ["requirements.in", "requirements.lock"])
def test_a_rendered_file_or_lock_that_never_ends_is_one_line(
    case: str, rel: str, index: Index, env: Env
) -> None:
    make, _ = BAD[case]
    env.lock(index.add("1.0"))
    (env.dir / rel).unlink()
    make(env.dir / rel)
    done = provision("install", env.name, "--out", str(env.out))
    assert rel in one_error(done), done.stderr
    assert not env.prefix.exists()


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("own", [".provision-install.json", ".provision-install.files"])
def test_a_prefix_s_own_files_that_never_end_never_hang_remove(
    case: str, own: str, index: Index, env: Env
) -> None:
    make, _ = BAD[case]
    env.lock(index.add("1.0"))
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0, out
    (env.prefix / own).unlink()
    make(env.prefix / own)
    listed = provision("list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    done = provision("remove", env.name)
    assert "Traceback" not in done.stderr, done.stderr
    if own.endswith(".json"):  # no marker that can be read: not provision's, left as it is
        assert done.returncode == 0 and "no provision build marker" in done.stdout, done.stdout
        assert (env.prefix / "bin" / "python").exists()
    else:  # no list that can be read: nothing is known, so nothing is deleted without --force
        assert "no list of the files" in one_error(done), done.stderr
        assert (env.prefix / "bin" / "python").exists()


@pytest.mark.parametrize(
    "prints",
    [
        "head -c 200000000 /dev/zero",
        "python3 -c \"print('[' * 100000 + ']' * 100000)\"",
        "printf '\\377\\376{'",
    ],
    ids=["200 MB of zeros", "JSON 100,000 deep", "not UTF-8"],
)
def test_an_interpreter_that_prints_what_never_parses_is_one_line(
    prints: str, tmp_path: Path
) -> None:
    # It answers the first question as Python would, then prints this instead of a report.
    exe = _script(
        tmp_path / "python",
        f'case "$*" in *provision-ok*) echo provision-ok; exit 0;; esac\n{prints}\n',
    )
    done = provision("verify", "--python", str(exe), "--timeout", "5")
    assert "printed no report" in one_error(done), done.stderr
