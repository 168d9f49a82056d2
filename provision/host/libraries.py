"""The CUDA libraries TensorFlow loads (cudart, cuDNN, cuBLAS): every copy on the loader's path, in
CUDA toolkits and in Python environments, with its version and the loader's rank for its SONAME.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from provision.host import loader
from provision.host.discovery import python_prefixes, site_packages, toolkit_roots
from provision.host.library_versions import LIB_RE, FoundLibrary, identify
from provision.host.model import KINDS, Library, Probe
from provision.host.root import Context, glob
from provision.payload import elf


@dataclass(frozen=True)
class LibraryFacts:
    libraries: tuple[Library, ...]  # by kind, then path
    ld_library_path: tuple[str, ...]  # as shown: host paths, home as ~
    loader_dirs: tuple[str, ...]  # /etc/ld.so.conf's folders, then the trusted ones
    probes: tuple[Probe, ...]


@dataclass
class _Seen:
    """A library file while the search is still finding the places that hold it."""

    kind: str
    names: set[str] = field(default_factory=set)
    found_in: list[str] = field(default_factory=list)
    env: str = ""


def probe_libraries(ctx: Context) -> LibraryFacts:
    cache = loader.ldconfig_cache(ctx)
    conf_dirs = loader.loader_conf_dirs(ctx)
    ld_dirs = ctx.dirs("LD_LIBRARY_PATH")
    places: list[tuple[Path, str, str]] = [(d, "LD_LIBRARY_PATH", "") for d in ld_dirs]
    cached: set[Path] = set()
    if cache is not None:
        for name, files in cache.items():
            if LIB_RE.match(name):
                cached.update(ctx.real(f) for f in files)
                places += [(f.parent, "loader cache", "") for f in files]
    conf_label = "loader cache" if cache is None else "ld.so.conf folder"
    places += [(ctx.at(d), conf_label, "") for d in conf_dirs]
    for root in toolkit_roots(ctx):
        for sub in ("lib64", "lib", "targets/*/lib"):
            places += [(d, "CUDA toolkit", "") for d in glob(root, sub)]
    for python_prefix in python_prefixes(ctx):
        prefix = python_prefix.path
        if python_prefix.conda:
            places.append((prefix / "lib", "conda", ctx.show(prefix)))
        for site in site_packages(prefix):
            places += [(d, "pip", ctx.show(prefix)) for d in glob(site, "nvidia/*/lib")]

    seen: dict[Path, _Seen] = {}
    seen_dirs: set[tuple[Path, str]] = set()
    for folder, label, env in places:
        key = (ctx.real(folder), label)
        if key in seen_dirs or not folder.is_dir():
            continue
        seen_dirs.add(key)
        for kind in KINDS:
            for f in glob(folder, f"lib{kind}.so*"):
                if not LIB_RE.match(f.name) or not f.is_file():
                    continue
                real = ctx.real(f)
                item = seen.setdefault(real, _Seen(kind))
                item.names.update({f.name, real.name})
                if label == "ld.so.conf folder" and real not in cached:
                    label_here = "ld.so.conf folder, not in the loader cache"
                else:
                    label_here = label
                if label_here not in item.found_in:
                    item.found_in.append(label_here)
                item.env = item.env or env

    located = [
        FoundLibrary(item.kind, real, frozenset(item.names), item.env, elf.read(str(real)))
        for real, item in seen.items()
    ]
    versions = identify(ctx, located)
    ranks = loader.loader_ranks(
        ctx, {lf.soname for lf in located}, set(seen), ld_dirs, cache, conf_dirs
    )
    libraries = tuple(
        Library(
            kind=lf.kind,
            path=ctx.show(lf.real),
            soname=lf.soname,
            version=versions[lf.real].version,
            version_from=versions[lf.real].version_from,
            found_in=tuple(seen[lf.real].found_in),
            loader_rank=ranks.get(lf.real),
            env=lf.env,
            built_for=versions[lf.real].built_for,
        )
        for lf in sorted(located, key=lambda lf: (KINDS.index(lf.kind), str(lf.real)))
    )
    counts = ", ".join(f"{sum(lib.kind == k for lib in libraries)} {k}" for k in KINDS)
    return LibraryFacts(
        libraries=libraries,
        ld_library_path=tuple(ctx.show(d) for d in ld_dirs),
        loader_dirs=tuple(conf_dirs),
        probes=(Probe("libraries", "ok", counts),),
    )
