"""Installing a prefix: from an explicit lockfile (every archive checked against the lock's
checksum before anything is linked) or from a fresh solve."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from provision.solver.channels import file_path
from provision.solver.conda_errors import CondaError
from provision.solver.config import pkgs_dir

if TYPE_CHECKING:
    import rattler
    from rattler import RepoDataRecord


@dataclass(frozen=True)
class ExplicitEntry:
    url: str
    md5: str | None
    sha256: str | None

    @property
    def file_name(self) -> str:
        return urllib.parse.unquote(self.url.rsplit("/", 1)[-1])


def parse_explicit(text: str, source: str) -> list[ExplicitEntry]:
    lines = [ln.strip() for ln in text.splitlines()]
    if "@EXPLICIT" not in lines:
        raise CondaError(
            "ArgumentError", f"{source} is not an explicit lockfile (no @EXPLICIT line)"
        )
    entries = []
    for ln in lines[lines.index("@EXPLICIT") + 1 :]:
        if not ln or ln.startswith("#"):
            continue
        url, _, digest = ln.partition("#")
        md5 = sha256 = None
        if digest.startswith("sha256:"):
            sha256 = digest.removeprefix("sha256:")
        elif len(digest) == 64:
            sha256 = digest
        elif digest:
            md5 = digest
        entries.append(ExplicitEntry(url, md5, sha256))
    return entries


def _digests(path: Path) -> tuple[str, str]:
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            md5.update(chunk)
            sha.update(chunk)
    return md5.hexdigest(), sha.hexdigest()


def _local_path(url: str) -> Path | None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return file_path(url)
    if not parts.scheme:
        return Path(url)
    return None


async def _fetch(entries: Sequence[ExplicitEntry], into: Path) -> list[Path]:
    """Local paths of every archive; remote ones downloaded with rattler's client (proxies, TLS)."""
    import asyncio

    from rattler import Client
    from rattler.package_streaming import download_to_path

    client = Client.default_client()  # no total limit: a big package may take long
    gate = asyncio.Semaphore(8)

    async def one(entry: ExplicitEntry) -> Path:
        local = _local_path(entry.url)
        if local is not None:
            if not local.is_file():
                raise CondaError("PackagesNotFoundError", f"{entry.url}: no such file")
            return local
        dest = into / entry.file_name
        if not dest.is_file():
            part = dest.with_name(dest.name + ".part")
            async with gate:
                try:
                    await download_to_path(client, entry.url, part)
                except Exception as exc:
                    raise CondaError(
                        "CondaHTTPError", f"cannot download {entry.url}: {exc}"
                    ) from exc
            part.replace(dest)
        return dest

    into.mkdir(parents=True, exist_ok=True)
    return list(await asyncio.gather(*(one(e) for e in entries)))


def verify(entries: Sequence[ExplicitEntry], paths: Sequence[Path]) -> None:
    """Refuse the whole install when any archive differs from the checksum its lock names."""
    for entry, path in zip(entries, paths, strict=True):
        md5, sha = _digests(path)
        for kind, want, got in (("md5", entry.md5, md5), ("sha256", entry.sha256, sha)):
            if want and want.lower() != got:
                raise CondaError(
                    "ChecksumMismatchError",
                    f"{entry.file_name}: {kind} {got} does not match the lockfile's {want}; "
                    "refusing to install (the package changed since it was locked)",
                )


def install_explicit(file: Path, prefix: Path) -> int:
    entries = parse_explicit(file.read_text(encoding="utf-8"), str(file))
    install_entries(entries, prefix)
    return 0


def install_entries(entries: Sequence[ExplicitEntry], prefix: Path) -> None:
    """Make the conda packages of `prefix` exactly `entries`: rattler links what is new or
    changed and unlinks what is not listed. A package already linked from the same file with the
    same checksum is taken from conda-meta as it is (not fetched again); every other archive is
    checked against its entry's checksum before anything is linked."""
    import asyncio

    import rattler

    installed = _installed(prefix)
    kept = [installed[e.file_name] for e in entries if _same(installed.get(e.file_name), e)]
    todo = [e for e in entries if not _same(installed.get(e.file_name), e)]
    cache = pkgs_dir()
    paths = asyncio.run(_fetch(todo, cache))
    verify(todo, paths)

    async def build() -> None:
        records: list[rattler.RepoDataRecord] = list(kept)
        for entry, path in zip(todo, paths, strict=True):
            record = await rattler.RepoDataRecord.from_package_archive(path)
            record.url = path.absolute().as_uri()
            record.channel = entry.url.rsplit("/", 2)[0]
            records.append(record)
        await rattler.install(
            records, target_prefix=prefix, cache_dir=cache / "extracted", show_progress=False,
            installed_packages=list(installed.values()),
        )  # fmt: skip

    try:
        asyncio.run(build())
    except CondaError:
        raise
    except Exception as exc:
        raise CondaError("CondaError", f"cannot install into {prefix}: {exc}") from exc
    _record_origins(prefix, todo)


def _installed(prefix: Path) -> dict[str, rattler.PrefixRecord]:
    """file name -> the conda-meta record of each package linked in `prefix`."""
    from rattler import PrefixRecord

    out = {}
    for path in sorted((prefix / "conda-meta").glob("*.json")):
        try:
            record = PrefixRecord.from_path(path)
        except Exception as exc:  # rattler's parse errors are no Python class we can name
            raise CondaError("CondaError", f"{path} cannot be read: {exc}") from exc
        out[record.file_name] = record
    return out


def _same(record: rattler.PrefixRecord | None, entry: ExplicitEntry) -> bool:
    if record is None:
        return False
    if entry.sha256 and record.sha256 is not None:
        return record.sha256.hex() == entry.sha256.lower()
    return bool(entry.md5) and record.md5 is not None and record.md5.hex() == str(entry.md5).lower()


def install_records(records: Sequence[RepoDataRecord], prefix: Path) -> int:
    """Install a fresh solve: rattler checks every download against the repodata's sha256."""
    import asyncio

    import rattler

    try:
        asyncio.run(
            rattler.install(
                list(records), target_prefix=prefix, cache_dir=pkgs_dir() / "extracted",
                show_progress=False,
            )
        )  # fmt: skip
    except Exception as exc:
        raise CondaError("CondaError", f"cannot install into {prefix}: {exc}") from exc
    return 0


def _record_origins(prefix: Path, entries: Sequence[ExplicitEntry]) -> None:
    """conda-meta names where each package came from, not the cache copy rattler linked from."""
    by_file = {e.file_name: e for e in entries}
    for path in (prefix / "conda-meta").glob("*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        entry = by_file.get(str(data.get("fn", "")))
        if entry is None:
            continue
        data["url"] = entry.url
        data["channel"] = entry.url.rsplit("/", 2)[0]
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
