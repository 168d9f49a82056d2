"""Gathering what a bundle holds, through a cache: the lock's wheels (pip download --require-hashes
for the target's Python and platform), conda-lock's packages (from their URLs), and NVIDIA's
runfile and cuDNN archive (from system.env's URLs); provision's own wheels are bundle_self's.

The cache (`--cache-dir`, default the user's cache folder) keeps every file by name with a sidecar
`NAME.sha256` holding its sha256 and md5. A file whose sidecar matches the lock's hash is taken
without asking anything: building from a warm cache needs no network. Every file is checked again,
against the manifest and so against the lock, as it goes into the tar (make.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision import _proc
from provision.bundlefile.bundle_format import CHUNK, BundleError, manylinux_platforms
from provision.fileio import write_atomic
from provision.lock.condafile import LockedPackage
from provision.progress import Event, Report

PIP_TIMEOUT = 3600.0
URL_TIMEOUT = 60.0


@dataclass(frozen=True)
class Item:
    """One file the bundle will hold: where it is now, and the sha256 it must have."""

    name: str  # member name, e.g. wheels/absl_py-2.0.0-py3-none-any.whl
    group: str
    path: Path
    sha256: str


@dataclass(frozen=True)
class BundleMachine:
    """The machine the bundle is for."""

    python: str  # the environment's Python X.Y (its wheels)
    provision_python: str  # the Python X.Y provision's own wheels are for
    machine: str  # x86_64 | aarch64
    glibc: str  # the newest manylinux its wheels may need
    subdir: str  # conda: linux-64

    @property
    def platforms(self) -> list[str]:
        return manylinux_platforms(self.glibc, self.machine)


@dataclass(frozen=True)
class BundleCache:
    root: Path

    def folder(self, kind: str) -> Path:
        path = self.root / kind
        path.mkdir(parents=True, exist_ok=True)
        return path


def default_cache() -> Path:
    from provision import caches

    return caches.root() / "bundle"


# -- hashes and the cache ----------------------------------------------------------------------


def digests(path: Path) -> tuple[str, str]:
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
            md5.update(chunk)
    return sha.hexdigest(), md5.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def cached_digests(path: Path) -> tuple[str, str] | None:
    """(sha256, md5) of a cached file, from its sidecar (written when it was stored)."""
    try:
        sha, md5 = _sidecar(path).read_text(encoding="ascii").split()
    except (OSError, ValueError):
        return None
    return (sha, md5) if path.is_file() else None


def store(src: Path, folder: Path) -> tuple[Path, str, str]:
    """Move a fetched file into the cache with its sidecar; (cached path, sha256, md5)."""
    sha, md5 = digests(src)
    dest = folder / src.name
    tmp = folder / f".{src.name}.{os.getpid()}.tmp"
    shutil.move(str(src), tmp)
    os.replace(tmp, dest)
    write_atomic(_sidecar(dest), f"{sha} {md5}\n")
    return dest, sha, md5


def fetch_url(url: str, folder: Path, sha256: str | None, md5: str | None, what: str) -> Item:
    """A file from its URL (file:// included) into the cache, unless the cache has it with this
    hash; BundleError when what arrives is not what the lock or the matrix says."""
    name = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])
    dest = folder / name
    have = cached_digests(dest)
    if have is None or (sha256 and have[0] != sha256) or (md5 and have[1] != md5):
        with tempfile.TemporaryDirectory(prefix="provision-fetch-", dir=folder) as tmp:
            part = Path(tmp) / name
            try:
                with (
                    urllib.request.urlopen(url, timeout=URL_TIMEOUT) as resp,
                    open(part, "wb") as out,
                ):
                    shutil.copyfileobj(resp, out, CHUNK)
            except (OSError, ValueError) as exc:
                raise BundleError(
                    f"cannot download {url} ({what}): {exc}; the bundle was not written"
                ) from exc
            dest, *_ = store(part, folder)
        have = cached_digests(dest)
        if have is None:
            raise BundleError(f"{dest}: the cache could not keep it")
    if (sha256 and have[0] != sha256) or (md5 and have[1] != md5):
        want = f"sha256 {sha256}" if sha256 else f"md5 {md5}"
        raise BundleError(
            f"{url} ({what}) is not the file that was locked: {want} expected, got sha256 "
            f"{have[0]} / md5 {have[1]}; the bundle was not written"
        )
    return Item("", "", dest, have[0])


# -- the lock's wheels -------------------------------------------------------------------------


def supported_tags(python: str, platforms: Sequence[str]) -> dict[str, int]:
    """Wheel tags a CPython X.Y on these platforms installs, with pip's preference (0 = best)."""
    from packaging import tags

    version = tuple(int(x) for x in python.split(".")[:2])
    interp = f"cp{version[0]}{version[1]}"
    every = [
        *tags.cpython_tags(version, abis=[interp], platforms=list(platforms)),
        *tags.compatible_tags(version, interp, list(platforms)),
    ]
    return {str(t): i for i, t in reversed(list(enumerate(every)))}


def _rank(filename: str, ranks: dict[str, int]) -> int | None:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return None
    found = [ranks[str(t)] for t in tags if str(t) in ranks]
    return min(found) if found else None


def _pick(pin_name: str, version: str, hashes: set[str], folder: Path, ranks: dict[str, int]
          ) -> Path | None:  # fmt: skip
    """The cached wheel of name==version with a locked hash that the target installs best."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    best: tuple[int, str, Path] | None = None
    for path in folder.glob("*.whl"):
        try:
            name, ver, _, _ = parse_wheel_filename(path.name)
        except ValueError:
            continue
        if canonicalize_name(name) != pin_name or str(ver) != str(_version(version)):
            continue
        have = cached_digests(path)
        rank = _rank(path.name, ranks)
        if have is None or have[0] not in hashes or rank is None:
            continue
        if best is None or (rank, path.name) < best[:2]:
            best = (rank, path.name, path)
    return best[2] if best else None


def _version(text: str) -> object:
    from packaging.version import Version

    return Version(text)


def pip_platform_args(target: BundleMachine, python: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for plat in target.platforms:
        args += ["--platform", plat]
    return args


def run_pip(argv: list[str]) -> _proc.Completed:
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return _proc.run(
        [sys.executable, "-m", "pip", *argv], env=env, timeout=PIP_TIMEOUT, check=False
    )


def pip_reason(done: _proc.Completed) -> str:
    lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
    if any("DO NOT MATCH THE HASHES" in ln for ln in lines):
        which = [ln.split(" from ")[0] for ln in lines if " from " in ln and ln.endswith(":")]
        return (
            f"{', '.join(which) or 'a package'}: the file the index serves does not match the "
            "lock's hash (it changed since it was locked)"
        )
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return " | ".join((errors or lines)[-3:]) or f"exit {done.returncode}"


def lock_wheels(
    lock: Path, target: BundleMachine, cache: BundleCache, report: Report
) -> list[Item]:
    """Every wheel of a requirements lock for the target, each one of the lock's hashes: from the
    cache, the missing ones through `pip download --require-hashes --no-deps`."""
    from provision.lock.requirements import parse_lock

    pins = parse_lock(lock.read_text(encoding="utf-8"))
    folder = cache.folder("wheels")
    ranks = supported_tags(target.python, target.platforms)

    def picked() -> dict[str, Path | None]:
        return {
            p.name: _pick(p.name, p.version, {h.removeprefix("sha256:") for h in p.hashes},
                          folder, ranks)
            for p in pins
        }  # fmt: skip

    chosen = picked()
    missing = [p for p in pins if chosen[p.name] is None]
    if missing:
        report(Event("info", f"downloading {len(missing)} of {len(pins)} wheels (pip download)"))
        with tempfile.TemporaryDirectory(prefix="provision-pip-", dir=folder) as tmp:
            reqs = Path(tmp) / "requirements.txt"
            reqs.write_text(
                "".join(
                    f"{p.name}=={p.version} " + " ".join(f"--hash={h}" for h in p.hashes) + "\n"
                    for p in missing
                ),
                encoding="utf-8",
            )
            dest = Path(tmp) / "wheels"
            argv = ["download", "--no-deps", "--require-hashes", "-r", str(reqs),
                    "-d", str(dest), *pip_platform_args(target, target.python)]  # fmt: skip
            done = run_pip(argv)
            if not done:
                raise BundleError(
                    f"pip download of {lock.name}'s wheels for Python {target.python} on "
                    f"{target.platforms[0]} failed: {pip_reason(done)}; the bundle was not written"
                )
            for path in sorted(dest.iterdir()):
                store(path, folder)
        chosen = picked()
    unresolved = sorted(n for n, p in chosen.items() if p is None)
    if unresolved:
        raise BundleError(
            f"{lock}: no wheel with a locked hash for Python {target.python} on "
            f"{target.platforms[0]}: {', '.join(unresolved)}; the bundle was not written"
        )
    out = []
    for path in sorted({p for p in chosen.values() if p is not None}):
        have = cached_digests(path)
        assert have is not None
        out.append(Item(f"wheels/{path.name}", "wheels", path, have[0]))
    return out


# -- conda-lock's packages ---------------------------------------------------------------------


def conda_packages(
    entries: Sequence[LockedPackage], lock: Path, subdir: str, cache: BundleCache, report: Report
) -> list[Item]:
    """The conda packages (and pip wheels) conda-lock.yml (`lock`, read by the caller: its
    `entries` for `subdir`) names, fetched by their URLs."""
    if not entries:
        raise BundleError(f"{lock} has no package for {subdir}; lock it with --platform {subdir}")
    report(Event("step", f"collecting {len(entries)} packages of {lock.name} for {subdir}"))
    out = []
    for entry in sorted(entries, key=lambda p: p.url):
        sha, md5 = entry.hash.sha256, entry.hash.md5
        if not entry.url or not (sha or md5):
            raise BundleError(f"{lock}: {entry.name} has no url or hash; re-lock it")
        folder = cache.folder("wheels" if entry.pip else f"conda/{subdir}")
        item = fetch_url(entry.url, folder, sha, md5, entry.shown)
        report(Event("detail", f"{entry.shown}: {item.path}"))
        group = "wheels" if entry.pip else "conda"
        out.append(Item(f"{group}/{item.path.name}", group, item.path, item.sha256))
    names = [i.name for i in out]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise BundleError(f"{lock}: two packages share a file name ({', '.join(dup)})")
    return out


# -- NVIDIA's runfile and cuDNN archive (system path) -------------------------------------------


def system_values(path: Path) -> dict[str, str]:
    """system.env's KEY=value lines (one shell word each, as render writes them)."""
    import shlex

    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, raw = line.split("=", 1)
            words = shlex.split(raw)
            values[key.strip()] = words[0] if words else ""
    return values


def toolkit(system_env: Path, cache: BundleCache, report: Report) -> list[Item]:
    """The runfile and the cuDNN archive, checked as install-system.sh checks them: sha256 where
    the matrix records one, else md5; a file with neither is refused."""
    values = system_values(system_env)
    out = []
    for kind, name, url, sha, md5 in (
        ("CUDA runfile", "RUNFILE_NAME", "RUNFILE_URL", "RUNFILE_SHA256", "RUNFILE_MD5"),
        ("cuDNN archive", "CUDNN_ARCHIVE_NAME", "CUDNN_URL", "CUDNN_SHA256", ""),
    ):
        want_sha, want_md5 = values.get(sha) or None, values.get(md5) or None if md5 else None
        if not (want_sha or want_md5):
            raise BundleError(
                f"{system_env}: the matrix records no checksum for the {kind} "
                f"{values.get(name)}; install-system.sh would refuse it, so does the bundle"
            )
        report(Event("step", f"collecting the {kind} {values[name]}"))
        item = fetch_url(values[url], cache.folder("toolkit"), want_sha, want_md5, kind)
        if item.path.name != values[name]:
            raise BundleError(f"{values[url]} is not named {values[name]}, as system.env says")
        out.append(Item(f"toolkit/{item.path.name}", "toolkit", item.path, item.sha256))
    return out
