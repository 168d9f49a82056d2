"""provision bundle and provision install --from-bundle, for real, with no network at install.

Bundles are built from a small real wheel served by the test's own index (tests/tinyindex.py) and
from provision's own wheels for this host's Python (bundletools: fetched once, cached). Installs
run in a network namespace with nothing in it (`unshare -n`), so "no index, no channel" is not a
promise but the only possibility. The conda and system paths, the bootstrap on a host without
provision and a real TensorFlow are in tests/test_bundle_paths.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import clitools
import pytest
from bundletools import leftovers, needs_unshare, provision_offline
from clitools import run_cli
from tinyindex import Env, Index

from provision.bundlefile import bundle_format
from provision.bundlefile.bundle_format import MTIME, ROOT, BundleManifest
from provision.install.place import state_of


def make_bundle(env: Env, dest: Path, *extra: str, wheels: Path | None = None) -> Path:
    args = ["bundle", env.name, "--out", str(env.out), "-o", str(dest), "-q",
            "--cache-dir", str(dest.parent / "cache")]  # fmt: skip
    if wheels is not None:
        args += ["--provision-wheels", str(wheels)]
    code, out = run_cli(*args, *extra)
    assert code == 0, out
    return dest


@pytest.fixture
def tiny_bundle(index: Index, env: Env, wheelhouse: Path, tmp_path: Path) -> Path:
    env.lock(index.add("1.0", payload=1 << 20))
    return make_bundle(env, tmp_path / "out" / "tiny.bundle.tar", wheels=wheelhouse)


def install_env(home: Path) -> dict[str, str]:
    return {"PROVISION_HOME": str(home)}


# -- the archive -------------------------------------------------------------------------------


def test_bundle_is_deterministic_manifest_first_and_checked(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    env.lock(index.add("1.0", payload=1 << 20))
    first = make_bundle(env, tmp_path / "a" / "tiny.tar", wheels=wheelhouse)
    index.mode = "fail"  # the second build must take everything from its cache
    shutil.copytree(tmp_path / "a" / "cache", tmp_path / "b" / "cache")
    second = make_bundle(env, tmp_path / "b" / "tiny.tar", wheels=wheelhouse)
    assert first.read_bytes() == second.read_bytes()

    with tarfile.open(first) as tar:
        infos = tar.getmembers()
        manifest = BundleManifest.loads(tar.extractfile(infos[0]).read(), "test")  # type: ignore[union-attr]
        names = [i.name for i in infos]
        assert names[0] == f"{ROOT}/manifest.json" and names[1] == f"{ROOT}/bootstrap.py"
        assert names[1:] == [f"{ROOT}/{m.name}" for m in manifest.members]
        assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {
            (MTIME, 0, 0, "", "", 0o644)
        }
        groups = [m.group for m in manifest.members]
        assert groups == sorted(groups, key=bundle_format.GROUPS.index)
        for info, member in zip(infos[1:], manifest.members, strict=True):
            data = tar.extractfile(info).read()  # type: ignore[union-attr]
            assert hashlib.sha256(data).hexdigest() == member.sha256, member.name
    assert manifest.name == "tiny" and manifest.path == "pip"
    assert [m.name for m in manifest.group("wheels")] == [
        "wheels/provision_tiny-1.0-py3-none-any.whl"
    ]
    env_files = {m.name for m in manifest.group("env")}
    assert env_files == {
        "env/tiny/provision.json", "env/tiny/requirements.in", "env/tiny/requirements.lock",
        "env/tiny/hooks/runtime.env",
    }  # fmt: skip
    assert any(m.name.startswith("provision/provision-") for m in manifest.group("provision"))
    request = json.loads((env.dir / "provision.json").read_text())["request"]
    assert manifest.requires.python == request["python"] and manifest.requires.machine == "x86_64"


def test_a_wheel_that_is_not_the_locked_one_is_refused(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    index.add("1.0", payload=10)  # the index now serves other bytes under the locked name
    code, out = run_cli(
        "bundle", env.name, "--out", str(env.out), "-o", str(tmp_path / "b.tar"),
        "--provision-wheels", str(wheelhouse), "--cache-dir", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 1 and "provision-tiny" in out and "hash" in out.lower(), out
    assert not list(tmp_path.glob("b.tar*")) and not list(tmp_path.glob(".b.tar*"))


def test_a_bundle_of_an_edited_environment_is_refused(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    (env.dir / "requirements.in").write_text("provision-tiny==2.0\n")
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(tmp_path / "b.tar"),
                        "--provision-wheels", str(wheelhouse))  # fmt: skip
    assert code == 1 and "requirements.in changed since provision rendered it" in out
    assert not (tmp_path / "b.tar").exists()


# -- installing with no network ------------------------------------------------------------------


@needs_unshare
def test_install_from_a_bundle_with_no_network(tiny_bundle: Path, tmp_path: Path) -> None:
    home = tmp_path / "target-home"
    uv_cache = tmp_path / "users-uv-cache"
    done = provision_offline("install", "--from-bundle", str(tiny_bundle), "--no-verify", "--json",
                             env={**install_env(home), "UV_CACHE_DIR": str(uv_cache)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The bundle's wheels went through a cache of the install's own, gone with the staged files:
    # none is left unpacked in the user's uv cache, where nothing would use it again.
    assert not list(uv_cache.glob("archive-v*/*")), list(uv_cache.glob("archive-v*/*"))
    report = json.loads(done.stdout)
    prefix = Path(report["install"]["prefix"])
    assert prefix == home / "envs" / "tiny" and state_of(prefix) == "complete"
    assert report["env_dir"] == str(home / "bundled" / "tiny")
    assert "unpacking wheels: 1 file(s)" in done.stderr  # progress, one line per group
    shown = subprocess.run(
        [prefix / "bin" / "python", "-c", "import provision_tiny; print(provision_tiny.VERSION)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert shown == "1.0"
    listed = provision_offline("list", "--json", env=install_env(home))
    assert listed.returncode == 0, listed.stderr
    assert "tiny" in listed.stdout and str(prefix) in listed.stdout
    assert leftovers(home / "unpack") == []  # the staging folder is gone
    again = provision_offline("install", "--from-bundle", str(tiny_bundle), "--no-verify",
                              env=install_env(home))  # fmt: skip
    assert again.returncode == 0 and "already built" in again.stdout, again.stderr
    # The install recorded the facts `provision check` compares with (issue 24).
    checked = provision_offline("check", "tiny", env=install_env(home))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "tiny: unchanged since install" in checked.stdout


@needs_unshare
def test_split_bundle_installs_from_its_first_part(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    env.lock(index.add("1.0", payload=1 << 20))
    whole = make_bundle(env, tmp_path / "one" / "tiny.tar", wheels=wheelhouse)
    base = tmp_path / "parts" / "tiny.tar"
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(base), "-q",
                        "--cache-dir", str(tmp_path / "parts" / "cache"), "--provision-wheels",
                        str(wheelhouse), "--split", "12M")  # fmt: skip
    assert code == 0, out
    parts = sorted(base.parent.glob("tiny.tar.*"))
    assert len(parts) >= 5 and not base.exists()
    assert all(p.stat().st_size < 12 << 20 for p in parts)
    # Many parts are listed as the first two, how many more, and the last.
    assert f"wrote {len(parts)} parts" in out
    assert f"  {parts[1]}\n  ... ({len(parts) - 3} more)\n  {parts[-1]}\n" in out
    assert str(parts[2]) not in out
    joined = b"".join(p.read_bytes()[bundle_format.PART_HEADER :] for p in parts)
    assert joined == whole.read_bytes()  # `tail -c +513` of each part gives back the tar
    home = tmp_path / "target-home"
    done = provision_offline("install", "--from-bundle", str(parts[0]), "--no-verify",
                             env=install_env(home))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert state_of(home / "envs" / "tiny") == "complete"


# -- refusals: nothing is left half-installed ----------------------------------------------------


def _split(index: Index, env: Env, wheelhouse: Path, tmp_path: Path) -> list[Path]:
    env.lock(index.add("1.0", payload=1 << 20))
    base = make_bundle(env, tmp_path / "parts" / "tiny.tar", "--split", "20M", wheels=wheelhouse)
    return sorted(base.parent.glob("tiny.tar.*"))


def _refused(bundle: Path, home: Path, *reasons: str) -> None:
    done = provision_offline("install", "--from-bundle", str(bundle), "--no-verify",
                             env=install_env(home))  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("provision: error:") and "Traceback" not in done.stderr
    for reason in reasons:
        assert reason in message, message
    assert leftovers(home) == [], leftovers(home)


@needs_unshare
def test_a_missing_part_is_named(index: Index, env: Env, wheelhouse: Path, tmp_path: Path) -> None:
    parts = _split(index, env, wheelhouse, tmp_path)
    parts[2].unlink()
    _refused(parts[0], tmp_path / "target-home", f"part 3 of {len(parts)} is missing: {parts[2]}")


@needs_unshare
def test_a_truncated_part_is_named(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    parts = _split(index, env, wheelhouse, tmp_path)
    with open(parts[1], "r+b") as fh:
        fh.truncate(parts[1].stat().st_size - 1000)
    _refused(parts[0], tmp_path / "target-home", f"{parts[1]} is truncated")


@needs_unshare
def test_a_corrupt_part_is_named(index: Index, env: Env, wheelhouse: Path, tmp_path: Path) -> None:
    parts = _split(index, env, wheelhouse, tmp_path)
    with open(parts[-1], "r+b") as fh:  # same size, one byte changed
        fh.seek(-20_000, os.SEEK_END)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    _refused(
        parts[0],
        tmp_path / "target-home",
        "is corrupt",
        f"part {len(parts)} of {len(parts)} ({parts[-1]})",
    )


def _offset_of(bundle: Path, member: str) -> int:
    with tarfile.open(bundle) as tar:
        return tar.getmember(f"{ROOT}/{member}").offset_data


@needs_unshare
def test_a_tampered_member_is_named(tiny_bundle: Path, tmp_path: Path) -> None:
    at = _offset_of(tiny_bundle, "wheels/provision_tiny-1.0-py3-none-any.whl") + 1000
    with open(tiny_bundle, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0xFF]))
    _refused(tiny_bundle, tmp_path / "target-home",
             f"wheels/provision_tiny-1.0-py3-none-any.whl in {tiny_bundle} is corrupt")  # fmt: skip


@needs_unshare
def test_a_truncated_bundle_is_named(tiny_bundle: Path, tmp_path: Path) -> None:
    at = _offset_of(tiny_bundle, "wheels/provision_tiny-1.0-py3-none-any.whl") + 1000
    with open(tiny_bundle, "r+b") as fh:
        fh.truncate(at)
    _refused(tiny_bundle, tmp_path / "target-home", str(tiny_bundle), "truncated")


@needs_unshare
def test_a_damaged_manifest_is_refused_before_anything(tiny_bundle: Path, tmp_path: Path) -> None:
    at = _offset_of(tiny_bundle, "manifest.json") + 30
    with open(tiny_bundle, "r+b") as fh:
        fh.seek(at)
        was = fh.read(1)
        fh.seek(at)
        fh.write(b"8" if was == b"9" else b"9")  # a change, whatever the byte was
    _refused(tiny_bundle, tmp_path / "target-home", "manifest is damaged")


# -- what a bundle cannot carry, said before anything is copied ----------------------------------


@needs_unshare
def test_a_target_without_the_python_says_so_before_copying(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    bundle = make_bundle_for_python(index, env, wheelhouse, tmp_path, "3.10")
    bare = tmp_path / "bare-bin"  # the test's interpreter, and nothing else, on PATH
    bare.mkdir()
    for tool in ("bash", "sh", "uname"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bare / tool)  # type: ignore[arg-type]
    home = tmp_path / "target-home"
    done = provision_offline(
        "install", "--from-bundle", str(bundle), "--no-verify",
        env={"PROVISION_HOME": str(home), "PATH": str(bare), "PYENV_ROOT": str(tmp_path / "none"),
             "UV_PYTHON_INSTALL_DIR": str(tmp_path / "none")},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "builds a venv from Python 3.10, which this host lacks" in done.stderr
    assert "nothing was copied" in done.stderr
    assert not home.exists() or leftovers(home) == []


def make_bundle_for_python(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path, python: str
) -> Path:
    code, out = run_cli(
        "render", "--tf", env_tf(env), "--path", "pip", "--python", python, "--name", "py",
        "--out", str(env.out),
    )  # fmt: skip
    assert code == 0, out
    other = Env(env.out, "py", env.home)
    other.lock(index.add("1.0"))
    return make_bundle(other, tmp_path / "py.tar", wheels=wheelhouse)


def env_tf(env: Env) -> str:
    return str(json.loads((env.dir / "provision.json").read_text())["request"]["tf"])


@needs_unshare
def test_an_old_driver_is_said_before_copying(
    tiny_bundle: Path, tmp_path: Path, fake_nvidia_smi: object
) -> None:
    smi = fake_nvidia_smi("400.31")  # type: ignore[operator]
    home = tmp_path / "target-home"
    done = provision_offline(
        "install", "--from-bundle", str(tiny_bundle), "--no-verify",
        env={"PROVISION_HOME": str(home), "PROVISION_NO_NVML": "1",
             "PATH": f"{smi}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the NVIDIA driver is 400.31, and CUDA needs >=" in done.stderr
    assert leftovers(home) == []


@needs_unshare
def test_require_gpu_without_a_driver_is_said_before_copying(
    tiny_bundle: Path, tmp_path: Path
) -> None:
    home = tmp_path / "target-home"
    done = provision_offline(
        "install", "--from-bundle", str(tiny_bundle), "--require-gpu",
        env={"PROVISION_HOME": str(home), "PROVISION_NO_NVML": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 1 and "--require-gpu: this host has no NVIDIA driver" in done.stderr
    assert leftovers(home) == []


@needs_unshare
def test_a_glibc_too_old_is_said_before_copying(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    """A locked wheel for manylinux_2_99: the bundle needs glibc 2.99, which no host has yet."""
    from tinyindex import build_wheel

    wheel = build_wheel(tmp_path, "3.0")
    tagged = index.root / "provision_tiny-3.0-py3-none-manylinux_2_99_x86_64.whl"
    shutil.move(wheel, tagged)
    sha = hashlib.sha256(tagged.read_bytes()).hexdigest()
    env.lock(f"provision-tiny==3.0 \\\n    --hash=sha256:{sha}\n")
    bundle = make_bundle(env, tmp_path / "new.tar", "--glibc", "2.99", wheels=wheelhouse)
    home = tmp_path / "target-home"
    done = provision_offline("install", "--from-bundle", str(bundle), env=install_env(home))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "its packages need glibc >= 2.99 and this host has" in done.stderr
    assert leftovers(home) == []


# -- killed, then run again ----------------------------------------------------------------------


@needs_unshare
@pytest.mark.parametrize("point", ["unpacking", "unpacked"])
def test_a_run_killed_midway_is_completed_by_running_it_again(
    tiny_bundle: Path, tmp_path: Path, point: str
) -> None:
    home = tmp_path / "target-home"
    kill = {**install_env(home), "PROVISION_TEST_KILL_AT": point}
    killed = provision_offline("install", "--from-bundle", str(tiny_bundle), "--no-verify",
                               env=kill)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert state_of(home / "envs" / "tiny") == "absent"
    assert list((home / "unpack").iterdir())  # what the killed run left
    done = provision_offline("install", "--from-bundle", str(tiny_bundle), "--no-verify",
                             env=install_env(home))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert state_of(home / "envs" / "tiny") == "complete"
    assert list((home / "unpack").iterdir()) == []


def _complete(env: Path) -> bool:
    """Every file provision.json lists is there with its recorded hash."""
    meta = json.loads((env / "provision.json").read_text())
    return all(
        hashlib.sha256((env / rel).read_bytes()).hexdigest() == digest
        for rel, digest in meta["files"].items()
    )


@needs_unshare
@pytest.mark.parametrize(
    ("event", "match", "nth"),
    [
        ("os.mkdir", "/bundled/.tiny.", 1),  # before the new directory exists
        ("open", "/bundled/.tiny.", 1),  # the new directory half copied
        ("open", "/bundled/.tiny.", 3),
        ("os.rename", "/bundled/", 1),  # before the old directory goes aside
        ("os.rename", "/bundled/", 2),  # between the swap's two renames: the old one is aside
        ("shutil.rmtree", "/bundled/.tiny.", 2),  # the new one in, the old one not yet removed
    ],
)
def test_a_run_killed_in_the_swap_leaves_the_old_directory_or_the_new(
    tiny_bundle: Path, tmp_path: Path, event: str, match: str, nth: int
) -> None:
    """install --from-bundle over an environment directory of an older provision, killed before
    each step of putting the new one in place: the old one or the new one is there, whole (or,
    between the two renames, the old one aside under the swap's name); the next run puts the new
    one in place and leaves nothing beside it."""
    home = tmp_path / "target-home"
    install = ("install", "--from-bundle", str(tiny_bundle), "--no-verify")
    first = provision_offline(*install, env=install_env(home))
    assert first.returncode == 0, first.stderr
    bundled = home / "bundled"
    env = bundled / "tiny"
    # As if written by an older provision, so the next install replaces the directory.
    (env / "hooks" / "runtime.env").write_text("old\n")
    meta = json.loads((env / "provision.json").read_text())
    meta["files"]["hooks/runtime.env"] = hashlib.sha256(b"old\n").hexdigest()
    (env / "provision.json").write_text(json.dumps(meta))
    offline = ["unshare", "-n", *clitools.killed_at(event, match, nth)]
    killed = clitools.provision(*install, env=install_env(home), timeout=600, prefix=offline)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if env.exists():
        assert _complete(env)
    else:  # only between the two renames: the old directory is aside, whole
        aside = list(bundled.glob(".tiny.old-*"))
        assert len(aside) == 1 and _complete(aside[0]), sorted(os.listdir(bundled))
        assert (aside[0] / "hooks" / "runtime.env").read_text() == "old\n"
    again = provision_offline(*install, env=install_env(home))
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(bundled)) == ["tiny"]  # nothing of the killed run beside it
    assert _complete(env) and (env / "hooks" / "runtime.env").read_text() != "old\n"
    assert state_of(home / "envs" / "tiny") == "complete"


# -- small parts of the format ---------------------------------------------------------------------


def test_sizes_and_platform_tags() -> None:
    assert bundle_format.parse_size("4G") == 4 << 30
    assert bundle_format.payload_per_part(4 << 30) + bundle_format.PART_HEADER == (4 << 30) - 1
    assert bundle_format.parse_size("63000000") == bundle_format.parse_size("63MB")
    with pytest.raises(Exception, match="--split takes a size"):
        bundle_format.parse_size("lots")
    assert bundle_format.wheel_glibc(
        "x-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    ) == (2, 17)
    assert bundle_format.wheel_glibc("x-1-py3-none-any.whl") is None
    plats = bundle_format.manylinux_platforms("2.28", "x86_64")
    assert plats[0] == "manylinux_2_28_x86_64" and "manylinux2014_x86_64" in plats
    assert plats[-1] == "manylinux1_x86_64"
