"""What a build of one bundle on one base made, kept beside the layer cache: the config and the
layers by diff_id. A second `provision image` of the same bundle (the sha256 of its manifest,
which lists every member's), the same base (its layers), the same compression, name and provision
writes the archive from the cached layers without building again, as podman's build cache skips
a step it ran before. --no-layer-cache builds anyway.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from provision import __version__
from provision.bundlefile.bundle_format import BundleManifest
from provision.fileio import sha256_bytes, sha256_text, write_atomic
from provision.image import oci


def key(manifest: BundleManifest, base: oci.Base, level: int, ref: str) -> str:
    inputs = {
        "bundle": sha256_bytes(manifest.dumps()),
        "base": [x.blob.digest for x in base.layers],
        "base_config": base.config,
        "level": level,
        "ref": ref,
        "provision": __version__,
    }
    return sha256_text(json.dumps(inputs, sort_keys=True))


def _path(cache: Path, name: str) -> Path:
    return cache / "images" / f"{name}.json"


def load(cache: Path, name: str, level: int) -> tuple[tuple[oci.Layer, ...], dict[str, Any]] | None:
    """The layers and config of an earlier build, if every layer is still in the cache."""
    try:
        data = json.loads(_path(cache, name).read_text(encoding="utf-8"))
        layers = []
        for entry in data["layers"]:
            path = cache / f"{entry['diff_id'].removeprefix('sha256:')}-{level}.tar.gz"
            if not path.is_file() or path.stat().st_size != entry["size"]:
                return None
            blob = oci.Blob(entry["digest"], entry["size"], path, oci.LAYER)
            layers.append(oci.Layer(blob, entry["diff_id"], entry["comment"]))
        return tuple(layers), dict(data["config"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(cache: Path, name: str, layers: tuple[oci.Layer, ...], config: dict[str, Any]) -> None:
    entries = [
        {"diff_id": x.diff_id, "digest": x.blob.digest, "size": x.blob.size, "comment": x.comment}
        for x in layers
    ]
    path = _path(cache, name)
    os.makedirs(path.parent, exist_ok=True)
    write_atomic(path, json.dumps({"layers": entries, "config": config}, sort_keys=True))
