"""Probes run at once, each in its own thread under one deadline, so that none can stop the others
or hang the caller. A probe that raises or overruns leaves a `failed` or `timeout` Probe record in
place of its own records, and hides nothing the others found.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Generic, Protocol, TypeVar

from provision.host.model import Probe


class Reported(Protocol):
    """A probe's typed result: its facts, and the Probe records saying how it went."""

    @property
    def probes(self) -> tuple[Probe, ...]: ...


R_co = TypeVar("R_co", bound=Reported, covariant=True)


class Task(Generic[R_co]):
    """One probe in its own (daemon) thread; `collect` takes what it has at the deadline."""

    def __init__(self, name: str, fn: Callable[[], R_co]) -> None:
        self.name = name
        self._fn = fn
        # Set once, by the thread: (result, seconds) or the exception it raised.
        self._outcome: tuple[R_co, float] | BaseException | None = None
        self._collected: tuple[R_co, float] | BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=f"probe-{name}", daemon=True)

    def _work(self) -> None:
        t0 = time.monotonic()
        try:
            result = self._fn()
            self._outcome = (result, round(time.monotonic() - t0, 3))
        except Exception as exc:  # a probe's bug must not hide the others' findings
            self._outcome = exc

    def start(self) -> None:
        self._thread.start()

    def wait(self, until: float) -> None:
        """Wait for the thread, at most until the monotonic time `until`."""
        self._thread.join(max(0.0, until - time.monotonic()))

    def collect(self, started: float, limit: float) -> list[Probe]:
        """Take the outcome as it is now, and return its Probe records (timed by the thread where
        they carry no time of their own), or one saying the probe failed or did not finish within
        `limit` seconds of `started`. A thread that finishes later changes nothing."""
        outcome = self._collected = self._outcome
        elapsed = round(time.monotonic() - started, 3)
        if outcome is None:
            return [Probe(self.name, "timeout", f"did not finish within {limit:.0f} s", elapsed)]
        if isinstance(outcome, BaseException):
            return [Probe(self.name, "failed", f"{type(outcome).__name__}: {outcome}", elapsed)]
        result, seconds = outcome
        return [p if p.seconds else replace(p, seconds=seconds) for p in result.probes]

    @property
    def result(self) -> R_co | None:
        """The result `collect` took; None when the probe failed, overran, or is not collected."""
        outcome = self._collected
        return outcome[0] if isinstance(outcome, tuple) else None


def run_all(tasks: Sequence[Task[Reported]], started: float, limit: float) -> list[Probe]:
    """Start every task, wait until all are done or `limit` seconds after `started` have passed,
    and collect their Probe records in the order of `tasks`."""
    for t in tasks:
        t.start()
    for t in tasks:
        t.wait(started + limit)
    return [p for t in tasks for p in t.collect(started, limit)]
