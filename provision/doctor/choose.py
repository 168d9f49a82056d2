"""What `provision create` builds when no release is asked for: the newest release and path that
the doctor's verdicts say this host can run, and one or two lines saying why.

Pure: a Diagnosis and the matrix in, a Choice out. Pre-release rows only when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from provision.doctor.diagnosis import FIX, RUNS, Diagnosis, Verdict
from provision.doctor.hardware import gpu_fit
from provision.errors import UnsupportedCombination
from provision.matrix import Matrix, Release, kinds
from provision.matrix.kinds import PathName
from provision.payload import targets as gpu_targets

# Linux on these machines: TensorFlow's wheels are CPU builds (their build_info: is_cuda_build
# False), and provision's environments are locked for linux-64.
ARM = ("aarch64", "arm64")
CPU_PATH: PathName = "pip"  # for the CPU: TensorFlow's wheel alone, no toolkit to fetch


@dataclass(frozen=True)
class Choice:
    tf: str
    path: PathName
    why: tuple[str, ...]  # one or two lines
    gpu: bool  # False: picked for the CPU


def choose(
    diagnosis: Diagnosis, matrix: Matrix, path: PathName | None = None, pre: bool = False
) -> Choice:
    host = diagnosis.host
    rows = list(reversed(matrix.releases if pre else matrix.finals))
    if host.os == "linux" and host.machine in ARM:
        raise UnsupportedCombination(
            f"this host is Linux {host.machine}: TensorFlow's wheels there are CPU-only builds "
            "(no CUDA, so no tensorflow[and-cuda]), and provision locks its environments for "
            f"linux-64; for the CPU use `pip install tensorflow=={rows[0].pin}`"
        )
    paths = (path,) if path else kinds.NAMES
    verdicts = {(v.tf, v.path): v for v in diagnosis.verdicts}
    for rel in rows:
        for kind in paths:
            v = verdicts.get((rel.tf, kind))
            if v is not None and v.status in (RUNS, FIX):
                return Choice(rel.tf, kind, _gpu_why(diagnosis, matrix, rel, v, rows), True)
    return _for_cpu(diagnosis, matrix, rows, path)


def _gpu_why(
    diagnosis: Diagnosis, matrix: Matrix, rel: Release, v: Verdict, rows: list[Release]
) -> tuple[str, ...]:
    gpus = ", ".join(f"{g.name} ({g.compute_capability})" for g in diagnosis.host.gpus) or "GPU"
    first = f"picked TensorFlow {rel.tf} ({rel.pin}) on the {v.path} path: the newest release "
    first += f"this host can run on its {gpus}"
    newer = [r for r in rows if r.key > rel.key]
    if newer:
        blocked = _first_reason(diagnosis, newer[0])
        first += f"; {newer[0].tf} cannot: {blocked}" if blocked else ""
    lines = [first]
    ptx = _ptx_line(diagnosis, matrix, rel)
    if ptx:
        lines.append(ptx)
    return tuple(lines)


def _ptx_line(diagnosis: Diagnosis, matrix: Matrix, rel: Release) -> str:
    """A GPU newer than every SASS target: what PTX JIT and XLA's ptxas need for it."""
    for gpu in diagnosis.host.gpus:
        fit, _ = gpu_fit(rel, gpu)
        if fit != "ptx":
            continue
        cc = gpu.compute_capability
        arch = "sm_" + cc.replace(".", "")
        ptx = [
            t.name for t in map(gpu_targets.parse, rel.compute_targets) if t and t.kind == "compute"
        ]
        cuda = matrix.cuda_of(rel)
        return (
            f"{gpu.name} ({arch}) is newer than TensorFlow {rel.tf}'s targets "
            f"({', '.join(rel.compute_targets)}): the driver JIT-compiles the "
            f"{ptx[-1] if ptx else 'PTX'} code at first start (minutes; CUDA_CACHE_MAXSIZE keeps "
            f"it), and XLA's ptxas must be from a CUDA that knows {arch}, newer than the CUDA "
            f"{cuda.full} this release ships, or jit_compile fails"
        )
    return ""


def _first_reason(diagnosis: Diagnosis, rel: Release) -> str:
    for v in diagnosis.verdicts:
        if v.tf == rel.tf and v.reasons:
            return v.reasons[0]
    return ""


def _for_cpu(
    diagnosis: Diagnosis, matrix: Matrix, rows: list[Release], path: PathName | None
) -> Choice:
    kind: PathName = path or CPU_PATH
    for rel in rows:
        if kinds.of(kind).refusal(matrix, rel) is None:
            why = _first_reason(diagnosis, rows[0]) or "no GPU can run any release here"
            return Choice(
                rel.tf,
                kind,
                (
                    f"no usable NVIDIA GPU here ({why})",
                    f"picked TensorFlow {rel.tf} ({rel.pin}) on the {kind} path for the CPU: its "
                    "CUDA build runs on the CPU, and on a GPU once the host has one it can use",
                ),
                False,
            )
    raise UnsupportedCombination(f"no release of the matrix is served by the {kind} path")
