"""The search's plan and judgement (bench_search): the settings tried, which cannot help on
this GPU, which combinations follow, whether a trial learnt, which is best; and a saved search
read back. Pure: nothing here runs a benchmark."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from provision import bench, diskread
from provision.errors import UsageError
from provision.payload import bench_schema

SCHEMA_TOOL = "provision-bench-search"
BUDGET_S = 600.0  # a whole search, per environment: the ten minutes
TRIAL_BOUND_S = 150.0  # a trial's first step (tracing, XLA's compile) and its estimate
LEARNS_SHARE = 0.5  # of the defaults' gain over chance, that a setting must keep to be best
PAYS = 1.03  # a larger batch is kept only when it is this much faster
# A run faster than the best so far that has not learnt gets a second look, this many times as
# many steps: on an H100, ResNet50 at batch 256 in mixed_float16 was at chance after 20 steps and
# at 1.0 after 45 (tests/fixtures/bench/h100-best).
SECOND_LOOK = 3

TrialStatus = Literal["ran", "failed", "skipped"]


@dataclass(frozen=True)
class Setting:
    """One point of the search: what it changes from the defaults."""

    batchnorm: str = "default"  # or "fused"
    precision: str = "float32"
    xla: bool = False  # --jit --strategy default (XLA compiles the step on one device)
    batch: int = 0  # per replica; 0: the batch the search was given
    steps: int = 0  # timed steps; 0: the search's (a second look trains longer)

    def options(self, base: bench.BenchOptions, bound: float) -> bench.BenchOptions:
        return replace(
            base,
            gpus="1",
            precision=self.precision,
            batchnorm=self.batchnorm,
            jit="on" if self.xla else base.jit,
            strategy="default" if self.xla else base.strategy,
            batch_per_replica=self.batch or base.batch_per_replica,
            steps=self.steps or base.steps,
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
        if self.steps:
            words.append(f"{self.steps} steps")
        return ", ".join(words) or "defaults"


DEFAULT = Setting()


@dataclass
class Trial:
    """One setting tried: how it ended, its speed, its accuracy, and its report (as `bench`)."""

    setting: Setting
    label: str
    command: str
    status: TrialStatus
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
                "steps": self.setting.steps or None,
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
    stopped: str = ""  # "interrupted" or "terminated": the trials run before the signal

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
            "stopped": self.stopped or None,
            "default": default.label if default else None,
            "best": best.label if best else None,
            "best_command": best.command if best else None,
            "speedup": speedup,
            "trials": [t.as_json() for t in self.trials],
        }


@dataclass(frozen=True)
class SearchResult:
    searches: tuple[Search, ...]
    # Ctrl-C or SIGTERM stopped the search: shown with what it found, then raised again.
    interrupted: KeyboardInterrupt | None = None

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
            search.stopped = str(item.get("stopped") or "")
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
    by: dict[Setting, Trial] = {}
    for t in trials:  # each setting as first tried, or its second look when only that learnt
        key = replace(t.setting, steps=0)
        if t.status == "ran" and (key not in by or (t.learns and not by[key].learns)):
            by[key] = t
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
        tried = any(replace(t.setting, steps=0) == s for t in trials)
        if tried or sum(p != DEFAULT for p in parts) < 2:
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


def _trial(item: dict[str, object]) -> Trial:
    raw = item.get("setting")
    setting = raw if isinstance(raw, dict) else {}
    batch = setting.get("batch_per_replica")
    steps = setting.get("steps")
    report = item.get("report")
    status = str(item.get("status"))
    return Trial(
        Setting(
            batchnorm=str(setting.get("batchnorm") or "default"),
            precision=str(setting.get("precision") or "float32"),
            xla=bool(setting.get("xla")),
            batch=batch if isinstance(batch, int) else 0,
            steps=steps if isinstance(steps, int) else 0,
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
