"""`provision matrix update`: the releases on the package index that the matrix lacks (pre-releases
with `pre`), their rows derived from the wheels with citations, written through the one writer;
`check` only says whether any is missing; `rederive` re-reads rows already in the matrix and
reports every derivable field that differs from what is committed.
"""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from provision.errors import MatrixError, UsageError
from provision.fileio import write_atomic
from provision.matrix import DATA_FILE, Matrix, Release, load, toml_writer
from provision.releases import derive as facts_of
from provision.releases import wheels as idx
from provision.releases.derive import ReleaseFacts, minor

PROJECT = "tensorflow"
FIRST = Version("2.4")


@dataclass
class UpdateOutcome:
    """What an update found and did; the CLI prints it and picks the exit code."""

    missing: list[str] = field(default_factory=list)  # versions on the index the matrix lacks
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # "2.22.0rc0 -> 2.22.0"
    differences: list[str] = field(default_factory=list)  # rederive: field by field
    notes: list[str] = field(default_factory=list)
    diff: str = ""
    written: bool = False
    counter: idx.Counter = field(default_factory=idx.Counter)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.differences


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def _wanted_minor(tf: str) -> str:
    try:
        v = Version(tf)
    except ValueError:
        raise UsageError(f"--tf takes a release like 2.22, not {tf!r}") from None
    return f"{v.major}.{v.minor}"


def candidates(page: idx.Project, matrix: Matrix, pre: bool) -> dict[str, Version]:
    """Minor -> the version a row should hold, for each minor the matrix lacks or holds only as an
    older pre-release: the newest final, else (with `pre`) the newest pre-release."""
    by_minor: dict[str, list[Version]] = {}
    for v in page.versions():
        if v < FIRST or v.is_devrelease or not any(idx.is_linux_x86_64(w) for w in page.wheels(v)):
            continue
        by_minor.setdefault(f"{v.major}.{v.minor}", []).append(v)
    rows = {r.tf: r for r in matrix.releases}
    out: dict[str, Version] = {}
    for tf, versions in by_minor.items():
        finals = [v for v in versions if not v.is_prerelease]
        best = max(finals) if finals else (max(versions) if pre else None)
        if best is None:
            continue
        row = rows.get(tf)
        if row is None:
            if Version(tf) > matrix.releases[-1].key:
                out[tf] = best
        elif row.prerelease and best > Version(row.pin):
            out[tf] = best
    return out


def update(
    *,
    pre: bool = False,
    check: bool = False,
    tfs: Sequence[str] = (),
    path: Path = DATA_FILE,
    index: str | None = None,
    date: str | None = None,
) -> UpdateOutcome:
    outcome = UpdateOutcome()
    text = _read(path)
    matrix = toml_writer.Draft(text).result()[1]
    page = idx.project(PROJECT, outcome.counter, index)
    todo = candidates(page, matrix, pre)
    if tfs:
        wanted = {_wanted_minor(t) for t in tfs}
        todo = {tf: v for tf, v in todo.items() if tf in wanted}
        known = {r.tf for r in matrix.releases}
        for tf in sorted(wanted - set(todo), key=Version):
            outcome.notes.append(
                f"{tf}: already in the matrix (use --rederive to compare it with the wheels)"
                if tf in known
                else f"{tf}: the index has no {'' if pre else 'final '}release of it to add"
                + ("" if pre else " (pre-releases need --pre)")
            )
    outcome.missing = [str(v) for _, v in sorted(todo.items(), key=lambda kv: Version(kv[0]))]
    if check or not todo:
        return outcome
    draft = toml_writer.Draft(text)
    when = date or today()
    for tf, version in sorted(todo.items(), key=lambda kv: Version(kv[0])):
        facts = facts_of.read_facts(page, version, outcome.counter, when)
        old = next((r for r in matrix.releases if r.tf == tf), None)
        _put(draft, matrix, facts, outcome.counter, index)
        if old is not None:
            outcome.replaced.append(f"{old.pin} -> {version}")
            for sid in (f"wheel-{old.pin}", f"index-{old.pin}"):
                if not _cited_elsewhere(matrix, sid, tf):
                    draft.drop("source", "id", sid)
        else:
            outcome.added.append(str(version))
    new_text, _ = _validated(draft)
    outcome.diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), new_text.splitlines(keepends=True),
            f"a/{path.name}", f"b/{path.name}",
        )
    )  # fmt: skip
    if _read(path) != text:
        raise MatrixError(f"{path} changed while it was being updated; nothing written, run again")
    write_atomic(path, new_text, mode=0o644)  # the matrix is read by every user
    outcome.written = True
    load.cache_clear()
    return outcome


def _cited_elsewhere(matrix: Matrix, sid: str, tf: str) -> bool:
    """Whether a row other than release `tf` cites source `sid` (a cuDNN row added with a
    pre-release keeps citing the pre-release's wheel after the final replaces the release)."""
    rows: list[tuple[str, ...]] = [r.sources for r in matrix.releases if r.tf != tf]
    rows += [c.sources for c in matrix.cuda.values()] + [d.sources for d in matrix.cudnn.values()]
    rows += [matrix.conda_forge.sources] + [c.sources for c in matrix.conda_forge.cudnn]
    return any(sid in ids for ids in rows)


def _validated(draft: toml_writer.Draft) -> tuple[str, Matrix]:
    try:
        return draft.result()
    except MatrixError as exc:
        raise MatrixError(f"the updated matrix does not validate ({exc}); nothing written") from exc


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(f"cannot read the matrix {path}: {exc}") from exc


def _pins(facts: ReleaseFacts, counter: idx.Counter, index: str | None) -> dict[str, str]:
    """Each NVIDIA wheel of the extra pinned to the lowest version on the index it allows."""
    reqs = [Requirement(t) for t in facts.and_cuda]
    nvidia = [r for r in reqs if r.name.startswith("nvidia-")]
    with ThreadPoolExecutor(max_workers=8) as pool:
        pages = list(pool.map(lambda r: idx.project(r.name, counter, index), nvidia))
    pins = {}
    for req, page in zip(nvidia, pages, strict=True):
        found = facts_of.lowest_wheel(page, req.specifier)
        if found is None:
            raise MatrixError(
                f"tensorflow {facts.version}: the index has no Linux x86-64 wheel of {req} "
                "(and-cuda)"
            )
        pins[req.name] = found
    return dict(sorted(pins.items()))


def _prerelease_deps(
    facts: ReleaseFacts, counter: idx.Counter, index: str | None
) -> tuple[str, ...]:
    """A pre-release's requirements that only pre-releases satisfy; () for a final release, whose
    resolver finds such a package on its own (2.5's keras-nightly~=2.5.0.dev): the explicit line
    is what lets a pre-release row's lock allow pre-releases for those packages alone."""
    if not facts.version.is_prerelease:
        return ()
    reqs = facts.prerelease_candidates
    pages = [idx.project(r.name, counter, index) for r in reqs]
    return tuple(
        str(r) for r, p in zip(reqs, pages, strict=True) if facts_of.only_prereleases(p, r)
    )


def _put(
    draft: toml_writer.Draft,
    matrix: Matrix,
    facts: ReleaseFacts,
    counter: idx.Counter,
    index: str | None,
) -> None:
    """Add (or replace) the release row, its sources and, when new, its cuDNN row."""
    v, wheel, tf = facts.version, facts.wheel, minor(str(facts.version))
    where = f"tensorflow {v}"
    if not facts.build_info.get("is_cuda_build"):
        raise MatrixError(f"{where}: {wheel.filename}'s build_info says it is no CUDA build")
    cuda = minor(facts.cuda_version) if facts.cuda_version else ""
    if not cuda:
        raise MatrixError(f"{where}: neither build_info.py nor cuda_config.h names a CUDA version")
    if cuda not in matrix.cuda:
        raise MatrixError(
            f"{where} is built with CUDA {facts.cuda_version}, which has no [[cuda]] row (the "
            "cited CUDA -> driver table); add that row from NVIDIA's release notes first"
        )
    pins = _pins(facts, counter, index)
    cudnn_pin = next((p for n, p in pins.items() if n.startswith("nvidia-cudnn-")), "")
    if not cudnn_pin or cudnn_pin.split(".")[0] != facts.cudnn_major:
        raise MatrixError(
            f"{where}: the cuDNN minor cannot be derived (the build says cuDNN "
            f"{facts.cudnn_major or '?'}, the and-cuda extra pins {cudnn_pin or 'no cuDNN wheel'})"
        )
    cudnn = minor(cudnn_pin)
    wheel_id, index_id = f"wheel-{v}", f"index-{v}"
    targets, kinds_known = facts.targets
    not_cited = list(facts_of.NEVER_IN_WHEELS)
    if not kinds_known:
        not_cited.append(
            "compute_targets: cuda_config.h lists capabilities without saying which carry PTX "
            "(build_info.py has no cuda_compute_capabilities); written as SASS only"
        )
    if cudnn not in matrix.cudnn or not matrix.cudnn[cudnn].url:
        not_cited.append(f"cudnn {cudnn}: NVIDIA's archive and its sha256, conda-forge's build")
    if cudnn not in matrix.cudnn:
        draft.put(
            "cudnn", "version", _cudnn_row(cudnn, cudnn_pin, matrix.cuda[cuda].major, wheel_id)
        )
    draft.put("source", "id", {
        "id": wheel_id,
        "url": f"pip-index:{PROJECT}/{wheel.filename}",
        "retrieved": f"{facts.retrieved} (sha256 {wheel.sha256 or 'not given by the index'}, "
        f"uploaded {wheel.upload_date or 'date not given by the index'})",
        "what": f"TensorFlow {v} Linux x86-64 wheel, members read with HTTP Range requests: "
        f"{facts_of.MEMBERS} ({', '.join(wheel.pythons)} wheel)",
        "note": "provision matrix update reads these facts again",
    })  # fmt: skip
    draft.put("source", "id", {
        "id": index_id,
        "url": f"pip-index:{PROJECT}",
        "retrieved": facts.retrieved,
        "what": f"Simple API file list of tensorflow {v}: Linux x86-64 wheels for Python "
        f"{', '.join(facts.pythons)}, glibc >= {facts.glibc} (manylinux tags); the NVIDIA "
        f"wheels the and-cuda extra allows, pinned to the lowest with a Linux x86-64 wheel",
    })  # fmt: skip
    row: dict[str, toml_writer.Value] = {
        "tf": tf,
        "latest": str(v),
        "pin": str(v),
        "python": list(facts.pythons),
        "cuda": cuda,
        "cudnn": cudnn,
        "and_cuda": list(facts.and_cuda),
        "compute_min": _lowest(targets),
        "compute_targets": list(targets),
        "glibc_min": facts.glibc,
        "windows_native_gpu": bool(facts.windows_gpu),
        "sources": [wheel_id, index_id],
        "note": f"Derived from the wheels by `provision matrix update` on {facts.retrieved}: "
        f"built with CUDA {facts.cuda_version}, cuDNN {facts.cudnn_major}; pip_wheels pins each "
        "NVIDIA wheel of the and-cuda extra to the lowest version it allows.",
        "prerelease": v.is_prerelease,
        "prerelease_deps": list(_prerelease_deps(facts, counter, index)),
        "dlopens": list(facts.dlopens),
        "not_yet_cited": not_cited,
        "pip_wheels": pins,
    }
    if not row["prerelease_deps"]:
        del row["prerelease_deps"]
    if not row["prerelease"]:
        del row["prerelease"]
    draft.put("release", "tf", row)


def _lowest(targets: Sequence[str]) -> str:
    from provision.payload import targets as gpu_targets

    caps = [t.capability for t in map(gpu_targets.parse, targets) if t is not None]
    if not caps:
        raise MatrixError(f"no compute-capability targets could be read ({list(targets)})")
    low = min(caps)
    return f"{low[0]}.{low[1]}"


def _cudnn_row(version: str, full: str, cuda_major: int, source: str) -> toml_writer.Row:
    return {
        "version": version,
        "full": full,
        "cuda_major": cuda_major,
        "archive": "",
        "url": "",
        "sha256": "",
        "conda_forge": "",
        "pip": f"nvidia-cudnn-cu{cuda_major}=={full}",
        "sources": [source],
        "note": "not yet cited: NVIDIA's archive and its sha256 (the system path refuses this "
        "cuDNN until they are), and whether conda-forge builds it (the conda path takes the "
        "NVIDIA wheel meanwhile). The version is the lower bound of the release's and-cuda extra.",
    }


# -- re-deriving rows already in the matrix --------------------------------------------------------


def rederive(
    *, tfs: Sequence[str] = (), path: Path = DATA_FILE, index: str | None = None
) -> UpdateOutcome:
    """Every derivable field of the rows asked for (all by default), from the wheels of each row's
    pin, against what is committed."""
    outcome = UpdateOutcome()
    matrix = toml_writer.Draft(_read(path)).result()[1]
    rows = [matrix.release(t) for t in tfs] if tfs else list(matrix.releases)
    page = idx.project(PROJECT, outcome.counter, index)
    when = today()
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(
            pool.map(
                lambda r: facts_of.read_facts(page, Version(r.pin), outcome.counter, when), rows
            )
        )
    for rel, facts in zip(rows, found, strict=True):
        deps = _prerelease_deps(facts, outcome.counter, index)
        outcome.differences += _compare(rel, facts, page, deps)
    return outcome


def _compare(
    rel: Release, facts: ReleaseFacts, page: idx.Project, prerelease_deps: tuple[str, ...]
) -> list[str]:
    problems: list[str] = []

    def differ(name: str, ours: object, wheels: object) -> None:
        if ours != wheels:
            problems.append(
                f"release {rel.tf}: {name} {ours!r} in the matrix, {wheels!r} in wheels"
            )

    patches = [
        v for v in page.versions()
        if f"{v.major}.{v.minor}" == rel.tf and v.is_prerelease == rel.prerelease
        and any(idx.is_linux_x86_64(w) for w in page.wheels(v))
    ]  # fmt: skip
    differ("latest", rel.latest, str(max(patches)) if patches else None)
    differ("python", list(rel.python), list(facts.pythons))
    differ("glibc_min", rel.glibc_min, facts.glibc)
    differ("and_cuda", list(rel.and_cuda), list(facts.and_cuda))
    if not facts.build_info.get("is_cuda_build"):
        problems.append(f"release {rel.tf}: the wheel's build_info says no CUDA build")
        return problems
    differ("cuda", rel.cuda, minor(facts.cuda_version) if facts.cuda_version else None)
    differ("cudnn major", rel.cudnn.split(".")[0], facts.cudnn_major)
    targets, kinds_known = facts.targets
    if kinds_known:
        differ("compute_targets", list(rel.compute_targets), list(targets))
    else:
        differ(
            "compute capabilities",
            sorted(t.split("_")[1] for t in rel.compute_targets),
            sorted(t.split("_")[1] for t in targets),
        )
    if facts.windows_gpu is not None:
        differ("windows_native_gpu", rel.windows_native_gpu, facts.windows_gpu)
    differ("prerelease_deps", list(rel.prerelease_deps), list(prerelease_deps))
    if rel.dlopens:
        differ("dlopens", list(rel.dlopens), list(facts.dlopens))
    return problems
