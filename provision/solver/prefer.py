"""What an earlier lock chose, kept by the next solve where its specs allow: a preference, never a
pin (rattler's locked packages), so a re-lock moves only what a changed request needs to move.

provision's conda-path lock writes the file (one JSON object, {subdir: {name: [version, build]}})
and names it in PREFER_ENV for the conda it runs; provision-conda's `create --dry-run` (what
conda-lock asks to solve) reads its subdir's. conda, mamba and micromamba do not read it: with
them every lock is solved afresh.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from provision.solver.conda_errors import CondaError

PREFER_ENV = "PROVISION_CONDA_PREFER"
LIMIT = 16 * 1024 * 1024  # a lock of ten thousand packages is under 1 MiB here

Choices = Mapping[str, Mapping[str, tuple[str, str]]]  # subdir -> name -> (version, build)


def write(path: Path, choices: Choices) -> None:
    data = {sub: {n: list(vb) for n, vb in sorted(pkgs.items())} for sub, pkgs in choices.items()}
    path.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")


def read(subdir: str, env: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """name -> (version, build) preferred for subdir: {} when no file is named."""
    where = (os.environ if env is None else env).get(PREFER_ENV)
    if not where:
        return {}
    try:
        with open(where, "rb") as fh:
            raw = fh.read(LIMIT + 1)
        if len(raw) > LIMIT:
            raise ValueError(f"over {LIMIT} bytes")
        data = json.loads(raw.decode("utf-8"))
        pkgs = data.get(subdir, {}) if isinstance(data, dict) else None
        if not isinstance(pkgs, dict):
            raise ValueError(f"no mapping for {subdir}")
        return {str(n): (str(v[0]), str(v[1])) for n, v in pkgs.items()}
    except (OSError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise CondaError("ArgumentError", f"{PREFER_ENV}={where}: unreadable ({exc})") from exc
