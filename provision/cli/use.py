"""Commands that use built environments, share them and measure them: bench, list, show,
remove, run, kernel, export, fleet, bundle. Click wiring only, as commands.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.args import SafePath, finite, nonblank, size, version_xy
from provision.cli.common import (
    _find,
    emit_json,
    find_option,
    presenter,
)

if TYPE_CHECKING:
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
    **options: object,
) -> None:
    """Multi-GPU scaling and mixed precision in one or more environments: images/s, accuracy,
    speed-up, matmul TFLOP/s; where it ran (GPUs, driver, interconnect) and what it loaded."""
    from provision import bench, environment
    from provision.paths import output_file

    if plot is not None:
        output_file(plot, "--plot", force)  # before anything runs (a benchmark may take hours)

    if reports:
        if names or pythons:
            raise click.UsageError("--report shows saved reports: give no NAME or --python")
        result = bench.load(reports, plot)
    else:
        targets = [
            bench.BenchTarget(n, environment.interpreter(_find(n, out).prefix)) for n in names
        ]
        targets += [bench.BenchTarget(Path(p).absolute().parent.parent.name, p) for p in pythons]
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


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> None:
    """The environments built on this machine: release, path, prefix, GPU or CPU, last verify."""
    from provision import built, caches
    from provision.cli import present

    items = built.listing()
    sizes = {
        i.name: caches.folder_size(Path(i.record.prefix)) for i in items if i.record is not None
    }
    if as_json:
        emit_json(present.listing_json(items, sizes))
    else:
        click.echo(present.listing(items, sizes, caches.info()))


@click.command("show")
@click.argument("name")
@find_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(name: str, out: Path | None, as_json: bool) -> None:
    """One environment: what it is, where it is built, how to enter it, its last verify."""
    from provision import caches
    from provision.cli import present

    found = _find(name, out)
    size = caches.folder_size(Path(found.record.prefix)) if found.record else 0
    cache_bytes = caches.total()
    if as_json:
        emit_json(
            {
                "name": found.env.name,
                "env_dir": str(found.env.root.absolute()),
                "request": found.env.request.to_json(),
                "edited": found.env.edited(),
                "packages": [p.line for p in found.env.packages()],
                "lock": present.lock_state(found.env),
                "built": found.record.to_json() if found.record else None,
                "size": size if found.record else None,
                "caches": cache_bytes,
            }
        )
    else:
        click.echo(present.show(found.env, found.record, size, cache_bytes))


@click.command("remove")
@click.argument("name")
@click.option("--keep-prefix", is_flag=True, help="Forget NAME but leave its prefix on disk.")
@click.option(
    "--force", is_flag=True,
    help="Remove even when the prefix holds files provision did not install (they are kept).",
)  # fmt: skip
def remove_cmd(name: str, keep_prefix: bool, force: bool) -> None:
    """Forget a built environment and delete what provision installed in its prefix; files it did
    not install are never deleted (without --force they stop the removal)."""
    from provision import built
    from provision.progress import human_size

    done = built.remove(name, keep_prefix=keep_prefix, force=force)
    if done.deleted_prefix:
        click.echo(f"removed {done.prefix} (freed {human_size(done.freed)})")
        for path in done.kept:
            click.echo(f"kept {done.prefix}/{path}: provision did not install it")
    else:
        click.echo(f"left {done.prefix}: {done.kept_because}")
    if done.kernel:
        click.echo(f"removed the Jupyter kernel {done.kernel}")
    click.echo(f"{name}: forgotten (its directory of inputs and lock is left as it is)")


@click.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.argument("name")
@find_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(name: str, out: Path | None, command: tuple[str, ...]) -> None:
    """Run COMMAND inside NAME's environment (as `conda run`): provision run NAME -- python x.py"""
    import os

    from provision import built

    argv, env = built.run_argv(_find(name, out), command)
    sys.stdout.flush()
    os.execve(argv[0], argv, env)


@click.command("kernel")
@click.argument("name")
@find_option
@click.option("--display-name", callback=nonblank,
              help="What Jupyter shows (default: TensorFlow X.Y (NAME)).")  # fmt: skip
@click.option(
    "--prefix", type=SafePath(path_type=Path, file_okay=False),
    help="Install the kernelspec under this prefix (e.g. a JupyterLab environment's sys.prefix) "
    "instead of the user's Jupyter directory.",
)  # fmt: skip
def kernel_cmd(name: str, out: Path | None, display_name: str | None, prefix: Path | None) -> None:
    """Register NAME as a Jupyter kernel (it needs ipykernel: render with --jupyter)."""
    from provision import built

    k = built.install_kernel(_find(name, out), display_name=display_name, prefix=prefix)
    click.echo(f"kernel {k.name} ({k.display_name}) in {k.location}")


@click.command("export")
@click.argument("name")
@click.argument("dest", type=SafePath(path_type=Path))
@find_option
def export_cmd(name: str, dest: Path, out: Path | None) -> None:
    """A self-contained copy of NAME for another machine: inputs, lock, README, smoke test."""
    from provision import built

    files = built.export(_find(name, out), dest)
    click.echo(f"exported {name} to {dest} ({len(files)} files)")


@click.command("fleet")
@click.argument("name", required=False)
@find_option
@click.option("--inventory", "-i", type=SafePath(path_type=Path, dir_okay=False),
              help="Ansible inventory of the hosts.")  # fmt: skip
@click.option("--limit", metavar="PATTERN", callback=nonblank,
              help="Only these hosts (Ansible's --limit).")  # fmt: skip
@click.option("--check", is_flag=True, help="Dry run: say what would change, change nothing.")
@click.option("--drift", is_flag=True,
              help="Only `provision check` on each host: what changed since the roll-out, hosts "
              "that regressed first.")  # fmt: skip
@click.option(
    "--schedule-check",
    "schedule",
    is_flag=True,
    help="Install a daily `provision check` on each host (systemd timer, else cron).",
)
@click.option("--forks", type=click.IntRange(min=1), help="Hosts worked on at once.")
@click.option("--bundle", type=SafePath(path_type=Path, dir_okay=False),
              help="Install from this offline bundle (provision bundle).")  # fmt: skip
@click.option("--report-dir", type=SafePath(path_type=Path, file_okay=False),
              help="Where reports go (default: fleet-reports/NAME).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report at the end.")
@click.option("--roles-path", is_flag=True, help="Print where the provision_env role is; exit.")
@click.option("--wheel", "wheel_dir", type=SafePath(path_type=Path, file_okay=False),
              help="Write provision's own wheel (what hosts get) into DIR; exit.")  # fmt: skip
def fleet_cmd(
    name: str | None,
    out: Path | None,
    inventory: Path | None,
    limit: str | None,
    check: bool,
    drift: bool,
    schedule: bool,
    forks: int | None,
    bundle: Path | None,
    report_dir: Path | None,
    as_json: bool,
    roles_path: bool,
    wheel_dir: Path | None,
) -> None:
    """Roll NAME out to the inventory's hosts with Ansible: doctor, install from the committed
    lock, GPU policy, verify, on each host; a summary, fleet.json and fleet.html at the end."""
    from provision.bundlefile import selfwheel
    from provision.cli import present
    from provision.fleet import playbook as fleet

    if roles_path or wheel_dir:
        click.echo(fleet.ROLES if roles_path else selfwheel.build(wheel_dir or Path(".")))
        return
    if name is None or inventory is None:
        raise click.UsageError("give an environment NAME and --inventory FILE")
    from provision.paths import writable_target

    if report_dir is not None:
        writable_target(report_dir, "--report-dir")  # before a playbook is written or run
    if drift and (check or bundle is not None):
        raise click.UsageError("--drift changes nothing and copies nothing: no --check, --bundle")
    options = fleet.Options(inventory, limit, check, forks, bundle, report_dir, drift=drift,
                            schedule=schedule)  # fmt: skip
    result = fleet.run(_find(name, out).env, options)
    click.echo(present.fleet_table(result))
    click.echo(f"reports: {result.files['json']}, {result.files['html']}")
    if as_json:
        emit_json(result.as_json())
    if not result.ok:
        sys.exit(1)


@click.command("bundle")
@click.argument("name")
@find_option
@click.option("-o", "--output", type=SafePath(path_type=Path, dir_okay=False),
              help="The bundle file (default: NAME.bundle.tar; parts: FILE.001, ...).")  # fmt: skip
@click.option("--split", metavar="SIZE", callback=size,
              help="Write parts smaller than SIZE (4G fits FAT32; 650M, 63MB).")  # fmt: skip
@click.option("--with-toolkit", is_flag=True,
              help="system path: carry NVIDIA's CUDA runfile and cuDNN archive too.")  # fmt: skip
@click.option("--provision-python", metavar="X.Y", callback=version_xy,
              help="Python of the target that runs provision (default: the environment's, "
              "when >= 3.10, else this one's).")  # fmt: skip
@click.option("--glibc", metavar="X.Y", callback=version_xy,
              help="The target's glibc (default: this host's).")  # fmt: skip
@click.option("--platform", metavar="SUBDIR", callback=nonblank,
              help="Target platform (default: the spec's).")  # fmt: skip
@click.option("--cache-dir", type=SafePath(path_type=Path, file_okay=False),
              help="Where downloads are kept (default: the user's cache).")  # fmt: skip
@click.option("--provision-wheels", type=SafePath(path_type=Path, file_okay=False, exists=True),
              help="Take provision's wheels and its dependencies' from DIR.")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--force", is_flag=True, help="Replace an existing bundle file (never a device).")
def bundle_cmd(
    name: str, out: Path | None, output: Path | None, split: str | None, with_toolkit: bool,
    provision_python: str | None, glibc: str | None, platform: str | None,
    cache_dir: Path | None, provision_wheels: Path | None, quiet: bool, as_json: bool,
    force: bool,
) -> None:  # fmt: skip
    """One archive holding everything needed to build NAME on a machine with no network."""
    from provision.bundle import make as bundle
    from provision.bundlefile import bundle_format

    dest = output or Path(f"{name}.bundle.tar")
    bundle.check_output(dest, split is not None, force)  # before any download
    report = presenter(quiet)
    result = bundle.build(
        _find(name, out).env, dest, force=force,
        split=bundle_format.parse_size(split) if split else None, with_toolkit=with_toolkit,
        cache_dir=cache_dir, provision_python=provision_python, glibc=glibc, platform=platform,
        wheelhouse=provision_wheels, report=report,
    )  # fmt: skip
    report.close()
    if as_json:
        emit_json(result.as_json())
        return
    shown = result.files[0] if len(result.files) == 1 else f"{len(result.files)} parts"
    click.echo(
        f"wrote {shown} ({result.size / 1e6:.1f} MB, {result.members} members, "
        f"{result.member_bytes / 1e6:.1f} MB of members) in {result.seconds:.1f} s"
    )
    parts = result.files if len(result.files) > 1 else []
    for part in parts if len(parts) <= 4 else [parts[0], parts[1]]:
        click.echo(f"  {part}")
    if len(parts) > 4:  # the rest are numbered alike: the first, the pattern and the last
        click.echo(f"  ... ({len(parts) - 3} more)\n  {parts[-1]}")
    click.echo(f"on the target: provision install --from-bundle {result.files[0]}")


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
    return value
