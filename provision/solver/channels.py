"""Channels: names to URLs, conda-lock's fake channel of virtual packages, reachability."""

from __future__ import annotations

import json
import os
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.solver.conda_errors import CondaError
from provision.solver.config import PROG
from provision.solver.virtual import VirtualPackages

if TYPE_CHECKING:
    from rattler import ChannelConfig

# How long a channel may take to answer at all; a dead host must fail fast, not after retries.
PROBE_TIMEOUT_S = float(os.environ.get("PROVISION_CONDA_CONNECT_TIMEOUT", "5"))


def channel_config() -> ChannelConfig:
    from rattler import ChannelConfig

    alias = os.environ.get("CONDA_CHANNEL_ALIAS")
    return ChannelConfig(alias, os.getcwd()) if alias else ChannelConfig(root_dir=os.getcwd())


def channel_url(name: str) -> str:
    from rattler import Channel

    return str(Channel(name, channel_config()).base_url).rstrip("/")


@dataclass(frozen=True)
class Channels:
    real: tuple[str, ...]  # as given: names or URLs
    virtual: VirtualPackages  # from fake channels that hold only __* records


def file_path(url: str) -> Path:
    """The local path a file:// URL names."""
    from urllib.request import url2pathname

    return Path(url2pathname(urllib.parse.urlsplit(url).path))


def _local_repodata(url: str, subdir: str) -> list[dict[str, Any]] | None:
    """Records of a file:// channel for subdir+noarch; None when it is not a readable channel."""
    root = file_path(url)
    records: list[dict[str, Any]] = []
    found = False
    for sub in (subdir, "noarch"):
        path = root / sub / "repodata.json"
        if path.is_file():
            found = True
            data = json.loads(path.read_text(encoding="utf-8"))
            for key in ("packages", "packages.conda"):
                records.extend(data.get(key, {}).values())
    return records if found else None


def split_channels(channels: Sequence[str], subdir: str) -> Channels:
    real: list[str] = []
    virtual: VirtualPackages = {}
    for ch in channels:
        if ch.startswith("file:"):
            records = _local_repodata(ch, subdir)
            if records is None:
                raise CondaError(
                    "UnavailableInvalidChannel",
                    f"channel {ch} has no repodata.json for {subdir} or noarch "
                    "(not a conda channel?)",
                )
            if records and all(str(r.get("name", "")).startswith("__") for r in records):
                for r in records:
                    if r.get("subdir") in (subdir, "noarch"):
                        build = str(r.get("build_string") or r.get("build") or "0")
                        virtual[str(r["name"])] = (str(r["version"]), build)
                continue
        real.append(ch)
    return Channels(tuple(real), virtual)


def _probe(url: str, timeout: float) -> str | None:
    """None when the server answers anything at all within timeout; else why it does not.

    Any HTTP status, even 404 or a TLS complaint, proves the host is there; rattler then reports
    the precise problem. Only silence or a refused connection is "unreachable".
    """
    import ssl
    import urllib.error
    import urllib.request

    outcome: list[str | None] = []

    def attempt() -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": PROG})
        try:
            opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
            with opener.open(req, timeout=timeout):
                outcome.append(None)
        except urllib.error.HTTPError:
            outcome.append(None)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLError):
                outcome.append(None)
            else:
                outcome.append(str(reason))
        except TimeoutError:
            outcome.append(f"no answer within {timeout:g} s")
        except (OSError, ValueError) as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=attempt, daemon=True)  # DNS lookups ignore socket timeouts
    worker.start()
    worker.join(timeout + 1)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def check_reachable(channels: Sequence[str], subdir: str) -> None:
    urls = {ch: channel_url(ch) for ch in channels if not ch.startswith("file:")}
    results: dict[str, str | None] = {}

    def one(ch: str, url: str) -> None:
        results[ch] = _probe(f"{url}/{subdir}/repodata.json", PROBE_TIMEOUT_S)

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in urls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PROBE_TIMEOUT_S + 2)
    for ch, url in urls.items():
        why = results.get(ch, f"no answer within {PROBE_TIMEOUT_S:g} s")
        if why is not None:
            shown = ch if ch == url else f"{ch} ({url})"
            raise CondaError("CondaHTTPError", f"channel {shown} cannot be reached: {why}")
