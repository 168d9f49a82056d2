"""conda-lock.yml, the conda path's lock: its one reader, and the two rewrites provision makes.

conda-lock writes its version-1 format: a `package` list of entries, one per package and platform,
each with its manager (conda or pip), name, version, platform, dependencies (name -> spec; the
`__glibc` one is the package's glibc floor), url and hash. `parse` reads the whole document into
typed rows through the declarative reader (records): a field of the wrong type, a missing one or
one conda-lock does not write is an error naming the package, in the caller's error class.

The rewrites keep conda-lock's own bytes: the document is dumped as PyYAML's writer (insertion
order) wrote it, with the pip section added after the conda one (`with_pip`, when the lock is
made) or with some URLs replaced (`with_urls`, for an install from a bundle's staged files).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from provision import diskread, records
from provision.errors import LockError
from provision.fileio import dump_yaml, load_yaml
from provision.lock.lockinputs import one_line

Manager = Literal["conda", "pip"]
LIMIT = 512 * diskread.MIB  # a conda lock of every platform is a few MB


@dataclass(frozen=True)
class Hash:
    md5: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class LockedSource:
    type: str
    url: str


@dataclass(frozen=True)
class LockedPackage:
    """One entry of the lock: a package for one platform, installed by conda or by pip."""

    name: str
    version: str
    manager: Manager
    platform: str
    url: str = ""  # conda-lock always writes both; their absence is told by who needs them
    hash: Hash = field(default_factory=Hash)
    dependencies: dict[str, str] = field(default_factory=dict)
    category: str = "main"
    optional: bool = False
    source: LockedSource | None = None
    build: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """(platform, manager, name): one entry of the lock."""
        return (self.platform, self.manager, self.name)

    @property
    def pip(self) -> bool:
        return self.manager == "pip"

    @property
    def file_name(self) -> str:
        """The name of the file its URL names (a wheel, a .conda or .tar.bz2)."""
        return urllib.parse.unquote(self.url.rsplit("/", 1)[-1])

    @property
    def build_string(self) -> str | None:
        """A conda package's build: recorded, else its file's (NAME-VERSION-BUILD.conda)."""
        if self.build or self.pip:
            return self.build
        stem = self.file_name.removesuffix(".tar.bz2").removesuffix(".conda")
        head = f"{self.name}-{self.version}-"
        return stem[len(head) :] if stem.startswith(head) and len(stem) > len(head) else None

    @property
    def glibc_floor(self) -> tuple[int, int] | None:
        """The oldest glibc it runs on, from its `__glibc >=X.Y` dependency; None without one."""
        m = re.match(r">=\s*(\d+)\.(\d+)", self.dependencies.get("__glibc", ""))
        return (int(m.group(1)), int(m.group(2))) if m else None

    @property
    def shown(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class CondaLock:
    """The packages of a conda-lock.yml, in the file's order; `document` is the whole file as
    read, for the rewrites (never changed in place)."""

    packages: tuple[LockedPackage, ...]
    document: dict[str, object] = field(compare=False, repr=False)

    @property
    def platforms(self) -> list[str]:
        return sorted({p.platform for p in self.packages})

    def on(self, platform: str) -> list[LockedPackage]:
        """The packages for one platform (conda subdir), in the file's order."""
        return [p for p in self.packages if p.platform == platform]

    def versions(self) -> dict[str, dict[str, str]]:
        """platform -> {name (lower case): version}, pip packages by their pip name."""
        out: dict[str, dict[str, str]] = {}
        for p in self.packages:
            out.setdefault(p.platform, {})[p.name.lower()] = p.version
        return out

    def with_pip(self, added: Iterable[LockedPackage]) -> str:
        """The lock's text with `added` (pip entries) in it, sorted as conda-lock sorts (manager,
        name, platform): the conda part stays byte for byte what conda-lock wrote."""
        data = copy.deepcopy(self.document)
        entries = _entries(data)
        entries += [_entry(p) for p in added]
        entries.sort(key=lambda e: (str(e["manager"]), str(e["name"]), str(e["platform"])))
        return dump_yaml(data)

    def with_urls(self, urls: Mapping[tuple[str, str, str], str]) -> str:
        """The lock's text with the URL of each package whose key `urls` holds replaced (an
        install from staged files names them by file:// URLs)."""
        data = copy.deepcopy(self.document)
        for entry, pkg in zip(_entries(data), self.packages, strict=True):
            if pkg.key in urls:
                entry["url"] = urls[pkg.key]
        return dump_yaml(data)


def parse(
    text: str, where: str, error: type[Exception] = LockError, first_line: int = 1
) -> CondaLock:
    """The lock in `text`; `error` naming `where` (and the line, for bad YAML, counted from
    `first_line`) if it is not a conda-lock file."""
    import yaml

    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + first_line}" if mark is not None else ""
        raise error(
            f"{where} is not valid YAML ({getattr(exc, 'problem', None) or one_line(exc)}{at})"
        ) from exc
    entries = data.get("package") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise error(f"{where} is not a conda-lock file (no list of packages)")
    assert isinstance(data, dict)
    packages = tuple(
        records.read(LockedPackage, e, f"{where}: package {e.get('name', i)!s}", error)
        for i, e in enumerate(entries)
    )
    return CondaLock(packages, data)


def read(path: Path, error: type[Exception] = LockError) -> CondaLock:
    """The lock at `path` (see parse); an unreadable file is `error` too."""
    try:
        text = diskread.read_text(path, LIMIT)
    except (OSError, ValueError) as exc:
        raise error(f"{path.name} cannot be read ({one_line(exc)})") from exc
    return parse(text, path.name, error)


def pip_package(
    name: str, version: str, platform: str, url: str, sha256: str, requires: Iterable[str]
) -> LockedPackage:
    """A `manager: pip` entry as conda-lock writes one (its dependencies have no specs)."""
    return LockedPackage(
        name=name, version=version, manager="pip", platform=platform, url=url,
        hash=Hash(sha256=sha256), dependencies={d: "" for d in requires},
    )  # fmt: skip


def _entries(data: Mapping[str, object]) -> list[dict[str, object]]:
    entries = data["package"]
    assert isinstance(entries, list)
    return entries


def _entry(p: LockedPackage) -> dict[str, object]:
    """conda-lock's key order for a pip entry it writes."""
    return {
        "name": p.name, "version": p.version, "manager": p.manager, "platform": p.platform,
        "dependencies": dict(p.dependencies), "url": p.url,
        "hash": {k: v for k, v in dataclasses.asdict(p.hash).items() if v is not None},
        "category": p.category, "optional": p.optional,
    }  # fmt: skip
