"""Doctor: judges a HostReport against the matrix.

For every release and path: `runs` (ready on this host now), `fix` (runs after the fixes listed,
each an exact command), `cannot` (with why: driver too old for the release's CUDA, GPU too old or
too new for the build, native Windows), or `n/a` (the path does not serve the release anywhere).
Host-wide findings (reboot due, two cuDNN copies on the loader's path, libraries newer than the
driver, ...) come first. Pure: the probing is provision.host's; `run` only ties the two together.

Modules: `model` (the results and their JSON), `findings` (host-wide findings, once per
diagnosis), `hardware` (the driver and GPUs against a release), `judge` (`diagnose`: a verdict per
release and path), and `versions` (lenient version numbers). The terminal layout is the CLI's
(cli/doctor_report).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from provision.doctor.findings import HostFindings, host_findings
from provision.doctor.hardware import GpuFit, gpu_fit
from provision.doctor.judge import diagnose
from provision.doctor.model import (
    KIND_TEXT,
    SCHEMA,
    STATUS_TEXT,
    Diagnosis,
    Finding,
    Registered,
    Verdict,
)
from provision.fileio import sha256_file
from provision.matrix import DATA_FILE

__all__ = [
    "KIND_TEXT",
    "SCHEMA",
    "STATUS_TEXT",
    "Diagnosis",
    "Finding",
    "GpuFit",
    "HostFindings",
    "Registered",
    "Verdict",
    "diagnose",
    "gpu_fit",
    "host_findings",
    "matrix_digest",
    "run",
]


def matrix_digest(path: Path = DATA_FILE) -> str:
    return sha256_file(path)


def run(tf: str | None = None, root: str | Path | None = None) -> Diagnosis:
    """Probe this host (or the stand-in `root`) and judge it; with `tf`, that release only."""
    from provision import host, matrix

    m = matrix.load()
    if tf:
        m.release(tf)  # an unknown release is a usage mistake: say so before probing
    d = diagnose(host.probe(root=root), m, tf, matrix_digest())
    return replace(d, registered=() if root else _registered())


def _registered() -> tuple[Registered, ...]:
    from provision import registry

    found = []
    for name, rec in registry.records():
        if isinstance(rec, str):
            found.append(Registered(name, "?", "?", "?", False, f"unreadable record: {rec}"))
            continue
        last = rec.last_verify
        verdict = ""
        if last is not None:
            verdict = f"{last.summary} ({last.when})"
        present = Path(rec.interpreter).exists()
        found.append(Registered(name, rec.tf, rec.path, rec.prefix, present, verdict))
    return tuple(found)
