"""provision check: what changed under a built environment since its facts were recorded.

Real venvs built by the real `provision install` from a small wheel (tests/tinyindex.py), on a
stand-in host (tests/fakehost.py) whose nvidia-smi says which driver and GPUs there are: the tests
change the driver, take a GPU away, delete a library, install a package by hand with pip, edit a
file and the hooks, and damage the record, then read `provision check` (text, JSON, Prometheus).
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from clitools import run_cli
from fakehost import H200, SMI_QUERY, FakeHost
from tinyindex import Env, Index, site_packages

from provision import matrix
from provision.facts import store


class Host:
    """The stand-in machine: one nvidia-smi whose driver and GPU count the test sets."""

    def __init__(self, base: Path) -> None:
        self.fake = FakeHost(base, base / "libs")
        self.header = (H200 / "nvidia-smi-query.csv").read_text().splitlines()[0]

    def smi(self, driver: str, cuda: str, gpus: int = 2) -> None:
        rows = [
            f"{i}, NVIDIA H200, GPU-{i}, {driver}, 9.0, 143771 MiB, 0 MiB, 143156 MiB, "
            f"00000000:00:0{6 + i}.0, Enabled, Disabled"
            for i in range(gpus)
        ]
        banner = f"| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda} |\n"
        self.fake.nvidia_smi(
            {SMI_QUERY: ("\n".join([self.header, *rows]) + "\n", 0), "": (banner, 0)}
        )


def release_of(env: Env) -> matrix.Release:
    manifest = json.loads((env.dir / "provision.json").read_text())
    return matrix.load().release(manifest["request"]["tf"])


@pytest.fixture
def built(index: Index, env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    """`tiny` installed on a host with 2 H200s and a driver new enough for its release."""
    host = Host(tmp_path / "host")
    monkeypatch.setenv("PROVISION_HOST_ROOT", str(host.fake.root))
    monkeypatch.setenv("PROVISION_NO_NVML", "1")
    rel = release_of(env)
    host.driver_ok = matrix.load().cuda_of(rel).driver_min  # type: ignore[attr-defined]
    host.smi(host.driver_ok, "13.0")  # type: ignore[attr-defined]
    env.lock(index.add("1.0"))
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0, out
    return host


def check(*args: str) -> tuple[int, str]:
    return run_cli("check", *args)


def check_json(*args: str) -> tuple[int, dict[str, object]]:
    code, out = run_cli("check", "--json", *args)
    return code, json.loads(out)


def changes(report: dict[str, object], name: str = "tiny") -> list[dict[str, str]]:
    envs = {e["name"]: e for e in report["environments"]}  # type: ignore[attr-defined]
    return list(envs[name]["changes"])


def test_nothing_changed_exits_0_and_says_so(built: Host, env: Env, tmp_path: Path) -> None:
    prom = tmp_path / "provision.prom"
    code, out = check("--prom", str(prom))
    assert code == 0, out
    assert "tiny: unchanged since install" in out and "nothing that matters changed" in out
    text = prom.read_text()
    assert '# TYPE provision_env_drift gauge\nprovision_env_drift{env="tiny"} 0\n' in text
    assert 'provision_env_changes{env="tiny",severity="breaks"} 0' in text
    assert "provision_check_timestamp_seconds " in text
    assert not list(tmp_path.glob(".provision.prom.*"))  # written through a renamed temp file
    code, report = check_json("tiny")
    assert code == 0 and report["ok"] is True
    assert report["environments"][0]["state"] == "ok"  # type: ignore[index]


def test_a_driver_downgraded_below_the_release_breaks_it(built: Host, env: Env) -> None:
    built.smi("418.40.04", "10.1")
    code, out = check("tiny")
    assert code == 1, out
    rel = release_of(env)
    need = matrix.load().cuda_of(rel).driver_min
    line = next(ln for ln in out.splitlines() if "driver" in ln and "→" in ln)
    assert line.split()[0] == "BREAKS", line
    assert f"driver {built.driver_ok} → 418.40.04" in line  # type: ignore[attr-defined]
    assert f"older than TensorFlow {rel.pin} needs ({need})" in line and "GPU unusable" in line
    assert f"fix: install NVIDIA driver >= {need}" in line


def test_a_driver_upgraded_asks_for_a_verify(built: Host, env: Env, tmp_path: Path) -> None:
    built.smi("999.10", "13.9")
    prom = tmp_path / "drift.prom"
    code, report = check_json("--prom", str(prom))
    assert code == 1
    (change,) = changes(report)
    assert change["severity"] == "changed" and "upgraded" in change["effect"]
    assert change["what"] == f"driver {built.driver_ok} → 999.10 (CUDA 13.0 → 13.9)"  # type: ignore[attr-defined]
    assert 'provision_env_drift{env="tiny"} 1' in prom.read_text()
    assert 'provision_env_changes{env="tiny",severity="changed"} 1' in prom.read_text()


def test_a_gpu_removed_is_named(built: Host) -> None:
    built.smi(built.driver_ok, "13.0", gpus=1)  # type: ignore[attr-defined]
    code, report = check_json()
    assert code == 1
    (change,) = changes(report)
    assert change["what"] == "GPU 1 (NVIDIA H200) is gone"
    assert change["effect"] == "1 of 2 GPU(s) left"


def test_a_library_deleted_from_the_prefix_breaks_it(built: Host, env: Env) -> None:
    lib = site_packages(env.prefix) / "nvidia" / "provision_tiny" / "lib" / "libprovisiontiny.so.1"
    lib.unlink()
    code, report = check_json()
    assert code == 1
    (change,) = changes(report)  # the library, not once more as a file of its package
    rel = lib.relative_to(env.prefix)
    assert change["what"] == f"library {rel} (?, from provision-tiny 1.0) is gone"
    assert change["severity"] == "breaks" and "cannot load" in change["effect"]
    assert change["fix"] == "`provision install tiny --force`"


def handmade_wheel(folder: Path, name: str, version: str, requires: str) -> Path:
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        f"Requires-Dist: {requires}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()}"
        f",{len(d)}"
        for n, d in files.items()
    ]
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return path


def pip_by_hand(env: Env, wheel: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env.prefix / "bin" / "python"), "install",
         "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip


def test_packages_installed_by_hand_are_named_with_their_effect(
    built: Host, env: Env, index: Index, tmp_path: Path
) -> None:
    index.add("2.0")
    pip_by_hand(env, next(index.root.glob("provision_tiny-2.0-*.whl")))
    pip_by_hand(env, handmade_wheel(tmp_path, "handmade", "1.0", "provision-tiny<2"))
    code, report = check_json()
    assert code == 1
    got = {c["what"]: c for c in changes(report)}
    assert set(got) == {
        "handmade 1.0 installed by hand (pip), not in the lock",
        "provision-tiny 1.0 → 2.0 installed by hand, the lock pins 1.0",
    }, got
    added = got["handmade 1.0 installed by hand (pip), not in the lock"]
    assert added["effect"] == "it needs provision-tiny<2, 2.0 is installed"
    assert added["severity"] == "breaks"
    changed = got["provision-tiny 1.0 → 2.0 installed by hand, the lock pins 1.0"]
    assert changed["effect"] == "handmade 1.0 needs provision-tiny<2"
    assert changed["fix"].startswith("`provision install tiny --force` or ")
    assert "'provision-tiny==1.0'" in changed["fix"]


def test_the_fix_check_prints_for_packages_installed_by_hand_works(
    built: Host, env: Env, index: Index, tmp_path: Path
) -> None:
    index.add("2.0")
    pip_by_hand(env, next(index.root.glob("provision_tiny-2.0-*.whl")))
    pip_by_hand(env, handmade_wheel(tmp_path, "handmade", "1.0", "provision-tiny"))
    got = {c["what"]: c for c in changes(check_json()[1])}
    mine = got["handmade 1.0 installed by hand (pip), not in the lock"]
    assert mine["fix"].startswith("`provision add tiny handmade` locks it or ")
    moved = got["provision-tiny 1.0 → 2.0 installed by hand, the lock pins 1.0"]
    assert moved["fix"].startswith("`provision install tiny --force`")
    # A package the lock does not name is the user's: the rebuild refuses, naming the ways on.
    force = ("install", env.name, "--out", str(env.out), "--force")
    code, out = run_cli(*force)
    assert code == 1, out
    assert "handmade-1.0.dist-info" in out and "`provision add tiny PKG` locks it" in out, out
    assert "provision_tiny-2.0.dist-info" not in out  # the lock's own is not in the way
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env.prefix / "bin" / "python"),
         "uninstall", "--yes", "--quiet", "handmade"], check=True, capture_output=True,
    )  # fmt: skip
    # The lock's package at another version is put back by the fix check printed.
    code, out = run_cli(*force)
    assert code == 0, out
    site = site_packages(env.prefix)
    assert [d.name for d in site.glob("provision_tiny-*.dist-info")] == [
        "provision_tiny-1.0.dist-info"
    ]
    code, out = check()
    assert code == 0 and "tiny: unchanged since install" in out, out


def test_a_file_edited_in_the_prefix_is_named(built: Host, env: Env) -> None:
    module = site_packages(env.prefix) / "provision_tiny" / "__init__.py"
    module.write_text(module.read_text() + "EDITED = True\n")
    code, out = check()
    assert code == 1
    rel = module.relative_to(env.prefix)
    assert (
        f"1 file(s) of provision-tiny 1.0 no longer match what its installer recorded: "
        f"{rel} (edited): edited by hand" in out
    )
    # Touched but not changed: no change at all.
    module.write_text(module.read_text().replace("EDITED = True\n", ""))
    assert check()[0] == 0


def test_hooks_edited_or_removed(built: Host, env: Env) -> None:
    activate = env.prefix / "etc" / "provision" / "activate.sh"
    activate.write_text(activate.read_text() + "export SOMETHING=1\n")
    code, out = check()
    assert code == 1 and "change  hook etc/provision/activate.sh was edited" in out
    pth = next(site_packages(env.prefix).glob("provision_env_hook.pth"))
    pth.unlink()
    code, report = check_json()
    gone = next(c for c in changes(report) if c["what"].endswith("provision_env_hook.pth is gone"))
    assert gone["severity"] == "breaks" and "by itself" in gone["effect"]
    # A reinstall puts the hooks back and records the facts again.
    assert run_cli("install", env.name, "--out", str(env.out), "--force")[0] == 0
    assert check()[0] == 0


def test_a_missing_or_damaged_record_says_to_verify_again(built: Host, env: Env) -> None:
    path = store.path_of("tiny")
    doc = json.loads(path.read_text())
    doc["body"]["host"]["driver"] = "1.0"
    path.write_text(json.dumps(doc))
    code, out = check()
    assert code == 1
    assert "changed after provision wrote it" in out and "provision verify tiny" in out
    path.write_text("{ half")
    code, out = check()
    assert code == 1 and "is damaged (not JSON)" in out
    path.unlink()
    code, report = check_json()
    one: Any = report["environments"][0]  # type: ignore[index]
    assert code == 1 and one["state"] == "unknown"
    assert "no facts were recorded" in one["problem"] and "provision verify tiny" in one["problem"]


def test_verify_runs_the_smoke_test_of_what_changed(built: Host, env: Env) -> None:
    # The tiny environment has no TensorFlow: the smoke test runs, and fails, saying so.
    code, out = check("--verify")
    assert code == 0 and "verify:" not in out  # nothing changed, nothing run
    built.smi("999.10", "13.9")
    code, report = check_json("--verify")
    assert code == 1
    one: Any = report["environments"][0]  # type: ignore[index]
    assert one["reverified"]["ok"] is False and one["reverified"]["summary"].startswith("FAIL")


def test_usage_errors(built: Host, tmp_path: Path) -> None:
    code, out = check("nope")
    assert code == 2 and "not registered on this machine: nope" in out
    code, out = check("--all")
    assert code == 2 and "--all goes with --verify" in out
    # node_exporter reads only *.prom: another name is refused before anything runs or is written.
    code, out = check("--prom", str(tmp_path / "drift.txt"))
    assert code == 2, out
    assert out.strip() == (
        f"provision: error: --prom {tmp_path / 'drift.txt'}: node_exporter's textfile collector "
        f"reads only files named *.prom; name it so (e.g. --prom {tmp_path / 'drift.prom'})"
    )
    assert not list(tmp_path.glob("drift*"))


def test_remove_forgets_the_facts(built: Host, env: Env) -> None:
    assert store.path_of("tiny").is_file()
    assert run_cli("remove", "tiny")[0] == 0
    assert not store.path_of("tiny").exists()


def conda_prefix(prefix: Path, python: str) -> None:
    """A conda prefix as conda and rattler leave it: conda-meta/*.json with paths_data (sha256),
    a CUDA library in lib/, the interpreter recorded as the python package."""
    lib = prefix / "lib" / "libcudart.so.12.5.82"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF not really\n")
    (prefix / "lib" / "libcudart.so.12").symlink_to(lib.name)
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    meta = prefix / "conda-meta"
    meta.mkdir()
    for name, version, paths in (
        ("cuda-cudart", "12.5.82", ["lib/libcudart.so.12.5.82", "lib/libcudart.so.12"]),
        ("python", f"{python}.7", []),
    ):
        data = [
            {"_path": p, "sha256": hashlib.sha256((prefix / p).read_bytes()).hexdigest()}
            if not (prefix / p).is_symlink() else {"_path": p, "path_type": "softlink"}
            for p in paths
        ]  # fmt: skip
        (meta / f"{name}-{version}-h0_0.json").write_text(json.dumps({
            "name": name, "version": version, "depends": [], "paths_data": {"paths": data},
        }))  # fmt: skip


def test_a_conda_prefix_is_read_from_conda_meta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from provision import registry

    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PROVISION_NO_NVML", "1")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: no driver, as on a CPU host
    prefix = tmp_path / "prefix"
    conda_prefix(prefix, "3.11")
    registry.put(registry.Record(
        name="forge", env_dir=str(tmp_path / "gone"), path="conda", tf="2.16.2", python="3.11",
        prefix=str(prefix), interpreter=str(prefix / "bin" / "python"), installer="conda-lock",
        lock_sha256="0" * 64, built_at=0.0,
    ))  # fmt: skip
    store.record(registry.get("forge"), "install")  # type: ignore[arg-type]
    facts = store.get("forge")
    assert facts.env.python == "3.11.7"
    assert [(lib.path, lib.package) for lib in facts.env.libraries] == [
        ("lib/libcudart.so.12", "cuda-cudart 12.5.82"),
        ("lib/libcudart.so.12.5.82", "cuda-cudart 12.5.82"),
    ]
    assert check("forge")[0] == 0
    (prefix / "lib" / "libcudart.so.12.5.82").write_bytes(b"\x7fELF edited by hand\n")
    code, report = check_json("forge")
    assert code == 1
    whats = [c["what"] for c in changes(report, "forge")]
    # Once, as the library it is (not again as a file of its package); the link is as it was.
    assert whats == ["library lib/libcudart.so.12.5.82 was replaced (16 → 20 bytes)"], whats
