"""How the matrix is shown: the overview table, one release in full with its sources, and JSON."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from provision.cli.columns import columns
from provision.matrix import Matrix, Release, kinds

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def _conda_cell(m: Matrix, rel: Release) -> str:
    cuda, cudnn = m.cuda_of(rel), m.cudnn_of(rel)
    base = (
        f"cudatoolkit {cuda.conda['cudatoolkit']}"
        if "cudatoolkit" in cuda.conda
        else f"cuda-version {cuda.conda['cuda_version']}"
    )
    dnn = f"cudnn {cudnn.conda_forge}" if cudnn.conda_forge else "cudnn from pip"
    return f"{base} + {dnn}"


def _paths_cell(m: Matrix, rel: Release) -> str:
    return ",".join(n for n, k in kinds.KINDS.items() if k.refusal(m, rel) is None)


def overview(m: Matrix) -> str:
    header = (
        "TF",
        "pin",
        "Python",
        "CUDA",
        "cuDNN",
        "driver >=",
        "CC >=",
        "glibc",
        "conda-forge",
        "paths",
        "win GPU",
    )
    rows = [header]
    for rel in m.releases:
        cuda, cudnn = m.cuda_of(rel), m.cudnn_of(rel)
        pys = rel.python
        rows.append(
            (
                rel.tf,
                rel.pin,
                f"{pys[0]}-{pys[-1]}" if len(pys) > 1 else pys[0],
                cuda.full,
                cudnn.full,
                f"{cuda.driver_min} ({cuda.driver_compat_min})",
                rel.compute_min,
                rel.glibc_min,
                _conda_cell(m, rel),
                _paths_cell(m, rel),
                "yes" if rel.windows_native_gpu else "no",
            )
        )
    lines = columns(rows, rule=True)
    lines.append("")
    lines.append("driver >=: the CUDA toolkit's own minimum (minor-version-compatibility floor).")
    pre = [r.pin for r in m.releases if r.prerelease]
    if pre:
        lines.append(f"pre-releases ({', '.join(pre)}): never a default; use them with --pre.")
    lines.append("`provision matrix --tf X.Y` shows one release with every field and its sources.")
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return ", ".join(str(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}=={v}" for k, v in sorted(value.items())) if value else "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value) if value not in ("", None) else "-"


def _block(title: str, obj: DataclassInstance, skip: tuple[str, ...] = ()) -> list[str]:
    lines = [title]
    for f in dataclasses.fields(obj):
        if f.name in skip:
            continue
        value = getattr(obj, f.name)
        if isinstance(value, tuple) and any(len(str(v)) > 40 for v in value):
            # Long entries (disagreements, notes) read better one to a line.
            lines.append(f"  {f.name}")
            lines += [f"    - {v}" for v in value]
            continue
        lines.append(f"  {f.name:<20} {_fmt(value)}")
    return lines


def detail(m: Matrix, rel: Release) -> str:
    cuda, cudnn = m.cuda_of(rel), m.cudnn_of(rel)
    lines = _block(f"TensorFlow {rel.tf}", rel, skip=("sources",))
    lines.append("  paths")
    for p, kind in kinds.KINDS.items():
        why = kind.refusal(m, rel)
        state = why or ("ok: " + _conda_cell(m, rel) if kind.conda_env else "ok")
        lines.append(f"    {p:<8} {state}")
    lines += ["", *_block(f"CUDA {cuda.version}", cuda, skip=("sources",))]
    lines += ["", *_block(f"cuDNN {cudnn.version}", cudnn, skip=("sources",))]
    lines += ["", "Sources"]
    for label, ids in (("release", rel.sources), ("cuda", cuda.sources), ("cudnn", cudnn.sources)):
        for sid in ids:
            src = m.sources[sid]
            lines.append(f"  [{label}] {src.id}: {src.what}")
            lines.append(f"      {src.url} (retrieved {src.retrieved})")
            if src.note:
                lines.append(f"      note: {src.note}")
    return "\n".join(lines)


def _asdict(obj: DataclassInstance) -> dict[str, object]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(obj).items()}


def release_json(m: Matrix, rel: Release) -> dict[str, object]:
    data = _asdict(rel)
    data["paths"] = {p: k.refusal(m, rel) or "ok" for p, k in kinds.KINDS.items()}
    data["cuda_row"] = _asdict(m.cuda_of(rel))
    data["cudnn_row"] = _asdict(m.cudnn_of(rel))
    ids = dict.fromkeys(rel.sources + m.cuda_of(rel).sources + m.cudnn_of(rel).sources)
    data["source_rows"] = [_asdict(m.sources[s]) for s in ids]
    return data


def as_json(m: Matrix, rel: Release | None = None) -> dict[str, object]:
    if rel is not None:
        return {"schema": 1, "release": release_json(m, rel)}
    return {
        "schema": 1,
        "releases": [release_json(m, r) for r in m.releases],
        "conda_forge": _asdict(m.conda_forge),
        "sources": [_asdict(s) for s in m.sources.values()],
    }
