"""Disk use is visible and can be reclaimed (issue 23, item 7): with PROVISION_HOME set, uv's
cache lives under it; `list` and `show` give each environment's size and the caches'; `provision
cache info` says where each cache is and its size, `provision cache prune` deletes provision's
own caches and keeps a cache the user chose. Real builds from tinyindex's wheel."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from clitools import run_cli
from tinyindex import Env, Index

from provision import caches


def test_caches_live_under_provision_home_and_prune_frees_them(
    index: Index, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("UV_CACHE_DIR", "PIP_CACHE_DIR", "PROVISION_CONDA_CACHE"):
        monkeypatch.delenv(var, raising=False)  # the user chose none: provision's own
    env.lock(index.add("1.0", payload=300_000))
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 0, out
    uv_cache = env.home / "cache" / "uv"
    assert caches.folder_size(uv_cache) > 300_000  # the wheel was cached there, not in ~/.cache

    code, out = run_cli("cache", "info", "--json")
    assert code == 0, out
    info = {c["name"]: c for c in json.loads(out)}
    assert info["uv"]["path"] == str(uv_cache) and info["uv"]["owned"]
    assert info["uv"]["size"] > 300_000

    code, out = run_cli("list", "--json")
    assert code == 0, out
    listed = {e["name"]: e for e in json.loads(out)}
    assert listed["tiny"]["size"] > 300_000  # the installed payload
    code, out = run_cli("list")
    assert code == 0, out
    row = next(ln for ln in out.splitlines() if ln.startswith("tiny "))
    assert " kB " in row or " MB " in row, row
    assert f"caches: {caches.human(caches.total())} in {env.home / 'cache'}" in out, out
    code, out = run_cli("show", "tiny", "--out", str(env.out))
    assert code == 0 and "  size " in out and "caches:" in out, out

    code, out = run_cli("cache", "prune")
    assert code == 0, out
    assert out.startswith("freed ") and f"removed {uv_cache}" in out, out
    assert not uv_cache.exists()
    python = env.prefix / "bin" / "python"  # the environment itself is untouched
    done = subprocess.run([str(python), "-c", "import provision_tiny"], capture_output=True)
    assert done.returncode == 0, done.stderr
    code, out = run_cli("install", "tiny", "--out", str(env.out), "--force")  # downloads again
    assert code == 0, out


def test_prune_keeps_a_cache_the_user_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    mine = tmp_path / "my-uv-cache"
    mine.mkdir()
    (mine / "keep.txt").write_text("the user's\n")
    monkeypatch.setenv("UV_CACHE_DIR", str(mine))
    monkeypatch.delenv("PIP_CACHE_DIR", raising=False)
    ours = tmp_path / "home" / "cache" / "bundle"
    ours.mkdir(parents=True)
    (ours / "x.whl").write_bytes(b"x" * 5000)
    code, out = run_cli("cache", "prune")
    assert code == 0, out
    assert (mine / "keep.txt").read_text() == "the user's\n"
    assert f"kept {mine}" in out and not ours.exists(), out


def test_without_provision_home_the_caches_are_provisions_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROVISION_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for var in ("UV_CACHE_DIR", "PIP_CACHE_DIR", "PROVISION_CONDA_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert caches.root() == tmp_path / "xdg" / "provision"
    assert caches.tool_env()["UV_CACHE_DIR"] == str(tmp_path / "xdg" / "provision" / "uv")


def test_renders_compiled_templates_go_under_provision_home_and_prune_removes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    monkeypatch.setenv("PROVISION_HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))  # the user's cache folder: nothing goes there
    code, out = run_cli("render", "--tf", "2.13", "--path", "pip", "--out", str(tmp_path / "envs"))
    assert code == 0, out
    jinja = home / "cache" / "jinja"
    assert list(jinja.iterdir()) and not xdg.exists()
    code, out = run_cli("cache", "info", "--json")
    assert code == 0, out
    assert {c["name"]: c["path"] for c in json.loads(out)}["jinja"] == str(jinja)
    code, out = run_cli("cache", "prune")
    assert code == 0 and f"removed {jinja}" in out, out
    assert not jinja.exists()
