"""provision fleet without hosts: the committed role files are fresh and pass ansible-lint, the
wheel the hosts get is reproducible, the report reads as a table, JSON and a page (looked at in
headless Chromium), and what fleet refuses it refuses before Ansible starts."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import clitools
import headless
import pytest

from provision import environment
from provision.bundlefile import selfwheel
from provision.cli import present
from provision.fleet import fleet_report
from provision.fleet import playbook as fleet
from provision.fleet.fleet_report import FleetResult, HostResult, Status

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def committed_fleet_envs() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "envs").glob(f"*/{fleet.FOLDER}"))


def test_committed_role_files_are_what_fleet_writes_now() -> None:
    envs = committed_fleet_envs()
    assert envs, "no environment commits its fleet files (envs/NAME/ansible/)"
    for folder in envs:
        env = environment.load(folder)
        for rel, text in fleet.generated(env).items():
            assert (folder / rel).read_text() == text, (
                f"{folder / rel} is stale: run provision fleet {env.name} (or write_generated)"
            )


def test_role_and_generated_playbook_pass_ansible_lint(tmp_path: Path) -> None:
    lint = BIN / "ansible-lint"
    if not lint.exists():
        pytest.skip("ansible-lint is not installed (pip install -e '.[test]')")
    env = committed_fleet_envs()[0]
    # The playbook as an admin runs it: its folder, the role found through the roles path.
    shutil.copytree(env / fleet.FOLDER, tmp_path / "play")
    shutil.copytree(fleet.ROLES, tmp_path / "play" / "roles")
    done = subprocess.run(
        [str(lint), "--offline", "--profile", "production", "playbook.yml", "roles/provision_env"],
        cwd=tmp_path / "play", capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_hosts_wheel_is_reproducible_and_complete(tmp_path: Path) -> None:
    one = selfwheel.build(tmp_path / "a")
    two = selfwheel.build(tmp_path / "b")
    assert one.read_bytes() == two.read_bytes()
    names = zipfile.ZipFile(one).namelist()
    assert "provision/cli/commands.py" in names
    assert "provision/ansible/roles/provision_env/tasks/main.yml" in names
    assert any(n.startswith("provision/templates/") for n in names)
    assert f"provision/fleet/{fleet_report.TEMPLATE}" in names  # the page's template
    meta = zipfile.ZipFile(one).read("provision-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: click" in meta and "\n\n" not in meta.strip()
    # It installs and runs where only Python is: a venv of its own, no provision around it.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    subprocess.run(
        [venv / "bin/python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", one],
        check=True, capture_output=True,
    )  # fmt: skip
    shown = subprocess.run(
        [venv / "bin/python", "-c", "import provision, sys; print(provision.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert shown.startswith(str(venv))


def _result(check: bool = False) -> FleetResult:
    hosts = (
        HostResult("gpu-a6000", Status.READY, "smoke test passed", "NVIDIA RTX A6000",
                   "555.42.06", 41.2),
        HostResult("gpu-h200", Status.INSTALL_FAILED,
                   "uv pip install failed (exit 2): HTTP 500 for provision_tiny-1.0",
                   "2 x NVIDIA H200", "580.159.04", 12.9),
        HostResult("gpu-v100-old", Status.REFUSED,
                   "driver 440.118.02 supports CUDA <= 10.2; TensorFlow 2.13 needs CUDA 11.8",
                   "Tesla V100-SXM2-16GB", "440.118.02", 3.1),
        HostResult("gpu-<b>", Status.UNREACHABLE, "at setup: Host key verification failed.",
                   "?", "?", 0.4),
    )  # fmt: skip
    return FleetResult("tf2.13-pip", "2.13", "2.13.1", "pip", check, 45.0, 2, hosts)


def test_summary_table_and_json() -> None:
    r = _result()
    text = present.fleet_table(r)
    head = text.splitlines()[0].split()
    assert head == ["host", "GPUs", "driver", "release", "path", "result", "time"]
    assert "gpu-h200      2 x NVIDIA H200" in text
    assert "  gpu-v100-old: driver 440.118.02 supports CUDA <= 10.2" in text
    assert text.endswith(
        "tf2.13-pip: 4 host(s): 1 install failed, 1 ready, 1 refused, 1 unreachable"
    )
    data = r.as_json()
    assert data["ok"] is False and data["summary"]["ready"] == 1
    assert [h["result"] for h in data["hosts"]] == [  # type: ignore[index]
        "ready", "install failed", "refused", "unreachable",
    ]  # fmt: skip
    json.dumps(data)


def test_the_html_page_in_headless_chromium(tmp_path: Path) -> None:
    """The page is static and escaped; a real browser renders it (the screenshot is kept at
    tests/fixtures/fleet/fleet-page.png when UPDATE_SCREENSHOT=1, for a person to look at)."""
    r = _result()
    fleet_report.write(r, tmp_path)
    page = (tmp_path / "fleet.html").read_text()
    assert "<script" not in page and "http" not in page.split("<body>")[1]
    assert "gpu-&lt;b&gt;" in page and "<b>" not in page.split("<body>")[1].replace(
        "<b>1</b>", ""
    )  # fmt: skip
    assert json.loads((tmp_path / "fleet.json").read_text())["hosts"][0]["host"] == "gpu-a6000"
    shot = tmp_path / "fleet.png"
    why = headless.screenshot(tmp_path / "fleet.html", shot, tmp_path / "chromium", "1280,560")
    if why == headless.MISSING:
        pytest.skip(why)
    assert not why, why
    assert shot.stat().st_size > 10_000
    import os

    if os.environ.get("UPDATE_SCREENSHOT"):
        keep = ROOT / "tests" / "fixtures" / "fleet" / "fleet-page.png"
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, keep)


def test_the_page_escapes_every_value(tmp_path: Path) -> None:
    """The page is a Jinja template with autoescape on, shipped in the package: a host's detail
    with markup, quotes and ampersands reaches the page as text, never as markup."""
    from importlib import resources

    assert (resources.files("provision") / "fleet" / fleet_report.TEMPLATE).is_file()
    bad = 'at setup: <script>alert(1)</script> "quotes" & ampersands'
    hosts = (HostResult("gpu-<i>", Status.FAILED, bad, "GPU & co", "1", 1.0, 0, (),
                        ("breaks: <img src=x onerror=alert(2)> & 'more'",)),)  # fmt: skip
    r = FleetResult('n"<a>', "2.13", "2.13.1", "pip", False, 1.0, 2, hosts, bundle="b&<c>.tar")
    fleet_report.write(r, tmp_path)
    page = (tmp_path / "fleet.html").read_text()
    body = page.split("<body>")[1]
    assert "<script" not in page and "<img" not in page and "<i>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &#34;quotes&#34; &amp; ampersands" in body
    assert '<li class="brk">&lt;img src=x onerror=alert(2)&gt; &amp; &#39;more&#39;</li>' in body
    assert "gpu-&lt;i&gt;" in body and "GPU &amp; co" in body and "b&amp;&lt;c&gt;.tar" in body
    assert "<title>provision fleet: n&#34;&lt;a&gt;</title>" in page
    assert page.count("<td>") == 6 and '<span class="badge bad">failed</span>' in body


run_cli = functools.partial(clitools.run_cli, quiet=False, crash=False)


def test_refusals_before_ansible_starts(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts: {}\n")
    code, out = run_cli("fleet", "tf2.13-pip", "--out", str(ROOT / "envs"))
    assert code == 2 and "--inventory" in out
    code, out = run_cli(
        "fleet", "tf2.13-pip", "--out", str(ROOT / "envs"), "--inventory", str(inventory),
        "--bundle", str(tmp_path / "b.tar"),
    )  # fmt: skip
    assert code == 1 and f"{tmp_path / 'b.tar'}: no such bundle" in out
    (tmp_path / "b.tar").write_bytes(b"not a tar" * 100)
    code, out = run_cli(
        "fleet", "tf2.13-pip", "--out", str(ROOT / "envs"), "--inventory", str(inventory),
        "--bundle", str(tmp_path / "b.tar"),
    )  # fmt: skip
    assert code == 1 and "is not a provision bundle" in out
    code, out = run_cli(
        "fleet", "tf2.13-conda", "--out", str(ROOT / "envs"), "--inventory", str(inventory)
    )
    assert code == 1 and "run `provision lock tf2.13-conda` first" in out
    code, out = run_cli("fleet", "--roles-path")
    assert code == 0 and Path(out.strip()) == fleet.ROLES


def test_fleet_is_lazy_for_help() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "provision", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "fleet" in done.stdout
    assert "ansible" not in done.stderr and "provision.fleet" not in done.stderr


def test_a_drift_report_reads_as_a_table_json_and_a_page(tmp_path: Path) -> None:
    """fleet --drift: each host's changes under the environment since the roll-out, in the
    table, fleet.json and fleet.html (hosts are ordered by fleet_report.collect)."""
    hosts = (
        HostResult("gpu-a6000", Status.REGRESSED, "2 change(s) since install 2026-12-02 01:10, "
                   "1 break it", "NVIDIA RTX A6000", "418.40.04", 2.1, 0, (),
                   ("breaks: driver 555.42.06 → 418.40.04 (CUDA 12.5 → 10.1): older than "
                    "TensorFlow 2.12.1 needs (520.61.05): GPU unusable; fix: install NVIDIA "
                    "driver >= 520.61.05",
                    "changed: provision-tiny 1.0 → 9.9 installed by hand, the lock pins 1.0: no "
                    "declared conflict; verify again; fix: `provision install tiny --force`")),
        HostResult("gpu-v100-old", Status.NOT_BUILT, "not registered on this machine: tiny",
                   "Tesla V100-SXM2-16GB", "440.118.02", 1.2),
        HostResult("gpu-<b>", Status.UNCHANGED, "unchanged since verify 2026-12-02 01:10",
                   "2 x NVIDIA H200", "580.159.04", 1.4),
    )  # fmt: skip
    r = FleetResult("tiny", "2.12", "2.12.1", "pip", False, 9.5, 2, hosts, drift=True)
    assert not r.ok
    text = present.fleet_table(r)
    assert "    breaks: driver 555.42.06 → 418.40.04" in text
    assert text.endswith("(drift since the roll-out)")
    data = r.as_json()
    assert data["drift"] is True
    assert data["hosts"][0]["changes"][1].startswith("changed: provision-tiny")  # type: ignore[index]
    fleet_report.write(r, tmp_path)
    page = (tmp_path / "fleet.html").read_text()
    assert "drift since the roll-out" in page and '<li class="brk">driver 555.42.06' in page
    assert "gpu-&lt;b&gt;" in page and "<script" not in page
    shot = tmp_path / "drift.png"
    why = headless.screenshot(tmp_path / "fleet.html", shot, tmp_path / "chromium", "1280,560")
    if why == headless.MISSING:
        pytest.skip(why)
    assert not why, why
    assert shot.stat().st_size > 10_000
