"""One --hash per file: a requirements lock's hashes against the files the index publishes.

`--require-hashes` installs any file whose sha256 is among a pin's hashes. uv writes one hash per
file of the release (its sdist and each wheel), so a hash that is the sha256 of no file the index
lists, or more hashes than the release has files, was not written by uv: it is how other bytes
than the locked ones get installed (a hash added to the lock, and a substituted file served under
the locked name). Before a pip-path build from the index, every pin is checked against the index's
listing (PEP 691 JSON, or PEP 503 HTML with #sha256 fragments). An index that cannot be reached is
left to the installer to report; a listing without hashes is checked by count only.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)

from provision import tools
from provision.errors import InstallError
from provision.lock.requirements import Pin, parse_lock

TIMEOUT_S = 30
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


def default_index() -> str | None:
    """The index pip uses when its configuration names none (pip's own constant, so that no
    registry's host name is written here); None when pip is not importable."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        return None
    return str(PyPI.simple_url)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href") if tag == "a" else None
        if href:
            url, _, fragment = href.partition("#")
            sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
            self.files.append((url.rsplit("/", 1)[-1], sha))


def _listing(index: str, name: str, context: ssl.SSLContext) -> list[tuple[str, str | None]]:
    """(file name, sha256 or None) of every file the index lists for the project."""
    request = urllib.request.Request(f"{index.rstrip('/')}/{name}/", headers={"Accept": _ACCEPT})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
        kind = response.headers.get("Content-Type", "")
        body = response.read(64 << 20).decode("utf-8", errors="replace")
    if "json" in kind:
        data = json.loads(body)
        return [
            (str(f.get("filename")), (f.get("hashes") or {}).get("sha256"))
            for f in data.get("files", [])
            if isinstance(f, dict)
        ]
    parser = _Links()
    parser.feed(body)
    return parser.files


def _version_of(filename: str) -> str | None:
    try:
        return str(parse_wheel_filename(filename)[1])
    except InvalidWheelFilename:
        pass
    try:
        return str(parse_sdist_filename(filename)[1])
    except InvalidSdistFilename:
        return None


def problem(pin: Pin, files: Sequence[tuple[str, str | None]]) -> str | None:
    """What is wrong with a pin's hashes against the index's files of its release, or None.

    Judged only where the index lists at least as many files of the release as the pin has
    hashes, each with its sha256: then every lock hash must be one of them. An index that lists
    fewer (a lab's mirror of the locked wheels only, the fleet's index, a wheelhouse) cannot tell
    a hash of a file it does not carry from one added to the lock; the installer still checks
    every file it installs against the lock."""
    want = canonicalize_version(pin.version)
    release = [
        (f, sha) for f, sha in files if (v := _version_of(f)) and canonicalize_version(v) == want
    ]
    published = {sha.lower() for _, sha in release if sha}
    if len(published) < len(release) or len(release) < len(pin.hashes):
        return None
    strangers = [h for h in pin.hashes if h.removeprefix("sha256:") not in published]
    if strangers:
        return (
            f"{pin.name}=={pin.version} has --hash {strangers[0][:20]}..., the sha256 of no "
            f"file the index lists for that release ({len(release)} file(s), one hash each)"
        )
    return None


def check(lock: Path) -> None:
    """InstallError naming the first pin whose hashes are not one per file of its release."""
    index = tools.pip_index_url() or default_index()
    if not index:
        return
    pins = parse_lock(lock.read_text(encoding="utf-8"))
    cert = tools.network_env().get("SSL_CERT_FILE")
    context = ssl.create_default_context(cafile=cert)

    def one(pin: Pin) -> str | None:
        try:
            return problem(pin, _listing(index, pin.name, context))
        except (OSError, ValueError, urllib.error.URLError):
            return None  # unreachable or unreadable: the installer says what is wrong

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = [p for p in pool.map(one, pins) if p]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise InstallError(
            f"{lock.name}: {found[0]}{more}; a --hash added to the lock lets other bytes be "
            f"installed: regenerate it with provision lock"
        )
