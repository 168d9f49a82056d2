"""provision-conda on its own, driven as conda-lock drives it: a subprocess, conda's arguments and
JSON, against the local conda-forge-like channel (tests/localchannel.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import localchannel
import yaml

from provision import matrix
from provision.tools import solver as solver_exe

EXE = solver_exe("builtin")
CUDA11 = next(c for c in matrix.load().cuda.values() if c.major == 11 and "cudatoolkit" in c.conda)
CUDA12 = next(c for c in reversed(matrix.load().cuda.values()) if c.major == 12)


def conda(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=full, timeout=120)


def dry_run(channel: str, *specs: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = conda("create", "--prefix", "/nonexistent/p", "--dry-run", "--json",
                 "--override-channels", "--channel", channel, *specs, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def names(plan: dict[str, Any]) -> dict[str, str]:
    return {a["name"]: a["version"] for a in plan["actions"]["FETCH"]}


def test_version_names_itself_and_rattler() -> None:
    done = conda("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("provision-conda ") and "py-rattler" in done.stdout


def test_dry_run_gives_condas_fetch_plan(local_channel: localchannel.Channel) -> None:
    tk = CUDA11.conda["cudatoolkit"]
    plan = dry_run(local_channel.url, "python=3.11", "pip", f"cudatoolkit={tk}",
                   env={"CONDA_OVERRIDE_CUDA": CUDA11.version})  # fmt: skip
    assert plan["success"] and plan["dry_run"]
    fetched = names(plan)
    assert fetched["cudatoolkit"] == tk
    assert fetched["python"].startswith("3.11.")
    for action in plan["actions"]["FETCH"]:
        # exactly what conda-lock reads into the lock
        assert action["url"].startswith(local_channel.url + "/")
        assert len(action["md5"]) == 32 and len(action["sha256"]) == 64
        assert isinstance(action["depends"], list)
        archive = Path(action["url"].removeprefix("file://"))
        assert archive.is_file()
    assert {a["name"] for a in plan["actions"]["LINK"]} == set(fetched)


def test_cuda_version_pins_the_split_packages(local_channel: localchannel.Channel) -> None:
    line = CUDA12.conda["cuda_version"]
    plan = dry_run(local_channel.url, f"cuda-version={line}", "cuda-cudart", "libcublas",
                   env={"CONDA_OVERRIDE_CUDA": line})  # fmt: skip
    fetched = names(plan)
    assert fetched["cuda-version"] == line
    unpinned = names(dry_run(local_channel.url, "cuda-cudart", env={"CONDA_OVERRIDE_CUDA": "13.9"}))
    assert unpinned["cuda-version"] != line  # without the pin the newest line wins
    deps = next(a["depends"] for a in plan["actions"]["FETCH"] if a["name"] == "cuda-cudart")
    assert any(d.startswith(f"cuda-version >={line},") for d in deps)


def test_virtual_packages_from_condalocks_fake_channel(
    local_channel: localchannel.Channel, tmp_path: Path
) -> None:
    """conda-lock passes virtual packages as a file:// channel of `__*` records: they must satisfy
    constraints but never appear as packages to fetch."""
    fake = tmp_path / "fake"
    for subdir in ("linux-64", "noarch"):
        (fake / subdir).mkdir(parents=True)
        pkgs = {}
        if subdir == "linux-64":
            for name, version in (("__cuda", CUDA12.version), ("__glibc", "2.17"), ("__unix", "0")):
                pkgs[f"{name}-{version}-0.tar.bz2"] = {
                    "name": name, "version": version, "build": "0", "build_number": 0,
                    "depends": [], "subdir": subdir, "package_type": "virtual_system",
                }  # fmt: skip
        data = {"info": {"subdir": subdir}, "packages": pkgs}
        (fake / subdir / "repodata.json").write_text(json.dumps(data))
    env = {"CONDA_OVERRIDE_CUDA": "", "CONDA_SUBDIR": "linux-64"}  # "" = absent, as conda-lock sets
    done = conda("create", "-p", str(tmp_path / "p"), "--dry-run", "--json", "--override-channels",
                 "-c", local_channel.url, "-c", fake.as_uri(),
                 f"cuda-version={CUDA12.conda['cuda_version']}", "cuda-cudart",
                 env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    fetched = names(json.loads(done.stdout))
    assert "cuda-cudart" in fetched
    assert not [n for n in fetched if n.startswith("__")]


def test_unsatisfiable_virtual_packages_give_the_solvers_explanation(
    local_channel: localchannel.Channel,
) -> None:
    line = CUDA12.conda["cuda_version"]
    done = conda("create", "-p", "/nonexistent/p", "--dry-run", "--json", "-c", local_channel.url,
                 f"cuda-version={line}", "cuda-cudart",
                 env={"CONDA_OVERRIDE_CUDA": "11.8"})  # fmt: skip
    assert done.returncode == 1
    err = json.loads(done.stdout)
    assert err["exception_name"] == "UnsatisfiableError"
    assert "cuda-version" in err["message"]
    assert "__cuda >=12" in err["message"]  # the constraint, as cuda-version declares it
    assert "__cuda=11.8" in err["message"]  # and what the host (here: the override) offers


def test_unreachable_channel_fails_fast_naming_it(silent_server: localchannel.SilentServer) -> None:
    """A channel that accepts and never answers is given up after the connect deadline (not the
    300 s download deadline): the message names the deadline that ended the wait."""
    channel = f"{silent_server.url}/conda-forge"
    done = conda("create", "-p", "/nonexistent/p", "--dry-run", "--json", "-c", channel, "python",
                 env={"PROVISION_CONDA_CONNECT_TIMEOUT": "1"})  # fmt: skip
    assert done.returncode == 1
    message = json.loads(done.stdout)["message"]
    assert message.startswith(f"channel {channel} cannot be reached"), message
    assert "no answer within 1 s" in message, message


def test_refused_connection_fails_at_once() -> None:
    done = conda(
        "create", "-p", "/x", "--dry-run", "--json", "-c", "http://127.0.0.1:9/ch", "python"
    )
    assert done.returncode == 1 and "http://127.0.0.1:9/ch cannot be reached" in done.stderr
    assert "no answer within" not in done.stderr  # refused at once, not waited out


def explicit_lock(plan: dict[str, Any]) -> str:
    lines = [f"{a['url']}#{a['md5']}" for a in plan["actions"]["FETCH"]]
    return "# platform: linux-64\n@EXPLICIT\n" + "\n".join(lines) + "\n"


def test_explicit_lockfile_installs_and_lists(
    local_channel: localchannel.Channel, tmp_path: Path
) -> None:
    toolkit = f"cudatoolkit={CUDA11.conda['cudatoolkit']}"
    plan = dry_run(local_channel.url, "python=3.11", "pip", toolkit,
                   env={"CONDA_OVERRIDE_CUDA": CUDA11.version})  # fmt: skip
    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text(explicit_lock(plan))
    prefix = tmp_path / "env"
    done = conda("create", "--quiet", "--file", str(lock), "--yes", "--prefix", str(prefix))
    assert done.returncode == 0, done.stderr
    assert (prefix / "lib" / "python3.11" / "site-packages" / "pip" / "__init__.py").is_file()
    listed = json.loads(conda("list", "--no-pip", "-p", str(prefix), "--json").stdout)
    assert {e["name"]: e["version"] for e in listed} == names(plan)
    meta = json.loads(next((prefix / "conda-meta").glob("cudatoolkit-*.json")).read_text())
    assert meta["url"].startswith(local_channel.url)  # where it came from, not a cache copy


def test_tampered_package_is_refused(local_channel: localchannel.Channel, tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    shutil.copytree(local_channel.path, channel)
    plan = dry_run(channel.as_uri(), "python=3.11", "pip")
    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text(explicit_lock(plan))
    victim = next(channel.glob("noarch/pip-*.tar.bz2"))
    victim.write_bytes(victim.read_bytes() + b"\0")
    prefix = tmp_path / "env"
    done = conda("create", "--quiet", "--file", str(lock), "--yes", "--prefix", str(prefix))
    assert done.returncode == 1
    assert f"{victim.name}: md5" in done.stderr and "refusing to install" in done.stderr
    assert not (prefix / "conda-meta").exists()  # nothing was installed at all


def test_run_activates_the_prefix(local_channel: localchannel.Channel, tmp_path: Path) -> None:
    plan = dry_run(local_channel.url, "python=3.11")
    lock = tmp_path / "x.lock"
    lock.write_text(explicit_lock(plan))
    prefix = tmp_path / "env"
    assert conda("create", "--file", str(lock), "--yes", "--prefix", str(prefix)).returncode == 0
    hook = prefix / "etc" / "conda" / "activate.d" / "provision.sh"
    hook.parent.mkdir(parents=True)
    hook.write_text('export FROM_HOOK="hook saw $CONDA_PREFIX"\n')
    done = conda("run", "--prefix", str(prefix), "sh", "-c", 'echo "$FROM_HOOK"; exit 3')
    assert done.stdout.strip() == f"hook saw {prefix}"
    assert done.returncode == 3  # the command's own exit status


def test_update_dry_run_changes_only_what_was_asked(
    local_channel: localchannel.Channel, tmp_path: Path
) -> None:
    plan = dry_run(local_channel.url, "python=3.10", "pip")
    lock = tmp_path / "x.lock"
    lock.write_text(explicit_lock(plan))
    prefix = tmp_path / "env"
    assert conda("create", "--file", str(lock), "--yes", "--prefix", str(prefix)).returncode == 0
    done = conda("install", "--override-channels", "-c", local_channel.url, "-p", str(prefix),
                 "--json", "--dry-run", "python=3.11")  # fmt: skip
    assert done.returncode == 0, done.stderr
    update = json.loads(done.stdout)["actions"]
    assert [a["name"] for a in update["LINK"]] == ["python"]
    assert update["LINK"][0]["version"].startswith("3.11.")
    assert [a["name"] for a in update["UNLINK"]] == ["python"]


def test_info_reports_caches_and_virtual_packages(tmp_path: Path) -> None:
    env = {"CONDA_PKGS_DIRS": str(tmp_path / "pkgs"), "CONDA_OVERRIDE_CUDA": "12.5",
           "CONDA_OVERRIDE_GLIBC": "2.28", "CONDA_SUBDIR": "linux-64"}  # fmt: skip
    info = json.loads(conda("info", "--json", env=env).stdout)
    assert info["pkgs_dirs"] == [str(tmp_path / "pkgs")]
    virtual = {name: version for name, version, _ in info["virtual_pkgs"]}
    assert virtual["__cuda"] == "12.5" and virtual["__glibc"] == "2.28"
    assert "__unix" in virtual


def test_extra_files_land_in_the_environment(tmp_path: Path) -> None:
    """The hook another test uses to put real NVIDIA libraries into the channel's packages."""
    lib = tmp_path / "libcudart.so.11.8.89"
    lib.write_bytes(b"\x7fELF stand-in")
    channel = localchannel.conda_forge_like(
        tmp_path / "channel",
        extra_files={"cudatoolkit": {
            "lib/libcudart.so.11.8.89": lib,
            "lib/libcudart.so.11.0": localchannel.Symlink("libcudart.so.11.8.89"),
        }},
    )  # fmt: skip
    plan = dry_run(channel.url, f"cudatoolkit={CUDA11.conda['cudatoolkit']}",
                   env={"CONDA_OVERRIDE_CUDA": CUDA11.version})  # fmt: skip
    lock = tmp_path / "x.lock"
    lock.write_text(explicit_lock(plan))
    prefix = tmp_path / "env"
    assert conda("create", "--file", str(lock), "--yes", "--prefix", str(prefix)).returncode == 0
    assert (prefix / "lib" / "libcudart.so.11.0").is_symlink()
    assert (prefix / "lib" / "libcudart.so.11.0").read_bytes() == b"\x7fELF stand-in"


def test_channel_archives_are_reproducible(tmp_path: Path) -> None:
    first = localchannel.conda_forge_like(tmp_path / "a")
    second = localchannel.conda_forge_like(tmp_path / "b")
    for pkg in first.packages:
        a = first.path / pkg.subdir / pkg.filename
        assert a.read_bytes() == (second.path / pkg.subdir / pkg.filename).read_bytes()
    for subdir in ("linux-64", "noarch"):
        a = (first.path / subdir / "repodata.json").read_bytes()
        assert a == (second.path / subdir / "repodata.json").read_bytes()


def test_conda_lock_update_moves_what_the_update_needs(
    local_channel: localchannel.Channel, tmp_path: Path
) -> None:
    """conda-lock --update: `list` the fake prefix, then `install --dry-run`; dependents follow."""
    lines = sorted(
        matrix.load().conda_forge.cuda_version, key=lambda v: [int(x) for x in v.split(".")]
    )
    old, new = lines[-1], localchannel.next_line(lines[-1])  # the channel's decoy line is newest

    def lock(line: str, *extra: str) -> dict[str, str]:
        (tmp_path / "environment.yml").write_text(
            "channels: [conda-forge]\n"
            f"dependencies: [python=3.11, cuda-version={line}, libcublas]\n"
        )
        (tmp_path / "vp.yml").write_text(
            f'subdirs:\n  linux-64:\n    packages:\n      __cuda: "{line}"\n      __glibc: "2.17"\n'
            '      __unix: "0"\n      __linux: "0"\n'
        )
        (tmp_path / "map.json").write_text("{}")
        done = subprocess.run(
            [sys.executable, "-m", "conda_lock", "lock", "-f", "environment.yml", "--lockfile",
             "conda-lock.yml", "-p", "linux-64", "-c", local_channel.url, "--conda", EXE,
             "--virtual-package-spec", "vp.yml", "--pypi_to_conda_lookup_file", "map.json", *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        data = yaml.safe_load((tmp_path / "conda-lock.yml").read_text())
        return {p["name"]: str(p["version"]) for p in data["package"]}

    before = lock(old)
    after = lock(new, "--update", "cuda-version")
    assert before["cuda-version"] == old and after["cuda-version"] == new
    assert after["libcublas"] != before["libcublas"]  # pinned to its line, so it had to move
    assert after["python"] == before["python"]  # and nothing else did
