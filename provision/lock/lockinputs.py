"""What a lock is made from: envs/NAME/ as lock sees it (the LockTarget) and its input files.

load_target takes the environment directory from environment.load (the one reader of provision.json
and of the table of an environment's files), the user's packages from packages.in, and checks that
the path's input files are there;
read_environment and requirements_in read environment.yml and requirements.in by meaning
(requirements parsed, match specs with their whitespace normalised), and virtual_packages and
env_channels the rest of a conda environment's inputs. Nothing here solves or writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from provision import environment
from provision.environment import EnvDir
from provision.errors import LockError
from provision.fileio import load_yaml
from provision.lock.requirements import parse_requirements
from provision.matrix import spec
from provision.userpackages import Package

if TYPE_CHECKING:
    from packaging.requirements import Requirement


@dataclass(frozen=True)
class LockTarget:
    """envs/<name>/ as lock sees it: the environment directory (environment.EnvDir, the one
    reader of provision.json), the EnvSpec it resolves to, and the user's packages (packages.in)."""

    env: EnvDir
    spec: spec.EnvSpec
    packages: tuple[Package, ...] = ()

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def root(self) -> Path:
        return self.env.root

    @property
    def lock_path(self) -> Path:
        return self.env.lock


def load_target(env: EnvDir) -> LockTarget:
    """What a lock is made from: the environment directory, its spec and the user's packages;
    LockError when the request does not resolve or an input is missing or unreadable."""
    root = env.root
    if not (root / environment.MANIFEST).is_file():
        raise LockError(f"{root / environment.MANIFEST} is gone; render the environment again")
    try:
        resolved = env.spec
    except environment.ManifestError as exc:
        raise LockError(str(exc)) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise LockError(
            f"{root / environment.MANIFEST}: cannot read the request ({exc}); render the "
            "environment again"
        ) from exc
    for path in env.inputs:
        if not path.is_file():
            raise LockError(f"{path} is missing; run: provision render {env.request_argv()}")
    try:
        packages = tuple(env.packages())
    except environment.ManifestError as exc:
        raise LockError(str(exc)) from exc
    return LockTarget(env, resolved, packages)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _input_yaml(target: LockTarget, rel: str) -> dict[str, object]:
    import yaml

    try:
        data = load_yaml(target.root / rel)
    except yaml.YAMLError as exc:
        raise LockError(f"{target.root / rel} is not valid YAML: {one_line(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LockError(f"{target.root / rel} is not a mapping; render the environment again")
    return data


def _list(value: object) -> list[object]:
    """A YAML list; nothing for null or a missing key."""
    return value if isinstance(value, list) else []


def strip_auth(url: str) -> str:
    return re.sub(r"//[^/@]+@", "//", url)


def env_channels(target: LockTarget) -> list[str]:
    """The channels environment.yml names (what conda-lock uses without --channel)."""
    channels = _input_yaml(target, "environment.yml").get("channels")
    return [str(c) for c in _list(channels) if str(c) != "nodefaults"]


@dataclass(frozen=True)
class EnvironmentYml:
    """environment.yml as the lock reads it: conda match specs and the pip section."""

    conda: tuple[str, ...]  # whitespace normalised, in the file's order
    pip: tuple[Requirement, ...]


def read_environment(target: LockTarget, user: bool = False) -> EnvironmentYml:
    """environment.yml's specs; with `user`, the user's packages (packages.in) added, as the lock
    resolves them."""
    conda: list[str] = []
    pip: list[Requirement] = []
    if user:
        conda += [normal_match_spec(p.spec) for p in target.packages if not p.pypi]
        pip += user_requirements(target)
    for dep in _list(_input_yaml(target, "environment.yml").get("dependencies")):
        if isinstance(dep, dict) and "pip" in dep:
            lines = "\n".join(str(r) for r in dep["pip"] or [])
            pip += parse_requirements(lines, f"{target.name}/environment.yml (pip)")
        elif isinstance(dep, dict):
            conda.append(json.dumps(dep, sort_keys=True))  # conda-lock says what it makes of it
        else:
            conda.append(normal_match_spec(str(dep)))
    return EnvironmentYml(tuple(conda), tuple(pip))


def normal_match_spec(text: str) -> str:
    """`python >= 3.8` and `python>=3.8` are one spec; `numpy 1.2` (name, space, version) stays."""
    return re.sub(r"\s*([=<>!~,|]+)\s*", r"\1", " ".join(text.split()))


def virtual_packages(target: LockTarget, platforms: Sequence[str]) -> dict[str, dict[str, str]]:
    """platform -> {virtual package: its spec} from virtual-packages.yml, whitespace normalised."""
    subdirs = _input_yaml(target, "virtual-packages.yml").get("subdirs") or {}
    out = {}
    for platform in sorted(platforms):
        entry = subdirs.get(platform) if isinstance(subdirs, dict) else None
        packages = entry.get("packages") if isinstance(entry, dict) else None
        out[platform] = {
            str(k): " ".join(str(v).split())
            for k, v in sorted((packages if isinstance(packages, dict) else {}).items())
        }
    return out


def requirements_in(target: LockTarget) -> list[Requirement]:
    text = (target.root / "requirements.in").read_text(encoding="utf-8")
    return parse_requirements(text, f"{target.name}/requirements.in")


def user_requirements(target: LockTarget) -> list[Requirement]:
    """The user's packages that the package index serves: all of packages.in on the pip and system
    paths, its `pypi:` lines on the conda path."""
    from packaging.requirements import Requirement

    conda = target.spec.kind.conda_env
    return [Requirement(p.spec) for p in target.packages if p.pypi or not conda]
