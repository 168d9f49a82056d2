"""provision-conda: a small conda-compatible front end over py-rattler, for conda-lock to drive.

conda-lock needs conda, mamba or micromamba. Where none is installed, `provision lock` and
`provision install` point conda-lock at this one (`--conda provision-conda`); conda-lock takes it
for conda (it tells the kinds apart by the executable's name), so it calls exactly:

  create --prefix P --dry-run --json [--override-channels] --channel URL... SPECS (lock)
  list --no-pip -p P --json; install ... -p P --json --dry-run SPECS            (lock --update)
  info --json                                                                   (package caches)
  create --quiet [--copy] --file X.lock --yes --prefix P                        (install)
  run --prefix P pip install --no-deps -r F                                     (install, pip part)

Virtual packages arrive as conda-lock's fake `file://` channel (records named `__*`) plus
CONDA_OVERRIDE_* variables; the target platform as CONDA_SUBDIR. Answers use conda's JSON shapes.
Explicit lockfiles are installed only after every archive matched the lock's checksum.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform as host_platform
import shutil
import sys
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision import __version__

if TYPE_CHECKING:
    from rattler import GenericVirtualPackage, RepoDataRecord

PROG = "provision-conda"
# How long a channel may take to answer at all; a dead host must fail fast, not after retries.
PROBE_TIMEOUT_S = float(os.environ.get("PROVISION_CONDA_CONNECT_TIMEOUT", "5"))
# Upper bound for one HTTP request once a channel has answered: a stalled server must not hang
# a lock for ever. Generous, because a first fetch of a big channel's repodata is slow.
HTTP_TIMEOUT_S = int(os.environ.get("PROVISION_CONDA_HTTP_TIMEOUT", "300"))
OVERRIDES = ("ARCHSPEC", "CUDA", "GLIBC", "LINUX", "OSX", "WIN")


class CondaError(Exception):
    """A failure reported the way conda reports it: exception name + message, exit 1."""

    def __init__(self, name: str, message: str, code: int = 1):
        super().__init__(message)
        self.name, self.message, self.code = name, message, code


# -- configuration -----------------------------------------------------------------------------


def cache_dir() -> Path:
    explicit = os.environ.get("PROVISION_CONDA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision-conda"


def pkgs_dir() -> Path:
    dirs = [d for d in os.environ.get("CONDA_PKGS_DIRS", "").split(",") if d]
    return Path(dirs[0]) if dirs else cache_dir() / "pkgs"


def envs_dir() -> Path:
    dirs = [d for d in os.environ.get("CONDA_ENVS_PATH", "").split(os.pathsep) if d]
    return Path(dirs[0]) if dirs else cache_dir() / "envs"


def target_subdir(explicit: str | None = None) -> str:
    from rattler import Subdir

    return explicit or os.environ.get("CONDA_SUBDIR") or str(Subdir.current())


def channel_config() -> Any:
    from rattler import ChannelConfig

    alias = os.environ.get("CONDA_CHANNEL_ALIAS")
    return ChannelConfig(alias, os.getcwd()) if alias else ChannelConfig(root_dir=os.getcwd())


def channel_url(name: str) -> str:
    from rattler import Channel

    return str(Channel(name, channel_config()).base_url).rstrip("/")


# -- virtual packages --------------------------------------------------------------------------


def _host_glibc() -> str | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    return text.split()[-1] if text.startswith("glibc") else None


def _detected_cuda() -> str | None:
    from rattler import VirtualPackage

    try:
        found = VirtualPackage.detect()
    except Exception:  # rattler raises its own DetectVirtualPackageError on odd hosts
        return None
    for pkg in found:
        generic = pkg.into_generic()
        if generic.name.normalized == "__cuda":
            return str(generic.version)
    return None


def virtual_packages(subdir: str, env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """{name: (version, build)} the way conda builds them for a target subdir.

    CONDA_OVERRIDE_X set to a value replaces the detected one; set to "" removes the package;
    unset means: detect on this host when it is the target, else conda's documented default.
    """
    from rattler import Subdir

    family, _, arch = subdir.partition("-")
    here = subdir == str(Subdir.current())
    archspec = {"64": "x86_64", "aarch64": "aarch64", "arm64": "arm64", "ppc64le": "ppc64le"}
    found: dict[str, tuple[str, str] | None] = {}
    if family == "linux":
        kernel = host_platform.release().split("-")[0] if here else "0"
        found["__unix"] = ("0", "0")
        found["__linux"] = (kernel, "0")
        found["__glibc"] = ((_host_glibc() if here else None) or "2.17", "0")
    elif family == "osx":
        found["__unix"] = ("0", "0")
        found["__osx"] = ((host_platform.mac_ver()[0] if here else "") or "11.0", "0")
    elif family == "win":
        found["__win"] = ("0", "0")
    if family != "noarch":
        found["__archspec"] = ("1", archspec.get(arch, arch))
        cuda = _detected_cuda() if here and "CONDA_OVERRIDE_CUDA" not in env else None
        found["__cuda"] = (cuda, "0") if cuda else None
    for key in OVERRIDES:
        var, name = f"CONDA_OVERRIDE_{key}", f"__{key.lower()}"
        if var not in env or name not in found:  # e.g. __osx means nothing for linux-64
            continue
        value = env[var]
        if not value:
            found[name] = None
        elif key == "ARCHSPEC":
            found[name] = ("1", value)
        else:
            found[name] = (value, "0")
    return {k: v for k, v in sorted(found.items()) if v is not None}


def _as_generic(packages: Mapping[str, tuple[str, str]]) -> list[GenericVirtualPackage]:
    from rattler import GenericVirtualPackage, PackageName, Version
    from rattler.package import BuildString

    return [
        GenericVirtualPackage(PackageName(name), Version(version), BuildString.new_unchecked(build))
        for name, (version, build) in packages.items()
    ]


# -- channels ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Channels:
    real: tuple[str, ...]  # as given: names or URLs
    virtual: dict[str, tuple[str, str]]  # from fake channels that hold only __* records


def _file_path(url: str) -> Path:
    from urllib.request import url2pathname

    return Path(url2pathname(urllib.parse.urlsplit(url).path))


def _local_repodata(url: str, subdir: str) -> list[dict[str, Any]] | None:
    """Records of a file:// channel for subdir+noarch; None when it is not a readable channel."""
    root = _file_path(url)
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
    virtual: dict[str, tuple[str, str]] = {}
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


# -- solving -----------------------------------------------------------------------------------


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
            virtual_packages=_as_generic(virtual),
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


def fetch_entry(record: RepoDataRecord) -> dict[str, Any]:
    """One record as conda's FETCH action (what conda-lock reads into the lock)."""
    entry: dict[str, Any] = {
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
        "sha256": _hex(record.sha256),
        "size": record.size,
        "subdir": record.subdir,
        "url": record.url,
        "version": str(record.version),
    }
    if record.timestamp is not None:
        entry["timestamp"] = int(record.timestamp.timestamp() * 1000)
    if entry["sha256"] is None:
        del entry["sha256"]
    return entry


def link_entry(record: RepoDataRecord) -> dict[str, Any]:
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


# -- prefixes ----------------------------------------------------------------------------------


def resolve_prefix(prefix: str | None, name: str | None) -> Path:
    if prefix and name:
        raise CondaError("ArgumentError", "give either --prefix or --name, not both")
    if prefix:
        return Path(prefix).absolute()
    if name:
        return envs_dir() / name
    active = os.environ.get("CONDA_PREFIX")
    if active:
        return Path(active)
    raise CondaError("ArgumentError", "no environment given; pass --prefix DIR or --name NAME")


def installed(prefix: Path) -> list[dict[str, Any]]:
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        return []
    out = []
    for path in sorted(meta.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        url = str(data.get("url") or "")
        channel = str(data.get("channel") or url.rsplit("/", 2)[0]).rstrip("/")
        fn = str(data.get("fn") or url.rsplit("/", 1)[-1])
        out.append({
            "base_url": channel,
            "build_number": int(data.get("build_number") or 0),
            "build_string": str(data.get("build") or data.get("build_string") or ""),
            "channel": channel.rsplit("/", 1)[-1],
            "dist_name": fn.removesuffix(".tar.bz2").removesuffix(".conda") or path.stem,
            "name": str(data["name"]),
            "platform": str(data.get("subdir") or ""),
            "version": str(data["version"]),
            "url": url,
            "md5": data.get("md5"),
        })  # fmt: skip
    return sorted(out, key=lambda e: e["name"])


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
        return _file_path(url)
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
    import asyncio

    import rattler

    entries = parse_explicit(file.read_text(encoding="utf-8"), str(file))
    cache = pkgs_dir()
    paths = asyncio.run(_fetch(entries, cache))
    verify(entries, paths)

    async def build() -> None:
        records = []
        for entry, path in zip(entries, paths, strict=True):
            record = await rattler.RepoDataRecord.from_package_archive(path)
            record.url = path.absolute().as_uri()
            record.channel = entry.url.rsplit("/", 2)[0]
            records.append(record)
        await rattler.install(
            records, target_prefix=prefix, cache_dir=cache / "extracted", show_progress=False
        )

    try:
        asyncio.run(build())
    except CondaError:
        raise
    except Exception as exc:
        raise CondaError("CondaError", f"cannot install into {prefix}: {exc}") from exc
    _record_origins(prefix, entries)
    return 0


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


# -- commands ----------------------------------------------------------------------------------


def emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def cmd_create(args: argparse.Namespace, *, update: bool = False) -> int:
    prefix = resolve_prefix(args.prefix, args.name)
    if args.file:
        if update or args.dry_run:
            raise CondaError("ArgumentError", "--file takes an explicit lockfile to install")
        return install_explicit(Path(args.file), prefix)
    if not args.specs:
        raise CondaError("ArgumentError", "no package specs given")
    subdir = target_subdir(args.subdir)
    specs = list(args.specs)
    current = installed(prefix) if update else []
    asked = {_spec_name(s) for s in specs}
    # conda's install: what is installed stays installed, at its current build where the request
    # allows; what was asked for moves to the newest version its spec allows.
    specs += [e["name"] for e in current if e["name"] not in asked]
    keep = {e["name"]: (e["version"], e["build_string"]) for e in current if e["name"] not in asked}
    records = solve(specs, args.channel or [], subdir, keep=keep)
    records = [r for r in records if not r.name.normalized.startswith("__")]
    kept = {(e["name"], e["version"], e["build_string"]) for e in current}
    changed = [r for r in records if (r.name.normalized, str(r.version), str(r.build)) not in kept]
    new_names = {r.name.normalized for r in changed}
    unlink = [e for e in current if e["name"] in new_names]
    if not args.dry_run:
        return install_records(records, prefix)
    result = {
        "actions": {
            "FETCH": [fetch_entry(r) for r in changed],
            "LINK": [link_entry(r) for r in changed],
            "UNLINK": unlink,
            "PREFIX": str(prefix),
        },
        "dry_run": True,
        "prefix": str(prefix),
        "success": True,
    }
    if args.json:
        emit(result)
    else:
        for r in changed:
            print(f"  {r.name.normalized:<28} {r.version!s:<16} {r.build!s:<24} {r.channel}")
    return 0


def _spec_name(spec: str) -> str:
    from rattler import MatchSpec

    name = MatchSpec(spec, strict=False).name
    return name.normalized if name is not None else spec


def cmd_list(args: argparse.Namespace) -> int:
    prefix = resolve_prefix(args.prefix, args.name)
    if not (prefix / "conda-meta").is_dir():
        raise CondaError("EnvironmentLocationNotFound", f"not a conda environment: {prefix}")
    entries = installed(prefix)
    if args.explicit:
        print("@EXPLICIT")
        for e in entries:
            print(f"{e['url']}#{e['md5']}" if args.md5 and e["md5"] else e["url"])
    elif args.json:
        emit([{k: v for k, v in e.items() if k not in ("url", "md5")} for e in entries])
    else:
        print(f"# packages in environment at {prefix}:")
        for e in entries:
            print(f"{e['name']:<28} {e['version']:<16} {e['build_string']:<24} {e['channel']}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    subdir = target_subdir(None)
    virtual = virtual_packages(subdir, os.environ)
    data = {
        "channels": [],
        "conda_version": None,
        "envs_dirs": [str(envs_dir())],
        "pkgs_dirs": [str(pkgs_dir())],
        "platform": subdir,
        "provision_conda_version": __version__,
        "python_version": host_platform.python_version(),
        "rattler_version": _rattler_version(),
        "root_prefix": str(cache_dir()),
        "virtual_pkgs": [[k, v, b] for k, (v, b) in virtual.items()],
    }
    if args.json:
        emit(data)
    else:
        for key, value in data.items():
            print(f"{key:>24} : {value}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    prefix = resolve_prefix(args.prefix, args.name)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise CondaError("ArgumentError", "no command given to run")
    if not (prefix / "conda-meta").is_dir():
        raise CondaError("EnvironmentLocationNotFound", f"not a conda environment: {prefix}")
    env = dict(os.environ)
    env.update(
        CONDA_PREFIX=str(prefix),
        CONDA_DEFAULT_ENV=str(prefix),
        CONDA_SHLVL="1",
        PATH=os.pathsep.join([str(prefix / "bin"), env.get("PATH", "")]),
    )
    hooks = sorted((prefix / "etc" / "conda" / "activate.d").glob("*.sh"))
    sys.stdout.flush()
    sys.stderr.flush()
    if hooks:
        # Activation hooks are shell code; source them the way `conda activate` would, then exec.
        script = "".join(f". {shlex_quote(str(h))}\n" for h in hooks) + 'exec "$@"\n'
        bash = shutil.which("bash") or "/bin/sh"
        os.execve(bash, [bash, "-c", script, command[0], *command], env)
    exe = shutil.which(command[0], path=env["PATH"])
    if exe is None:
        raise CondaError("CondaError", f"{command[0]}: command not found in {prefix}/bin or PATH")
    os.execve(exe, command, env)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def cmd_env(args: argparse.Namespace) -> int:
    raise CondaError(
        "NotImplementedError",
        f"{PROG} installs explicit and unified lockfiles, not environment.yml; "
        "use conda-lock's default (unified) lockfile",
    )


def _rattler_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("py-rattler")
    except PackageNotFoundError:
        return "unknown"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="conda-compatible solver and installer over py-rattler (driven by conda-lock)",
    )
    top.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="command_name")

    def prefix_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("-p", "--prefix")
        p.add_argument("-n", "--name")
        p.add_argument("--json", action="store_true")
        p.add_argument("-q", "--quiet", action="store_true")
        p.add_argument("-v", "--verbose", action="count", default=0)

    for name in ("create", "install", "update"):
        p = sub.add_parser(
            name, help=f"conda {name}: solve (--dry-run) or install an explicit lockfile"
        )
        prefix_opts(p)
        p.add_argument("-c", "--channel", action="append")
        p.add_argument("--override-channels", action="store_true")
        p.add_argument("--dry-run", "-d", action="store_true")
        p.add_argument("-y", "--yes", action="store_true")
        p.add_argument("--copy", action="store_true")
        p.add_argument("--file")
        p.add_argument("--subdir", "--platform", dest="subdir")
        p.add_argument("specs", nargs="*")
    p = sub.add_parser("list", help="packages installed in a prefix")
    prefix_opts(p)
    p.add_argument("--no-pip", action="store_true")
    p.add_argument("--explicit", action="store_true")
    p.add_argument("--md5", action="store_true")
    p = sub.add_parser("info", help="caches, platform and virtual packages")
    p.add_argument("--json", action="store_true")
    p.add_argument("-a", "--all", action="store_true")
    p = sub.add_parser("run", help="run a command inside a prefix")
    p.add_argument("-p", "--prefix")
    p.add_argument("-n", "--name")
    p.add_argument("--no-capture-output", "--live-stream", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("env", help="not supported (use a lockfile)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    return top


def run(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    if args.version:
        print(f"{PROG} {__version__} (py-rattler {_rattler_version()})")
        return 0
    handlers = {
        "create": cmd_create,
        "install": lambda a: cmd_create(a, update=True),
        "update": lambda a: cmd_create(a, update=True),
        "list": cmd_list,
        "info": cmd_info,
        "run": cmd_run,
        "env": cmd_env,
    }
    if args.command_name not in handlers:
        parser().print_usage(sys.stderr)
        return 2
    as_json = bool(getattr(args, "json", False))
    try:
        return int(handlers[args.command_name](args))
    except CondaError as exc:
        if as_json:
            emit({
                "caused_by": None, "error": f"{exc.name}: {exc.message}",
                "exception_name": exc.name, "message": exc.message,
            })  # fmt: skip
        print(f"{PROG}: {exc.name}: {exc.message}", file=sys.stderr)
        return exc.code


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        # conda-lock asks on every lock: answer before argparse, asyncio and rattler load.
        print(f"{PROG} {__version__} (py-rattler {_rattler_version()})")
        sys.exit(0)
    code = run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # rattler's runtime can crash while the interpreter tears down after a failed request;
    # everything is flushed, so leave without running finalizers.
    os._exit(code)


if __name__ == "__main__":
    main()
