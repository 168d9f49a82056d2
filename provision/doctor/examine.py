"""`provision doctor`: probe this host (provision.host), judge it against the matrix (judge), and
list the environments registered here; `matrix_digest` names the matrix a diagnosis was made from.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from provision.doctor.diagnosis import Diagnosis, Registered
from provision.doctor.judge import diagnose
from provision.fileio import sha256_file
from provision.matrix import DATA_FILE


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
