"""`provision bench --best`: each environment's best setting on one GPU, found by trying the
settings that matter one after another, each bounded, the whole search within a budget.

The plan: the defaults first (the baseline of every speed-up), then each setting alone:
BatchNormalization fused (Keras 3 only: Keras 2's is fused already), XLA (`--jit --strategy
default`), mixed_bfloat16 (compute capability 8.0 and newer) and mixed_float16 (7.0 and newer);
then the combinations of the values that helped or learnt, the most promising first (a
combination's expected speed-up is the product of its parts'; XLA is always combined with each
precision that learnt, because XLA fuses the casts that make a mixed precision slow alone); then
the best so far at twice its batch, while memory allows and it pays. A setting that does not
learn (accuracy at chance, or less than half of the defaults' gain over chance) is never called
best, however fast. Every trial runs under a bound on its first step (the compile) and the time
left in the budget; what no longer fits is recorded as skipped, with why.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from provision import bench, diskread
from provision.errors import UsageError
from provision.payload import bench_schema
from provision.progress import Event, Report, human_seconds, nothing

SCHEMA_TOOL = "provision-bench-search"
BUDGET_S = 600.0  # a whole search, per environment: the ten minutes
TRIAL_BOUND_S = 150.0  # a trial's first step (tracing, XLA's compile) and its estimate
LEARNS_SHARE = 0.5  # of the defaults' gain over chance, that a setting must keep to be best
PAYS = 1.03  # a larger batch is kept only when it is this much faster

Status = Literal["ran", "failed", "skipped"]


@dataclass(frozen=True)
class Setting:
    """One point of the search: what it changes from the defaults."""

    batchnorm: str = "default"  # or "fused"
    precision: str = "float32"
    xla: bool = False  # --jit --strategy default (XLA compiles the step on one device)
    batch: int = 0  # per replica; 0: the batch the search was given

    def options(self, base: bench.BenchOptions, bound: float) -> bench.BenchOptions:
        return replace(
            base,
            gpus="1",
            precision=self.precision,
            batchnorm=self.batchnorm,
            jit="on" if self.xla else base.jit,
            strategy="default" if self.xla else base.strategy,
            batch_per_replica=self.batch or base.batch_per_replica,
            max_seconds=bound,
        )

    def label(self, base_batch: int) -> str:
        words = []
        if self.batchnorm != "default":
            words.append(f"batchnorm {self.batchnorm}")
        if self.xla:
            words.append("XLA")
        if self.precision != "float32":
            words.append(self.precision)
        if self.batch and self.batch != base_batch:
            words.append(f"batch {self.batch}")
        return ", ".join(words) or "defaults"


DEFAULT = Setting()


@dataclass
class Trial:
    """One setting tried: how it ended, its speed, its accuracy, and its report (as `bench`)."""

    setting: Setting
    label: str
    command: str
    status: Status
    reason: str = ""  # failed or skipped: why
    images_per_s: float | None = None
    first_step_s: float | None = None
    accuracy: float | None = None
    chance: float | None = None
    at_chance: bool = False
    learns: bool = False
    seconds: float = 0.0  # its wall time, start to report
    report: dict[str, object] | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "setting": {
                "batchnorm": self.setting.batchnorm,
                "precision": self.setting.precision,
                "xla": self.setting.xla,
                "batch_per_replica": self.setting.batch or None,
            },
            "label": self.label,
            "command": self.command,
            "status": self.status,
            "reason": self.reason or None,
            "images_per_s": self.images_per_s,
            "first_step_s": self.first_step_s,
            "accuracy": self.accuracy,
            "chance": self.chance,
            "at_chance": self.at_chance,
            "learns": self.learns,
            "seconds": round(self.seconds, 1),
            "report": self.report,
        }


@dataclass
class Search:
    """One environment's search: every trial in the order run, the defaults and the best."""

    environment: str
    budget_s: float
    trials: list[Trial]
    seconds: float = 0.0
    hardware: bench.Hardware | None = None
    error: str = ""  # the defaults could not run: nothing was searched

    @property
    def default(self) -> Trial | None:
        return next((t for t in self.trials if t.setting == DEFAULT and t.status == "ran"), None)

    @property
    def best(self) -> Trial | None:
        return choose_best(self.trials)

    def as_json(self) -> dict[str, object]:
        default, best = self.default, self.best
        speedup = None
        if default and best and default.images_per_s and best.images_per_s:
            speedup = round(best.images_per_s / default.images_per_s, 3)
        return {
            "environment": self.environment,
            "hardware": self.hardware,
            "budget_s": self.budget_s,
            "seconds": round(self.seconds, 1),
            "error": self.error or None,
            "default": default.label if default else None,
            "best": best.label if best else None,
            "best_command": best.command if best else None,
            "speedup": speedup,
            "trials": [t.as_json() for t in self.trials],
        }


@dataclass(frozen=True)
class SearchResult:
    searches: tuple[Search, ...]

    @classmethod
    def from_json(cls, doc: object) -> SearchResult:
        """A saved `bench --best --json` document; ValueError when it is not one."""
        if not isinstance(doc, dict) or doc.get("tool") != SCHEMA_TOOL:
            raise ValueError(f"not a {SCHEMA_TOOL} document")
        searches = []
        for item in _dicts(doc.get("searches")):
            trials = [_trial(t) for t in _dicts(item.get("trials"))]
            budget = _float(item.get("budget_s")) or 0.0
            search = Search(str(item.get("environment")), budget, trials)
            search.seconds = _float(item.get("seconds")) or 0.0
            hw = item.get("hardware")
            search.hardware = hw if isinstance(hw, dict) else None  # type: ignore[assignment]
            search.error = str(item.get("error") or "")
            searches.append(search)
        return cls(tuple(searches))

    @property
    def ok(self) -> bool:
        return all(s.best is not None for s in self.searches)

    def as_json(self) -> dict[str, object]:
        return {
            "schema": bench_schema.SCHEMA,
            "tool": SCHEMA_TOOL,
            "searches": [s.as_json() for s in self.searches],
        }


def learns(trial: Trial, default: Trial | None) -> bool:
    """Whether a trial learnt: above chance, and keeping at least half of the defaults' gain over
    chance (accuracy after a benchmark's few dozen steps is noisy; a setting that loses more has
    changed what is trained, not only how fast)."""
    if trial.accuracy is None or trial.chance is None or trial.at_chance:
        return False
    if default is None or default.accuracy is None or default.at_chance:
        return True
    floor = trial.chance + LEARNS_SHARE * (default.accuracy - trial.chance)
    return trial.accuracy >= floor


def choose_best(trials: Sequence[Trial]) -> Trial | None:
    """The fastest trial that ran and learnt; None when none did."""
    good = [t for t in trials if t.status == "ran" and t.learns and t.images_per_s]
    return max(good, key=lambda t: t.images_per_s or 0.0, default=None)


def plan_skips(
    keras_major: int | None, capability: float | None, model: str = "resnet50"
) -> dict[Setting, str]:
    """The single-setting trials that cannot help here, with why (capability None: no GPU)."""
    skips: dict[Setting, str] = {}
    if model != "resnet50":
        skips[Setting(batchnorm="fused")] = f"{model} has no BatchNormalization"
    elif keras_major is not None and keras_major < 3:
        skips[Setting(batchnorm="fused")] = "Keras 2's BatchNormalization is fused already"
    if capability is None:
        why = "mixed precision is emulated on a CPU: it cannot be faster there"
        skips[Setting(precision="mixed_bfloat16")] = why
        skips[Setting(precision="mixed_float16")] = why
        return skips
    if capability < 8.0:
        skips[Setting(precision="mixed_bfloat16")] = (
            f"no bfloat16 tensor cores before Ampere (compute capability 8.0; this GPU "
            f"{capability:.1f})"
        )
    if capability < 7.0:
        skips[Setting(precision="mixed_float16")] = (
            f"no float16 tensor cores before Volta (compute capability 7.0; this GPU "
            f"{capability:.1f})"
        )
    return skips


SINGLES = (
    Setting(batchnorm="fused"),
    Setting(xla=True),
    Setting(precision="mixed_bfloat16"),
    Setting(precision="mixed_float16"),
)


def combinations(trials: Sequence[Trial]) -> list[Setting]:
    """The combinations of the single settings worth trying, most promising first: a value is
    kept when its trial ran and learnt (a precision), or also was not slower (BatchNormalization,
    XLA); a combination's promise is the product of its parts' speed-ups."""
    by = {t.setting: t for t in trials if t.status == "ran"}
    base = by.get(DEFAULT)
    if base is None or not base.images_per_s:
        return []

    def gain(s: Setting) -> float | None:
        t = by.get(s)
        if t is None or not t.learns or not t.images_per_s or not base.images_per_s:
            return None
        return t.images_per_s / base.images_per_s

    norms = ["default"] + [b for b in ("fused",) if (gain(Setting(batchnorm=b)) or 0) >= 1.0]
    xlas = [False] + ([True] if gain(Setting(xla=True)) is not None else [])
    precisions = ["float32"] + [
        p for p in ("mixed_bfloat16", "mixed_float16") if gain(Setting(precision=p)) is not None
    ]
    promise: list[tuple[float, Setting]] = []
    for norm, xla, precision in itertools.product(norms, xlas, precisions):
        s = Setting(batchnorm=norm, precision=precision, xla=xla)
        parts = [Setting(batchnorm=norm), Setting(xla=xla), Setting(precision=precision)]
        if s in by or sum(p != DEFAULT for p in parts) < 2:
            continue
        product = 1.0
        for p in parts:
            product *= gain(p) or 1.0 if p != DEFAULT else 1.0
        promise.append((product, s))
    promise.sort(key=lambda item: -item[0])
    return [s for _, s in promise]


def keras_major(report: dict[str, object] | None) -> int | None:
    software = (report or {}).get("software")
    version = software.get("keras") if isinstance(software, dict) else None
    try:
        return int(str(version).split(".")[0]) if version else None
    except ValueError:
        return None


def capability(hw: bench.Hardware, options: bench.BenchOptions) -> float | None:
    """GPU 0's compute capability (the search runs on one GPU); None on CPU devices."""
    if options.cpu_devices or not hw["gpus"]:
        return None
    try:
        return float(hw["gpus"][0]["compute_capability"] or "")
    except ValueError:
        return None


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
        return max(same or others or [0.0])

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
        return trial

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
        search = Search(self.target.label, self.budget_s, self.trials)
        first = self.attempt(DEFAULT)
        if first.status != "ran":
            search.error = f"the defaults did not run: {first.reason}"
            search.seconds = time.monotonic() - self.start
            return search
        hw = (first.report or {}).get("hardware")
        search.hardware = hw if isinstance(hw, dict) else None  # type: ignore[assignment]
        cap = capability(search.hardware, self.base) if search.hardware else None
        skips = plan_skips(keras_major(first.report), cap, self.base.model)
        for setting in SINGLES:
            self.attempt(setting, skips.get(setting, ""))
        for setting in combinations(self.trials):
            self.attempt(setting)
        self._batches()
        search.seconds = time.monotonic() - self.start
        return search

    def _batches(self) -> None:
        """The best so far at twice its batch, again while it pays and memory holds."""
        best = choose_best(self.trials)
        while best is not None:
            batch = (best.setting.batch or self.base.batch_per_replica) * 2
            bigger = self.attempt(replace(best.setting, batch=batch))
            if not (
                bigger.status == "ran"
                and bigger.learns
                and (bigger.images_per_s or 0) >= PAYS * (best.images_per_s or 0)
            ):
                return
            best = bigger


def _trial(item: dict[str, object]) -> Trial:
    raw = item.get("setting")
    setting = raw if isinstance(raw, dict) else {}
    batch = setting.get("batch_per_replica")
    report = item.get("report")
    status = str(item.get("status"))
    return Trial(
        Setting(
            batchnorm=str(setting.get("batchnorm") or "default"),
            precision=str(setting.get("precision") or "float32"),
            xla=bool(setting.get("xla")),
            batch=batch if isinstance(batch, int) else 0,
        ),
        label=str(item.get("label")),
        command=str(item.get("command")),
        status=status if status in ("ran", "failed", "skipped") else "failed",  # type: ignore[arg-type]
        reason=str(item.get("reason") or ""),
        images_per_s=_float(item.get("images_per_s")),
        first_step_s=_float(item.get("first_step_s")),
        accuracy=_float(item.get("accuracy")),
        chance=_float(item.get("chance")),
        at_chance=bool(item.get("at_chance")),
        learns=bool(item.get("learns")),
        seconds=_float(item.get("seconds")) or 0.0,
        report=report if isinstance(report, dict) else None,
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def outcome(trial: Trial) -> str:
    """A trial's outcome in a few words, as progress and the table's last column say it."""
    if trial.status != "ran":
        return f"{trial.status}: {trial.reason}"
    text = f"{trial.images_per_s:,.1f} images/s, accuracy {trial.accuracy:.3f}"
    if trial.at_chance:
        text += " (at chance: it learnt nothing)"
    elif not trial.learns:
        text += " (learnt less than half of what the defaults did)"
    return text


def _quiet(report: Report) -> Report:
    """A trial's own progress, less its start and end lines (the search says them)."""

    def forward(event: Event) -> None:
        if event.kind not in ("step", "done"):
            report(event)

    return forward


def load(paths: Sequence[Path]) -> SearchResult | None:
    """Saved searches (`bench --best --json`) as one result; None when the files are benchmark
    reports instead. A mix of both, or a file that cannot be read, is a usage error."""
    docs = []
    for path in paths:
        try:
            docs.append(diskread.read_json(path, bench.REPORT_LIMIT))
        except OSError as exc:
            raise UsageError(f"--report {path}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise UsageError(f"--report {path}: {exc}") from exc
    kinds = [isinstance(d, dict) and d.get("tool") == SCHEMA_TOOL for d in docs]
    if not any(kinds):
        return None
    if not all(kinds):
        raise UsageError("--report: give saved searches (--best --json) or reports, not both")
    searches = [s for d in docs for s in SearchResult.from_json(d).searches]
    return SearchResult(tuple(searches))


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
        searches.append(searcher.run())
    return SearchResult(tuple(searches))
