"""A package index on 127.0.0.1 that serves TensorFlow-shaped wheels for `provision matrix update`:
the simple API (PEP 691 JSON, or PEP 503 HTML with data-* attributes), files with HTTP Range
requests, and every byte it sends counted. The wheels are real zip files holding the members the
updater reads (METADATA, build_info.py, cuda_config.h) and incompressible padding, so a test can
tell that only a small part of a wheel was read. The fixture `wheel_index` is in conftest.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpserve
import pytest

BUILD_INFO = "tensorflow/python/platform/build_info.py"
CUDA_CONFIG = "tensorflow/include/third_party/gpus/cuda/cuda_config.h"
# The and-cuda extra of 2.21.0 as published; a test changes the lines it needs.
AND_CUDA = (
    "nvidia-cublas-cu12<13.0,>=12.5.3.2",
    "nvidia-cuda-cupti-cu12<13.0,>=12.5.82",
    "nvidia-cuda-nvcc-cu12<13.0,>=12.5.82",
    "nvidia-cuda-nvrtc-cu12<13.0,>=12.5.82",
    "nvidia-cuda-runtime-cu12<13.0,>=12.5.82",
    "nvidia-cudnn-cu12<10.0,>=9.3.0.75",
    "nvidia-cufft-cu12<12.0,>=11.2.3.61",
    "nvidia-curand-cu12<11.0,>=10.3.6.82",
    "nvidia-cusolver-cu12<12.0,>=11.6.3.83",
    "nvidia-cusparse-cu12<13.0,>=12.5.1.3",
    "nvidia-nccl-cu12<3.0,>=2.27.7",
    "nvidia-nvjitlink-cu12<13.0,>=12.5.82",
)
CUDA_CONFIG_12 = {
    "TF_CUDA_VERSION": "12.5.1",
    "TF_CUDNN_VERSION": "9",
    "TF_CUDART_VERSION": "12",
    "TF_CUBLAS_VERSION": "12",
    "TF_CUFFT_VERSION": "11",
    "TF_CURAND_VERSION": "10",
    "TF_CUSOLVER_VERSION": "11",
    "TF_CUSPARSE_VERSION": "12",
    "TF_CUDA_COMPUTE_CAPABILITIES": "60, 70, 80, 89, 90",
}
TARGETS = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]


def tf_wheel(
    folder: Path,
    version: str,
    python: str,
    *,
    platform: str = "manylinux_2_27_x86_64",
    and_cuda: Sequence[str] = AND_CUDA,
    requires: Sequence[str] = ("numpy>=1.26.0",),
    build_info: dict[str, object] | None = None,
    cuda_config: dict[str, str] | None = None,
    padding: int = 4 << 20,
) -> Path:
    """A wheel shaped like TensorFlow's: its METADATA, build_info.py, cuda_config.h, padding."""
    tag = f"cp{python.replace('.', '')}"
    name = f"tensorflow-{version}-{tag}-{tag}-{platform}.whl"
    info = build_info if build_info is not None else {
        "is_cuda_build": True, "is_rocm_build": False, "is_tensorrt_build": False,
        "cuda_version": "12.5.1", "cudnn_version": "9", "cuda_compute_capabilities": TARGETS,
    }  # fmt: skip
    meta = [f"Metadata-Version: 2.1\nName: tensorflow\nVersion: {version}\nRequires-Python: >=3.10"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    meta.append("Provides-Extra: and-cuda")
    meta += [f'Requires-Dist: {r}; extra == "and-cuda"' for r in and_cuda]
    dist = f"tensorflow-{version}.dist-info"
    items = ", ".join(f"({k!r}, {v!r})" for k, v in info.items())
    config = cuda_config if cuda_config is not None else CUDA_CONFIG_12
    with zipfile.ZipFile(folder / name, "w", zipfile.ZIP_DEFLATED) as zf:
        # padding first, as TensorFlow's own wheels hold their libraries before the dist-info
        zf.writestr(zipfile.ZipInfo("tensorflow/libtensorflow_framework.so.2"), os.urandom(padding))
        zf.writestr(
            BUILD_INFO,
            f"import collections\n\nbuild_info = collections.OrderedDict([{items}])\n",
        )
        zf.writestr(CUDA_CONFIG, "".join(f'#define {k} "{v}"\n' for k, v in config.items()))
        zf.writestr(f"{dist}/METADATA", "\n".join(meta) + "\n\nTensorFlow, as a test.\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
    return folder / name


@dataclass
class WheelIndex:
    root: Path
    url: str = ""
    html: bool = False  # PEP 503 pages instead of PEP 691 JSON
    sent: int = 0  # bytes of every response body
    lock: threading.Lock = field(default_factory=threading.Lock)
    upload: dict[str, str] = field(default_factory=dict)  # file name -> upload time

    def add(self, project: str, path: Path, uploaded: str = "2026-11-20T10:00:00Z") -> Path:
        folder = self.root / project
        folder.mkdir(exist_ok=True)
        target = folder / path.name
        if path != target:
            path.replace(target)
        self.upload[target.name] = uploaded
        return target

    def tensorflow(
        self, version: str, pythons: Sequence[str] = ("3.11", "3.12"), **kw: object
    ) -> None:
        folder = self.root / "tensorflow"
        folder.mkdir(exist_ok=True)
        for python in pythons:
            self.add("tensorflow", tf_wheel(folder, version, python, **kw))  # type: ignore[arg-type]

    def listing(self, project: str, *versions: str, platform: str = "manylinux2014_x86_64") -> None:
        """Files of a project the updater only lists (NVIDIA's wheels, a nightly): empty stand-ins
        under their real-shaped names."""
        folder = self.root / project
        folder.mkdir(exist_ok=True)
        for version in versions:
            dist = project.replace("-", "_")
            (folder / f"{dist}-{version}-py3-none-{platform}.whl").write_bytes(
                b"PK\x05\x06" + bytes(18)
            )

    def nvidia(self, and_cuda: Sequence[str] = AND_CUDA) -> None:
        """Each NVIDIA wheel of the extra at its lower bound, and one newer."""
        for req in and_cuda:
            name, low = re.match(r"([a-z0-9-]+).*>=([0-9.]+)", req).groups()  # type: ignore[union-attr]
            self.listing(name, low, low + "9")


def _handler(index: WheelIndex) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            m = re.fullmatch(r"/files/([^/]+)/([^/]+)", self.path)
            path = index.root / m.group(1) / m.group(2) if m else None
            self.send_response(200 if path and path.is_file() else 404)
            self.send_header(
                "Content-Length", str(path.stat().st_size if path and path.is_file() else 0)
            )
            self.end_headers()

        def do_GET(self) -> None:
            m = re.fullmatch(r"/simple/([^/]+)/?", self.path)
            if m and (index.root / m.group(1)).is_dir():
                self._page(m.group(1))
                return
            m = re.fullmatch(r"/files/([^/]+)/([^/]+)", self.path)
            if m and (index.root / m.group(1) / m.group(2)).is_file():
                self._file(index.root / m.group(1) / m.group(2))
                return
            self._send(404, b"not found\n", "text/plain")

        def _page(self, project: str) -> None:
            files = []
            for path in sorted((index.root / project).glob("*.whl")):
                files.append({
                    "filename": path.name,
                    "url": f"/files/{project}/{path.name}",
                    "hashes": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
                    "size": path.stat().st_size,
                    "upload-time": index.upload.get(path.name, "2026-01-01T00:00:00Z"),
                })  # fmt: skip
            if index.html:
                links = "".join(
                    f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}" '  # type: ignore[index]
                    f'data-upload-time="{f["upload-time"]}">{f["filename"]}</a>\n'
                    for f in files
                )
                self._send(200, f"<html><body>\n{links}</body></html>\n".encode(), "text/html")
            else:
                body = json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files})
                self._send(200, body.encode(), "application/vnd.pypi.simple.v1+json")

        def _file(self, path: Path) -> None:
            data = path.read_bytes()
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            if m is None:
                self._send(200, data, "application/octet-stream")
                return
            start, end = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self._body(data[start : end + 1], "application/octet-stream")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self._body(body, kind)

        def _body(self, body: bytes, kind: str) -> None:
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with index.lock:
                index.sent += len(body)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    return Handler


@pytest.fixture
def wheel_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WheelIndex]:
    folder = tmp_path / "wheel-index"
    folder.mkdir()
    idx = WheelIndex(folder)
    server = httpserve.Server(_handler(idx))
    idx.url = f"{server.url}/simple"
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", idx.url)
    yield idx
    server.stop()
