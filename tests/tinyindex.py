"""A small real wheel, a PEP 503 index on 127.0.0.1 that serves it (and can fail or stall a
download on purpose), and an environment directory rendered by provision and sealed to that wheel:
real venvs in seconds, for install, environment and integrity tests. Fixtures `index` and `env`
are registered in conftest.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import os
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpserve
import pytest
from click.testing import CliRunner
from clitools import run_cli

from provision import environment, matrix, tools
from provision.cli.commands import cli
from provision.create import default_python
from provision.errors import InstallError
from provision.lock import lockfile, lockinputs
from provision.matrix import spec

ROOT = Path(__file__).resolve().parent.parent
TINY = "provision-tiny"


# -- a small real wheel and an index that serves it ------------------------------------------


def build_wheel(folder: Path, version: str, payload: int = 0) -> Path:
    """A minimal valid wheel: a module, a folder shaped like NVIDIA's nvidia/<pkg>/lib, bulk."""
    dist = f"provision_tiny-{version}.dist-info"
    files: dict[str, bytes] = {
        "provision_tiny/__init__.py": f'VERSION = "{version}"\n'.encode(),
        "nvidia/provision_tiny/lib/libprovisiontiny.so.1": b"\x7fELF placeholder\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {TINY}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    if payload:
        files["provision_tiny/blob.bin"] = os.urandom(payload)
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"provision_tiny-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@dataclass
class Index:
    """A PEP 503 index on 127.0.0.1; `mode` decides what a wheel download does."""

    root: Path
    url: str = ""
    mode: str = "ok"  # ok | fail (a download: HTTP 500) | stall (until `release` is set) | down
    requested: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def add(self, version: str, payload: int = 0) -> str:
        """Publish a version; returns its lock text (pinned, with the wheel's sha256)."""
        wheel = build_wheel(self.root, version, payload)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        return f"{TINY}=={version} \\\n    --hash=sha256:{sha}\n"


def _handler(index: Index) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            # Resolvers ask for a wheel's size first; answered without a body, never stalled.
            wheel = index.root / self.path[7:]
            if self.path.startswith("/files/") and wheel.is_file():
                self.send_response(200)
                self.send_header("Content-Type", "application/zip")
                self.send_header("Content-Length", str(wheel.stat().st_size))
                self.end_headers()
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def do_GET(self) -> None:
            if index.mode == "down":  # every request, the index pages too
                self._send(503, b"index down\n", "text/plain")
            elif self.path.rstrip("/") == f"/simple/{TINY}":
                wheels = sorted([*index.root.glob("*.whl"), *index.root.glob("*.tar.gz")])
                sums = [hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels]
                links = "".join(
                    f'<a href="/files/{w.name}#sha256={sha}">{w.name}</a>\n'
                    for w, sha in zip(wheels, sums, strict=True)
                )
                self._send(200, f"<html><body>\n{links}</body></html>\n".encode(), "text/html")
            elif self.path.startswith("/files/") and (index.root / self.path[7:]).is_file():
                index.requested.set()
                if index.mode == "fail":
                    self._send(500, b"index on fire\n", "text/plain")
                    return
                if index.mode == "stall":
                    index.release.wait(120)
                self._send(200, (index.root / self.path[7:]).read_bytes(), "application/zip")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    return Handler


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    folder = tmp_path / "index"
    folder.mkdir()
    idx = Index(folder)
    server = httpserve.Server(_handler(idx))
    idx.url = f"{server.url}/simple"
    # pip's configuration is what provision reads (and hands to uv): this index, nothing else.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", idx.url)
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv(
        "UV_HTTP_RETRIES", "0"
    )  # a failing download fails at once, not after back-off
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    yield idx
    idx.release.set()
    server.stop()


# -- an environment directory rendered by provision, locked to the small wheel -----------------


@dataclass
class Env:
    out: Path
    name: str
    home: Path

    @property
    def dir(self) -> Path:
        return self.out / self.name

    @property
    def prefix(self) -> Path:
        return self.home / "envs" / self.name

    def lock(self, text: str) -> None:
        """Pin requirements.in to the requirement of `text` (a wheel the test's index serves),
        reseal the manifest as render would, and lock with the real `provision lock`."""
        requirement = text.split(" ", 1)[0]
        reqs = self.dir / "requirements.in"
        reqs.write_text(reqs.read_text().split("\n", 1)[0] + "\n" + requirement + "\n")
        reseal(self.dir, "requirements.in")
        # `provision lock` would refuse a lock without the matrix's TensorFlow pins; this one is
        # sealed the way it seals its own (header, input digest, body digest, end marker).
        target = lockinputs.load_target(environment.load(self.dir))
        platforms = list(target.spec.platforms)
        body = text + "    # via -r requirements.in\n" + lockfile.end_line(1)
        head = lockfile.header(
            target,
            lockfile.inputs(target, platforms, []),
            lockfile.regen_command(target, platforms, []),
            hashlib.sha256(body.encode()).hexdigest(),
        )
        (self.dir / "requirements.lock").write_text(head + body)
        code, out = run_cli("lock", self.name, "--out", str(self.out), "--check")
        assert code == 0, out


def reseal(folder: Path, *rels: str) -> None:
    """provision.json records these files as they are now, as render would have written them."""
    found = environment.load(folder)
    files = dict(found.manifest.files)
    for rel in rels:
        files[rel] = hashlib.sha256((folder / rel).read_bytes()).hexdigest()
    manifest = environment.Manifest(found.manifest.request, files, found.manifest.name)
    (folder / environment.MANIFEST).write_text(manifest.dumps())


def system_release() -> tuple[str, str]:
    """A system-path release with cuDNN wheels (the fake NVIDIA artifacts' libraries, CUDA 11)
    and a Python of this host: (release, Python)."""
    for s in spec.all_specs(matrix.load()):
        if s.kind.host_toolkit and s.cudnn.pip and s.cuda.major == 11:
            for python in reversed(s.release.python):
                if tools.has_python(python):
                    return s.release.tf, python
    pytest.skip("no system-path release with a Python of this host")


def pip_release() -> tuple[str, str]:
    """A release the pip path serves with a Python this host has (the render request)."""
    m = matrix.load()
    for rel in m.releases:
        if rel.pip_wheels or rel.and_cuda:
            try:
                return rel.tf, str(default_python(rel.tf, "pip"))
            except InstallError:
                continue
    pytest.skip("no release of the matrix can use a Python installed on this host")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    tf, python = pip_release()
    home = tmp_path / "home"
    monkeypatch.setenv("PROVISION_HOME", str(home))
    out = tmp_path / "envs"
    res = CliRunner().invoke(
        cli,
        ["render", "--tf", tf, "--path", "pip", "--python", python, "--name", "tiny",
         "--out", str(out), "--gpu-memory", "growth", "--gpus", "0"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return Env(out, "tiny", home)


@pytest.fixture
def built(index: Index, env: Env) -> Env:
    """`env` locked against the tiny index (provision-tiny 1.0) and installed."""
    env.lock(index.add("1.0"))
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0, out
    return env


def bash(script: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return done.stdout


def site_packages(prefix: Path) -> Path:
    return next((prefix / "lib").glob("python*/site-packages"))
