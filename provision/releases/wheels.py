"""What a package index says about a project's wheels, and the few members of a wheel that
`matrix update` reads, fetched with HTTP Range requests (a few hundred KiB of a ~500 MB wheel).

The index is pip's (provision.tools.pip_index_url): its simple API, PEP 691 JSON when the index
speaks it, else PEP 503 HTML. Only the standard library talks HTTP here. Every failure is a
MatrixError with one line that names the URL or the wheel.
"""

from __future__ import annotations

import html.parser
import io
import json
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from provision.errors import MatrixError

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{SIMPLE_JSON}, text/html;q=0.1"
TIMEOUT = 60
# manylinux tags older than PEP 600 -> the glibc they promise (PEP 513, 571, 599)
LEGACY_MANYLINUX = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}


def index_url() -> str:
    """pip's configured index; pip's own default when pip is installed and nothing is set."""
    from provision.tools import pip_index_url

    configured = pip_index_url()
    if configured:
        return configured.rstrip("/")
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        raise MatrixError(
            "no package index is configured: set PIP_INDEX_URL or pip's index-url"
        ) from None
    return str(PyPI.simple_url).rstrip("/")


@dataclass
class Counter:
    """Bytes read from the network, for the benchmark and the summary line."""

    bytes: int = 0
    requests: int = 0


@dataclass(frozen=True)
class WheelFile:
    filename: str
    url: str
    sha256: str
    size: int | None
    upload_time: str  # ISO 8601 from the index, "" when it does not say
    version: Version
    pythons: tuple[str, ...]  # "3.12" for cp312; pure wheels give none
    platforms: tuple[str, ...]

    @property
    def upload_date(self) -> str:
        return self.upload_time[:10]


@dataclass(frozen=True)
class Project:
    name: str
    url: str
    files: tuple[WheelFile, ...] = field(repr=False)

    def versions(self) -> list[Version]:
        return sorted({f.version for f in self.files})

    def wheels(self, version: Version) -> list[WheelFile]:
        return [f for f in self.files if f.version == version]


def _get(url: str, counter: Counter, headers: dict[str, str] | None = None) -> tuple[bytes, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            body = resp.read()
            kind = resp.headers.get("Content-Type", "")
    except (urllib.error.URLError, OSError) as exc:
        raise MatrixError(f"cannot read {url}: {exc}") from exc
    counter.bytes += len(body)
    counter.requests += 1
    return body, kind


class _Links(html.parser.HTMLParser):
    """PEP 503 anchors: href and the data-* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append({k: v or "" for k, v in attrs})


def _entries(body: bytes, kind: str, url: str) -> Iterable[dict[str, object]]:
    if kind.split(";")[0].strip() == SIMPLE_JSON:
        try:
            files = json.loads(body)["files"]
        except (ValueError, KeyError, TypeError) as exc:
            raise MatrixError(f"{url}: not a simple-API JSON page ({exc})") from exc
        yield from files
        return
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for link in parser.links:
        href, _, frag = link.get("href", "").partition("#")
        name = urllib.parse.unquote(href.rsplit("/", 1)[-1])
        hashes = dict([frag.split("=", 1)]) if "=" in frag else {}
        yield {
            "filename": name,
            "url": href,
            "hashes": hashes,
            "yanked": "data-yanked" in link,
            "upload-time": link.get("data-upload-time", ""),
        }


def project(name: str, counter: Counter, index: str | None = None) -> Project:
    """The project's wheels on the index (yanked files left out)."""
    base = index or index_url()
    page = f"{base}/{name}/"
    body, kind = _get(page, counter, {"Accept": ACCEPT})
    files: list[WheelFile] = []
    for entry in _entries(body, kind, page):
        filename = str(entry.get("filename", ""))
        if not filename.endswith(".whl") or entry.get("yanked"):
            continue
        try:
            _, version, _, tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        hashes = entry.get("hashes")
        sha = str(hashes.get("sha256", "")) if isinstance(hashes, dict) else ""
        size = entry.get("size")
        pythons = sorted(
            {f"3.{m.group(1)}" for t in tags if (m := re.fullmatch(r"cp3(\d+)", t.interpreter))},
            key=Version,
        )
        files.append(
            WheelFile(
                filename=filename,
                url=urllib.parse.urljoin(page, str(entry.get("url", ""))),
                sha256=sha,
                size=size if isinstance(size, int) else None,
                upload_time=str(entry.get("upload-time") or ""),
                version=version,
                pythons=tuple(pythons),
                platforms=tuple(sorted({t.platform for t in tags})),
            )
        )
    return Project(name, page, tuple(files))


def glibc_of(platforms: Iterable[str]) -> Version | None:
    """The lowest glibc any of a wheel's manylinux tags accepts, None when none is manylinux."""
    found: list[Version] = []
    for tag in platforms:
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
        if m:
            found.append(Version(f"{m.group(1)}.{m.group(2)}"))
            continue
        legacy = LEGACY_MANYLINUX.get(tag.split("_", 1)[0])
        if legacy:
            found.append(Version(legacy))
    return min(found) if found else None


def is_linux_x86_64(wheel: WheelFile) -> bool:
    return any(p.startswith("manylinux") and p.endswith("_x86_64") for p in wheel.platforms)


class RangeReader(io.RawIOBase):
    """A read-only, seekable file over HTTP Range requests, so zipfile reads single members."""

    def __init__(self, url: str, size: int, counter: Counter) -> None:
        super().__init__()
        self.url, self.size, self.pos, self.counter = url, size, 0, counter

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.pos >= self.size:
            return 0
        end = min(self.pos + len(buffer), self.size) - 1
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                if resp.status != 206:
                    raise MatrixError(
                        f"{self.url}: the server ignored the Range request (HTTP {resp.status})"
                    )
                data = resp.read()
        except urllib.error.URLError as exc:
            raise MatrixError(f"cannot read {self.url}: {exc}") from exc
        self.counter.bytes += len(data)
        self.counter.requests += 1
        if not data:
            return 0
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def _size(url: str, counter: Counter) -> int:
    req = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            length = resp.headers.get("Content-Length")
    except (urllib.error.URLError, OSError) as exc:
        raise MatrixError(f"cannot read {url}: {exc}") from exc
    counter.requests += 1
    if not length or not length.isdigit():
        raise MatrixError(f"{url}: the index does not say how large the wheel is")
    return int(length)


def read_members(
    wheel: WheelFile, wanted: Iterable[str], counter: Counter
) -> dict[str, str | None]:
    """`{member: text}` of the wheel's METADATA (key "METADATA") and each wanted member, None for
    a member the wheel does not hold. A wheel that is no zip, or whose METADATA is missing, is a
    MatrixError naming it."""
    size = wheel.size if wheel.size is not None else _size(wheel.url, counter)
    raw = RangeReader(wheel.url, size, counter)
    try:
        with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=256 * 1024)) as zf:
            names = set(zf.namelist())
            meta = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            if len(meta) != 1:
                raise MatrixError(
                    f"{wheel.filename}: malformed wheel: no single .dist-info/METADATA"
                )
            out: dict[str, str | None] = {"METADATA": zf.read(meta[0]).decode("utf-8")}
            for name in wanted:
                out[name] = zf.read(name).decode("utf-8") if name in names else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{wheel.filename}: malformed wheel: {exc}") from exc
    except OSError as exc:
        raise MatrixError(f"{wheel.filename}: cannot read it: {exc}") from exc
    return out
