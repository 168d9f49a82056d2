"""provision fleet against real hosts: network namespaces with a real sshd each
(tests/fleethosts.py), real ansible-core, the real CLI in a child process.

Three hosts with different stand-in GPUs: an RTX A6000 on driver 555 (the doctor lets it run the
release), a V100 on driver 440 (refused: too old for the release's CUDA), and an H200 on driver
580 whose package mirror fails the environment's wheel (its install fails). The environment is a
pip environment locked to a small real wheel served by the test (tinyindex), not TensorFlow:
doctor, install, GPU policy and verify really run on each host, and verify fails there for want of
TensorFlow, naming it. A fourth host, with no route to the index, gets the same environment from
an offline bundle (fleet --bundle). A host that ends "ready" needs real TensorFlow: that is the
slow tests/test_fleet_tf.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakehost
import fleethosts
import headless
import pytest
from bundletools import provision_wheelhouse
from clitools import run_cli
from tinyindex import TINY, Env, build_wheel, pip_release

from provision.bundle import bundle_fetch

ROOT = Path(__file__).resolve().parent.parent
REASON = fleethosts.unavailable()
if REASON is None and shutil.which("ansible-playbook") is None:
    beside = Path(sys.executable).parent / "ansible-playbook"
    REASON = None if beside.exists() else "ansible-core is not installed (pip install -e '.[test]')"
# The fixture downloads provision's dependencies once (hosts install them from the test's index).
pytestmark = [pytest.mark.skipif(REASON is not None, reason=REASON or ""), pytest.mark.index]


def v100_driver440(base: Path, cache: Path, python: str) -> fakehost.FakeHost:
    h = fakehost.FakeHost(base, cache)
    h.kernel_module("440.118.02", open_module=False)
    h.driver_libs("440.118.02")
    h.nvml("440.118.02", "10.2", [fakehost.FakeGpu("Tesla V100-SXM2-16GB", "7.0", 16160)])
    h.python(python)
    return h


def h200(base: Path, cache: Path, python: str) -> fakehost.FakeHost:
    h = fakehost.h200(base, cache)
    h.python(python)
    return h


@dataclass
class Fleet:
    lab: fleethosts.Lab
    index: fleethosts.Index
    out: Path  # the envs/ folder
    work: Path
    inventory: Path  # the three hosts with an index
    offline_inventory: Path  # the host without one
    python: str
    source: Path  # a copy of provision taken once: the wheel the hosts get stays the same

    def env(self) -> dict[str, str]:
        scrub = ("PROVISION_HOST_ROOT", "VIRTUAL_ENV", "ANSIBLE_CONFIG")
        env = {k: v for k, v in os.environ.items() if k not in scrub}
        env["PROVISION_HOME"] = str(self.work / "control-home")
        env["PYTHONPATH"] = str(self.source)
        return env

    def argv(
        self, name: str, *args: str, inventory: Path | None = None, reports: str = ""
    ) -> list[str]:
        return [sys.executable, "-m", "provision", "fleet", name, "--out", str(self.out),
                "--inventory", str(inventory or self.inventory),
                "--report-dir", str(self.work / (reports or name)), *args]  # fmt: skip

    def report(self, name: str) -> dict[str, Any]:
        path = self.work / name / "fleet.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def run(
        self, name: str, *args: str, inventory: Path | None = None, reports: str = ""
    ) -> tuple[int, str, dict[str, Any]]:
        done = subprocess.run(
            self.argv(name, *args, inventory=inventory, reports=reports), capture_output=True,
            text=True, timeout=600, env=self.env(), cwd=self.work, check=False,
        )  # fmt: skip
        return done.returncode, done.stdout + done.stderr, self.report(reports or name)

    def seal(self, name: str, version: str) -> None:
        """Render `name` (pip, with a GPU policy) and lock it to provision-tiny==version."""
        tf = pip_release()[0]
        code, text = run_cli(
            "render", "--tf", tf, "--path", "pip", "--python", self.python, "--name", name,
            "--out", str(self.out), "--gpu-memory", "1024", "--gpus", "0",
        )  # fmt: skip
        assert code == 0, text
        wheel = build_wheel(self.index.root, version)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        Env(self.out, name, self.work / "control-home").lock(
            f"{TINY}=={version} \\\n    --hash=sha256:{sha}\n"
        )

    def prefix(self, host: str, name: str) -> Path:
        return self.lab.hosts[host].home / ".local/share/provision/envs" / name


def results(data: dict[str, Any]) -> dict[str, str]:
    return {h["host"]: h["result"] for h in data["hosts"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    python = pip_release()[1]
    work = tmp_path_factory.mktemp("fleet")
    cache = Path(os.environ.get("PROVISION_TEST_CACHE", Path.home() / ".cache/provision-tests"))
    deps = fleethosts.provision_wheels(cache, python)
    served = work / "index"
    served.mkdir()
    for wheel in deps.glob("*.whl"):
        shutil.copyfile(wheel, served / wheel.name)
    libs = work / "libs"
    libs.mkdir()
    source = work / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "provision", source / "provision", ignore=skip)
    shutil.copytree(ROOT / "templates", source / "templates", ignore=skip)
    with fleethosts.lab(work / "lab", libs) as lab, fleethosts.serve(served) as index:

        def a6000(b: Path, c: Path) -> fakehost.FakeHost:
            return fleethosts.a6000(b, c, python)

        lab.add("gpu-a6000", a6000, index.url)
        lab.add("gpu-v100-old", lambda b, c: v100_driver440(b, c, python), index.url)
        lab.add("gpu-h200-noindex", lambda b, c: h200(b, c, python), index.broken_url)
        lab.add(OFFLINE, a6000, index.url, online=False)  # no route to the index
        inventory = lab.inventory(only=tuple(MIXED))
        offline = lab.inventory(work / "inventory-offline.yml", only=(OFFLINE,))
        f = Fleet(lab, index, work / "envs", work, inventory, offline, python, source)
        f.seal("tiny", "1.0")
        yield f


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    data: dict[str, Any]
    seconds: float


@pytest.fixture(scope="module")
def first(fleet: Fleet) -> Run:
    """The first roll-out of `tiny` to every host (each host installs provision first)."""
    t0 = time.monotonic()
    code, out, data = fleet.run("tiny")
    return Run(code, out, data, time.monotonic() - t0)


MIXED = {
    "gpu-a6000": "verify failed",
    "gpu-v100-old": "refused",
    "gpu-h200-noindex": "install failed",
}
OFFLINE = "gpu-a6000-offline"


def test_rollout_has_mixed_outcomes_and_one_host_never_stops_the_others(
    fleet: Fleet, first: Run
) -> None:
    code, out, data = first.code, first.out, first.data
    assert code == 1, out
    assert results(data) == MIXED, out
    hosts = {h["host"]: h for h in data["hosts"]}
    # The good host went through every step; verify ran there and says what is missing.
    steps = [(s["step"], s["status"]) for s in hosts["gpu-a6000"]["steps"]]
    assert steps == [
        ("setup", "changed"), ("doctor", "ok"), ("install", "changed"),
        ("gpu policy", "ok"), ("verify", "FAILED"),
    ], steps  # fmt: skip
    assert "No module named 'tensorflow'" in hosts["gpu-a6000"]["detail"]
    assert (hosts["gpu-a6000"]["gpus"], hosts["gpu-a6000"]["driver"]) == (
        "NVIDIA RTX A6000", "555.42.06",
    )  # fmt: skip
    assert "driver 440.118.02 supports CUDA <= 10.2" in hosts["gpu-v100-old"]["detail"]
    assert hosts["gpu-v100-old"]["gpus"] == "Tesla V100-SXM2-16GB"
    assert "500" in hosts["gpu-h200-noindex"]["detail"], hosts["gpu-h200-noindex"]
    # The refused host got no environment; every host's reports came back.
    assert not fleet.prefix("gpu-v100-old", "tiny").exists()
    reports = fleet.work / "tiny" / "hosts"
    assert sorted(p.name for p in (reports / "gpu-a6000").iterdir()) == [
        "doctor.json", "install.json", "verify.json",
    ]  # fmt: skip
    assert sorted(p.name for p in (reports / "gpu-v100-old").iterdir()) == ["doctor.json"]
    # Progress came per host and step as it happened; the summary table closes the output.
    assert "gpu-v100-old       doctor     refused" in out
    assert "gpu-h200-noindex   install    FAILED" in out
    table = out[out.index("host  ") :]
    assert "gpu-a6000" in table and "verify failed" in table and "refused" in table
    # The environment's GPU policy is what the built environment applies on the host.
    runtime = (fleet.prefix("gpu-a6000", "tiny") / "etc/provision/runtime.env").read_text()
    assert "PROVISION_GPU_MEMORY='1024'" in runtime and "PROVISION_GPUS='0'" in runtime
    print(f"\nfirst run: {first.seconds:.1f} s")


def test_a_second_run_changes_nothing(fleet: Fleet, first: Run) -> None:
    t0 = time.monotonic()
    _, out, again = fleet.run("tiny")
    assert results(again) == MIXED, out
    assert {h["host"]: h["changed"] for h in again["hosts"]} == dict.fromkeys(MIXED, 0), out
    print(f"\nsecond run: {time.monotonic() - t0:.1f} s")


def test_check_is_a_dry_run(fleet: Fleet, first: Run) -> None:
    marker = fleet.prefix("gpu-a6000", "tiny") / ".provision-install.json"
    before = marker.stat().st_mtime_ns
    _, out, dry = fleet.run("tiny", "--check")
    assert dry["check"] is True
    assert results(dry) == {
        "gpu-a6000": "up to date",
        "gpu-v100-old": "refused",
        "gpu-h200-noindex": "would build",
    }, out
    assert marker.stat().st_mtime_ns == before
    assert "dry run" in out


def test_limit_works_on_those_hosts_only(fleet: Fleet, first: Run) -> None:
    _, out, limited = fleet.run("tiny", "--limit", "gpu-v100-old")
    assert list(results(limited)) == ["gpu-v100-old"], out


def test_generated_files_hold_no_secret_and_name_no_host(fleet: Fleet, first: Run) -> None:
    generated = fleet.out / "tiny" / "ansible"
    assert sorted(p.name for p in generated.iterdir()) == ["playbook.yml", "vars.yml"]
    key = fleet.lab.key.read_text().splitlines()[1]
    written = [*generated.iterdir(), *(fleet.work / "tiny").rglob("*.json")]
    written += [*(fleet.work / "tiny").rglob("*.html")]
    assert len(written) > 2
    for path in written:
        text = path.read_text()
        assert key not in text and "PRIVATE KEY" not in text, path
    for path in generated.iterdir():
        assert f"127.{fleethosts.NET}." not in path.read_text() and "gpu-" not in path.read_text()


def test_an_unknown_host_key_fails_that_host_only(fleet: Fleet) -> None:
    """SSH host keys are checked: a host whose key is not the one known is not worked on."""
    victim = fleet.lab.hosts["gpu-h200-noindex"]
    wrong = fleet.work / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    pub = wrong.with_suffix(".pub").read_text().split()
    lines = [
        f"{victim.address} {pub[0]} {pub[1]}" if ln.startswith(victim.address + " ") else ln
        for ln in fleet.lab.known_hosts.read_text().splitlines()
    ]
    other = fleet.work / "other_known_hosts"
    other.write_text("\n".join(lines) + "\n")
    inventory = fleet.work / "inventory-other.yml"
    inventory.write_text(
        fleet.inventory.read_text().replace(str(fleet.lab.known_hosts), str(other))
    )
    _, out, data = fleet.run("tiny", "--limit", "gpu-a6000,gpu-h200-noindex",
                                inventory=inventory)  # fmt: skip
    assert results(data) == {"gpu-a6000": "verify failed", "gpu-h200-noindex": "unreachable"}, out
    assert "Host key verification failed" in out


def test_a_host_killed_mid_install_is_completed_by_the_rerun(fleet: Fleet) -> None:
    fleet.seal("killme", "2.0")
    fleet.index.stall_name = "provision_tiny-2.0"
    fleet.index.requested.clear()
    fleet.index.release.clear()
    victim = fleet.lab.hosts["gpu-a6000"]
    hosts = "gpu-a6000,gpu-h200-noindex"
    proc = subprocess.Popen(
        fleet.argv("killme", "--limit", hosts), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=fleet.env(), cwd=fleet.work,
    )  # fmt: skip
    try:
        assert fleet.index.requested.wait(240), "no install reached the download"
        time.sleep(0.5)
        fleet.lab.kill(victim)  # sshd, the session, provision install: everything on the host
        fleet.index.release.set()
        out, _ = proc.communicate(timeout=300)
    finally:
        fleet.index.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    got = results(fleet.report("killme"))
    assert got == {"gpu-a6000": "unreachable", "gpu-h200-noindex": "install failed"}, out
    prefix = fleet.prefix("gpu-a6000", "killme")
    marker = prefix / ".provision-install.json"
    assert not marker.exists() or json.loads(marker.read_text())["state"] != "complete"

    fleet.index.stall_name = ""
    fleet.lab.start(victim)
    _, out, again = fleet.run("killme", "--limit", hosts)
    assert results(again) == {"gpu-a6000": "verify failed", "gpu-h200-noindex": "install failed"}
    site = prefix / f"lib/python{fleet.python}/site-packages"
    assert (site / "provision_tiny-2.0.dist-info").is_dir(), out
    assert json.loads(marker.read_text())["state"] == "complete"


# -- an offline bundle, to a host with no route to the index -----------------------------------


def bundle_of(fleet: Fleet, name: str, dest: Path, *extra: str) -> Path:
    """`provision bundle NAME` of the sealed environment, from a warm cache: the locked wheel as
    the index serves it, provision's own wheels as the bundle tests fetch them (once, cached)."""
    wheels = fleet.work / "provision-wheels"
    if not wheels.is_dir():
        provision_wheelhouse(wheels)
    cache = bundle_fetch.BundleCache(fleet.work / "bundle-cache")
    for wheel in fleet.index.root.glob(f"{TINY.replace('-', '_')}-*.whl"):
        copy = fleet.work / wheel.name
        shutil.copyfile(wheel, copy)
        bundle_fetch.store(copy, cache.folder("wheels"))
    code, out = run_cli(
        "bundle", name, "--out", str(fleet.out), "-o", str(dest), "--cache-dir", str(cache.root),
        "--provision-wheels", str(wheels), *extra,
    )  # fmt: skip
    assert code == 0, out
    return dest


@pytest.fixture(scope="module")
def bundled(fleet: Fleet) -> Path:
    return bundle_of(fleet, "tiny", fleet.work / "bundles" / "tiny.bundle.tar")


@pytest.fixture(scope="module")
def offline_dry(fleet: Fleet, bundled: Path) -> Run:
    """--check on the offline host before anything of provision is there."""
    t0 = time.monotonic()
    code, out, data = fleet.run("tiny", "--bundle", str(bundled), "--check",
                                inventory=fleet.offline_inventory, reports="dry")  # fmt: skip
    return Run(code, out, data, time.monotonic() - t0)


@pytest.fixture(scope="module")
def offline_first(fleet: Fleet, bundled: Path, offline_dry: Run) -> Run:
    t0 = time.monotonic()
    code, out, data = fleet.run("tiny", "--bundle", str(bundled),
                                inventory=fleet.offline_inventory, reports="offline")  # fmt: skip
    return Run(code, out, data, time.monotonic() - t0)


def remote_dir(fleet: Fleet, host: str) -> Path:
    return fleet.lab.hosts[host].home / ".provision-fleet"


def test_the_offline_host_reaches_no_index(fleet: Fleet) -> None:
    """What makes the bundle the only way: the host answers SSH, and the index is not routed."""
    probe = f"python3 -c \"import urllib.request as u; u.urlopen('{fleet.index.url}/', timeout=5)\""
    offline = fleet.lab.ssh(fleet.lab.hosts[OFFLINE], probe)
    assert offline.returncode != 0 and "No route to host" in offline.stderr, offline.stderr
    online = fleet.lab.ssh(fleet.lab.hosts["gpu-a6000"], probe.replace("/'", f"/{TINY}/'"))
    assert online.returncode == 0, online.stderr


def test_check_on_a_host_without_provision_says_it_would_copy_the_bundle(
    fleet: Fleet, offline_dry: Run
) -> None:
    assert offline_dry.code == 0, offline_dry.out
    assert results(offline_dry.data) == {OFFLINE: "would set up"}, offline_dry.out
    assert offline_dry.data["hosts"][0]["detail"] == (
        "provision is not on the host yet; would copy the bundle, then install provision from it"
    )
    assert not list((remote_dir(fleet, OFFLINE) / "bundles").glob("*"))
    assert not (remote_dir(fleet, OFFLINE) / "venv").exists()


def test_a_bundle_installs_provision_then_doctor_then_the_environment(
    fleet: Fleet, bundled: Path, offline_first: Run
) -> None:
    code, out, data = offline_first.code, offline_first.out, offline_first.data
    assert results(data) == {OFFLINE: "verify failed"}, out
    assert code == 1 and data["bundle"] == "tiny.bundle.tar"
    host = data["hosts"][0]
    steps = [(s["step"], s["status"]) for s in host["steps"]]
    assert steps == [
        ("setup", "changed"), ("doctor", "ok"), ("install", "changed"),
        ("gpu policy", "ok"), ("verify", "FAILED"),
    ], out  # fmt: skip
    setup = host["steps"][0]["detail"]
    assert "copy the bundle" in setup and "install provision from the bundle" in setup, setup
    assert "No module named 'tensorflow'" in host["detail"]  # the environment is the bundle's
    # The bundle lies on the host as it is here; provision came from it, the environment too.
    held = remote_dir(fleet, OFFLINE) / "bundles" / bundled.name
    assert held.read_bytes() == bundled.read_bytes()
    site = fleet.prefix(OFFLINE, "tiny") / f"lib/python{fleet.python}/site-packages"
    assert (site / "provision_tiny-1.0.dist-info").is_dir(), out
    reports = fleet.work / "offline" / "hosts" / OFFLINE
    install = json.loads((reports / "install.json").read_text())
    assert install["report"]["install"]["skipped"] is False
    assert install["report"]["verify"] is None  # verify is the role's own step, after the policy
    runtime = (fleet.prefix(OFFLINE, "tiny") / "etc/provision/runtime.env").read_text()
    assert "PROVISION_GPU_MEMORY='1024'" in runtime
    print(f"\nfirst run from the bundle: {offline_first.seconds:.1f} s")


def test_a_second_bundle_run_copies_nothing_and_changes_nothing(
    fleet: Fleet, bundled: Path, offline_first: Run
) -> None:
    held = remote_dir(fleet, OFFLINE) / "bundles" / bundled.name
    before = held.stat().st_mtime_ns
    t0 = time.monotonic()
    _, out, again = fleet.run("tiny", "--bundle", str(bundled),
                              inventory=fleet.offline_inventory, reports="offline")  # fmt: skip
    assert results(again) == {OFFLINE: "verify failed"}, out
    assert again["hosts"][0]["changed"] == 0, out
    assert held.stat().st_mtime_ns == before
    print(f"\nsecond run from the bundle: {time.monotonic() - t0:.1f} s")


def test_check_with_a_bundle_says_what_it_would_copy(
    fleet: Fleet, bundled: Path, offline_first: Run
) -> None:
    _, out, same = fleet.run("tiny", "--bundle", str(bundled), "--check",
                             inventory=fleet.offline_inventory, reports="check")  # fmt: skip
    assert results(same) == {OFFLINE: "up to date"}, out
    assert "copy" not in same["hosts"][0]["detail"]
    # The same bundle in parts: other files, so the host does not hold them yet.
    parts = bundle_of(fleet, "tiny", fleet.work / "parts" / "tiny.bundle.tar", "--split", "30M")
    first = parts.with_name(parts.name + ".001")
    _, out, dry = fleet.run("tiny", "--bundle", str(first), "--check",
                            inventory=fleet.offline_inventory, reports="check")  # fmt: skip
    assert results(dry) == {OFFLINE: "up to date"}, out
    assert dry["hosts"][0]["detail"].endswith("would copy the bundle first"), out
    assert not (remote_dir(fleet, OFFLINE) / "bundles" / first.name).exists()

    # Copied for real: only the copy changes (the same provision, the same lock, already built).
    _, out, moved = fleet.run("tiny", "--bundle", str(first),
                              inventory=fleet.offline_inventory, reports="offline")  # fmt: skip
    assert results(moved) == {OFFLINE: "verify failed"}, out
    assert moved["hosts"][0]["changed"] == 1, out
    for part in sorted(first.parent.glob("tiny.bundle.tar.0*")):
        held = remote_dir(fleet, OFFLINE) / "bundles" / part.name
        assert held.read_bytes() == part.read_bytes(), part.name


def test_a_bundle_of_another_environment_or_lock_is_refused_before_ansible(
    fleet: Fleet, bundled: Path
) -> None:
    fleet.seal("other", "3.0")
    code, out, _ = fleet.run("other", "--bundle", str(bundled), inventory=fleet.offline_inventory,
                             reports="refused")  # fmt: skip
    assert code == 1 and "is a bundle of tiny, not of other" in out, out
    stale = bundle_of(fleet, "other", fleet.work / "stale" / "other.bundle.tar")
    fleet.seal("other", "3.1")  # the committed lock moves on; the bundle stays behind
    code, out, _ = fleet.run("other", "--bundle", str(stale), inventory=fleet.offline_inventory,
                             reports="refused")  # fmt: skip
    assert code == 1 and "holds another requirements.lock than other's committed one" in out, out
    assert not (fleet.work / "refused").exists()


def test_a_signed_bundle_is_checked_here_and_the_trust_file_goes_to_the_host(
    fleet: Fleet, offline_first: Run
) -> None:
    """fleet --trust: the signer is checked on the control machine before Ansible starts, and the
    allowed_signers file is copied to the host, where bootstrap and install check it again."""
    keys = fleet.work / "keys"
    keys.mkdir()
    for who in ("alice", "mallory"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", keys / who],
                       check=True, stdin=subprocess.DEVNULL)  # fmt: skip
        pub = " ".join((keys / f"{who}.pub").read_text().split()[:2])
        (keys / f"{who}.allowed").write_text(f"{who}@lab {pub}\n")
    signed = bundle_of(fleet, "tiny", fleet.work / "signed-bundle" / "tiny.bundle.tar",
                       "--sign", str(keys / "alice"))  # fmt: skip
    code, out, _ = fleet.run("tiny", "--bundle", str(signed), "--trust",
                             str(keys / "mallory.allowed"), inventory=fleet.offline_inventory,
                             reports="untrusted")  # fmt: skip
    assert code == 1 and "is signed by ED25519 key SHA256:" in out and "does not trust" in out, out
    assert not (fleet.work / "untrusted").exists()
    code, out, data = fleet.run("tiny", "--bundle", str(signed), "--trust",
                                str(keys / "alice.allowed"), inventory=fleet.offline_inventory,
                                reports="signed")  # fmt: skip
    assert data, out[-3000:]
    assert results(data) == {OFFLINE: "verify failed"}, out  # no TensorFlow: as unsigned
    held = remote_dir(fleet, OFFLINE) / "trust" / "allowed_signers"
    assert held.read_bytes() == (keys / "alice.allowed").read_bytes()
    install = json.loads((fleet.work / "signed" / "hosts" / OFFLINE / "install.json").read_text())
    signature = install["report"]["signature"]
    assert signature["state"] == "verified" and signature["principal"] == "alice@lab", install


# -- drift since the roll-out (provision fleet NAME --drift, issue 24) --------------------------

SCREENSHOT = ROOT / "tests" / "fixtures" / "fleet" / "fleet-drift.png"


def _drift_a6000(fleet: Fleet, tmp: Path) -> None:
    """On gpu-a6000: the driver goes back to 418 (CUDA 10.1) and a package is installed by hand."""
    fake = fleet.lab.hosts["gpu-a6000"].fake
    header = (fakehost.HOSTS / "a6000-555" / "nvidia-smi-query.csv").read_text().splitlines()[0]
    row = ("0, NVIDIA RTX A6000, GPU-0, 418.40.04, 8.6, 49140 MiB, 1 MiB, 48669 MiB, "
           "00000000:41:00.0, Disabled, [N/A]")  # fmt: skip
    fake.nvidia_smi({
        fakehost.SMI_QUERY: (f"{header}\n{row}\n", 0),
        "": ("| NVIDIA-SMI 418.40.04   Driver Version: 418.40.04   CUDA Version: 10.1 |\n", 0),
    })  # fmt: skip
    tmp.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(tmp, "9.9")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(fleet.prefix("gpu-a6000", "tiny") /
         "bin" / "python"), "install", "--no-deps", "--no-index", "--quiet",
         "--disable-pip-version-check", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip


def test_drift_names_the_host_that_changed_and_lists_it_first(fleet: Fleet, first: Run) -> None:
    code, out, before = fleet.run("tiny", "--drift", reports="drift-before")
    assert before["drift"] is True, out
    assert results(before) == {
        "gpu-a6000": "unchanged", "gpu-v100-old": "not built", "gpu-h200-noindex": "not built",
    }, out  # fmt: skip
    assert code == 1  # a host without the environment is not "unchanged"
    _drift_a6000(fleet, fleet.work / "hand")
    code, out, after = fleet.run("tiny", "--drift", reports="drift-after")
    assert code == 1, out
    assert after["hosts"][0]["host"] == "gpu-a6000"  # regressed hosts first
    host = after["hosts"][0]
    assert host["result"] == "regressed" and host["driver"] == "418.40.04", host
    changes = "\n".join(host["changes"])
    assert "breaks: driver 555.42.06 → 418.40.04" in changes, changes
    assert "provision-tiny 1.0 → 9.9 installed by hand, the lock pins 1.0" in changes, changes
    table = out[out.index("host  ") :]
    assert table.index("gpu-a6000") < table.index("gpu-v100-old")
    assert "regressed" in table and "418.40.04" in table and "(drift since the roll-out)" in out
    page = fleet.work / "drift-after" / "fleet.html"
    text = page.read_text()
    assert "drift since the roll-out" in text and "provision-tiny 1.0 → 9.9" in text
    assert (fleet.work / "drift-after" / "hosts" / "gpu-a6000" / "check.json").is_file()
    png = fleet.work / "drift.png"
    why = headless.screenshot(page, png, fleet.work / "chromium")
    if why == headless.MISSING:
        pytest.skip(why)
    assert not why, why
    if os.environ.get("UPDATE_SCREENSHOT"):  # kept for a person to look at
        shutil.copyfile(png, SCREENSHOT)


FAKE_CRONTAB = """#!/bin/sh
# crontab as the cron module uses it, for one namespace host: its table is $HOME/crontab.txt
# (hosts share this machine's filesystem: the real crontab would edit this machine's own)
f="$HOME/crontab.txt"
case "$1" in
  -l) if [ -f "$f" ]; then cat "$f"; else echo "no crontab for root" >&2; exit 1; fi ;;
  -r) rm -f "$f" ;;
  -) cat > "$f" ;;
  *) cp "$1" "$f" ;;
esac
"""


def test_schedule_check_installs_a_daily_check_where_systemd_does_not_run(
    fleet: Fleet, first: Run
) -> None:
    host = fleet.lab.hosts["gpu-a6000"]
    if Path("/run/systemd/system").exists():
        pytest.skip("systemd runs here: the namespace hosts would get a systemd timer")
    crontab = host.dir / "bin" / "crontab"
    crontab.write_text(FAKE_CRONTAB)
    crontab.chmod(0o755)
    _, out, data = fleet.run("tiny", "--drift", "--schedule-check", "--limit", "gpu-a6000",
                             reports="schedule")  # fmt: skip
    assert list(results(data)) == ["gpu-a6000"], out
    steps = [(s["step"], s["status"]) for s in data["hosts"][0]["steps"]]
    assert ("schedule", "changed") in steps, steps
    table = (host.home / "crontab.txt").read_text()
    assert "#Ansible: provision-check-tiny\n@daily " in table, table
    job = table.split("@daily ", 1)[1].strip()
    assert " -q check tiny --prom " in job and job.endswith(">/dev/null 2>&1 || true"), job
    # The entry runs on the host and leaves the metrics node_exporter reads.
    ran = fleet.lab.ssh(host, job)
    assert ran.returncode == 0, ran.stderr
    prom = host.home / ".provision-fleet" / "metrics" / "provision-tiny.prom"
    assert 'provision_env_drift{env="tiny"}' in prom.read_text()
    # Once only: a second run leaves one entry.
    fleet.run("tiny", "--drift", "--schedule-check", "--limit", "gpu-a6000", reports="schedule")
    assert (host.home / "crontab.txt").read_text().count("provision-check-tiny") == 1
