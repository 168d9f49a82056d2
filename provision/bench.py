"""`provision bench`: runs the payload's benchmark in one environment or several, one after the
other with the same options, records where it ran (the hardware, read on the host), and gives one
result for all of them; the CLI shows it (cli/bench_report: table, findings, plot)."""

from __future__ import annotations

import json
import os
import platform
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, TypedDict

from provision import _proc, diskread
from provision.errors import ProvisionError, UsageError
from provision.payload import bench_schema
from provision.payload_app import payload_argv, payload_env
from provision.progress import Event, Report, human_seconds, nothing

REPORT_LIMIT = 64 << 20  # a saved report set; one report is a few KiB
LONG_S = 600.0  # a configuration expected to take longer than this is warned about


class BenchError(ProvisionError):
    """The benchmark could not run, or printed no report."""


Switch = Literal["on", "off", "auto"]  # XLA for a part: on, off, or Keras's default


class BenchOptionError(UsageError):
    """A benchmark option that the payload would refuse after TensorFlow has loaded."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag, self.message = flag, message


@dataclass(frozen=True)
class BenchOptions:
    """What the payload's benchmark runs, typed, in the order of `provision bench`'s options: the
    payload's flags and the command line a report shows are written from it. Checked when made:
    what the payload would refuse after TensorFlow has loaded is refused first."""

    gpus: str = "1"
    precision: str = ",".join(bench_schema.PRECISIONS)
    model: str = "resnet50"
    image_size: int = 32
    batch_per_replica: int = 128
    global_batch: int | None = None
    steps: int = 30
    warmup: int = 5
    jit: Switch = "auto"
    steps_per_execution: int = 1
    data_format: str = "channels_last"
    data: str = "tf.data"
    loop: str = "fit"
    strategy: str = "mirrored"
    max_seconds: float = 0
    gpu_memory: str = "env"
    batchnorm: str = "default"
    optimizer_jit: Switch = "auto"
    xla_cache: str | None = None  # absolute
    profile: str | None = None  # absolute
    dataset: Path | None = None
    cpu_devices: int = 0

    def __post_init__(self) -> None:
        for flag, count in (("--steps", self.steps), ("--warmup", self.warmup)):
            if count % self.steps_per_execution:
                raise BenchOptionError(
                    flag, f"{count} is not a multiple of --steps-per-execution "
                    f"{self.steps_per_execution}",
                )  # fmt: skip
        if self.strategy == "default" and self.gpus != "1":
            raise BenchOptionError("--gpus", "--strategy default runs on one device: give --gpus 1")
        if self.dataset is not None:
            _check_dataset(Path(self.dataset))

    @staticmethod
    def switch(value: bool | None) -> Switch:
        """A --x/--no-x flag as the payload takes it: given on, given off, or not given."""
        return "on" if value is True else "off" if value is False else "auto"

    def items(self) -> list[tuple[str, object]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def _check_dataset(folder: Path) -> None:
    """--dataset as the payload reads it (.npz archives holding arrays x and y), checked on the
    host, so that an empty folder or a broken archive is one line before TensorFlow loads. Only
    the archives' tables of contents are read: a dataset may be gigabytes."""
    import zipfile

    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".npz"))
    except OSError as exc:
        raise BenchOptionError("--dataset", f"{folder}: {exc.strerror}") from None
    if not names:
        raise BenchOptionError("--dataset", f"{folder} holds no .npz files (arrays x and y)")
    for name in names:
        try:
            with zipfile.ZipFile(folder / name) as archive:
                members = set(archive.namelist())
        except (OSError, zipfile.BadZipFile) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a zip"
            raise BenchOptionError(
                "--dataset", f"{folder / name} is not a .npz archive ({why})"
            ) from None
        missing = [a for a in ("x", "y") if f"{a}.npy" not in members]
        if missing:
            raise BenchOptionError(
                "--dataset", f"{folder / name} holds no array {' or '.join(missing)}"
            )


@dataclass(frozen=True)
class BenchTarget:
    """One environment to benchmark: how it is named in the results, and its interpreter."""

    label: str
    python: Path


class HardwareGpu(TypedDict):
    index: int
    name: str
    memory_mib: int | None
    compute_capability: str | None


class HardwareCpu(TypedDict):
    model: str
    cores: int | None


class Hardware(TypedDict):
    """Where a benchmark ran, read on the host: a report's "hardware" (bench_schema)."""

    gpus: list[HardwareGpu]
    driver: str | None
    driver_cuda: str | None
    source: str | None
    interconnect: dict[str, object]
    cpu: HardwareCpu


@dataclass(frozen=True)
class BenchResult:
    # A report per environment that gave one, in order: parsed JSON, read by cli/bench_report.
    reports: tuple[dict[str, object], ...]
    errors: tuple[dict[str, str], ...] = ()  # {"environment", "error"}: gave no report
    plot: Path | None = None
    plot_error: str = ""  # the plot could not be written; the results are still all here

    @property
    def ok(self) -> bool:
        """Every environment gave a report, and one configuration at least ran."""
        return not self.errors and any(r.get("runs") for r in self.reports)

    def as_json(self) -> dict[str, object]:
        """One environment: its report; several: a set of reports (bench_schema)."""
        if len(self.reports) == 1 and not self.errors:
            return self.reports[0]
        return {
            "schema": bench_schema.SCHEMA,
            "tool": bench_schema.SET_TOOL,
            "reports": list(self.reports),
            "errors": list(self.errors),
        }


def bench_argv(python: Path, options: BenchOptions, json_out: Path) -> list[str]:
    args = ["--json", str(json_out)]
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return payload_argv(python, "bench", args, json_out.parent)


def check_plot(plot: Path) -> None:
    """Refuse a --plot that cannot be written before the benchmark runs (it may take hours)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise BenchError("--plot needs matplotlib: pip install 'provision[bench]'") from exc
    folder = Path(plot).parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if Path(plot).is_dir():
        raise UsageError(f"--plot {plot} is a directory; give a file name ending in .png")
    if not existing.is_dir():
        raise UsageError(f"--plot {plot}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BenchError(f"--plot {plot}: {existing} is not writable; choose another place")


def slow_warnings(options: BenchOptions) -> list[str]:
    """Configurations known to crawl, said before anything starts: mixed precision on CPU devices
    emulates float16/bfloat16 (measured: 1.4 images/s for the mlp model in float16)."""
    if not options.cpu_devices:
        return []
    mixed = [p for p in options.precision.split(",") if p.startswith("mixed_")]
    if not mixed:
        return []
    return [
        f"{', '.join(mixed)} on CPU devices is emulated and can take hours per configuration "
        "(float16 on a CPU measured 1.4 images/s); --precision float32 runs at full speed"
    ]


class _Events:
    """The payload's progress lines (configuration, estimate, outcome) as progress events."""

    def __init__(self, report: Report, label: str = "") -> None:
        self.report = report
        self.label = label  # the environment, when several are compared

    def __call__(self, line: str, is_stderr: bool) -> None:
        event_prefix = bench_schema.EVENT
        if not line.startswith(event_prefix):
            if line.strip():
                self.report(Event("detail", line.strip()))
            return
        try:
            ev = json.loads(line[len(event_prefix) :])
        except ValueError:
            return
        what = f"{ev.get('gpus')} x {ev.get('precision')}"
        if self.label:
            what = f"{self.label} {what}"
        kind = ev.get("event")
        if kind == "config":
            self.report(Event("step", f"[{ev.get('index')}/{ev.get('total')}] {what} ..."))
        elif kind == "first_step":
            seconds = float(ev.get("seconds") or 0)
            self.report(Event("info", f"{what}: first step {seconds:.1f} s (tracing, compiling)"))
        elif kind == "compiling":
            seconds = float(ev.get("seconds") or 0)
            limit = float(ev.get("limit") or 0)
            bound = f"; --max-seconds stops it at {limit:g} s" if limit else ""
            self.report(
                Event("info", f"{what}: first step running {seconds:.0f} s (tracing, compiling"
                      f"{bound})")
            )  # fmt: skip
        elif kind == "policy":
            self.report(Event("info", f"{self.label + ': ' if self.label else ''}{ev.get('text')}"))
        elif kind == "estimate":
            seconds = float(ev.get("seconds") or 0)
            pace = float(ev.get("step_s") or 0)
            left = human_seconds(seconds)
            self.report(Event("info", f"{what}: about {left} to go ({pace:.2f} s a step)"))
            if seconds > LONG_S:
                warning = (
                    f"{what} will take about {left}; Ctrl-C stops it, fewer --steps shorten it"
                )
                self.report(Event("warn", warning))
        elif kind == "result":
            self.report(
                Event(
                    "done",
                    f"{what}: {float(ev.get('images_per_s') or 0):,.1f} images/s, accuracy "
                    f"{float(ev.get('accuracy') or 0):.3f} ({float(ev.get('seconds') or 0):.0f} s)",
                )
            )
        elif kind == "skipped":
            self.report(Event("done", f"{what}: skipped: {ev.get('reason')}"))
        elif kind == "failed":
            self.report(Event("done", f"{what}: failed: {ev.get('error')}"))
        elif kind == "warn":
            self.report(Event("warn", f"{self.label + ': ' if self.label else ''}{ev.get('text')}"))


def run(
    targets: Sequence[BenchTarget],
    *,
    options: BenchOptions,
    plot: Path | None,
    timeout: float = 3600,
    report: Report = nothing,
    command: str = "",
) -> BenchResult:
    """The benchmark in each environment in turn, with its interpreter as it is (its own hook
    finds CUDA). An environment that gives no report is recorded and the next one runs.
    report: each configuration as it starts, its estimate once its first steps are timed."""
    for target in targets:
        if not Path(target.python).exists():
            raise BenchError(f"{target.label}: no interpreter at {target.python}")
    if plot is not None:
        check_plot(plot)
    for warning in slow_warnings(options):
        report(Event("warn", warning))
    hw = hardware()
    reports: list[dict[str, object]] = []
    errors: list[dict[str, str]] = []
    several = len(targets) > 1
    for i, target in enumerate(targets, start=1):
        if several:
            report(Event("step", f"environment {i}/{len(targets)}: {target.label} ..."))
        try:
            data = _one(target, options, timeout, _Events(report, target.label if several else ""))
        except BenchError as exc:
            errors.append({"environment": target.label, "error": str(exc)})
            report(Event("warn", f"{target.label}: {exc}"))
            continue
        data.update(
            hardware=hw,
            environment={"name": target.label, "python": str(target.python)},
            command=command or None,
        )
        reports.append(data)
    return BenchResult(tuple(reports), tuple(errors))


def _one(
    target: BenchTarget, options: BenchOptions, timeout: float, events: _Events
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp:
        report_file = Path(tmp) / "report.json"
        argv = bench_argv(target.python, options, report_file)
        env = payload_env(Path(tmp))
        done = _proc.stream(argv, events, timeout=timeout, group=True, env=env)
        if not report_file.is_file():
            raise BenchError(
                f"the benchmark failed (exit {done.returncode}): {done.last_line()[-300:]}"
            )
        try:
            data = diskread.read_json(report_file, REPORT_LIMIT)
        except (OSError, ValueError) as exc:
            raise BenchError(f"the benchmark wrote a report that cannot be read: {exc}") from exc
    if not isinstance(data, dict):
        raise BenchError(f"the benchmark wrote a report that is no JSON object: {data!r:.100}")
    return data


def load(paths: Sequence[Path], plot: Path | None = None) -> BenchResult:
    """Saved reports (any schema, one report or a set per file), shown as one result. The reports
    are judged before matplotlib is imported for --plot (an import that writes its caches)."""
    reports: list[dict[str, object]] = []
    for path in paths:
        try:
            reports += bench_schema.read(diskread.read_json(path, REPORT_LIMIT))
        except OSError as exc:
            raise UsageError(f"--report {path}: {exc.strerror or exc}") from exc
        except ValueError as exc:  # not JSON, or not a benchmark report
            raise UsageError(f"--report {path}: {exc}") from exc
    if plot is not None:
        check_plot(plot)
    return BenchResult(tuple(reports))


def hardware(env: Mapping[str, str] | None = None) -> Hardware:
    """The GPUs (NVML, else nvidia-smi), the driver and the CUDA version it supports, how the
    GPUs are connected (nvidia-smi topo -m) and the CPU, read on the host. PROVISION_HOST_ROOT
    reads a stand-in machine instead (tests)."""
    from provision.host.gpu import probe_gpus
    from provision.host.root import Context, read_text
    from provision.host.topology import probe_interconnect

    env = os.environ if env is None else env
    ctx = Context(env.get("PROVISION_HOST_ROOT") or None, env, None)
    facts = probe_gpus(ctx)
    cpuinfo = read_text(ctx.at("/proc/cpuinfo"), 1 << 20)
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    cores = sum(1 for ln in cpuinfo.splitlines() if ln.startswith("processor")) or os.cpu_count()
    driver = facts.driver
    return {
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "memory_mib": g.memory_mib,
                "compute_capability": g.compute_capability or None,
            }
            for g in facts.gpus
        ],
        "driver": (driver.version or None) if driver else None,
        "driver_cuda": (driver.cuda or None) if driver else None,
        "source": (driver.source or None) if driver else None,
        "interconnect": probe_interconnect(ctx, len(facts.gpus)).as_json(),
        "cpu": {"model": model, "cores": cores},
    }


def command_line(names: Sequence[str], options: BenchOptions) -> str:
    """The `provision bench` command that runs these options (those not at their defaults)."""
    words = ["provision", "bench", *names]
    for key, value in options.items():
        if value is None or value is False or value == bench_schema.DEFAULTS.get(key):
            continue
        if key in ("jit", "optimizer_jit"):
            flag = "--" + key.replace("_", "-")
            words.append(flag if value == "on" else f"--no-{flag[2:]}" if value == "off" else "")
            continue
        flag = "--" + key.replace("_", "-")
        shown = str(value)
        if isinstance(value, float) and value.is_integer():
            shown = str(int(value))
        words += [flag] if value is True else [flag, shown]
    return shlex.join(w for w in words if w)
