"""The status words of a smoke-test check: pass, warn, skip, fail.

A Literal type with a constant per word and a tuple of all of them; the words are the smoke
report's JSON wire format, so they never change here without a schema bump. This module is part
of the payload (standard library only, Python 3.8), so that the smoke test, which runs inside
environments, and `provision verify` import the same words. The host probes' words are
provision.host.model's, the doctor's verdicts and findings provision.doctor.diagnosis's: neither
ships into environments.
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


def check_status(word: object) -> Optional[CheckStatus]:
    """`word` as a check status; None when it is not one (a report from elsewhere)."""
    return next((s for s in CHECK_STATUSES if s == word), None)
