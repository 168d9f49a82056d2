"""The protocol every step of the workflow speaks. render, lock, install, verify and bench each end
in one StepResult: done, skipped (its output already matched its inputs), stale (a check found its
output out of date) or failed, with the lines that say what happened and, when something is left
to do, a hint that names the command. `create` drives the steps through it; the CLI shows it.
Data only: nothing here prints or imports the steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

StepName = Literal["render", "lock", "install", "verify", "bench"]
StepOutcome = Literal["done", "skipped", "stale", "failed"]


@dataclass
class StepResult:
    step: StepName
    outcome: StepOutcome = "done"
    lines: list[str] = field(default_factory=list)
    hint: str = ""

    @property
    def ok(self) -> bool:
        """Nothing is left to do: the step did its work, or found it already done."""
        return self.outcome in ("done", "skipped")

    @property
    def summary(self) -> str:
        return "; ".join(self.lines)

    def as_json(self) -> dict[str, object]:
        return {
            "step": self.step,
            "outcome": self.outcome,
            "lines": list(self.lines),
            "hint": self.hint or None,
        }
