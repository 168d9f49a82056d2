"""provision deletes and overwrites only what it created (issue 23).

A corpus of places where something that is not provision's sits where provision writes or deletes:
a user's file, a FIFO, a device, a folder, another environment's prefix, a copy of a prefix, a
symlink that leads nowhere, a file a user added to a prefix. Each case runs the CLI on real files
(real venvs from the test's own index, tests/tinyindex.py) and compares the tree that is not
provision's before and after: paths, kinds, modes and contents. Run as root (as these tests are
here), a device path must be refused before anything is written to it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import clitools
import pytest
from bundletools import needs_unshare
from click.testing import CliRunner
from clitools import run_cli
from tinyindex import Env, Index

from provision import registry
from provision.cli.commands import cli
from provision.install.place import state_of

Snapshot = dict[str, tuple[str, int, str]]


def snapshot(root: Path) -> Snapshot:
    """Every path under root (root included): its kind, mode and content (or link target)."""
    out: Snapshot = {}
    paths = [root, *sorted(root.rglob("*"))] if root.is_dir() and not root.is_symlink() else [root]
    for path in paths:
        st = path.lstat()
        rel = str(path.relative_to(root)) if path != root else "."
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", 0, os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", st.st_mode & 0o7777, path.read_bytes().hex())
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", st.st_mode & 0o7777, "")
        else:
            out[rel] = ("special", st.st_mode, str(st.st_rdev))
    return out


def other_env(env: Env, name: str, version: str, index: Index) -> Env:
    """A second environment of the same request under another name, locked to its own wheel."""
    res = CliRunner().invoke(
        cli,
        ["render", "--tf", json.loads((env.dir / "provision.json").read_text())["request"]["tf"],
         "--path", "pip", "--python",
         json.loads((env.dir / "provision.json").read_text())["request"]["python"],
         "--name", name, "--out", str(env.out), "--gpu-memory", "growth", "--gpus", "0"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    other = Env(env.out, name, env.home)
    other.lock(index.add(version))
    return other


def installed(env: Env, *extra: str) -> Path:
    code, out = run_cli("install", env.name, "--out", str(env.out), *extra)
    assert code == 0, out
    return Path(registry.get(env.name).prefix)  # type: ignore[union-attr]


def one_line(out: str) -> str:
    """The one error line: provision's own, or Click's usage format (Usage, Try, Error)."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert "Traceback" not in out, out
    if lines and lines[0].startswith("Usage: "):
        assert len(lines) == 3 and lines[-1].startswith("Error: "), out
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("provision: error: "), out
    return lines[0]


# -- output files: bundle -o, bench --plot ------------------------------------------------------


def _document(tmp: Path) -> Path:
    path = tmp / "notes.txt"
    path.write_text("the user's document\n")
    path.chmod(0o640)
    return path


def _fifo(tmp: Path) -> Path:
    path = tmp / "pipe"
    os.mkfifo(path)
    return path


def _folder(tmp: Path) -> Path:
    path = tmp / "folder"
    path.mkdir()
    (path / "inside.txt").write_text("x")
    return path


def _dangling(tmp: Path) -> Path:
    path = tmp / "dangling"
    path.symlink_to(tmp / "nowhere")
    return path


def _loop(tmp: Path) -> Path:
    path = tmp / "loop"
    path.symlink_to(path)
    return path


def _link_to_device(tmp: Path) -> Path:
    path = tmp / "full"
    path.symlink_to("/dev/full")
    return path


# case -> (make the path, refused even with --force, a phrase of the refusal)
OUTPUTS: dict[str, tuple[Callable[[Path], Path], bool, str]] = {
    "a user's document": (_document, False, "will not overwrite it without --force"),
    "a FIFO": (_fifo, True, "is a FIFO"),
    "a folder": (_folder, True, "directory"),
    "a symlink that leads nowhere": (_dangling, True, "leads nowhere"),
    "a symlink loop": (_loop, True, "-o"),
    "/dev/full": (lambda tmp: Path("/dev/full"), True, "is a character device"),
    "/dev/null": (lambda tmp: Path("/dev/null"), True, "is a character device"),
    "a symlink to /dev/full": (_link_to_device, True, "is a character device"),
}


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_bundle_output_is_never_what_provision_did_not_make(
    case: str, index: Index, env: Env, tmp_path: Path
) -> None:
    make, always, phrase = OUTPUTS[case]
    env.lock(index.add("1.0"))
    user = tmp_path / "user"
    user.mkdir()
    dest = make(user)
    before, device = snapshot(user), snapshot(dest) if dest.exists() else {}
    for extra in ([], ["--force"]):
        code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(dest), *extra)
        if extra and not always:
            break  # a regular file with --force is replaced: what --force is for
        line = one_line(out)
        assert code == 2 and phrase in line, out
        assert snapshot(user) == before
        if device:
            assert snapshot(dest) == device  # the device node is still the device node
    assert not list(user.glob(".*partial*"))


@pytest.mark.parametrize("case", ["a user's document", "a FIFO", "a folder", "/dev/full"])
def test_bench_plot_is_never_what_provision_did_not_make(case: str, tmp_path: Path) -> None:
    make, always, phrase = OUTPUTS[case]
    fixture = Path(__file__).parent / "fixtures" / "bench-resnet50-224.json"
    user = tmp_path / "user"
    user.mkdir()
    dest = make(user)
    before = snapshot(user)
    extra = ["--force"] if always else []
    code, out = run_cli("bench", "--report", str(fixture), "--plot", str(dest), *extra)
    assert code == 2 and phrase in one_line(out), out
    assert snapshot(user) == before
    if dest == Path("/dev/full"):
        assert stat.S_ISCHR(os.stat(dest).st_mode)


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_export_destination_is_never_what_provision_did_not_make(
    case: str, index: Index, env: Env, tmp_path: Path
) -> None:
    make, _, _ = OUTPUTS[case]
    env.lock(index.add("1.0"))
    user = tmp_path / "user"
    user.mkdir()
    dest = make(user)
    before = snapshot(user)
    code, out = run_cli("export", env.name, str(dest), "--out", str(env.out))
    assert code in (1, 2) and one_line(out), out
    assert snapshot(user) == before


def test_fleet_wheel_is_never_written_over_a_fifo(tmp_path: Path) -> None:
    from provision.bundlefile import selfwheel

    os.mkfifo(tmp_path / selfwheel.wheel_name())
    before = snapshot(tmp_path)
    code, out = run_cli("fleet", "--wheel", str(tmp_path))
    assert code == 2 and "is a FIFO" in one_line(out), out
    assert snapshot(tmp_path) == before


def test_provision_s_own_wheel_is_replaced_by_the_next_build(tmp_path: Path) -> None:
    """A second `fleet --wheel DIR` (and every second `bundle`, which builds the same wheel into
    its cache) replaces provision's own wheel: that file is provision's, with --force implied."""
    from provision.bundlefile import selfwheel

    for _ in range(2):
        code, out = run_cli("fleet", "--wheel", str(tmp_path))
        assert code == 0, out
    assert sorted(p.name for p in tmp_path.iterdir()) == [selfwheel.wheel_name()]


# -- prefixes -----------------------------------------------------------------------------------


def test_another_environment_s_prefix_is_refused(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    theirs = installed(env)
    other = other_env(env, "other", "2.0", index)
    before = snapshot(theirs)
    for target in (theirs, theirs / "lib", theirs.parent):
        code, out = run_cli("install", other.name, "--out", str(other.out), "--prefix",
                            str(target))  # fmt: skip
        assert code == 1 and f"where {env.name} is built" in one_line(out), out
    assert snapshot(theirs) == before
    assert registry.get(other.name) is None


def test_a_prefix_holding_a_user_s_file_is_not_rebuilt_over_it(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    (prefix / "train.py").write_text("print('mine')\n")
    before = snapshot(prefix)
    code, out = run_cli("install", env.name, "--out", str(env.out), "--force")
    assert code == 1 and "train.py" in one_line(out) and "did not install" in out, out
    assert snapshot(prefix) == before


def test_remove_keeps_a_user_s_file_and_says_so(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    (prefix / "train.py").write_text("print('mine')\n")
    (prefix / "data").mkdir()
    (prefix / "data" / "x.csv").write_text("1,2\n")
    (prefix / "lib" / "notes.md").write_text("in a folder of the installer's\n")
    before = snapshot(prefix)
    code, out = run_cli("remove", env.name)
    line = one_line(out)
    assert code == 1 and "train.py" in line and "data" in line and "--force" in line, out
    assert snapshot(prefix) == before and registry.get(env.name) is not None
    code, out = run_cli("remove", env.name, "--force")
    assert code == 0, out
    assert f"kept {prefix}/train.py" in out and f"kept {prefix}/data" in out
    assert "freed" in out
    left = {str(p.relative_to(prefix)) for p in prefix.rglob("*")}
    assert left == {"train.py", "data", "data/x.csv", "lib", "lib/notes.md"}
    assert (prefix / "train.py").read_text() == "print('mine')\n"
    assert registry.get(env.name) is None


def test_remove_deletes_what_was_installed_and_says_what_it_freed(index: Index, env: Env) -> None:
    env.lock(index.add("1.0", payload=1 << 20))
    prefix = installed(env)
    # Python writes bytecode beside what was installed: that is the installer's too.
    subprocess.run([prefix / "bin" / "python", "-c", "import provision_tiny"], check=True)
    code, out = run_cli("remove", env.name)
    assert code == 0, out
    assert not prefix.exists()
    freed = out.split("(freed ")[1].split(")")[0]
    assert freed.endswith(("KiB", "MiB")), out


def test_remove_leaves_another_environment_s_prefix(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    theirs = installed(env)
    other = other_env(env, "other", "2.0", index)
    installed(other)
    record = registry.get(other.name)
    assert record is not None
    registry.put(record.__class__(**{**record.to_json(), "prefix": str(theirs),  # type: ignore[arg-type]
                                     "interpreter": str(theirs / "bin" / "python")}))  # fmt: skip
    before = snapshot(theirs)
    code, out = run_cli("remove", other.name)
    assert code == 0 and "left" in out, out
    assert snapshot(theirs) == before and registry.get(env.name) is not None


def test_remove_leaves_a_user_s_copy_that_holds_the_marker(
    index: Index, env: Env, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    copy = tmp_path / "my-copy"
    shutil.copytree(prefix, copy, symlinks=True)
    (copy / "notes.txt").write_text("my notes\n")
    record = registry.get(env.name)
    assert record is not None
    registry.put(record.__class__(**{**record.to_json(), "prefix": str(copy),  # type: ignore[arg-type]
                                     "interpreter": str(copy / "bin" / "python")}))  # fmt: skip
    before = snapshot(copy)
    code, out = run_cli("remove", env.name)
    assert code == 0 and "a copy, not provision's" in out, out
    assert snapshot(copy) == before


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_a_symlink_prefix_that_leads_nowhere_is_refused_never_replaced(
    kind: str, index: Index, env: Env, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere" if kind == "dangling" else link)
    code, out = run_cli("install", env.name, "--out", str(env.out), "--prefix", str(link))
    assert code == 2 and "leads nowhere" in one_line(out), out
    assert link.is_symlink() and os.readlink(link) == str(
        tmp_path / "nowhere" if kind == "dangling" else link
    )
    assert registry.get(env.name).prefix == str(prefix)  # type: ignore[union-attr]


def test_a_symlink_prefix_to_a_folder_is_followed(index: Index, env: Env, tmp_path: Path) -> None:
    env.lock(index.add("1.0"))
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    code, out = run_cli("install", env.name, "--out", str(env.out), "--prefix", str(link))
    assert code == 0, out
    assert link.is_symlink() and state_of(real) == "complete"
    assert registry.get(env.name).prefix == str(real)  # type: ignore[union-attr]


def test_kill_9_in_a_user_s_folder_then_a_file_added_is_never_wiped(
    index: Index, env: Env, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    folder = tmp_path / "mine"
    folder.mkdir()
    index.mode = "stall"
    argv = [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out),
            "--prefix", str(folder)]  # fmt: skip
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert index.requested.wait(60), "the install never reached the download"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    index.release.set()
    index.mode = "ok"
    assert state_of(folder) == "building"
    (folder / "train.py").write_text("print('mine')\n")
    code, out = run_cli("install", env.name, "--out", str(env.out), "--prefix", str(folder))
    assert code == 1 and "train.py" in one_line(out), out
    assert (folder / "train.py").read_text() == "print('mine')\n"
    (folder / "train.py").rename(tmp_path / "train.py")  # the user moves it out, as told
    code, out = run_cli("install", env.name, "--out", str(env.out), "--prefix", str(folder))
    assert code == 0, out
    assert state_of(folder) == "complete"
    code, out = run_cli("remove", env.name)
    assert code == 0, out
    assert folder.is_dir() and list(folder.iterdir()) == []  # the user's folder, as it was


# -- .provision-old and .provision-new ----------------------------------------------------------


def test_a_provision_old_left_by_a_kill_is_finished_by_the_next_run(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    old = prefix.with_name(prefix.name + ".provision-old")
    # As a kill after the new prefix was complete and before the old one was deleted leaves it.
    shutil.copytree(prefix, old, symlinks=True)
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0 and "nothing to do" in out, out
    assert not old.exists()
    # Killed between moving the complete one away and moving the new one in: it is put back.
    prefix.rename(old)
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0 and "nothing to do" in out, out
    assert state_of(prefix) == "complete" and not old.exists()
    shutil.copytree(prefix, old, symlinks=True)
    code, out = run_cli("remove", env.name)
    assert code == 0 and not old.exists() and not prefix.exists(), out


def _killed_during_force(env: Env, index: Index) -> None:
    """install --force, killed with -9 while the new prefix downloads (the old one set aside)."""
    index.mode = "stall"
    index.requested.clear()
    argv = [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out),
            "--force"]  # fmt: skip
    shutil.rmtree(os.environ["UV_CACHE_DIR"], ignore_errors=True)  # so that it downloads again
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert index.requested.wait(60), "the install never reached the download"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    index.release.set()
    index.mode = "ok"


@pytest.mark.parametrize("then", ["install", "create-like install --force", "remove"])
def test_kill_9_during_install_force_is_finished_by_the_next_run(
    then: str, index: Index, env: Env
) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    _killed_during_force(env, index)
    old = prefix.with_name(prefix.name + ".provision-old")
    assert old.is_dir() and state_of(prefix) == "building"
    if then == "remove":
        code, out = run_cli("remove", env.name)
        assert code == 0 and not prefix.exists(), out
    else:
        extra = ["--force"] if "force" in then else []
        code, out = run_cli("install", env.name, "--out", str(env.out), *extra)
        assert code == 0 and state_of(prefix) == "complete", out
    assert sorted(os.listdir(prefix.parent)) == ([prefix.name] if then != "remove" else [])


def test_a_provision_old_that_is_not_provision_s_is_left_alone(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    old = prefix.with_name(prefix.name + ".provision-old")
    old.mkdir()
    (old / "thesis.tex").write_text("\\section{mine}\n")
    before = snapshot(old)
    code, out = run_cli("install", env.name, "--out", str(env.out), "--force")
    assert code == 1 and "is in the way and is not provision's" in one_line(out), out
    assert snapshot(old) == before and state_of(prefix) == "complete"
    code, out = run_cli("remove", env.name)
    assert code == 0, out
    assert snapshot(old) == before


# -- a registry that cannot change --------------------------------------------------------------


def _can_bind_read_only() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp"],
        capture_output=True, check=False,
    )  # fmt: skip
    return probe.returncode == 0


def _read_only(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """provision ARGV with folder mounted read-only (a private mount namespace: root too)."""
    script = f"mount --bind '{folder}' '{folder}' && mount -o remount,bind,ro '{folder}' && \"$@\""
    return clitools.provision(
        *argv, prefix=["unshare", "-m", "sh", "-c", script, "sh"], timeout=300
    )


@pytest.mark.skipif(not _can_bind_read_only(), reason="needs root and unshare for a ro mount")
def test_a_read_only_registry_stops_install_and_remove_before_they_change_anything(
    index: Index, env: Env
) -> None:
    env.lock(index.add("1.0"))
    prefix = installed(env)
    folder = env.home / "registry"
    before = snapshot(prefix), snapshot(folder)
    done = _read_only(folder, "remove", env.name)
    assert done.returncode == 1 and "nothing was changed" in one_line(done.stderr), done.stderr
    assert (snapshot(prefix), snapshot(folder)) == before
    other = other_env(env, "other", "2.0", index)
    done = _read_only(folder, "install", other.name, "--out", str(other.out))
    assert done.returncode == 1 and "cannot write" in one_line(done.stderr), done.stderr
    assert not other.prefix.exists() and snapshot(folder) == before[1]


# -- a bundle of a name that is already built here ----------------------------------------------


@needs_unshare
def test_a_bundle_over_an_environment_of_its_name_from_other_inputs_asks_for_force(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    from bundletools import provision_offline

    env.lock(index.add("1.0"))
    bundled = tmp_path / "out" / "tiny.bundle.tar"
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(bundled), "-q",
                        "--cache-dir", str(tmp_path / "cache"), "--provision-wheels",
                        str(wheelhouse))  # fmt: skip
    assert code == 0, out
    env.lock(index.add("2.0"))  # the same name, built here from other inputs
    prefix = installed(env)
    before = snapshot(prefix), snapshot(env.home / "registry")
    home = {"PROVISION_HOME": str(env.home)}
    done = provision_offline("install", "--from-bundle", str(bundled), "--no-verify", env=home)
    assert done.returncode == 2 and "--force" in one_line(done.stderr), done.stderr
    assert (snapshot(prefix), snapshot(env.home / "registry")) == before
    assert not (env.home / "bundled").exists()
    done = provision_offline("install", "--from-bundle", str(bundled), "--no-verify", "--force",
                             env=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(
        [prefix / "bin" / "python", "-c", "import provision_tiny as t; print(t.VERSION)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert shown == "1.0"


def test_create_over_another_environment_s_prefix_writes_nothing(
    index: Index, env: Env, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    theirs = installed(env)
    request = json.loads((env.dir / "provision.json").read_text())["request"]
    out = tmp_path / "new-envs"
    before = snapshot(theirs)
    code, text = run_cli("create", "--tf", request["tf"], "--path", "pip", "--python",
                         request["python"], "--name", "another", "--out", str(out),
                         "--prefix", str(theirs))  # fmt: skip
    assert code == 1 and f"where {env.name} is built" in text, text
    assert snapshot(theirs) == before and not out.exists()
