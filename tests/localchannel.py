"""A local conda channel with conda-forge's package names, versions and dependency metadata.

Tests (and benchmarks) lock and install against it because conda-forge itself is unreachable
from the build machines. Packages are real `.tar.bz2` archives (plain tarfile, fixed mtimes,
sorted members, `info/index.json`, `info/paths.json`, `info/files`) indexed with
`rattler.index.index_fs`, so the same inputs give the same bytes.

The CUDA versions come from the matrix (`[conda_forge]` and the releases), so every row can be
locked against this channel; the dependency metadata follows conda-forge's recipes:
`cudatoolkit` 11.x constrains `__cuda >=11`; `cuda-version` constrains `__cuda >=<major>` and
`cudatoolkit <X.Y>|<X.Y>.*`; the split CUDA 12 packages depend on `cuda-version >=X.Y,<X.Y+1`;
`cudnn` depends on `cuda-version` of its CUDA major (and `cudatoolkit 11.*` or `libcublas` and
`cuda-nvrtc`). One newer CUDA 12 line is added as a decoy, so an unpinned solve would visibly
take it.

`build_channel(root, packages, extra_files=...)` accepts extra files per package name, so real
NVIDIA libraries (from the nvidia-*-cu11/-cu12 wheels) can be put into `cudatoolkit`,
`cuda-cudart` or `cudnn`: see `conda_forge_like`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import http.server
import io
import json
import os
import re
import socket
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpserve

from provision.matrix import Matrix

# Fixture data, not project data: versions of packages the matrix does not describe.
MTIME = 1_577_836_800  # 2020-01-01, the same for every member of every archive
TIMESTAMP_MS = MTIME * 1000
GLIBC_DEP = "__glibc >=2.17,<3.0.a0"
LIBGCC = "libgcc-ng >=12"
LIBSTDCXX = "libstdcxx-ng >=12"
ZLIB = "libzlib >=1.3.1,<2.0a0"
PIP_VERSION = "24.2"

# conda-forge name of a CUDA 12 component -> the NVIDIA wheel built from the same redistributable
# (same version number), so the local channel uses the versions the matrix pins for pip.
WHEEL_OF = {
    "cuda-cudart": "nvidia-cuda-runtime",
    "cuda-cupti": "nvidia-cuda-cupti",
    "cuda-nvcc": "nvidia-cuda-nvcc",
    "cuda-nvrtc": "nvidia-cuda-nvrtc",
    "libcublas": "nvidia-cublas",
    "libcufft": "nvidia-cufft",
    "libcurand": "nvidia-curand",
    "libcusolver": "nvidia-cusolver",
    "libcusparse": "nvidia-cusparse",
    "libnvjitlink": "nvidia-nvjitlink",
    "nccl": "nvidia-nccl",
}
# Version for a split package on a CUDA line no matrix row pins (NCCL is not numbered by CUDA).
FALLBACK = {"nccl": "2.21.5"}
# Run dependencies among the split packages, as conda-forge's recipes declare them.
SPLIT_DEPENDS = {
    "libcublas": ("cuda-nvrtc",),
    "libcusolver": ("libcublas", "libcusparse", "libnvjitlink"),
    "libcusparse": ("libnvjitlink",),
}


@dataclass(frozen=True)
class Symlink:
    """A symbolic link inside a package (e.g. libcudart.so.11.0 -> libcudart.so.11.8.89)."""

    target: str


FileContent = bytes | str | os.PathLike[str] | Symlink


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    build_number: int = 0
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    subdir: str = "linux-64"
    noarch: str = ""  # "", "generic" or "python"
    license: str = "LicenseRef-fixture"
    files: Mapping[str, FileContent] = field(default_factory=dict)
    build: str = ""  # computed like conda-build's h<hash>_<number> when empty

    @property
    def build_string(self) -> str:
        if self.build:
            return self.build
        digest = hashlib.sha1(
            "\n".join((self.name, self.version, *self.depends, *self.constrains)).encode()
        ).hexdigest()
        return f"h{digest[:7]}_{self.build_number}"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build_string}.tar.bz2"

    def index_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "build": self.build_string,
            "build_number": self.build_number,
            "constrains": list(self.constrains),
            "depends": list(self.depends),
            "license": self.license,
            "name": self.name,
            "subdir": self.subdir,
            "timestamp": TIMESTAMP_MS,
            "version": self.version,
        }
        if self.subdir == "noarch":
            data["noarch"] = self.noarch or "generic"
        else:
            data["arch"], data["platform"] = _arch_platform(self.subdir)
        return data


@dataclass(frozen=True)
class Channel:
    path: Path
    packages: tuple[Package, ...]

    @property
    def url(self) -> str:
        return self.path.absolute().as_uri()

    def archive(self, name: str, version: str | None = None) -> Path:
        """Path of the (first) archive of `name`, e.g. to tamper with it in a test."""
        for pkg in self.packages:
            if pkg.name == name and (version is None or pkg.version == version):
                return self.path / pkg.subdir / pkg.filename
        raise KeyError(f"{name} {version or ''} is not in the channel")


def _arch_platform(subdir: str) -> tuple[str, str]:
    platform, _, arch = subdir.partition("-")
    return {"64": "x86_64", "aarch64": "aarch64"}.get(arch, arch), platform


def _member(
    name: str, size: int, *, kind: bytes = tarfile.REGTYPE, link: str = ""
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname = size, kind, link
    info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
    executable = name.startswith(("bin/", "python-scripts/"))
    info.mode = 0o777 if kind == tarfile.SYMTYPE else 0o755 if executable else 0o644
    return info


def _digest(content: bytes | Path) -> tuple[str, int]:
    if isinstance(content, bytes):
        return hashlib.sha256(content).hexdigest(), len(content)
    h = hashlib.sha256()
    with content.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest(), content.stat().st_size


def write_package(pkg: Package, channel_dir: Path) -> Path:
    """Write one deterministic .tar.bz2 under channel_dir/<subdir>/ and return its path."""
    payload: dict[str, bytes | Path | Symlink] = {}
    for rel, content in pkg.files.items():
        if isinstance(content, Symlink | bytes):
            payload[rel] = content
        elif isinstance(content, str):
            payload[rel] = content.encode()
        else:
            payload[rel] = Path(content)
    paths = []
    for rel in sorted(payload):
        content = payload[rel]
        if isinstance(content, Symlink):
            paths.append({"_path": rel, "path_type": "softlink", "size_in_bytes": 0})
        else:
            sha, size = _digest(content)
            paths.append(
                {"_path": rel, "path_type": "hardlink", "sha256": sha, "size_in_bytes": size}
            )
    info = {
        "info/files": "".join(f"{p}\n" for p in sorted(payload)).encode(),
        "info/index.json": json.dumps(pkg.index_json(), indent=2, sort_keys=True).encode(),
        "info/paths.json": json.dumps(
            {"paths": paths, "paths_version": 1}, indent=2, sort_keys=True
        ).encode(),
    }
    out = channel_dir / pkg.subdir / pkg.filename
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w:bz2", format=tarfile.GNU_FORMAT, compresslevel=9) as tar:
        for name in sorted([*info, *payload]):
            content = info.get(name, payload.get(name))
            if isinstance(content, Symlink):
                tar.addfile(_member(name, 0, kind=tarfile.SYMTYPE, link=content.target))
            elif isinstance(content, bytes):
                tar.addfile(_member(name, len(content)), io.BytesIO(content))
            else:
                assert isinstance(content, Path)
                with content.open("rb") as f:
                    tar.addfile(_member(name, content.stat().st_size), f)
    tmp.replace(out)
    return out


def index(channel_dir: Path) -> None:
    """rattler's indexer, then its clock reading (indexed_timestamp) fixed, for identical bytes."""
    from rattler.index import index_fs

    (channel_dir / "noarch").mkdir(parents=True, exist_ok=True)
    asyncio.run(index_fs(channel_dir, write_zst=False, write_shards=False, force=True))
    for repodata in channel_dir.glob("*/repodata.json"):
        data = json.loads(repodata.read_text(encoding="utf-8"))
        for key in ("packages", "packages.conda"):
            for record in data.get(key, {}).values():
                if "indexed_timestamp" in record:
                    record["indexed_timestamp"] = TIMESTAMP_MS
        repodata.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


def build_channel(
    root: Path,
    packages: Iterable[Package],
    extra_files: Mapping[str, Mapping[str, FileContent]] | None = None,
) -> Channel:
    """Write and index `packages` under root; extra_files[name] is added to every build of name."""
    extra = extra_files or {}
    unknown = set(extra) - {p.name for p in packages}
    if unknown:
        raise KeyError(f"extra files for packages the channel does not have: {sorted(unknown)}")
    built = tuple(
        replace(p, files={**p.files, **extra[p.name]}) if p.name in extra else p for p in packages
    )
    for pkg in built:
        write_package(pkg, root)
    index(root)
    return Channel(root, built)


def next_line(line: str) -> str:
    major, minor = line.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def _bump(version: str) -> str:
    parts = version.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return ".".join(parts)


def _cuda_version_pin(line: str) -> str:
    return f"cuda-version >={line},<{next_line(line)}.0a0"


def _key(version: str) -> list[int]:
    return [int(x) for x in version.split(".")]


def _base_packages() -> list[Package]:
    mutex = "_libgcc_mutex 0.1 conda_forge"
    py = ("python >=3.8",)
    # No real pip here: its script fails loudly, so `conda run pip install` in a test environment
    # can never fall through to the host's pip.
    pip_files = {
        "site-packages/pip/__init__.py": f'__version__ = "{PIP_VERSION}"\n',
        "python-scripts/pip": "#!/bin/sh\necho 'fixture pip from tests/localchannel.py: "
        "not a real pip' >&2\nexit 97\n",
    }
    return [
        Package("_libgcc_mutex", "0.1", build="conda_forge"),
        Package("libgomp", "13.2.0", depends=(mutex,)),
        Package("_openmp_mutex", "4.5", build="2_gnu", depends=(mutex, "libgomp >=7.5.0")),
        Package("libgcc-ng", "13.2.0", depends=(mutex, "_openmp_mutex >=4.5")),
        Package("libstdcxx-ng", "13.2.0", depends=("libgcc-ng 13.2.0",)),
        Package("libzlib", "1.3.1", depends=(LIBGCC,), constrains=("zlib 1.3.1 *_1",)),
        Package("pip", PIP_VERSION, subdir="noarch", noarch="python",
                depends=(*py, "setuptools", "wheel"), files=pip_files),
        Package("setuptools", "72.1.0", subdir="noarch", noarch="python", depends=py),
        Package("wheel", "0.44.0", subdir="noarch", noarch="python", depends=py),
    ]  # fmt: skip


def _pythons(matrix: Matrix) -> list[Package]:
    out = []
    for py in sorted({py for rel in matrix.releases for py in rel.python}, key=_key):
        tag = py.replace(".", "")
        build = f"h{hashlib.sha1(py.encode()).hexdigest()[:7]}_0_cpython"
        abi = (f"python_abi {py}.* *_cp{tag}",)
        out.append(Package("python", f"{py}.0", build=build, depends=(GLIBC_DEP, LIBGCC, ZLIB),
                           constrains=abi))  # fmt: skip
        out.append(Package("python_abi", py, build=f"5_cp{tag}",
                           constrains=(f"python {py}.* *_cpython",)))  # fmt: skip
    return out


def _cuda12_versions(matrix: Matrix) -> dict[tuple[str, str], str]:
    """(CUDA line, conda name) -> version, from the NVIDIA wheels the matrix pins for that line."""
    found: dict[tuple[str, str], str] = {}
    for rel in matrix.releases:
        for conda_name, wheel in WHEEL_OF.items():
            version = rel.pip_wheels.get(f"{wheel}-cu12")
            if version:
                found.setdefault((rel.cuda, conda_name), version)
    return found


def conda_forge_packages(matrix: Matrix) -> list[Package]:
    """The catalogue: base packages, every Python the matrix names, and the CUDA stacks it uses."""
    pkgs = _base_packages() + _pythons(matrix)
    forge = matrix.conda_forge
    native = (GLIBC_DEP, LIBGCC, LIBSTDCXX)

    # CUDA 11: cudatoolkit per conda-forge version, and cuda-version for its line.
    lines11 = sorted({".".join(tk.split(".")[:2]) for tk in forge.cudatoolkit}, key=_key)
    for tk in forge.cudatoolkit:
        # conda-forge: __cuda >=major from 11 on (minor-version compatibility), >=X.Y before.
        major, minor = tk.split(".")[:2]
        cuda = (f"__cuda >={major}" if int(major) >= 11 else f"__cuda >={major}.{minor}",)
        pkgs.append(Package("cudatoolkit", tk, build_number=13, depends=native, constrains=cuda))

    # CUDA 12: cuda-version per line and the split packages at that line's versions; one decoy.
    lines12 = sorted(set(forge.cuda_version), key=_key)
    if lines12:
        lines12.append(next_line(lines12[-1]))
    for line in lines11 + lines12:
        limits = (f"__cuda >={line.split('.')[0]}", f"cudatoolkit {line}|{line}.*")
        pkgs.append(Package("cuda-version", line, build_number=3, subdir="noarch",
                            noarch="generic", constrains=limits))  # fmt: skip
    versions = _cuda12_versions(matrix)
    split_names = sorted(
        {*forge.cuda12_packages, *(d for ds in SPLIT_DEPENDS.values() for d in ds)}
    )
    for i, line in enumerate(lines12):
        decoy = i == len(lines12) - 1
        base_line = lines12[i - 1] if decoy else line
        pin = _cuda_version_pin(line)
        for name in split_names:
            version = versions.get((base_line, name)) or FALLBACK.get(name, f"{base_line}.0")
            version = _bump(version) if decoy else version
            deps = (*native, pin, *SPLIT_DEPENDS.get(name, ()))
            if name in ("cuda-cudart", "cuda-nvcc"):
                arch_pkg = f"{name}_linux-64"
                pkgs.append(Package(arch_pkg, version, subdir="noarch", noarch="generic",
                                    depends=(pin,)))  # fmt: skip
                deps += (f"{arch_pkg} {version}",)
            pkgs.append(Package(name, version, depends=deps))

    # cuDNN: the builds conda-forge has, per CUDA major.
    for row in forge.cudnn:
        major = row.cuda_major
        cuda_dep = ("cudatoolkit 11.*",) if major == 11 else ("cuda-nvrtc", "libcublas")
        pin = f"cuda-version >={major}.0,<{major + 1}.0a0"
        deps = (*native, pin, *cuda_dep, ZLIB)
        pkgs.append(Package("cudnn", row.version, build=f"cuda{major}_0", depends=deps))
    return pkgs


def conda_forge_like(
    root: Path,
    matrix: Matrix | None = None,
    extra_files: Mapping[str, Mapping[str, FileContent]] | None = None,
) -> Channel:
    """Build the conda-forge-like channel under root; extra_files as in build_channel.

    Example, real libraries for a built environment to load:
        conda_forge_like(tmp, extra_files={"cudatoolkit": {"lib/libcudart.so.11.0": wheel_lib}})
    """
    from provision import matrix as matrix_mod

    return build_channel(root, conda_forge_packages(matrix or matrix_mod.load()), extra_files)


def synthetic_repodata(root: Path, n_records: int = 50_000, versions: int = 20) -> Channel:
    """A channel of n_records metadata-only records (repodata.json, no archives), for benchmarks.

    Names pkg00000..; each version of pkgN depends on version ranges of pkgN+1 and pkgN+7, so a
    solve of the first package walks a long chain of real choices.
    """
    names = n_records // versions
    packages: dict[str, dict[str, object]] = {}
    for n in range(names):
        for v in range(versions):
            depends = [
                f"pkg{d:05d} >={v // 2}.0,<{v // 2 + 5}.0" for d in (n + 1, n + 7) if d < names
            ]
            fn = f"pkg{n:05d}-{v}.0-h0000000_0.tar.bz2"
            digest = hashlib.sha256(fn.encode()).hexdigest()
            packages[fn] = {
                "build": "h0000000_0", "build_number": 0, "depends": depends, "license": "MIT",
                "md5": digest[:32], "name": f"pkg{n:05d}", "sha256": digest, "size": 1,
                "subdir": "linux-64", "timestamp": TIMESTAMP_MS, "version": f"{v}.0",
            }  # fmt: skip
    for subdir, pk in (("linux-64", packages), ("noarch", {})):
        (root / subdir).mkdir(parents=True, exist_ok=True)
        data = {
            "info": {"subdir": subdir},
            "packages": pk,
            "packages.conda": {},
            "repodata_version": 1,
        }
        (root / subdir / "repodata.json").write_text(json.dumps(data, sort_keys=True))
    return Channel(root, ())


# -- a local package index (PEP 503 simple API over HTTP) for the pip parts ---------------------


def fake_wheel(
    root: Path,
    name: str,
    version: str,
    extras: Iterable[str] = (),
    requires: Iterable[str] = (),
    python_requires: str | None = None,
) -> Path:
    """A minimal, deterministic py3-none-any wheel (METADATA, WHEEL, RECORD; no code), with the
    dependencies and Python range given (none by default)."""
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += f"Requires-Python: {python_requires}\n" if python_requires else ""
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    metadata += "".join(f"Provides-Extra: {e}\n" for e in extras)
    members = {
        f"{dist}.dist-info/METADATA": metadata,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: localchannel\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in sorted(members)) + f"{dist}.dist-info/RECORD,,\n"
    members[f"{dist}.dist-info/RECORD"] = record
    out = root / f"{dist}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(members):
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, members[path])
    return out


def simple_index(
    root: Path,
    requirements: Iterable[str],
    requires: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """root/simple/<name>/index.html and root/packages/*.whl for every `name[extras]==version`;
    requires: `name==version` -> its Requires-Dist lines (`python` followed by a specifier, e.g.
    `python >=3.12`, is its Requires-Python)."""
    wanted: dict[str, tuple[str, set[str], set[str]]] = {}
    for req in requirements:
        m = re.match(r"^([A-Za-z0-9._-]+)(?:\[([^\]]*)\])?==(\S+)$", req.strip())
        if not m:
            raise ValueError(f"simple_index takes name[extras]==version, not {req!r}")
        norm = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        _, versions, extras = wanted.setdefault(norm, (m.group(1), set(), set()))
        versions.add(m.group(3))
        extras.update(e for e in (m.group(2) or "").split(",") if e)
    names = []
    for norm, (name, versions, extras) in sorted(wanted.items()):
        links = []
        for version in sorted(versions):
            deps = list((requires or {}).get(f"{norm}=={version}", ()))
            python = next((d.split(None, 1)[1] for d in deps if d.startswith("python ")), None)
            deps = [d for d in deps if not d.startswith("python ")]
            wheel = fake_wheel(root / "packages", name, version, sorted(extras), deps, python)
            sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
            links.append(
                f'<a href="../../packages/{wheel.name}#sha256={sha}">{wheel.name}</a><br/>'
            )
        page = root / "simple" / norm / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
        names.append(f'<a href="{norm}/">{norm}</a><br/>')
    (root / "simple" / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n" + "\n".join(names) + "\n</body></html>\n"
    )
    return root


class Server:
    """Serves a directory over HTTP on 127.0.0.1 from a daemon thread (stop() when done).
    `requests` lists the paths asked for; max_age: the Cache-Control max-age of every answer
    (0: a client's cache must ask again each time, as of a page older than the index's max-age)."""

    def __init__(self, root: Path, max_age: int | None = None):
        handler = functools.partial(_QuietHandler, directory=str(root))
        # No request is served before __init__ returns: the handler's state is set after start.
        self.served = httpserve.Server(handler, daemon_threads=False)
        self.httpd = self.served.httpd
        self.root = root
        self.requests: list[str] = []
        self.httpd.max_age = max_age  # type: ignore[attr-defined]
        self.httpd.requests = self.requests  # type: ignore[attr-defined]
        self.url = self.served.url

    def stop(self) -> None:
        self.served.stop()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_head(self):  # type: ignore[no-untyped-def]
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        return super().send_head()

    def end_headers(self) -> None:
        if self.server.max_age is not None:  # type: ignore[attr-defined]
            self.send_header("Cache-Control", f"max-age={self.server.max_age}")  # type: ignore[attr-defined]
        super().end_headers()


class SilentServer:
    """Accepts TCP connections and never answers: the worst kind of unreachable channel."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[object] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def stop(self) -> None:
        self.sock.close()


class _StallingHandler(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        time.sleep(3600)

    def log_message(self, format: str, *args: object) -> None:
        pass


class StallingServer:
    """Answers HEAD at once and never answers GET: a channel that looks alive, then hangs."""

    def __init__(self) -> None:
        self.served = httpserve.Server(_StallingHandler)
        self.httpd = self.served.httpd
        self.url = self.served.url

    def stop(self) -> None:
        self.served.stop()
