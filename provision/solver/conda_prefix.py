"""A conda prefix: which one a command means, and what its conda-meta says is installed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from provision.solver.conda_errors import CondaError
from provision.solver.config import envs_dir
from provision.solver.solve import LinkEntry


class InstalledPackage(LinkEntry):
    """One conda-meta record, in conda's `list --json` shape plus where it came from."""

    url: str
    md5: str | None


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


def require_environment(prefix: Path) -> None:
    if not (prefix / "conda-meta").is_dir():
        raise CondaError("EnvironmentLocationNotFound", f"not a conda environment: {prefix}")


def installed(prefix: Path) -> list[InstalledPackage]:
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        return []
    out: list[InstalledPackage] = []
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
