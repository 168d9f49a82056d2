"""The search run: each trial through `provision bench` (one configuration, bounded), judged
as it ends, skipped with why when the budget no longer holds it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from provision import bench
from provision.bench_search.plan import (
    BUDGET_S,
    DEFAULT,
    PAYS,
    SECOND_LOOK,
    SINGLES,
    TRIAL_BOUND_S,
    Search,
    SearchResult,
    Setting,
    Trial,
    _dicts,
    _float,
    capability,
    choose_best,
    combinations,
    keras_major,
    learns,
    outcome,
    plan_skips,
)
from provision.errors import Terminated
from provision.payload import bench_schema
from provision.progress import Event, Report, human_seconds, nothing


class _Searcher:
    def __init__(
        self,
        target: bench.BenchTarget,
        base: bench.BenchOptions,
        budget_s: float,
        bound_s: float,
        timeout: float,
        report: Report,
    ) -> None:
        self.target, self.base, self.report = target, base, report
        self.budget_s, self.bound_s, self.timeout = budget_s, bound_s, timeout
        self.start = time.monotonic()
        self.trials: list[Trial] = []

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def expected(self, setting: Setting) -> float:
        """What a trial is expected to take: the longest of its kind so far (XLA or not)."""
        same = [t.seconds for t in self.trials if t.setting.xla == setting.xla and t.seconds]
        others = [t.seconds for t in self.trials if t.seconds]
        longest = max(same or others or [0.0])
        return longest * 2 if setting.steps else longest  # a second look trains longer

    def attempt(self, setting: Setting, skip: str = "") -> Trial:
        done = next((t for t in self.trials if t.setting == setting), None)
        if done is not None:
            return done
        base_batch = self.base.batch_per_replica
        label = setting.label(base_batch)
        bound = min(self.bound_s, max(1.0, self.left()))
        options = setting.options(self.base, bound)
        command = bench.command_line([self.target.label], replace(options, max_seconds=0))
        trial = Trial(setting, label, command, "skipped")
        need = self.expected(setting)
        if not skip and self.trials and self.left() < max(need, 1.0):
            skip = (
                f"over the search's budget ({human_seconds(max(0.0, self.left()))} left, "
                f"about {human_seconds(need)} needed)"
            )
        index = len(self.trials) + 1
        if skip:
            trial.reason = skip
            self.report(Event("info", f"[{index}] {label}: skipped: {skip}"))
            self.trials.append(trial)
            return trial
        self.report(Event("step", f"[{index}] {label} ..."))
        t0 = time.monotonic()
        result = bench.run(
            [self.target], options=options, plot=None, timeout=self.timeout,
            report=_quiet(self.report), command=command,
        )  # fmt: skip
        trial.seconds = time.monotonic() - t0
        self._judge(trial, result)
        self.trials.append(trial)
        self.report(Event("done", f"[{index}] {label}: {outcome(trial)}"))
        return self._second_look(trial)

    def _second_look(self, trial: Trial) -> Trial:
        """A run faster than every one that learnt, which did not learn in the search's steps,
        trains again SECOND_LOOK times as long: some settings start slowly (a larger batch, a
        float16 policy), and accuracy after a few dozen steps is noisy. The longer run stands."""
        best = choose_best(self.trials)
        faster = (trial.images_per_s or 0) > (best.images_per_s or 0) if best else True
        if trial.status != "ran" or trial.learns or trial.setting.steps or not faster:
            return trial
        steps = self.base.steps * SECOND_LOOK
        return self.attempt(replace(trial.setting, steps=steps))

    def _judge(self, trial: Trial, result: bench.BenchResult) -> None:
        if result.errors:
            trial.status, trial.reason = "failed", result.errors[0]["error"]
            return
        data = result.reports[0]
        trial.report = data
        runs = _dicts(data.get("runs"))
        task = data.get("task")
        chance = task.get("chance") if isinstance(task, dict) else None
        if runs:
            run = runs[0]
            trial.status = "ran"
            trial.images_per_s = _float(run.get("images_per_s"))
            trial.first_step_s = _float(run.get("first_step_s"))
            trial.accuracy = _float(run.get("accuracy"))
            trial.chance = _float(chance)
            if trial.chance is not None and trial.accuracy is not None:
                trial.at_chance = bench_schema.at_chance(trial.accuracy, trial.chance)
            default = next((t for t in self.trials if t.setting == DEFAULT), None)
            trial.learns = learns(trial, default if trial.setting != DEFAULT else None)
            return
        for key, status in (("failed", "failed"), ("skipped", "skipped")):
            items = _dicts(data.get(key))
            if items:
                trial.status = status  # type: ignore[assignment]
                trial.reason = str(items[0].get("error") or items[0].get("reason") or "")
                return
        trial.status, trial.reason = "failed", "the benchmark reported no run"

    def run(self) -> Search:
        """The plan, trial after trial; Ctrl-C or SIGTERM during a trial ends the search with
        the trials that finished (the one running is dropped) and is raised again."""
        search = Search(self.target.label, self.budget_s, self.trials)
        try:
            self._plan(search)
        except KeyboardInterrupt as exc:
            search.stopped = "terminated" if isinstance(exc, Terminated) else "interrupted"
            search.seconds = time.monotonic() - self.start
            raise Stopped(search, exc) from exc
        search.seconds = time.monotonic() - self.start
        return search

    def _plan(self, search: Search) -> None:
        first = self.attempt(DEFAULT)
        if first.status != "ran":
            search.error = f"the defaults did not run: {first.reason}"
            return
        hw = (first.report or {}).get("hardware")
        search.hardware = hw if isinstance(hw, dict) else None  # type: ignore[assignment]
        cap = capability(search.hardware, self.base) if search.hardware else None
        skips = plan_skips(keras_major(first.report), cap, self.base.model)
        for setting in SINGLES:
            self.attempt(setting, skips.get(setting, ""))
        for setting in combinations(self.trials):
            self.attempt(setting)
        self._batches()

    def _batches(self) -> None:
        """The best so far at twice its batch, again while it pays and memory holds."""
        best = choose_best(self.trials)
        while best is not None:
            batch = (best.setting.batch or self.base.batch_per_replica) * 2
            bigger = self.attempt(replace(best.setting, batch=batch, steps=0))
            if not (
                bigger.status == "ran"
                and bigger.learns
                and (bigger.images_per_s or 0) >= PAYS * (best.images_per_s or 0)
            ):
                return
            best = bigger


def _quiet(report: Report) -> Report:
    """A trial's own progress, less its start and end lines (the search says them)."""

    def forward(event: Event) -> None:
        if event.kind not in ("step", "done"):
            report(event)

    return forward


def run(
    targets: Sequence[bench.BenchTarget],
    *,
    options: bench.BenchOptions,
    budget_s: float = BUDGET_S,
    bound_s: float = TRIAL_BOUND_S,
    timeout: float = 3600,
    report: Report = nothing,
) -> SearchResult:
    """One search per environment, one after the other, each within budget_s."""
    for target in targets:
        if not target.python.exists():
            raise bench.BenchError(f"{target.label}: no interpreter at {target.python}")
    searches = []
    for i, target in enumerate(targets, start=1):
        if len(targets) > 1:
            report(Event("step", f"environment {i}/{len(targets)}: {target.label} ..."))
        searcher = _Searcher(target, options, budget_s, bound_s, timeout, report)
        try:
            searches.append(searcher.run())
        except Stopped as stop:
            searches.append(stop.search)
            return SearchResult(tuple(searches), stop.signal)
    return SearchResult(tuple(searches))


class Stopped(Exception):
    """A search ended by Ctrl-C or SIGTERM: what it found, and the signal to raise again."""

    def __init__(self, search: Search, signal: KeyboardInterrupt) -> None:
        super().__init__(search.stopped)
        self.search, self.signal = search, signal
