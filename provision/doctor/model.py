"""The doctor's results as values: host-wide findings, a verdict per release and path, the
environments provision built here, and the diagnosis holding them, with its JSON form (`schema` 1).

The status words are provision.payload.status's (VerdictStatus, FindingLevel); the JSON carries
them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from provision import __version__
from provision.errors import ProvisionError
from provision.host import HostReport
from provision.matrix.spec import PATHS, PathKind
from provision.payload.status import (
    CANNOT,
    FIX,
    NOT_OFFERED,
    RUNS,
    FindingLevel,
    VerdictStatus,
    finding_level,
    verdict_status,
)

SCHEMA = 1
STATUS_TEXT: Mapping[VerdictStatus, str] = {
    RUNS: "runs",
    FIX: "runs after a fix",
    CANNOT: "cannot",
    NOT_OFFERED: "not offered",
}
KIND_TEXT: Mapping[str, str] = {"cudart": "CUDA runtime", "cudnn": "cuDNN", "cublas": "cuBLAS"}


@dataclass(frozen=True)
class Finding:
    """Something about the host as a whole, whatever release runs on it."""

    level: FindingLevel
    text: str
    fix: str = ""  # one command; "" when there is none to give


@dataclass(frozen=True)
class Verdict:
    tf: str
    path: PathKind
    status: VerdictStatus
    reasons: tuple[str, ...] = ()  # why it cannot, or what is missing before the fixes
    fixes: tuple[str, ...] = ()  # commands, in the order to run them
    notes: tuple[str, ...] = ()  # caveats that do not change the status


@dataclass(frozen=True)
class Registered:
    """An environment provision built here, and its last verify ("" when never verified)."""

    name: str
    tf: str
    path: str
    prefix: str
    present: bool
    last_verify: str


@dataclass(frozen=True)
class Diagnosis:
    host: HostReport
    findings: tuple[Finding, ...]
    verdicts: tuple[Verdict, ...]
    tf: str | None = None
    matrix_sha256: str = ""
    schema: int = SCHEMA
    registered: tuple[Registered, ...] = ()  # environments provision built on this host

    @property
    def ok(self) -> bool:
        """The host can run the release asked for (any, without --tf), perhaps after fixes."""
        return any(v.status in (RUNS, FIX) for v in self.verdicts)

    def to_json(self) -> dict[str, object]:
        return {
            "schema": self.schema,
            "provision": __version__,
            "tf": self.tf,
            "matrix_sha256": self.matrix_sha256,
            "ok": self.ok,
            "findings": [asdict(f) for f in self.findings],
            "verdicts": [asdict(v) for v in self.verdicts],
            "registered": [asdict(r) for r in self.registered],
            "host": self.host.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Diagnosis:
        """The diagnosis `to_json` wrote (parsed JSON); ProvisionError for another schema or an
        unknown status word."""
        d: dict[str, Any] = dict(data)  # parsed JSON: its shape is checked by the constructors
        if d.get("schema") != SCHEMA:
            raise ProvisionError(f"doctor report schema {d.get('schema')!r} is not {SCHEMA}")
        return cls(
            host=HostReport.from_json(d["host"]),
            findings=tuple(_finding(f) for f in d["findings"]),
            verdicts=tuple(_verdict(v) for v in d["verdicts"]),
            tf=d.get("tf"),
            matrix_sha256=d.get("matrix_sha256", ""),
            registered=tuple(Registered(**r) for r in d.get("registered", ())),
        )


def _finding(f: Mapping[str, Any]) -> Finding:
    level = finding_level(f.get("level"))
    if level is None:
        raise ProvisionError(f"doctor report: unknown finding level {f.get('level')!r}")
    return Finding(**{**f, "level": level})


def _verdict(v: Mapping[str, Any]) -> Verdict:
    status = verdict_status(v.get("status"))
    if status is None:
        raise ProvisionError(f"doctor report: unknown verdict status {v.get('status')!r}")
    path = next((p for p in PATHS if p == v.get("path")), None)
    if path is None:
        raise ProvisionError(f"doctor report: unknown path {v.get('path')!r}")
    lists = {k: tuple(v[k]) for k in ("reasons", "fixes", "notes")}
    return Verdict(**{**v, "path": path, "status": status, **lists})
