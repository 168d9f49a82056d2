"""The doctor's results as values: host-wide findings, a verdict per release and path, the
environments provision built here, and the diagnosis holding them, with its JSON form (`schema` 1).

The verdict and finding words are defined here (VerdictStatus, FindingLevel); the JSON carries
them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Final, Literal

from provision import __version__, records
from provision.errors import ProvisionError
from provision.host import HostReport
from provision.matrix.kinds import PathName

SCHEMA = 1
# The doctor's verdict on a release and path: ready now, ready after the fixes listed, cannot
# (with why), or the path does not serve the release anywhere.
VerdictStatus = Literal["runs", "fix", "cannot", "n/a"]
RUNS: Final[VerdictStatus] = "runs"
FIX: Final[VerdictStatus] = "fix"
CANNOT: Final[VerdictStatus] = "cannot"
NOT_OFFERED: Final[VerdictStatus] = "n/a"
VERDICT_STATUSES: Final[tuple[VerdictStatus, ...]] = (RUNS, FIX, CANNOT, NOT_OFFERED)

# How much a host-wide finding of the doctor matters.
FindingLevel = Literal["error", "warning", "note"]
ERROR: Final[FindingLevel] = "error"
WARNING: Final[FindingLevel] = "warning"
NOTE: Final[FindingLevel] = "note"
FINDING_LEVELS: Final[tuple[FindingLevel, ...]] = (ERROR, WARNING, NOTE)


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
    path: PathName
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
        """The diagnosis `to_json` wrote (parsed JSON); ProvisionError for another schema, an
        unknown status word, or another shape (the message names the field)."""
        if data.get("schema") != SCHEMA:
            raise ProvisionError(f"doctor report schema {data.get('schema')!r} is not {SCHEMA}")
        # `provision` and `ok` are written for readers and derived, never read back; the host
        # report keeps its own schema check.
        fields = {k: v for k, v in data.items() if k not in ("provision", "ok")}
        host = data.get("host")
        if isinstance(host, Mapping):
            fields["host"] = HostReport.from_json(host)
        return records.read(cls, fields, "doctor report", ProvisionError)
