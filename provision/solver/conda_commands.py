"""The conda commands conda-lock calls: create/install/update, list, info (and env, refused)."""

from __future__ import annotations

import json
import os
import platform as host_platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from provision import __version__
from provision.solver.conda_errors import CondaError
from provision.solver.conda_prefix import (
    InstalledPackage,
    installed,
    require_environment,
    resolve_prefix,
)
from provision.solver.config import (
    PROG,
    cache_dir,
    envs_dir,
    pkgs_dir,
    rattler_version,
    target_subdir,
)
from provision.solver.install import install_explicit, install_records
from provision.solver.prefer import read as preferred
from provision.solver.solve import FetchEntry, LinkEntry, fetch_entry, link_entry, solve
from provision.solver.virtual import virtual_packages


@dataclass(frozen=True)
class CreateOptions:
    """create, or with `update` install/update: solve (--dry-run) or install a lockfile."""

    prefix: str | None
    name: str | None
    channels: tuple[str, ...]
    specs: tuple[str, ...]
    file: str | None
    subdir: str | None
    dry_run: bool
    json: bool
    update: bool


@dataclass(frozen=True)
class ListOptions:
    prefix: str | None
    name: str | None
    json: bool
    explicit: bool
    md5: bool


@dataclass(frozen=True)
class InfoOptions:
    json: bool


class Actions(TypedDict):
    FETCH: list[FetchEntry]
    LINK: list[LinkEntry]
    UNLINK: list[InstalledPackage]
    PREFIX: str


class DryRun(TypedDict):
    """conda's answer to `create/install --dry-run --json`: what conda-lock reads."""

    actions: Actions
    dry_run: bool
    prefix: str
    success: bool


def emit(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def cmd_create(opts: CreateOptions) -> int:
    prefix = resolve_prefix(opts.prefix, opts.name)
    if opts.file:
        if opts.update or opts.dry_run:
            raise CondaError("ArgumentError", "--file takes an explicit lockfile to install")
        return install_explicit(Path(opts.file), prefix)
    if not opts.specs:
        raise CondaError("ArgumentError", "no package specs given")
    subdir = target_subdir(opts.subdir)
    specs = list(opts.specs)
    current = installed(prefix) if opts.update else []
    asked = {_spec_name(s) for s in specs}
    # conda's install: what is installed stays installed, at its current build where the request
    # allows; what was asked for moves to the newest version its spec allows.
    specs += [e["name"] for e in current if e["name"] not in asked]
    keep = {e["name"]: (e["version"], e["build_string"]) for e in current if e["name"] not in asked}
    if not opts.update:
        # A lock's solve: what the previous lock chose stays where the specs allow (prefer).
        keep = preferred(subdir)
    records = solve(specs, opts.channels, subdir, keep=keep)
    records = [r for r in records if not r.name.normalized.startswith("__")]
    kept = {(e["name"], e["version"], e["build_string"]) for e in current}
    changed = [r for r in records if (r.name.normalized, str(r.version), str(r.build)) not in kept]
    new_names = {r.name.normalized for r in changed}
    unlink = [e for e in current if e["name"] in new_names]
    if not opts.dry_run:
        return install_records(records, prefix)
    result: DryRun = {
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
    if opts.json:
        emit(result)
    else:
        for r in changed:
            print(f"  {r.name.normalized:<28} {r.version!s:<16} {r.build!s:<24} {r.channel}")
    return 0


def _spec_name(spec: str) -> str:
    from rattler import MatchSpec

    name = MatchSpec(spec, strict=False).name
    return name.normalized if name is not None else spec


def cmd_list(opts: ListOptions) -> int:
    prefix = resolve_prefix(opts.prefix, opts.name)
    require_environment(prefix)
    entries = installed(prefix)
    if opts.explicit:
        print("@EXPLICIT")
        for e in entries:
            print(f"{e['url']}#{e['md5']}" if opts.md5 and e["md5"] else e["url"])
    elif opts.json:
        emit([{k: v for k, v in e.items() if k not in ("url", "md5")} for e in entries])
    else:
        print(f"# packages in environment at {prefix}:")
        for e in entries:
            print(f"{e['name']:<28} {e['version']:<16} {e['build_string']:<24} {e['channel']}")
    return 0


def cmd_info(opts: InfoOptions) -> int:
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
        "rattler_version": rattler_version(),
        "root_prefix": str(cache_dir()),
        "virtual_pkgs": [[k, v, b] for k, (v, b) in virtual.items()],
    }
    if opts.json:
        emit(data)
    else:
        for key, value in data.items():
            print(f"{key:>24} : {value}")
    return 0


def cmd_env() -> int:
    raise CondaError(
        "NotImplementedError",
        f"{PROG} installs explicit and unified lockfiles, not environment.yml; "
        "use conda-lock's default (unified) lockfile",
    )
