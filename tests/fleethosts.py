"""Hosts for `provision fleet` tests: network namespaces on this machine, each with a real sshd.

Each host is `ip netns` namespace joined to this machine by a veth pair on loopback-only
addressing: the host is 127.X.N.2, this machine 127.X.0.1 on every pair, X a /16 no other test
session here uses (route_localnet lets 127/8 cross the pair; more specific routes in each side's
local table send it there). The test's
package index listens on 127.X.254.1, routed the same way to every host but an offline one,
whose table says that address is unreachable: such a host answers SSH and reaches nothing else.
Nothing else is routed, so traffic stays on loopback and the test namespaces. Each host's sshd
(Debian's openssh-server, `sshd -D` with a config, host key and authorized key in tmp) gives its
sessions the host's own HOME, a stand-in GPU (tests/fakehost.py: a root read by the doctor through
PROVISION_HOST_ROOT, its nvidia-smi on PATH) and the host's pip configuration. Hosts share this
machine's filesystem and its Python, as the machines of one lab share an image.

`Lab` is a context manager: namespaces and their processes are removed on exit, even when a test
fails; namespaces left by a killed test run are swept at the next start.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import fakehost
import httpserve

PREFIX = "pvfleet"


def _free_net() -> int:
    """X of the 127.X.0.0/16 this test session's hosts use: one that no route of another session
    on this machine uses (a CI run beside a developer's run must not take each other's hosts)."""
    try:
        shown = subprocess.run(
            ["ip", "-4", "route", "show", "table", "local"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        shown = ""
    used = {int(x) for x in re.findall(r"\b127\.(\d+)\.\d+\.\d+", shown)}
    start = 200 + os.getpid() % 50
    return next((x for x in [*range(start, 255), *range(200, start)] if x not in used), start)


NET = _free_net()
CONTROL = f"127.{NET}.0.1"
INDEX = f"127.{NET}.254.1"  # where the test's package index listens; no host is numbered 254
_NUMBERS = itertools.count(1)  # host numbers, unique in this process (two labs may overlap)


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)


def unavailable() -> str | None:
    """Why namespace hosts cannot run here, or None."""
    if os.geteuid() != 0:
        return "namespace hosts need root (ip netns, veth pairs)"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y iproute2 openssh-client)"
    if not Path("/usr/sbin/sshd").is_file():
        return "sshd is not installed (apt-get install -y openssh-server)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    done = _run("ip", "netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


def sweep() -> None:
    """Remove namespaces of test runs whose process is gone (a killed run leaves them)."""
    listed = _run("ip", "netns", "list", check=False).stdout.split()
    for name in listed:
        parts = name.split("-")
        mine = len(parts) == 3 and parts[0] == PREFIX and parts[1].isdigit()
        if mine and not Path(f"/proc/{parts[1]}").exists():
            _kill_all(name)
            _run("ip", "netns", "del", name, check=False)


def _kill_all(ns: str) -> None:
    pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def a6000(base: Path, cache: Path, python: str) -> fakehost.FakeHost:
    """An RTX A6000 on driver 555, as the doctor sees it: it lets the host run the release."""
    h = fakehost.FakeHost(base, cache)
    h.kernel_module("555.42.06")
    h.driver_libs("555.42.06")
    h.nvidia_smi(captures=fakehost.HOSTS / "a6000-555")
    h.python(python)
    return h


@dataclass
class Host:
    name: str
    number: int
    dir: Path
    fake: fakehost.FakeHost
    index_url: str
    online: bool = True  # False: no route to the index, only SSH from this machine
    ns: str = ""
    sshd: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.{NET}.{self.number}.2"

    @property
    def home(self) -> Path:
        return self.dir / "home"


class Lab:
    """Namespace hosts, an SSH user key, a known_hosts and an inventory, all under `base`."""

    def __init__(self, base: Path, lib_cache: Path):
        self.base = base
        self.lib_cache = lib_cache
        self.hosts: dict[str, Host] = {}
        self.key = base / "id_ed25519"
        self.known_hosts = base / "known_hosts"
        self.tag = os.getpid()
        base.mkdir(parents=True, exist_ok=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleet-test", "-f", str(self.key))
        (base / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        self.known_hosts.write_text("")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir

    # -- hosts --

    def add(
        self,
        name: str,
        gpu: Callable[[Path, Path], fakehost.FakeHost],
        index_url: str,
        *,
        online: bool = True,
    ) -> Host:
        number = next(_NUMBERS)
        folder = self.base / "hosts" / name
        fake = gpu(folder / "gpu", self.lib_cache)
        host = Host(name, number, folder, fake, index_url, online)
        host.home.mkdir(parents=True)
        (folder / "tmp").mkdir()
        self.hosts[name] = host
        self._network(host)
        self._sshd_config(host)
        self.start(host)
        return host

    def _network(self, host: Host) -> None:
        host.ns = f"{PREFIX}-{self.tag}-{host.number}"
        outer, inner = (
            f"pvf{self.tag % 100000}o{host.number}",
            f"pvf{self.tag % 100000}i{host.number}",
        )
        ns = ["ip", "netns", "exec", host.ns]
        _run("ip", "netns", "add", host.ns)
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", host.ns)
        _run(*ns, "ip", "link", "set", "lo", "up")
        _run("sysctl", "-qw", f"net.ipv4.conf.{outer}.route_localnet=1")
        _run(*ns, "sysctl", "-qw", f"net.ipv4.conf.{inner}.route_localnet=1")
        _run("ip", "addr", "add", f"{CONTROL}/32", "dev", outer)
        _run(*ns, "ip", "addr", "add", f"{host.address}/32", "dev", inner)
        _run("ip", "link", "set", outer, "up")
        _run(*ns, "ip", "link", "set", inner, "up")
        _run("ip", "route", "add", f"{host.address}/32", "dev", outer, "src", CONTROL,
             "table", "local")  # fmt: skip
        _run(*ns, "ip", "route", "add", f"{CONTROL}/32", "dev", inner, "src", host.address,
             "table", "local")  # fmt: skip
        if host.online:
            _run(*ns, "ip", "route", "add", f"{INDEX}/32", "dev", inner, "src", host.address,
                 "table", "local")  # fmt: skip
        else:  # without this, the namespace's own loopback would answer for all of 127/8
            _run(*ns, "ip", "route", "add", "unreachable", f"{INDEX}/32", "table", "local")

    def _sshd_config(self, host: Host) -> None:
        key = host.dir / "ssh_host_ed25519_key"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        bin_dir = host.dir / "bin"
        bin_dir.mkdir()
        smi = next(host.fake.root.glob("usr/bin/nvidia-smi"), None)
        if smi is not None:
            (bin_dir / "nvidia-smi").symlink_to(smi)
        host.env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(host.home),
            # The host's temporary folder: a module killed with its host leaves Ansible's payload
            # folder there, in the host's tree (every host is this machine).
            "TMPDIR": str(host.dir / "tmp"),
            "PROVISION_HOST_ROOT": str(host.fake.root),
            # The host's pip configuration: its index only (this machine's pip.conf is ignored).
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_INDEX_URL": host.index_url,
            "UV_HTTP_RETRIES": "0",  # a failing download fails at once
            "LANG": "C.UTF-8",
        }
        setenv = " ".join(f"{k}={v}" for k, v in host.env.items())
        (host.dir / "sshd_config").write_text(
            f"ListenAddress {host.address}:22\nHostKey {key}\nPidFile {host.dir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.base}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPrintMotd no\nMaxSessions 50\nMaxStartups 100\nLogLevel ERROR\n"
            f"SetEnv {setenv}\nSubsystem sftp internal-sftp\n"
        )
        pub = key.with_suffix(".pub").read_text().split()
        with self.known_hosts.open("a") as f:
            f.write(f"{host.address} {pub[0]} {pub[1]}\n")

    def start(self, host: Host) -> None:
        """(Re)start the host's sshd and wait until it answers on port 22."""
        with (host.dir / "sshd.log").open("ab") as log:
            host.sshd = subprocess.Popen(
                ["ip", "netns", "exec", host.ns, "/usr/sbin/sshd", "-D", "-e",
                 "-f", str(host.dir / "sshd_config")],
                stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((host.address, 22), 1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
            time.sleep(0.1)
        raise RuntimeError(
            f"sshd of {host.name} did not answer: {(host.dir / 'sshd.log').read_text()}"
        )

    def kill(self, host: Host) -> None:
        """Everything running on the host dies at once: sshd, sessions, installers."""
        _kill_all(host.ns)
        if host.sshd is not None:
            host.sshd.wait(10)

    def ssh(self, host: Host, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-i", str(self.key), "-o", f"UserKnownHostsFile={self.known_hosts}",
             "-o", "GlobalKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
             f"root@{host.address}", command],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def inventory(
        self,
        path: Path | None = None,
        extra: dict[str, dict[str, str]] | None = None,
        only: tuple[str, ...] = (),
    ) -> Path:
        """A YAML inventory of every host (or `only` these); the user key and known_hosts come
        from here only."""
        path = path or self.base / "inventory.yml"
        lines = ["all:", "  hosts:"]
        for host in self.hosts.values():
            if only and host.name not in only:
                continue
            lines.append(f"    {host.name}:")
            lines.append(f"      ansible_host: {host.address}")
            lines.append(f"      ansible_remote_tmp: {host.dir / 'ansible-tmp'}")
            for k, v in (extra or {}).get(host.name, {}).items():
                lines.append(f"      {k}: {v}")
        lines += [
            "  vars:",
            "    ansible_user: root",
            f"    ansible_ssh_private_key_file: {self.key}",
            f"    ansible_ssh_common_args: -o UserKnownHostsFile={self.known_hosts}"
            " -o GlobalKnownHostsFile=/dev/null",
            "    ansible_python_interpreter: /usr/bin/python3",
            # Ansible's folder where tasks run: each host's own (above), and this one for the
            # tasks the role runs on the control machine (the implicit localhost takes the vars
            # of `all`), not root's ~/.ansible: every host here is this machine.
            f"    ansible_remote_tmp: {self.base / 'control-ansible-tmp'}",
        ]
        path.write_text("\n".join(lines) + "\n")
        return path

    def close(self) -> None:
        for host in self.hosts.values():
            if host.ns:
                _kill_all(host.ns)
                if host.sshd is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        host.sshd.wait(10)
                _run("ip", "netns", "del", host.ns, check=False)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a package index the hosts reach (on 127.X.0.1, this machine's end of every pair) ----------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Index:
    """PEP 503 pages for every wheel in `root`, served at /simple/; /broken/simple/ answers 500
    for downloads of `broken_name` (a host whose mirror fails the environment's packages).
    Downloads of `stall_name` wait until `release` is set; `requested` is set when one is asked
    for."""

    root: Path
    url: str = ""
    stall_name: str = ""
    broken_name: str = "provision_tiny"
    requested: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    hashes: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def sha256(self, wheel: Path) -> str:
        """Once per file (TensorFlow's wheels are hundreds of MB), while it stays the same."""
        st = wheel.stat()
        key = (wheel.name, st.st_size, st.st_mtime_ns)
        if key not in self.hashes:
            self.hashes[key] = _sha256(wheel)
        return self.hashes[key]

    @property
    def broken_url(self) -> str:
        return self.url.replace("/simple", "/broken/simple")

    def page(self, project: str, prefix: str = "") -> bytes | None:
        wheels = sorted(
            w for w in self.root.glob("*.whl") if _norm(w.name.split("-")[0]) == _norm(project)
        )
        if not wheels:
            return None
        links = "".join(
            f'<a href="{prefix}/files/{w.name}#sha256={self.sha256(w)}">{w.name}</a>\n'
            for w in wheels
        )
        return f"<html><body>\n{links}</body></html>\n".encode()


def _handler(index: Index) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            broken = path.startswith("/broken/")
            path = path.removeprefix("/broken")
            if path.startswith("/simple/"):
                body = index.page(path[len("/simple/") :].strip("/"), "/broken" * broken)
                if body is None:
                    return self._send(404, b"not found\n")
                return self._send(200, body, "text/html")
            wheel = index.root / path.removeprefix("/files/")
            if not path.startswith("/files/") or not wheel.is_file():
                return self._send(404, b"not found\n")
            if broken and wheel.name.startswith(index.broken_name):
                return self._send(500, b"index on fire\n")
            if index.stall_name and wheel.name.startswith(index.stall_name):
                index.requested.set()
                index.release.wait(300)
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(wheel.stat().st_size))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError), wheel.open("rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
            return None

        def _send(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    return Handler


@contextlib.contextmanager
def serve(root: Path) -> Iterator[Index]:
    with serving(Index(root)) as index:
        yield index


@contextlib.contextmanager
def serving(index: Index) -> Iterator[Index]:
    """`index` served at INDEX on a port of its own, until the block ends."""
    with httpserve.Server(_handler(index), host=INDEX) as server:
        index.url = f"{server.url}/simple"
        try:
            yield index
        finally:
            index.release.set()


def provision_requirements() -> list[str]:
    """What provision's wheel requires on a host (its metadata, without extras)."""
    import importlib.metadata

    from packaging.requirements import Requirement

    reqs = importlib.metadata.distribution("provision").requires or []
    return sorted(r for r in reqs if Requirement(r).marker is None or "extra" not in r)


def provision_wheels(cache: Path, python: str) -> Path:
    """The wheels of provision's dependencies for a host's Python, downloaded once and cached
    (the hosts install them from the test's index, as a lab's hosts do from theirs)."""
    reqs = provision_requirements()
    key = hashlib.sha256("\n".join([python, *reqs]).encode()).hexdigest()[:12]
    folder = cache / f"fleet-wheels-py{python}-{key}"
    if folder.is_dir():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(tmp),
         "--only-binary=:all:", "--python-version", python, *reqs],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        import pytest

        pytest.skip(f"cannot download provision's dependencies: {done.stderr.strip()[-300:]}")
    tmp.rename(folder)
    return folder


@contextlib.contextmanager
def lab(base: Path, lib_cache: Path) -> Iterator[Lab]:
    sweep()
    with Lab(base, lib_cache) as it:
        yield it
