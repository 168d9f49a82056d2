"""`provision bench`: the benchmark in one or more environments, saved reports shown again, and
`--best`, the search for each environment's best setting on one GPU. Click wiring only."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.args import SafePath, finite
from provision.cli.common import _find, emit_json, find_option, presenter

if TYPE_CHECKING:
    from provision import bench, bench_search
    from provision.bench import BenchOptions


@click.command("bench")
@click.argument("names", metavar="[NAME]...", nargs=-1)
@find_option
@click.option(
    "--python", "pythons", multiple=True, type=SafePath(path_type=Path, dir_okay=False),
    help="Run with this interpreter (repeatable), besides or instead of NAMEs.",
)  # fmt: skip
@click.option(
    "--report", "reports", multiple=True, type=SafePath(path_type=Path, dir_okay=False),
    help="Show saved --json reports (repeatable) as one table; runs nothing.",
)  # fmt: skip
@click.option(
    "--gpus", default="1", show_default=True, callback=lambda c, p, v: _counts(v, "--gpus"),
    help="GPU counts to compare, e.g. 1,2,4.",
)  # fmt: skip
@click.option(
    "--precision", default="float32,mixed_float16,mixed_bfloat16", show_default=True,
    callback=lambda c, p, v: _precisions(v),
)  # fmt: skip
@click.option(
    "--model",
    type=click.Choice(("resnet50", "small_cnn", "mlp")),
    default="resnet50",
    show_default=True,
)
@click.option("--image-size", type=click.IntRange(min=8), default=32, show_default=True)
@click.option("--batch-per-replica", type=click.IntRange(min=1), default=128, show_default=True)
@click.option(
    "--global-batch", type=click.IntRange(min=1),
    help="Fixed global batch (adjusted to the replicas).",
)  # fmt: skip
@click.option(
    "--steps", type=click.IntRange(min=1), default=30, show_default=True,
    help="Timed steps per run.",
)  # fmt: skip
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True)
@click.option(
    "--jit/--no-jit", default=None,
    help="XLA for the training step on or off; neither: Keras's default (Keras 3: auto).",
)  # fmt: skip
@click.option(
    "--steps-per-execution", type=click.IntRange(min=1), default=1, show_default=True,
    help="Training steps per call of the compiled function.",
)  # fmt: skip
@click.option(
    "--data-format", type=click.Choice(("channels_last", "channels_first")),
    default="channels_last", show_default=True,
)  # fmt: skip
@click.option(
    "--data", type=click.Choice(("tf.data", "synthetic-tensor")), default="tf.data",
    show_default=True, help="A shuffled, batched, prefetched pipeline, or one fixed batch.",
)  # fmt: skip
@click.option(
    "--loop", type=click.Choice(("fit", "custom")), default="fit", show_default=True,
    help="Keras's model.fit, or a tf.function training loop.",
)  # fmt: skip
@click.option(
    "--strategy", type=click.Choice(("mirrored", "default")), default="mirrored",
    show_default=True, help="MirroredStrategy, or TensorFlow's default (one device).",
)  # fmt: skip
@click.option(
    "--max-seconds", type=click.FloatRange(min=0), default=0, callback=finite,
    help="Skip a configuration whose estimate (after its first steps) is longer, or whose "
    "first step (tracing, XLA compile) runs longer: 'compile over N s'.",
)  # fmt: skip
@click.option(
    "--gpu-memory", default="env", show_default=True, callback=lambda c, p, v: _gpu_memory(v),
    help="GPU memory: env (the environment's policy: its limit or growth), growth, or a limit "
    "in MiB for this benchmark.",
)  # fmt: skip
@click.option(
    "--batchnorm", type=click.Choice(("default", "fused", "unfused", "none")), default="default",
    show_default=True, help="ResNet50's BatchNormalization: fused (one cuDNN kernel), unfused, "
    "or none.",
)  # fmt: skip
@click.option(
    "--optimizer-jit/--no-optimizer-jit", default=None,
    help="XLA for the optimizer's update (Keras 2's jit_compile); neither: Keras's default.",
)  # fmt: skip
@click.option(
    "--xla-cache", type=SafePath(path_type=Path, file_okay=False),
    help="Folder for XLA's persistent compilation cache (TF_XLA_FLAGS).",
)  # fmt: skip
@click.option(
    "--profile", type=SafePath(path_type=Path, file_okay=False),
    help="Trace a few steps after the timed ones (tf.profiler) into this folder; the report "
    "lists the op types that took the time.",
)  # fmt: skip
@click.option(
    "--dataset",
    type=SafePath(path_type=Path, file_okay=False, exists=True),
    help="Directory of .npz files (x, y) instead of synthetic data.",
)
@click.option(
    "--cpu-devices", type=click.IntRange(min=0), default=0,
    help="Use N virtual CPU devices (no GPU).",
)  # fmt: skip
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=3600, show_default=True, callback=finite,
    help="Seconds per environment.",
)  # fmt: skip
@click.option(
    "--best", is_flag=True,
    help="Search each environment's best setting on one GPU: BatchNormalization, XLA, precision "
    "and batch tried in turn; the fastest that learns is named, with its command.",
)  # fmt: skip
@click.option(
    "--budget", type=click.FloatRange(min=10), default=600, show_default=True, callback=finite,
    help="--best: seconds for one environment's whole search.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the report(s) as JSON.")
@click.option("--markdown", is_flag=True, help="Print a markdown table with each row's command.")
@click.option("--plot", type=SafePath(path_type=Path, dir_okay=False), help="Write a PNG plot.")
@click.option("--force", is_flag=True, help="Replace an existing --plot file.")
def bench_cmd(
    names: tuple[str, ...],
    out: Path | None,
    pythons: tuple[Path, ...],
    reports: tuple[Path, ...],
    timeout: float,
    plot: Path | None,
    as_json: bool,
    markdown: bool,
    force: bool,
    best: bool,
    budget: float,
    **options: object,
) -> None:
    """Multi-GPU scaling and mixed precision in one or more environments: images/s, accuracy,
    speed-up, matmul TFLOP/s; where it ran (GPUs, driver, interconnect) and what it loaded."""
    from provision import bench
    from provision.paths import output_file

    if plot is not None:
        output_file(plot, "--plot", force)  # before anything runs (a benchmark may take hours)
    if best:
        _search(names, out, pythons, reports, plot, as_json, markdown, budget, timeout, options)
        return

    if reports:
        if names or pythons:
            raise click.UsageError("--report shows saved reports: give no NAME or --python")
        from provision import bench_search

        saved = bench_search.load(reports)
        if saved is not None:
            if markdown:
                raise click.UsageError("saved searches show as a table or --json: no --markdown")
            shown_search(saved, as_json, plot)
            return
        result = bench.load(reports, plot)
    else:
        targets = _targets(names, out, pythons)
        if not targets:
            raise click.UsageError("give environment NAMEs, --python EXE or --report FILE")
        chosen = _bench_options(options)
        called = [*names, *(w for p in pythons for w in ("--python", str(p)))]
        shown = presenter()
        result = bench.run(
            targets, options=chosen, plot=plot, report=shown, timeout=timeout,
            command=bench.command_line(called, chosen),
        )  # fmt: skip
        shown.close()
    from provision.cli import bench_report

    result = bench_report.with_plot(result, plot)
    if as_json:
        emit_json(result.as_json())
    else:
        text = bench_report.markdown(result.reports) if markdown else None
        click.echo("\n".join(text or bench_report.result_lines(result)))
    if result.plot_error:
        raise bench.BenchError(f"{result.plot_error}; the results are above")
    if not result.ok:
        sys.exit(1)


# The search's axes: --best chooses them, so giving one with --best is refused.
SEARCHED = {"precision": "--precision", "batchnorm": "--batchnorm", "jit": "--jit/--no-jit",
            "strategy": "--strategy"}  # fmt: skip


def _search(
    names: tuple[str, ...],
    out: Path | None,
    pythons: tuple[Path, ...],
    reports: tuple[Path, ...],
    plot: Path | None,
    as_json: bool,
    markdown: bool,
    budget: float,
    timeout: float,
    options: dict[str, object],
) -> None:
    from provision import bench, bench_search

    ctx = click.get_current_context()
    for flag, given in (("--report", reports), ("--markdown", markdown)):
        if given:
            raise click.UsageError(f"--best runs its own trials: it takes no {flag}")
    if options["gpus"] != "1":
        raise click.UsageError("--best searches on one GPU: give no --gpus (or --gpus 1)")
    source = click.core.ParameterSource.COMMANDLINE
    for key, flag in SEARCHED.items():
        if ctx.get_parameter_source(key) == source:
            raise click.UsageError(f"--best tries {flag} itself: leave it out")
    targets = _targets(names, out, pythons)
    if not targets:
        raise click.UsageError("give environment NAMEs or --python EXE")
    if plot is not None:
        bench.check_plot(plot)  # matplotlib there, the folder writable: before hours of trials
    chosen = _bench_options({**options, "precision": "float32"})
    bound = chosen.max_seconds or bench_search.TRIAL_BOUND_S
    shown = presenter()
    result = bench_search.run(
        targets, options=chosen, budget_s=budget, bound_s=bound, timeout=timeout, report=shown
    )
    shown.close()
    shown_search(result, as_json, plot)


def shown_search(result: bench_search.SearchResult, as_json: bool, plot: Path | None) -> None:
    """A search's result on stdout (and its --plot); exit 1 when an environment has no best
    setting. A plot that cannot be drawn is said after the results, which stand."""
    from provision import bench
    from provision.cli import search_report

    if as_json:
        emit_json(result.as_json())
    else:
        click.echo("\n".join(search_report.lines(result)))
    if plot is not None:
        try:
            search_report.plot(result, plot)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            message = f"cannot write --plot {plot}: {why}; the results are above"
            raise bench.BenchError(message) from exc
        if not as_json:
            click.echo(f"plot: {plot}")
    if result.interrupted is not None:
        raise result.interrupted  # the group says "interrupted" (130) or "terminated" (143)
    if not result.ok:
        sys.exit(1)


def _targets(
    names: tuple[str, ...], out: Path | None, pythons: tuple[Path, ...]
) -> list[bench.BenchTarget]:
    """The environments named (built here: one that is not is a usage error, exit 2, as verify
    says it) and the interpreters given, in that order."""
    from provision import bench, built

    targets = [
        bench.BenchTarget(n, Path(built.require_built(_find(n, out)).interpreter)) for n in names
    ]
    return targets + [bench.BenchTarget(Path(p).absolute().parent.parent.name, p) for p in pythons]


def _counts(value: str, flag: str) -> str:
    parts = value.split(",")
    if not all(p.isascii() and p.isdigit() and 0 < int(p) <= 1024 for p in parts):
        raise click.BadParameter(f"takes GPU counts like 1,2,4, not {value!r}", param_hint=flag)
    if len(set(parts)) != len(parts):
        raise click.BadParameter(f"names a count twice: {value!r}", param_hint=flag)
    return value


def _bench_options(given: dict[str, object]) -> BenchOptions:
    """Click's values as the typed options, made once; a refusal names its flag (exit 2).
    --jit/--no-jit come as True, False or None; folders are made absolute."""
    from provision import bench

    values = dict(given)
    for key in ("jit", "optimizer_jit"):
        values[key] = bench.BenchOptions.switch(values[key])  # type: ignore[arg-type]
    for key in ("xla_cache", "profile"):
        if values[key] is not None:
            values[key] = str(Path(str(values[key])).absolute())
    try:
        return bench.BenchOptions(**values)  # type: ignore[arg-type]
    except bench.BenchOptionError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.flag) from exc


def _gpu_memory(value: str) -> str:
    import re

    from provision.matrix.spec import MAX_GPU_MEMORY_MIB

    if value in ("env", "growth"):
        return value
    if re.fullmatch("[0-9]{1,9}", value) and 0 < int(value) <= MAX_GPU_MEMORY_MIB:
        return value
    raise click.BadParameter(
        f"{value[:40]!r}: give env, growth or a positive number of MiB (at most 16 TiB)",
        param_hint="--gpu-memory",
    )


def _precisions(value: str) -> str:
    from provision.payload.bench_schema import PRECISIONS

    bad = [p for p in value.split(",") if p not in PRECISIONS]
    if bad:
        raise click.BadParameter(
            f"{', '.join(map(repr, bad))}: choose from {', '.join(PRECISIONS)}",
            param_hint="--precision",
        )
    parts = value.split(",")
    if len(set(parts)) != len(parts):
        raise click.BadParameter(f"names a precision twice: {value!r}", param_hint="--precision")
    return value
