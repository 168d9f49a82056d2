"""Where Python, TensorFlow and CUDA tools live: Python installations and environments (conda,
venvs, provision's own registry), their site-packages, CUDA toolkits, and every ptxas.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from provision.errors import ProvisionError
from provision.host.model import HostEnvironment, Probe, Ptxas
from provision.host.root import Context, glob, read_text

CONDA_BASES = (
    "~/miniconda3", "~/anaconda3", "~/miniforge3", "~/mambaforge", "~/micromamba",
    "~/.local/share/mamba", "/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/opt/miniforge3",
)  # fmt: skip
PYTHON_PREFIXES = ("/usr", "/usr/local", "~/.local")
# Where people keep virtual environments (virtualenvwrapper, pyenv-virtualenv, habit).
VENV_FOLDERS = ("~/.virtualenvs", "~/venvs", "~/.venvs", "~/envs", "~/.pyenv/versions")


class Prefix(NamedTuple):
    path: Path  # a file of this filesystem
    kind: str  # conda | venv | python

    @property
    def conda(self) -> bool:
        """A conda environment: its own lib/ and bin/ hold libraries and tools."""
        return self.kind == "conda"


@dataclass(frozen=True)
class PtxasFacts:
    ptxas: tuple[Ptxas, ...]
    probes: tuple[Probe, ...]


@dataclass(frozen=True)
class EnvironmentFacts:
    pythons: tuple[str, ...]  # "3.12", oldest first
    environments: tuple[HostEnvironment, ...]  # those with TensorFlow
    probes: tuple[Probe, ...]


def python_prefixes(ctx: Context) -> list[Prefix]:
    """Every Python installation or environment worth looking into, each once."""
    wanted: list[Path] = []
    if not ctx.stand_in:
        wanted += [Path(sys.prefix), *_registered_prefixes()]
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if ctx.env.get(var):
            wanted.append(ctx.at(ctx.env[var]))
    wanted += _conda_prefixes(ctx)
    wanted += [ctx.at(p) for p in PYTHON_PREFIXES]
    for folder in VENV_FOLDERS:
        wanted += glob(ctx.at(folder), "*")
    out: list[Prefix] = []
    seen: set[Path] = set()
    for prefix in wanted:
        real = ctx.real(prefix)
        if real in seen or not prefix.is_dir():
            continue
        seen.add(real)
        kind = (
            "conda"
            if (prefix / "conda-meta").is_dir()
            else "venv"
            if (prefix / "pyvenv.cfg").exists()
            else "python"
        )
        out.append(Prefix(prefix, kind))
    return out


def _registered_prefixes() -> list[Path]:
    """The environments provision built here (its registry), wherever their prefixes are."""
    from provision import registry

    try:
        return [Path(r.prefix) for _, r in registry.records() if not isinstance(r, str)]
    except OSError:
        return []


def _conda_prefixes(ctx: Context) -> list[Path]:
    bases: list[Path] = [ctx.at(b) for b in CONDA_BASES]
    for var in ("CONDA_EXE", "MAMBA_EXE"):
        if ctx.env.get(var):
            bases.append(ctx.at(ctx.env[var]).parent.parent)
    if ctx.env.get("MAMBA_ROOT_PREFIX"):
        bases.append(ctx.at(ctx.env["MAMBA_ROOT_PREFIX"]))
    prefixes = [
        ctx.at(v) for k, v in sorted(ctx.env.items()) if re.fullmatch(r"CONDA_PREFIX(_\d+)?", k)
    ]
    for line in read_text(ctx.at("~/.conda/environments.txt")).splitlines():
        if line.strip():
            prefixes.append(ctx.at(line.strip()))
    for base in bases:
        if (base / "conda-meta").is_dir():
            prefixes.append(base)
            prefixes += [p for p in glob(base, "envs/*") if (p / "conda-meta").is_dir()]
    return prefixes


def site_packages(prefix: Path) -> list[Path]:
    found = glob(prefix, "lib/python3*/site-packages") + glob(prefix, "lib/python3*/dist-packages")
    return [p for p in found if p.is_dir()]


def _python_of(site: Path) -> str:
    m = re.match(r"python(\d+\.\d+)$", site.parent.name)
    return m.group(1) if m else ""


def toolkit_roots(ctx: Context) -> list[Path]:
    """The CUDA toolkits installed the usual way: /usr/local/cuda*."""
    return [p for p in glob(ctx.at("/usr/local"), "cuda*") if p.is_dir()]


def probe_ptxas(ctx: Context) -> PtxasFacts:
    candidates: list[tuple[Path, str]] = [
        (root / "bin" / "ptxas", "") for root in toolkit_roots(ctx)
    ]
    candidates += [(d / "ptxas", "") for d in ctx.dirs("PATH")]
    for python_prefix in python_prefixes(ctx):
        prefix, env = python_prefix.path, ctx.show(python_prefix.path)
        if python_prefix.conda:
            candidates.append((prefix / "bin" / "ptxas", env))
        for site in site_packages(prefix):
            candidates += [(p, env) for p in glob(site, "nvidia/*/bin/ptxas")]
    seen: set[Path] = set()
    found: list[Ptxas] = []
    for path, env in candidates:
        if not os.access(path, os.X_OK):
            continue
        real = ctx.real(path)
        if real in seen:
            continue
        seen.add(real)
        try:
            said = ctx.run([str(path), "--version"]).stdout
        except ProvisionError:
            said = ""
        m = re.search(r"release (\d+\.\d+)", said)
        found.append(Ptxas(ctx.show(real), m.group(1) if m else "", env))
    detail = ", ".join(f"{p.version or '?'}" for p in found) or "none found"
    return PtxasFacts(tuple(found), (Probe("ptxas", "ok" if found else "absent", detail),))


def probe_environments(ctx: Context) -> EnvironmentFacts:
    pythons: dict[str, str] = {}
    for d in [*ctx.dirs("PATH"), ctx.at("/usr/bin"), ctx.at("/usr/local/bin")]:
        for exe in glob(d, "python3.*"):
            m = re.fullmatch(r"python(3\.\d+)", exe.name)
            if m and os.access(exe, os.X_OK):
                pythons.setdefault(m.group(1), ctx.show(exe))
    envs: list[HostEnvironment] = []
    for prefix, kind in python_prefixes(ctx):
        for site in site_packages(prefix):
            tf = [
                d.name[: -len(".dist-info")].split("-")[1]
                for d in glob(site, "tensorflow-*.dist-info")
            ]
            if tf:
                hooked = (site / "provision_env_hook.pth").is_file()
                envs.append(
                    HostEnvironment(ctx.show(prefix), kind, _python_of(site), max(tf), hooked)
                )
    ordered = tuple(sorted(pythons, key=lambda v: tuple(int(x) for x in v.split("."))))
    detail = f"Python {', '.join(ordered) or 'none'}; {len(envs)} environment(s) with TensorFlow"
    return EnvironmentFacts(ordered, tuple(envs), (Probe("environments", "ok", detail),))
