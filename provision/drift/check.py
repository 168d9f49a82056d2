"""`provision check`: every registered environment (or the named ones) read again and judged
against the facts recorded when it was last built or verified; optionally verified again.

The host (driver, GPUs) is read once for all environments; each prefix from its files only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from provision import registry
from provision.errors import ProvisionError, UsageError
from provision.facts import store
from provision.facts.collect import Facts, HostFacts, env_facts, host_facts
from provision.verify.baseline import subject
from provision.verify.changes import Change, compare

if TYPE_CHECKING:
    from provision.verify import VerifyResult

DriftState = Literal["ok", "drift", "unknown", "missing"]


@dataclass(frozen=True)
class Reverified:
    ok: bool
    summary: str  # "PASS", or the failed checks, or why the smoke test could not run
    result: VerifyResult | None = None  # the smoke test's report, compared with the spec

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok, "summary": self.summary,
            "verify": self.result.as_json() if self.result is not None else None,
        }  # fmt: skip


@dataclass(frozen=True)
class EnvCheck:
    name: str
    # ok: nothing changed; drift: changes; unknown: no usable record; missing: gone
    state: DriftState
    changes: tuple[Change, ...] = ()
    problem: str = ""  # why it could not be judged
    baseline: str = ""  # "verify 2026-12-02 01:10": what recorded the facts compared with
    reverified: Reverified | None = None
    seconds: float = 0.0

    @property
    def breaks(self) -> int:
        return sum(c.severity == "breaks" for c in self.changes)

    @property
    def ok(self) -> bool:
        """Nothing that matters changed, or a smoke test run now passed."""
        if self.reverified is not None:
            return self.reverified.ok
        return self.state == "ok"

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name, "state": self.state, "ok": self.ok, "problem": self.problem,
            "baseline": self.baseline, "seconds": round(self.seconds, 3),
            "changes": [c.as_json() for c in self.changes],
            "reverified": None if self.reverified is None else self.reverified.as_json(),
        }  # fmt: skip


@dataclass(frozen=True)
class CheckResult:
    host: HostFacts
    envs: tuple[EnvCheck, ...]
    at: float
    seconds: float

    @property
    def ok(self) -> bool:
        return all(e.ok for e in self.envs)

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "host": {
                "driver": self.host.driver, "cuda": self.host.cuda,
                "gpus": [{"index": g.index, "name": g.name, "cc": g.cc,
                          "memory_mib": g.memory_mib} for g in self.host.gpus],
            },
            "environments": [e.as_json() for e in self.envs],
            "seconds": round(self.seconds, 3),
        }  # fmt: skip


def check(
    names: Sequence[str] = (), *, verify: bool = False, all_: bool = False, timeout: float = 180
) -> CheckResult:
    """Judge each environment; with `verify`, run the smoke test of those that changed (or of all,
    with `all_`): a pass records their facts anew."""
    started = time.monotonic()
    listed = dict(registry.records())
    if names:
        unknown = [n for n in names if n not in listed]
        if unknown:
            known = ", ".join(sorted(listed)) or "none"
            raise UsageError(
                f"not registered on this machine: {', '.join(unknown)} (registered: {known})"
            )
        chosen = [(n, listed[n]) for n in names]
    else:
        chosen = sorted(listed.items())
    host = host_facts()
    out = []
    for name, rec in chosen:
        t0 = time.monotonic()
        one = _judge(name, rec, host)
        if verify and (all_ or not one.ok) and one.state != "missing" and not isinstance(rec, str):
            one = _reverify(one, rec, timeout)
        out.append(_timed(one, time.monotonic() - t0))
    return CheckResult(host, tuple(out), time.time(), time.monotonic() - started)


def _timed(one: EnvCheck, seconds: float) -> EnvCheck:
    from dataclasses import replace

    return replace(one, seconds=seconds)


def _judge(name: str, rec: registry.Record | str, host: HostFacts) -> EnvCheck:
    if isinstance(rec, str):
        return EnvCheck(name, "unknown", problem=rec)
    if not Path(rec.interpreter).exists():
        return EnvCheck(
            name, "missing",
            problem=f"its prefix {rec.prefix} is gone; rebuild it with provision install {name}",
        )  # fmt: skip
    try:
        old = store.get(name)
    except store.FactsError as exc:
        return EnvCheck(name, "unknown", problem=str(exc))
    target = subject(rec)
    now = env_facts(Path(rec.prefix), Path(rec.interpreter), rec.python)
    changes = tuple(compare(old, host, now, target))
    return EnvCheck(name, "drift" if changes else "ok", changes, baseline=_baseline(old))


def _baseline(old: Facts) -> str:
    return f"{old.source} {time.strftime('%Y-%m-%d %H:%M', time.localtime(old.at))}"


def _reverify(one: EnvCheck, rec: registry.Record, timeout: float) -> EnvCheck:
    from dataclasses import replace

    from provision import environment, verify

    try:
        env = environment.load(Path(rec.env_dir))
    except ProvisionError as exc:
        return replace(one, reverified=Reverified(False, f"cannot verify: {exc}"))
    try:
        used = store.get(rec.name).gpus_used
    except store.FactsError:
        used = rec.last_verify.gpus if rec.last_verify is not None else 0
    try:
        result = verify.verify(env, prefix=Path(rec.prefix), require_gpu=used > 0, timeout=timeout)
    except ProvisionError as exc:
        return replace(one, reverified=Reverified(False, str(exc)))
    summary = "PASS" if result.ok else "FAIL: " + ", ".join(o.name for o in result.failures)
    if result.cpu_only:
        summary += f" ({result.cpu_only})"
    if result.still_broken:  # passed without vouching for a break: it stays found
        summary += f"; {result.still_broken}"
    return replace(
        one, reverified=Reverified(result.ok and not result.still_broken, summary, result)
    )
