"""Helpers for the bundle tests: provision's own wheels for this host's Python (fetched once with
the real code path and cached under ~/.cache/provision-tests/bundle-cache), running provision with
no network (`unshare -n`: a network namespace with nothing in it, loopback down), and looking at
what a failed install left behind.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import clitools
import pytest

from provision.bundle import bundle_fetch, bundle_self
from provision.bundle.make import host_glibc

PYTHON = "{}.{}".format(*sys.version_info[:2])


def cache_root() -> Path:
    configured = os.environ.get("PROVISION_TEST_CACHE")
    base = Path(configured) if configured else Path.home() / ".cache" / "provision-tests"
    return base / "bundle-cache"


@functools.cache
def can_unshare() -> bool:
    if not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return done.returncode == 0


needs_unshare = pytest.mark.skipif(
    not can_unshare(),
    reason="needs `unshare -n` (root, or user namespaces) for a host with no network",
)


def provision_wheelhouse(dest: Path) -> Path:
    """provision's wheel and its dependencies' for this host's Python, as a bundle gathers them
    (selfwheel + pip download), into dest; the downloads stay in the test cache."""
    cache = bundle_fetch.BundleCache(cache_root())
    target = bundle_fetch.BundleMachine(PYTHON, PYTHON, "x86_64", host_glibc(), "linux-64")
    env = {k: os.environ.pop(k) for k in ("PIP_INDEX_URL", "PIP_CONFIG_FILE") if k in os.environ}
    try:
        items = bundle_self.provision_wheels(target, cache, None, lambda line: None)
    finally:
        os.environ.update(env)
    dest.mkdir(parents=True, exist_ok=True)
    for item in items:
        shutil.copyfile(item.path, dest / item.path.name)
    return dest


def offline(argv: list[str], env: dict[str, str] | None = None, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """argv in a network namespace of its own: no route anywhere, not even to 127.0.0.1."""
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [shutil.which("unshare") or "unshare", "-n", *argv], env=full, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip


# provision ARGS with no network, as offline() runs argv: env on top of os.environ, 600 s.
provision_offline = functools.partial(
    clitools.provision, prefix=[shutil.which("unshare") or "unshare", "-n"], timeout=600
)


def leftovers(home: Path) -> list[str]:
    """What an install left under PROVISION_HOME, apart from empty bookkeeping folders."""
    found = []
    for path in sorted(home.rglob("*")) if home.exists() else []:
        rel = path.relative_to(home).as_posix()
        if path.is_dir() and (rel in ("locks", "unpack", "registry") or not any(path.iterdir())):
            continue
        if rel.startswith("locks/"):
            continue
        found.append(rel)
    return found
