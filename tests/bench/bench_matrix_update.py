"""`provision matrix update` for one release (issue 22, Speed): time and bytes, counted outside it.

    python tests/bench/bench_matrix_update.py [--tf 2.22] [--repeat 2] [--json FILE]

The committed matrix is copied and the release's row, its sources and a cuDNN row only it uses
are taken out; `provision matrix update --pre --tf X.Y --matrix COPY` then adds them back from the
package index. Every byte goes through a CONNECT proxy on 127.0.0.1 that this script runs and
counts (both directions, TLS included), so the figure does not trust the tool's own counter.
Targets: <= 30 s and <= 50 MB per release, while the wheel it reads is hundreds of MB (the ratio
bytes read / wheel size is printed). Each figure is the best of --repeat. Exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECONDS, MEGABYTES = 30.0, 50.0


class CountingProxy:
    """An HTTP CONNECT proxy that counts every byte it relays."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.bytes = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        m = re.match(rb"CONNECT ([^: ]+):(\d+) ", head)
        if m is None:
            client.sendall(b"HTTP/1.1 405 CONNECT only\r\n\r\n")
            client.close()
            return
        upstream = socket.create_connection((m.group(1).decode(), int(m.group(2))), timeout=60)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pair = {client: upstream, upstream: client}
        try:
            while True:
                ready, _, _ = select.select(list(pair), [], [], 120)
                if not ready:
                    return
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
                    with self.lock:
                        self.bytes += len(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()


def strip_release(src: Path, dest: Path, tf: str) -> str:
    """Copy the matrix without the release's rows; the pin it had."""
    sys.path.insert(0, str(ROOT))
    from provision.matrix import toml_writer

    draft = toml_writer.Draft(src.read_text(encoding="utf-8"))
    _, matrix = draft.result()
    rel = matrix.release(tf)
    draft.drop("release", "tf", rel.tf)
    for sid in rel.sources:
        if not any(sid in r.sources for r in matrix.releases if r.tf != rel.tf):
            draft.drop("source", "id", sid)
    if all(r.cudnn != rel.cudnn for r in matrix.releases if r.tf != rel.tf):
        draft.drop("cudnn", "version", rel.cudnn)
    dest.write_text(draft.result()[0], encoding="utf-8")
    return rel.pin


def wheel_size(pin: str) -> int:
    sys.path.insert(0, str(ROOT))
    from packaging.version import Version

    from provision.releases import wheels

    page = wheels.project("tensorflow", wheels.Counter())
    sizes = [w.size or 0 for w in page.wheels(Version(pin)) if wheels.is_linux_x86_64(w)]
    return max(sizes)


def once(tf: str, proxy: CountingProxy) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as tmp:
        copy = Path(tmp) / "matrix.toml"
        pin = strip_release(ROOT / "provision" / "data" / "matrix.toml", copy, tf)
        url = f"http://127.0.0.1:{proxy.port}"
        env = {**os.environ, "HTTPS_PROXY": url, "https_proxy": url, "NO_PROXY": "", "no_proxy": ""}
        argv = [sys.executable, "-m", "provision", "-q", "matrix", "update", "--pre",
                "--tf", tf, "--matrix", str(copy)]  # fmt: skip
        before = proxy.bytes
        start = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
        seconds = time.monotonic() - start
        if done.returncode != 0 or f"added {pin}" not in done.stdout:
            sys.exit(f"bench: {' '.join(argv)} failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        return {"seconds": seconds, "bytes": float(proxy.bytes - before)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf", default="2.22")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    proxy = CountingProxy()
    runs = [once(args.tf, proxy) for _ in range(args.repeat)]
    seconds = min(r["seconds"] for r in runs)
    megabytes = min(r["bytes"] for r in runs) / 1e6
    sys.path.insert(0, str(ROOT))
    from provision.matrix import load

    pin = load().release(args.tf).pin
    size_mb = wheel_size(pin) / 1e6
    result = {
        "release": pin,
        "seconds": round(seconds, 2),
        "megabytes": round(megabytes, 2),
        "wheel_megabytes": round(size_mb, 1),
        "fraction_of_wheel": round(megabytes / size_mb, 4),
        "targets": {"seconds": SECONDS, "megabytes": MEGABYTES},
    }
    print(
        f"matrix update --tf {args.tf} ({pin}): {seconds:.1f} s (target <= {SECONDS:.0f}), "
        f"{megabytes:.1f} MB through the proxy (target <= {MEGABYTES:.0f}); the wheel read is "
        f"{size_mb:.0f} MB, {100 * megabytes / size_mb:.1f}% of it"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if seconds <= SECONDS and megabytes <= MEGABYTES else 1


if __name__ == "__main__":
    sys.exit(main())
