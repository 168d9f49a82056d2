"""The image of a built root filesystem: which file goes in which layer, the config, the archive,
and the Apptainer definition that builds a SIF from it. The order of the steps is image/staging's
docstring; `build_image` is the one entry point the CLI calls.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision import environment, registry
from provision.bundlefile.bundle_format import BundleManifest
from provision.bundlefile.bundle_io import open_source
from provision.bundlefile.bundle_sign import Trust
from provision.errors import UsageError
from provision.image import oci, recipe, staging
from provision.image.oci import ImageError
from provision.progress import Event, Report, nothing
from provision.userpackages import canonical

HEALTH_INTERVAL_NS = 3600 * 10**9  # verify loads TensorFlow and runs on each GPU: hourly
HEALTH_TIMEOUT_NS = 600 * 10**9
# Left out of the image: PROVISION_HOME's scratch (the staging folder, lock files, uv's cache of
# interpreters) and the install's facts (a baseline with its clock time; the first verify in the
# container records its own)
SKIP = ("unpack", "locks", "cache", "facts")
# The prefix's own records of the build (the lock's sha256, every file installed): they change with
# the user's packages, so they go in the user's layer
BUILD_RECORDS = (".provision-install.json", ".provision-install.files", ".lock")


@dataclass(frozen=True)
class ImageRequest:
    output: Path
    base: Path
    bundle: Path | None = None  # else make_bundle(dest) writes one at dest
    make_bundle: Callable[[Path], Path] | None = None  # the CLI's: provision bundle NAME
    force: bool = False
    level: int = 6  # gzip
    tag: str = ""  # the name podman load gives it (default localhost/NAME:latest)
    apptainer: bool = False
    trust: Trust | None = None
    cache: Path | None = None  # compressed layers kept by diff_id; None: none kept
    reuse: bool = True  # False: build and compress again (what is made is still kept)
    name: str | None = None  # the environment the user named (a bundle of another is refused)


def definition_path(output: Path) -> Path:
    stem = output.name.removesuffix(".tar").removesuffix(".oci")
    return output.with_name(f"{stem}.def")


def build_image(request: ImageRequest, report: Report = nothing) -> staging.ImageResult:
    from provision.paths import output_file

    started = time.monotonic()
    seconds: dict[str, float] = {}
    output_file(request.output, "-o", request.force)
    if request.apptainer:
        output_file(definition_path(request.output), "the Apptainer definition", request.force)
    oci.check_base(request.base)
    with staging.work_dir(request.output) as work:
        bundle = request.bundle
        if bundle is None:
            if request.make_bundle is None:
                raise ImageError("give an environment NAME, or --from-bundle FILE")
            bundle = request.make_bundle(work / "environment.bundle.tar")
            seconds["bundle"] = time.monotonic() - started
        manifest = staging.check_bundle(bundle, request.trust, report)
        if request.name is not None and request.name != manifest.name:
            raise UsageError(f"{bundle} is a bundle of {manifest.name}, not of {request.name}")
        bundle_size = sum(p.stat().st_size for p in open_source(bundle).files)
        (work / "blobs").mkdir()
        base = oci.read_base(request.base, work, request.level, request.cache, request.reuse)
        ref = request.tag or f"localhost/{manifest.name}:latest"
        key = recipe.key(manifest, base, request.level, ref)
        earlier = None
        if request.cache is not None and request.reuse:
            earlier = recipe.load(request.cache, key, request.level)
        if earlier is not None:
            report(Event("step", "this bundle was built on this base before: its layers reused"))
            layers, config = earlier
        else:
            layers, config = _build(request, work, base, bundle, manifest, seconds, report)
            if request.cache is not None:
                recipe.save(request.cache, key, layers, config)
        config_blob = oci.json_blob(config, work / "blobs", oci.CONFIG)
        all_layers = (*base.layers, *layers)
        image_manifest = {
            "schemaVersion": 2,
            "mediaType": oci.MANIFEST,
            "config": config_blob.descriptor(),
            "layers": [x.blob.descriptor() for x in all_layers],
            "annotations": {"org.opencontainers.image.title": manifest.name},
        }
        manifest_blob = oci.json_blob(image_manifest, work / "blobs", oci.MANIFEST)
        tmp = work / "image.oci.tar"
        oci.write_archive(tmp, manifest_blob, [config_blob, *(x.blob for x in all_layers)], ref)
        output_file(request.output, "-o", request.force)  # again: nothing appeared there since
        tmp.replace(request.output)
        definition = None
        if request.apptainer:
            definition = definition_path(request.output)
            from provision.fileio import write_atomic

            write_atomic(definition, apptainer_definition(manifest.name, request.output.name))
    seconds["total"] = time.monotonic() - started
    return staging.ImageResult(
        manifest.name, request.output, manifest_blob.digest, request.output.stat().st_size,
        tuple(all_layers), bundle_size,
        sum(x.blob.size for x in base.layers), seconds, definition,
    )  # fmt: skip


def _build(
    request: ImageRequest, work: Path, base: oci.Base, bundle: Path, manifest: BundleManifest,
    seconds: dict[str, float], report: Report,
) -> tuple[tuple[oci.Layer, ...], dict[str, Any]]:  # fmt: skip
    """The base unpacked, the bundle built inside it, the layers and the config of what it made."""
    bootstrap = staging.first_bootstrap(bundle)
    report(Event("step", f"unpacking the base ({len(base.layers)} layer(s))"))
    rootfs = work / "rootfs"
    rootfs.mkdir()
    oci.unpack(base.layers, rootfs)
    t0 = time.monotonic()
    report(Event("step", f"building {manifest.name} inside the base, with no network"))
    staging.build_in_root(rootfs, bundle, bootstrap, report)
    staging.settle_record(rootfs, manifest.name)
    staging.settle_prefix(rootfs, _record(rootfs, manifest.name))
    seconds["build"] = time.monotonic() - t0
    t0 = time.monotonic()
    layers = own_layers(rootfs, manifest.name, work / "blobs", request, report)
    seconds["layers"] = time.monotonic() - t0
    record = _record(rootfs, manifest.name)
    return layers, image_config(base, layers, record, manifest.tf, manifest.lock_sha256)


def _record(rootfs: Path, name: str) -> registry.Record:
    path = rootfs / staging.HOME.lstrip("/") / "registry" / f"{name}.json"
    return registry.Record.from_json(json.loads(path.read_text(encoding="utf-8")))


def user_files(rootfs: Path, record: registry.Record) -> set[str]:
    """The files (relative to rootfs) of the distributions packages.in names, from their RECORD."""
    env = environment.load(rootfs / record.env_dir.lstrip("/"))
    wanted = {canonical(p.name) for p in env.packages()}
    prefix = rootfs / record.prefix.lstrip("/")
    site = environment.site_packages(prefix, record.python)
    found: set[str] = set()
    if not wanted or not site.is_dir():
        return found
    for info in sorted(site.glob("*.dist-info")):
        name = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        if canonical(name) not in wanted:
            continue
        rows = (info / "RECORD").read_text(encoding="utf-8").splitlines()
        for row in rows:
            rel = row.rsplit(",", 2)[0] if row else ""
            if not rel:
                continue
            path = Path(os.path.normpath(site / rel))
            found.add(path.relative_to(rootfs).as_posix())
            if path.suffix == ".py":  # its bytecode, when the installer compiled it
                for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
                    found.add(pyc.relative_to(rootfs).as_posix())
        found.add(info.relative_to(rootfs).as_posix())
        found.update(p.relative_to(rootfs).as_posix() for p in info.rglob("*"))
    # A folder below site-packages that holds nothing else (the package's own) is theirs too
    site_rel = site.relative_to(rootfs).as_posix()
    parents = {str(Path(f).parent) for f in found}
    for folder in sorted(parents, key=lambda f: -f.count("/")):
        if folder.startswith(site_rel + "/") and all(
            p.relative_to(rootfs).as_posix() in found for p in (rootfs / folder).rglob("*")
        ):
            found.add(folder)
    return found


def own_layers(rootfs: Path, name: str, blobs: Path, request: ImageRequest, report: Report
               ) -> tuple[oci.Layer, ...]:  # fmt: skip
    """provision's venv; the environment without the user's packages; the rest of
    PROVISION_HOME (the user's packages, the environment directory, the registry record)."""
    home_rel = staging.HOME.lstrip("/")
    record = _record(rootfs, name)
    prefix_rel = record.prefix.lstrip("/")
    venv = [(n, p) for n, p in oci.entries(rootfs / home_rel / "venv", f"{home_rel}/venv")]
    users = user_files(rootfs, record) | {f"{prefix_rel}/{n}" for n in BUILD_RECORDS}
    kept = f"{prefix_rel}/{environment.KEPT_SOURCE}/"  # the environment directory, lock included
    prefix = oci.entries(rootfs / prefix_rel, prefix_rel)
    env_items = [(n, p) for n, p in prefix if n not in users and not n.startswith(kept)]
    user_items = [(n, p) for n, p in prefix if n in users or n.startswith(kept)]
    taken = {"venv", os.path.relpath(prefix_rel, home_rel), *SKIP}
    rest = oci.entries(rootfs / home_rel, home_rel, skip=taken)
    user_items += [(n, p) for n, p in rest if n != home_rel]
    out = []
    for items, comment in (
        (venv, "provision's venv"),
        (env_items, f"{name}: the locked packages"),
        (user_items, f"{name}: the user's packages, its directory and record"),
    ):
        report(Event("step", f"layer: {comment} ({len(items)} entries)"))
        out.append(oci.write_layer(oci.with_parents(items, rootfs), blobs, comment,
                                   request.level, request.cache, reuse=request.reuse))  # fmt: skip
    return tuple(out)


def image_config(
    base: oci.Base, layers: tuple[oci.Layer, ...], record: registry.Record, tf: str, lock: str
) -> dict[str, object]:
    inner = base.config.get("config") or {}
    base_env = [e for e in inner.get("Env") or [] if not e.startswith(("PATH=", "PROVISION_"))]
    path = f"{record.prefix}/bin:{staging.HOME}/venv/bin:{staging.PATH}"
    verify = ["provision", "verify", record.name]
    history = list(base.config.get("history") or [])
    if not history:
        history = [{"created_by": f"base {Path(base.shown).name}"} for _ in base.layers]
    history = [{k: v for k, v in h.items() if k != "created"} for h in history]
    history += [{"created_by": "provision image", "comment": x.comment} for x in layers]
    return {
        "architecture": base.config.get("architecture", "amd64"),
        "os": base.config.get("os", "linux"),
        "config": {
            "Env": sorted([f"PATH={path}", f"PROVISION_HOME={staging.HOME}", *base_env]),
            "Cmd": ["python"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": record.name,
                "io.provision.environment": record.name,
                "io.provision.tensorflow": tf,
                "io.provision.lock_sha256": lock,
                "io.provision.healthcheck": " ".join(verify),
            },
            # Docker's config extension (podman reads it from images in Docker's format only)
            "Healthcheck": {
                "Test": ["CMD", *verify],
                "Interval": HEALTH_INTERVAL_NS,
                "Timeout": HEALTH_TIMEOUT_NS,
                "Retries": 1,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in (*base.layers, *layers)]},
        "history": history,
    }


def apptainer_definition(name: str, archive: str) -> str:
    """A definition that builds a SIF from the archive beside it, with no network (`apptainer
    build NAME.sif NAME.def`); its %test is provision verify, with a writable copy of the
    registry (a SIF is read-only, and verify records its result)."""
    return f"""\
# The SIF of {name}, from the OCI archive beside this file, with no network:
#   apptainer build {name}.sif {definition_path(Path(archive)).name}
#   apptainer exec --nv {name}.sif python -c "import tensorflow"
#   apptainer exec --nv {name}.sif provision verify {name} --require-gpu
#   apptainer test --nv {name}.sif
Bootstrap: oci-archive
From: {archive}

%labels
    io.provision.environment {name}

%help
    The {name} environment of provision: python is its interpreter, no activation needed.
    Health check: apptainer test --nv {name}.sif (provision verify {name}).

%test
    export PROVISION_HOME="${{TMPDIR:-/tmp}}/provision-home-$$"
    mkdir -p "$PROVISION_HOME" && cp -a {staging.HOME}/registry "$PROVISION_HOME"/
    exec provision verify {name}
"""
