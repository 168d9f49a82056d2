"""The status words of provision, in one place: the smoke test's checks, the host probes, the
doctor's verdicts and its findings.

Each vocabulary is a Literal type with a constant per word and a tuple of all of them; the words
are the JSON wire format (smoke reports, `provision doctor --json`), so they never change here
without a schema bump. This module is part of the payload (standard library only, Python 3.8),
so that the smoke test, which runs inside environments, and the host import the same words.
"""

from typing import Final, Literal, Optional, Tuple

# A smoke-test check, and a fact of its report compared with the spec (provision verify).
# A warn or a skip never fails.
CheckStatus = Literal["pass", "warn", "skip", "fail"]
PASS: Final[CheckStatus] = "pass"
WARN: Final[CheckStatus] = "warn"
SKIP: Final[CheckStatus] = "skip"
FAIL: Final[CheckStatus] = "fail"
CHECK_STATUSES: Final[Tuple[CheckStatus, ...]] = (PASS, WARN, SKIP, FAIL)

# What one host probe (provision.host) got: an answer, nothing to ask, an error, no answer in
# time, or not asked (a PROVISION_NO_* knob).
ProbeStatus = Literal["ok", "absent", "failed", "timeout", "skipped"]
OK: Final[ProbeStatus] = "ok"
ABSENT: Final[ProbeStatus] = "absent"
FAILED: Final[ProbeStatus] = "failed"
TIMEOUT: Final[ProbeStatus] = "timeout"
SKIPPED: Final[ProbeStatus] = "skipped"
PROBE_STATUSES: Final[Tuple[ProbeStatus, ...]] = (OK, ABSENT, FAILED, TIMEOUT, SKIPPED)

# The doctor's verdict on a release and path: ready now, ready after the fixes listed, cannot
# (with why), or the path does not serve the release anywhere.
VerdictStatus = Literal["runs", "fix", "cannot", "n/a"]
RUNS: Final[VerdictStatus] = "runs"
FIX: Final[VerdictStatus] = "fix"
CANNOT: Final[VerdictStatus] = "cannot"
NOT_OFFERED: Final[VerdictStatus] = "n/a"
VERDICT_STATUSES: Final[Tuple[VerdictStatus, ...]] = (RUNS, FIX, CANNOT, NOT_OFFERED)

# How much a host-wide finding of the doctor matters.
FindingLevel = Literal["error", "warning", "note"]
ERROR: Final[FindingLevel] = "error"
WARNING: Final[FindingLevel] = "warning"
NOTE: Final[FindingLevel] = "note"
FINDING_LEVELS: Final[Tuple[FindingLevel, ...]] = (ERROR, WARNING, NOTE)


def check_status(word: object) -> Optional[CheckStatus]:
    """`word` as a check status; None when it is not one (a report from elsewhere)."""
    return next((s for s in CHECK_STATUSES if s == word), None)


def verdict_status(word: object) -> Optional[VerdictStatus]:
    """`word` as a verdict status; None when it is not one."""
    return next((s for s in VERDICT_STATUSES if s == word), None)


def finding_level(word: object) -> Optional[FindingLevel]:
    """`word` as a finding level; None when it is not one."""
    return next((s for s in FINDING_LEVELS if s == word), None)
