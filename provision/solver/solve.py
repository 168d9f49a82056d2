"""Solving specs with rattler, and each solved record in the JSON shapes conda-lock reads."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from provision.solver.channels import channel_config, check_reachable, split_channels
from provision.solver.conda_errors import CondaError
from provision.solver.config import cache_dir
from provision.solver.virtual import as_generic, virtual_packages

if TYPE_CHECKING:
    from rattler import RepoDataRecord

# Upper bound for one HTTP request once a channel has answered: a stalled server must not hang
# a lock for ever. Generous, because a first fetch of a big channel's repodata is slow.
HTTP_TIMEOUT_S = int(os.environ.get("PROVISION_CONDA_HTTP_TIMEOUT", "300"))


class _FetchFields(TypedDict):
    arch: str | None
    build: str
    build_number: int
    channel: str
    constrains: list[str]
    depends: list[str]
    fn: str
    license: str
    md5: str
    name: str
    platform: str | None
    size: int | None
    subdir: str
    url: str
    version: str


class FetchEntry(_FetchFields, total=False):
    """One package in conda's FETCH action: what conda-lock reads into the lock."""

    sha256: str
    timestamp: int  # milliseconds since the epoch


class LinkEntry(TypedDict):
    """One package in conda's LINK action (and, with url and md5, in `list --json`)."""

    base_url: str
    build_number: int
    build_string: str
    channel: str
    dist_name: str
    name: str
    platform: str
    version: str


def solve(
    specs: Sequence[str],
    channels: Sequence[str],
    subdir: str,
    env: Mapping[str, str] | None = None,
    keep: Mapping[str, tuple[str, str]] | None = None,
) -> list[RepoDataRecord]:
    """Solve specs; `keep` (name -> (version, build): an installed prefix) is preferred only."""
    import asyncio

    import rattler
    from rattler.exceptions import SolverError

    env = os.environ if env is None else env
    if not channels:
        raise CondaError("ArgumentError", "no channel given; pass --channel NAME_OR_URL")
    split = split_channels(channels, subdir)
    virtual = {**virtual_packages(subdir, env), **split.virtual}
    check_reachable(split.real, subdir)
    config = channel_config()
    client = rattler.Client.default_client(timeout=HTTP_TIMEOUT_S)
    gateway = rattler.Gateway(cache_dir=cache_dir() / "repodata", client=client)

    sources = [rattler.Channel(ch, config) for ch in split.real]
    platforms = [rattler.Subdir(subdir), rattler.Subdir("noarch")]

    async def run() -> list[RepoDataRecord]:
        locked = []
        if keep:
            found = await gateway.query(sources, platforms, list(keep), recursive=False)
            locked = [
                r
                for group in found
                for r in group
                if keep.get(r.name.normalized) == (str(r.version), str(r.build))
            ]
        return await rattler.solve(
            sources=sources,
            specs=[rattler.MatchSpec(s, strict=False) for s in specs],
            gateway=gateway,
            platforms=platforms,
            locked_packages=locked,
            virtual_packages=as_generic(virtual),
            channel_priority=rattler.ChannelPriority.Strict,
            channel_relations="disabled",
        )

    try:
        records = asyncio.run(run())
    except SolverError as exc:
        offered = ", ".join(
            f"{k}={v}" if b == "0" else f"{k}={v} {b}" for k, (v, b) in virtual.items()
        )
        raise CondaError(
            "UnsatisfiableError",
            f"{str(exc).strip()}\n(virtual packages for {subdir}: {offered or 'none'})",
        ) from exc
    except Exception as exc:  # GatewayError, FetchRepoDataError, InvalidMatchSpecError ...
        name = type(exc).__name__
        kind = "InvalidMatchSpec" if "MatchSpec" in name or "Version" in name else "CondaHTTPError"
        raise CondaError(kind, f"{name}: {str(exc).strip()}") from exc
    return sorted(records, key=lambda r: r.name.normalized)


def _hex(value: bytes | None) -> str | None:
    return value.hex() if value else None


def fetch_entry(record: RepoDataRecord) -> FetchEntry:
    """One record as conda's FETCH action (what conda-lock reads into the lock)."""
    entry: FetchEntry = {
        "arch": record.arch,
        "build": str(record.build),
        "build_number": record.build_number,
        "channel": record.channel.rstrip("/") if record.channel else "",
        "constrains": list(record.constrains),
        "depends": list(record.depends),
        "fn": record.file_name,
        "license": record.license or "",
        "md5": _hex(record.md5) or "",
        "name": record.name.normalized,
        "platform": record.platform,
        "size": record.size,
        "subdir": record.subdir,
        "url": record.url,
        "version": str(record.version),
    }
    sha256 = _hex(record.sha256)
    if sha256 is not None:
        entry["sha256"] = sha256
    if record.timestamp is not None:
        entry["timestamp"] = int(record.timestamp.timestamp() * 1000)
    return entry


def link_entry(record: RepoDataRecord) -> LinkEntry:
    channel = record.channel.rstrip("/") if record.channel else ""
    return {
        "base_url": channel,
        "build_number": record.build_number,
        "build_string": str(record.build),
        "channel": channel.rsplit("/", 1)[-1],
        "dist_name": record.file_name.removesuffix(".tar.bz2").removesuffix(".conda"),
        "name": record.name.normalized,
        "platform": record.subdir,
        "version": str(record.version),
    }
