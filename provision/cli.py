"""Click wiring only: gather options, call one core function, turn ProvisionError into an exit code.

Core modules are imported inside each command so that `provision --help` imports nothing but Click.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from provision import __version__
from provision.cliargs import SafePath, finite, nonblank, size, version_xy
from provision.errors import ProvisionError

F = TypeVar("F", bound=Callable[..., Any])
PATH_CHOICES = ("conda", "system", "pip")


class Group(click.Group):
    """Translates every ProvisionError once: one line on stderr, the error's exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # the order of the workflow, not the alphabet

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ProvisionError as exc:
            _stop_progress(ctx)
            click.echo(f"provision: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _stop_progress(ctx)
            click.echo("provision: interrupted", err=True)
            ctx.exit(130)
        except OSError as exc:  # a path the file system refused, met where no module expected it
            _stop_progress(ctx)
            click.echo(f"provision: error: {_os_error(exc)}", err=True)
            ctx.exit(1)
        finally:
            _stop_progress(ctx)


def _os_error(exc: OSError) -> str:
    where = str(exc.filename or "")
    where = where if len(where) <= 120 else where[:60] + "..." + where[-40:]
    why = exc.strerror or str(exc)
    return f"{why}: {where}; check the path and its permissions" if where else why


VERBOSITY = "provision.verbosity"
PRESENTER = "provision.presenter"


def _stop_progress(ctx: click.Context) -> None:
    shown = ctx.meta.get(PRESENTER)
    if shown is not None:
        shown.close()


def presenter(quiet: bool = False) -> Any:
    """The progress shown on stderr for this command: -q none, -v every tool's line; rich on a
    terminal, plain lines otherwise. One per command (a spinner must be stopped before errors)."""
    from provision.progress import Presenter

    ctx = click.get_current_context()
    if PRESENTER not in ctx.meta:
        verbosity = 0 if quiet else int(ctx.meta.get(VERBOSITY, 1))
        ctx.meta[PRESENTER] = Presenter(verbosity)
    return ctx.meta[PRESENTER]


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def out_option(f: F) -> F:
    """Where render and create write environment directories."""
    return click.option(
        "--out",
        "out",
        type=SafePath(path_type=Path, file_okay=True, dir_okay=True),
        default=Path("envs"),
        show_default=True,
        help="Directory that holds the environment directories.",
    )(f)


def find_option(f: F) -> F:
    """Where a NAME is looked up: the registry of built environments, then envs/ (or only --out)."""
    return click.option(
        "--out",
        "out",
        type=SafePath(path_type=Path, file_okay=False, dir_okay=True),
        default=None,
        help="Look for NAME only in this directory of environment directories "
        "(default: the environments built here, then ./envs).",
    )(f)


def _find(name: str, out: Path | None) -> Any:
    from provision import environment

    return environment.find(name, out)


def jupyter_option(f: F) -> F:
    return click.option(
        "--jupyter", is_flag=True, help="Include ipykernel, for `provision kernel NAME`."
    )(f)


def gpu_options(f: F) -> F:
    f = click.option(
        "--gpu-memory",
        metavar="growth|MiB",
        help="GPU memory policy applied on activation: grow on demand, or a hard limit in MiB.",
    )(f)
    return click.option("--gpus", metavar="0,1", help="GPUs the environment may see.")(f)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr; errors only.")
@click.option(
    "-v", "--verbose", count=True, help="Show every line the installers print (progress)."
)
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: int) -> None:
    """From a cited TensorFlow / CUDA / cuDNN matrix to a locked, built and verified environment.

    Progress goes to stderr (rich on a terminal, plain lines otherwise); stdout holds results."""
    if quiet and verbose:
        raise click.UsageError("give -q or -v, not both")
    ctx.meta[VERBOSITY] = 0 if quiet else 1 + verbose


@cli.command("matrix")
@click.option(
    "--tf", "tf", metavar="X.Y", callback=nonblank,
    help="Show one release with every field and its sources.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def matrix_cmd(tf: str | None, as_json: bool) -> None:
    """The compatibility table: TensorFlow, Python, CUDA, cuDNN, driver, GPUs, channels, sources."""
    from provision import matrix, table

    m = matrix.load()
    if as_json:
        emit_json(table.as_json(m, m.release(tf) if tf else None))
    elif tf:
        click.echo(table.detail(m, m.release(tf)))
    else:
        click.echo(table.overview(m))


@cli.command("render")
@click.option("--tf", "tf", metavar="X.Y", callback=nonblank, help="TensorFlow release.")
@click.option("--path", "path", type=click.Choice(PATH_CHOICES), default="conda", show_default=True)
@click.option(
    "--python", "python", metavar="X.Y", callback=version_xy,
    help="Python version (default: newest supported).",
)  # fmt: skip
@click.option("--name", "name", help="Environment name (default: tf<X.Y>-<path>).")
@out_option
@gpu_options
@jupyter_option
@click.option("--all", "all_", is_flag=True, help="Every release on every path that can serve it.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when files on disk are stale.")
@click.option("--force", is_flag=True, help="Overwrite files edited by hand since rendering.")
def render_cmd(
    tf: str | None,
    path: str,
    python: str | None,
    name: str | None,
    out: Path,
    gpu_memory: str | None,
    gpus: str | None,
    jupyter: bool,
    all_: bool,
    check: bool,
    force: bool,
) -> None:
    """Render envs/<name>/: the lock inputs, hooks/runtime.env and the manifest provision.json."""
    from provision import render

    if all_ == bool(tf):
        raise click.UsageError("give either --tf X.Y or --all")
    result = render.run(
        out=out,
        tf=tf,
        path=path,
        python=python,
        name=name,
        all_=all_,
        check=check,
        force=force,
        gpu_memory=gpu_memory,
        gpus=gpus,
        jupyter=jupyter,
    )
    for line in result.lines:
        click.echo(line)
    if not result.ok:
        sys.exit(1)


@cli.command("lock")
@click.argument("name")
@find_option
@click.option(
    "--platform", "platforms", multiple=True, metavar="SUBDIR", callback=nonblank,
    help="Target platform (repeatable; default: the spec's, linux-64).",
)  # fmt: skip
@click.option(
    "--channel", "channels", multiple=True, metavar="URL", callback=nonblank,
    help="Replace the environment's channels (repeatable; recorded in the lock).",
)  # fmt: skip
@click.option(
    "--solver", type=click.Choice(("auto", "conda", "mamba", "micromamba", "builtin")),
    default="auto", show_default=True,
    help="conda path: what conda-lock solves with (auto: the host's, else the built-in one).",
)  # fmt: skip
@click.option("--check", is_flag=True, help="Lock nothing; exit 1 when the lock is stale.")
@click.option(
    "--cache-dir", type=SafePath(path_type=Path, file_okay=False),
    help="Where conda-lock, the solver and uv cache (default: the user's cache).",
)  # fmt: skip
def lock_cmd(
    name: str,
    out: Path | None,
    platforms: tuple[str, ...],
    channels: tuple[str, ...],
    solver: str,
    check: bool,
    cache_dir: Path | None,
) -> None:
    """Lock envs/NAME: conda-lock.yml (conda path), requirements.lock with hashes (pip, system)."""
    from provision import lock
    from provision.progress import Event

    found = _find(name, out)
    shown = presenter()
    if not check:
        shown(Event("step", f"locking {name} ({found.env.path} path) ..."))
    result = lock.run(
        found.env.root.parent, name, platforms=platforms, channels=channels, solver=solver,
        check=check,
        cache_dir=cache_dir,
    )  # fmt: skip
    shown.close()
    for line in result.lines:
        click.echo(line)
    if not result.ok:
        sys.exit(1)


def bundle_install_options(f: F) -> F:
    """install --from-bundle: what only a bundle install takes."""
    f = click.option("-q", "--quiet", is_flag=True, help="--from-bundle: no progress on stderr.")(f)
    f = click.option("--no-verify", is_flag=True, help="--from-bundle: skip the smoke test.")(f)
    f = click.option(
        "--require-gpu", is_flag=True,
        help="--from-bundle: a host without an NVIDIA driver, or a smoke test with no GPU, fails.",
    )(f)  # fmt: skip
    return click.option(
        "--from-bundle", "bundle", type=SafePath(path_type=Path, dir_okay=False),
        help="Build from an offline bundle (provision bundle), or its first part, with no network; "
        "--out DIR: where its environment directory goes (default PROVISION_HOME/bundled).",
    )(f)  # fmt: skip


@cli.command("install", context_settings={"ignore_unknown_options": False})
@click.argument("name", required=False)
@find_option
@click.option("--prefix", type=SafePath(path_type=Path), help="Build here, not in the default.")
@click.option("--force", is_flag=True, help="Rebuild even when the environment is complete.")
@click.option(
    "--installer", type=click.Choice(("auto", "uv", "pip")), default="auto", show_default=True,
    help="pip path: what installs the lock into the venv (auto: uv, pip when uv is missing).",
)  # fmt: skip
@click.option(
    "--solver", type=click.Choice(("auto", "conda", "mamba", "micromamba", "builtin")),
    default="auto", show_default=True, help="conda path: what conda-lock solves with.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@bundle_install_options
@click.argument("script_args", nargs=-1, metavar="[-- INSTALL.SH OPTIONS]")
def install_cmd(
    name: str | None,
    out: Path | None,
    prefix: Path | None,
    force: bool,
    installer: str,
    solver: str,
    as_json: bool,
    script_args: tuple[str, ...],
    **from_bundle: Any,
) -> None:
    """Build NAME on this machine from its lock (conda prefix, venv, or the system script).

    --force rebuilds a complete environment and accepts rendered files edited by hand.
    --from-bundle FILE builds, verifies and registers the bundle's environment with no network."""
    from provision import install

    if from_bundle["bundle"] is not None:
        if force:
            raise click.UsageError("--force does not apply to --from-bundle")
        _install_from_bundle(name, out, prefix, installer, solver, as_json, script_args,
                             **from_bundle)  # fmt: skip
        return
    if name is None:
        raise click.UsageError("give an environment NAME, or --from-bundle FILE")
    found = _find(name, out)
    if prefix is None and found.record is not None and found.record.owned:
        prefix = Path(found.record.prefix)  # rebuild where it was built
    shown = presenter()
    result = install.install(
        found.env, prefix, force=force, installer=installer,  # type: ignore[arg-type]
        solver=solver, script_args=script_args, report=shown,
    )  # fmt: skip
    shown.close()
    if as_json:
        emit_json(result.as_json())
        return
    if result.output and (shown.verbosity == 0 or "--dry-run" in script_args):
        # install.sh's plan is the result of a dry run; a real run's steps were shown as they ran
        click.echo(result.output.rstrip("\n"))
    if result.skipped:
        click.echo(f"{result.prefix}: nothing to do, built from this lock (--force rebuilds)")
    elif result.installer == "install.sh":
        click.echo(f"install.sh finished in {result.seconds:.1f} s (venv: {result.prefix})")
    else:
        click.echo(f"built {result.prefix} with {result.installer} in {result.seconds:.1f} s")


@cli.command("create")
@click.option("--tf", "tf", metavar="X.Y", required=True, callback=nonblank,
              help="TensorFlow release.")  # fmt: skip
@click.option("--path", "path", type=click.Choice(PATH_CHOICES), default="conda", show_default=True)
@click.option("--python", "python", metavar="X.Y", callback=version_xy,
              help="Default: newest supported on this host.")  # fmt: skip
@click.option("--name", "name", help="Environment name (default: tf<X.Y>-<path>).")
@out_option
@gpu_options
@jupyter_option
@click.option("--prefix", type=SafePath(path_type=Path), help="Build here, not in the default.")
@click.option("--force", is_flag=True, help="Overwrite hand edits, re-lock, rebuild, re-verify.")
@click.option(
    "--solver", type=click.Choice(("auto", "conda", "mamba", "micromamba", "builtin")),
    default="auto", show_default=True, help="conda path: what conda-lock solves with.",
)  # fmt: skip
@click.option("--channel", "channels", multiple=True, callback=nonblank,
              help="conda path: lock against this channel.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary at the end.")
def create_cmd(
    tf: str,
    path: str,
    python: str | None,
    name: str | None,
    out: Path,
    gpu_memory: str | None,
    gpus: str | None,
    jupyter: bool,
    prefix: Path | None,
    force: bool,
    solver: str,
    channels: tuple[str, ...],
    as_json: bool,
) -> None:
    """Render, lock, install and verify an environment; each step is skipped when already done."""
    from provision import create

    shown = presenter()
    result = create.create(
        tf=tf, path=path, python=python, name=name, out=out, gpu_memory=gpu_memory, gpus=gpus,
        prefix=prefix, force=force, solver=solver, channels=channels,
        progress=lambda step: _show_step(shown, step), jupyter=jupyter, report=shown,
    )  # fmt: skip
    shown.close()
    if as_json:
        emit_json(result.as_json())
    if not result.ok:
        click.echo(f"provision: error: {result.error}", err=True)
        click.echo(f"provision: what to do: {result.hint}", err=True)
        sys.exit(1)
    if not as_json:
        device = f" ({result.cpu_only})" if result.cpu_only else ""
        click.echo(f"{result.name}: ready{device} at {result.prefix} (python: {result.python})")


def _show_step(shown: Any, step: Any) -> None:
    """create's steps: one starts (a spinner on a terminal, a line in a log), one ends."""
    from provision.progress import Event

    head = f"[{step.index}/4] {step.name:<8}"
    if step.status == "running":
        shown(Event("step", f"{head} ..."))
        return
    shown(Event("done", f"{head} {step.status:<7} {step.seconds:6.1f} s  {step.detail}"))


@cli.command("doctor")
@click.option("--tf", "tf", metavar="X.Y", callback=nonblank,
              help="Judge one release only (exit 1 if it cannot).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--root", type=SafePath(path_type=Path, file_okay=False, exists=True),
    envvar="PROVISION_HOST_ROOT", hidden=True,
    help="Read the host's files under DIR instead of / (tests, copies of a machine).",
)  # fmt: skip
def doctor_cmd(tf: str | None, as_json: bool, root: Path | None) -> None:
    """What this host can run: driver, GPUs, CUDA libraries, and a verdict per release and path.

    Exit 0 when the host can run the release asked for (any release without --tf), 1 otherwise.
    """
    from provision import doctor, matrix
    from provision.cliargs import platform_note
    from provision.doctor import report

    note = platform_note(sys.platform)
    if note and root is None:
        click.echo(f"provision: note: {note}", err=True)
    result = doctor.run(tf=tf, root=root)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(report.render(result, matrix.load()))
    if not result.ok:
        sys.exit(1)


@cli.command("verify")
@click.argument("name", required=False)
@find_option
@click.option(
    "--python", "python", type=SafePath(path_type=Path, dir_okay=False),
    help="Run the smoke test with this interpreter, as it is (no activation).",
)  # fmt: skip
@click.option("--prefix", type=SafePath(path_type=Path), help="The environment's prefix.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--require-gpu", is_flag=True, help="No GPU is a failure.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=180, show_default=True, metavar="S",
    callback=finite,
    help="Seconds each check may take before it counts as hung.",
)  # fmt: skip
def verify_cmd(
    name: str | None,
    out: Path | None,
    python: Path | None,
    prefix: Path | None,
    as_json: bool,
    require_gpu: bool,
    timeout: float,
) -> None:
    """Run the smoke test inside NAME's environment, as Jupyter, IDEs and cron run it (no
    activation), and compare the report with the spec."""
    from provision import environment, verify

    env = None
    if name is not None:
        found = _find(name, out)
        env = found.env
        if python is None and prefix is None:
            prefix = found.prefix
    elif python is None and prefix is None:
        raise click.UsageError("give an environment NAME, --prefix DIR or --python EXE")
    else:
        # An interpreter or prefix of an environment built here is judged against its spec.
        env = environment.built_at(python, prefix)
    from provision.progress import Event

    shown = presenter()
    shown(Event("step", "running the smoke test (TensorFlow starts, then each check) ..."))
    result = verify.verify(
        env, python=python, prefix=prefix, require_gpu=require_gpu, timeout=timeout
    )
    shown.close()
    if as_json:
        emit_json(result.as_json())
    else:
        click.echo("\n".join(result.lines()))
    if not result.ok:
        sys.exit(1)


@cli.command("bench")
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
    help="Skip a configuration whose estimate (after its first steps) is longer.",
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
def bench_cmd(
    names: tuple[str, ...],
    out: Path | None,
    pythons: tuple[Path, ...],
    reports: tuple[Path, ...],
    timeout: float,
    plot: Path | None,
    as_json: bool,
    markdown: bool,
    **options: Any,
) -> None:
    """Multi-GPU scaling and mixed precision in one or more environments: images/s, accuracy,
    speed-up, matmul TFLOP/s; where it ran (GPUs, driver, interconnect) and what it loaded."""
    from provision import bench, environment

    if reports:
        if names or pythons:
            raise click.UsageError("--report shows saved reports: give no NAME or --python")
        result = bench.load(reports, plot)
    else:
        targets = [bench.Target(n, environment.interpreter(_find(n, out).prefix)) for n in names]
        targets += [bench.Target(Path(p).absolute().parent.parent.name, p) for p in pythons]
        if not targets:
            raise click.UsageError("give environment NAMEs, --python EXE or --report FILE")
        _bench_checks(options)
        called = [*names, *(w for p in pythons for w in ("--python", str(p)))]
        shown = presenter()
        result = bench.run(
            targets, options=options, plot=plot, report=shown, timeout=timeout,
            command=bench.command_line(called, options),
        )  # fmt: skip
        shown.close()
    if as_json:
        emit_json(result.as_json())
    else:
        from provision import bench_report

        shown_lines = bench_report.markdown(result.reports) if markdown else result.lines()
        click.echo("\n".join(shown_lines))
    if result.plot_error:
        raise bench.BenchError(f"{result.plot_error}; the results are above")
    if not result.ok:
        sys.exit(1)


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> None:
    """The environments built on this machine: release, path, prefix, GPU or CPU, last verify."""
    from provision import built, present

    items = built.listing()
    if as_json:
        emit_json(present.listing_json(items))
    else:
        click.echo(present.listing(items))


@cli.command("show")
@click.argument("name")
@find_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(name: str, out: Path | None, as_json: bool) -> None:
    """One environment: what it is, where it is built, how to enter it, its last verify."""
    from provision import present

    found = _find(name, out)
    if as_json:
        emit_json(
            {
                "name": found.env.name,
                "env_dir": str(found.env.root.absolute()),
                "request": found.env.request.to_json(),
                "edited": found.env.edited(),
                "built": found.record.to_json() if found.record else None,
            }
        )
    else:
        click.echo(present.show(found.env, found.record))


@cli.command("remove")
@click.argument("name")
@click.option("--keep-prefix", is_flag=True, help="Forget NAME but leave its prefix on disk.")
def remove_cmd(name: str, keep_prefix: bool) -> None:
    """Forget a built environment and delete its prefix (only what provision built)."""
    from provision import built

    done = built.remove(name, keep_prefix=keep_prefix)
    if done.deleted_prefix:
        click.echo(f"removed {done.prefix}")
    else:
        click.echo(f"left {done.prefix}: {done.kept_because}")
    if done.kernel:
        click.echo(f"removed the Jupyter kernel {done.kernel}")
    click.echo(f"{name}: forgotten (its directory of inputs and lock is left as it is)")


@cli.command(
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


@cli.command("kernel")
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


@cli.command("export")
@click.argument("name")
@click.argument("dest", type=SafePath(path_type=Path))
@find_option
def export_cmd(name: str, dest: Path, out: Path | None) -> None:
    """A self-contained copy of NAME for another machine: inputs, lock, README, smoke test."""
    from provision import built

    files = built.export(_find(name, out), dest)
    click.echo(f"exported {name} to {dest} ({len(files)} files)")


@cli.command("fleet")
@click.argument("name", required=False)
@find_option
@click.option("--inventory", "-i", type=SafePath(path_type=Path, dir_okay=False),
              help="Ansible inventory of the hosts.")  # fmt: skip
@click.option("--limit", metavar="PATTERN", callback=nonblank,
              help="Only these hosts (Ansible's --limit).")  # fmt: skip
@click.option("--check", is_flag=True, help="Dry run: say what would change, change nothing.")
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
    forks: int | None,
    bundle: Path | None,
    report_dir: Path | None,
    as_json: bool,
    roles_path: bool,
    wheel_dir: Path | None,
) -> None:
    """Roll NAME out to the inventory's hosts with Ansible: doctor, install from the committed
    lock, GPU policy, verify, on each host; a summary, fleet.json and fleet.html at the end."""
    from provision import fleet, fleet_report, selfwheel

    if roles_path or wheel_dir:
        click.echo(fleet.ROLES if roles_path else selfwheel.build(wheel_dir or Path(".")))
        return
    if name is None or inventory is None:
        raise click.UsageError("give an environment NAME and --inventory FILE")
    from provision.cliargs import writable_target

    if report_dir is not None:
        writable_target(report_dir, "--report-dir")  # before a playbook is written or run
    options = fleet.Options(inventory, limit, check, forks, bundle, report_dir)
    result = fleet.run(_find(name, out).env, options)
    click.echo(fleet_report.table(result))
    click.echo(f"reports: {result.files['json']}, {result.files['html']}")
    if as_json:
        emit_json(result.as_json())
    if not result.ok:
        sys.exit(1)


@cli.command("bundle")
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
def bundle_cmd(
    name: str, out: Path | None, output: Path | None, split: str | None, with_toolkit: bool,
    provision_python: str | None, glibc: str | None, platform: str | None,
    cache_dir: Path | None, provision_wheels: Path | None, quiet: bool, as_json: bool,
) -> None:  # fmt: skip
    """One archive holding everything needed to build NAME on a machine with no network."""
    from provision import bundle, bundle_format
    from provision.cliargs import writable_target

    writable_target(output or Path(f"{name}.bundle.tar"), "-o")  # before any download
    result = bundle.build(
        _find(name, out).env, output or Path(f"{name}.bundle.tar"),
        split=bundle_format.parse_size(split) if split else None, with_toolkit=with_toolkit,
        cache_dir=cache_dir, provision_python=provision_python, glibc=glibc, platform=platform,
        wheelhouse=provision_wheels, progress=_progress(quiet),
    )  # fmt: skip
    if as_json:
        emit_json(result.as_json())
        return
    shown = result.files[0] if len(result.files) == 1 else f"{len(result.files)} parts"
    click.echo(
        f"wrote {shown} ({result.size / 1e6:.1f} MB, {result.members} members, "
        f"{result.member_bytes / 1e6:.1f} MB of members) in {result.seconds:.1f} s"
    )
    for part in result.files if len(result.files) > 1 else ():
        click.echo(f"  {part}")
    click.echo(f"on the target: provision install --from-bundle {result.files[0]}")


def _progress(quiet: bool) -> Callable[[str], None]:
    silent = quiet or click.get_current_context().meta.get(VERBOSITY, 1) == 0  # the group's -q
    return (lambda line: None) if silent else (lambda line: click.echo(line, err=True))


def _install_from_bundle(
    name: str | None, out: Path | None, prefix: Path | None, installer: str, solver: str,
    as_json: bool, script_args: tuple[str, ...], *, bundle: Path, require_gpu: bool,
    no_verify: bool, quiet: bool,
) -> None:  # fmt: skip
    from provision import unbundle

    if name is not None and name.startswith("-"):  # `install --from-bundle B -- --opt`: no NAME
        script_args = (name, *script_args)
        name = None
    result = unbundle.install_from_bundle(
        bundle, name=name, out=out, prefix=prefix, installer=installer,  # type: ignore[arg-type]
        solver=solver, require_gpu=require_gpu, verify=not no_verify, script_args=script_args,
        progress=_progress(quiet),
    )  # fmt: skip
    if as_json:
        emit_json(result.as_json())
    else:
        built = result.installed
        done = "already built" if built.skipped else f"built with {built.installer}"
        click.echo(f"{result.name}: {done} at {built.prefix} (inputs: {result.env_dir})")
        if result.verified is not None:
            click.echo("\n".join(result.verified.lines()))
    if not result.ok:
        sys.exit(1)


BENCH_PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def _counts(value: str, flag: str) -> str:
    parts = value.split(",")
    if not all(p.isascii() and p.isdigit() and 0 < int(p) <= 1024 for p in parts):
        raise click.BadParameter(f"takes GPU counts like 1,2,4, not {value!r}", param_hint=flag)
    if len(set(parts)) != len(parts):
        raise click.BadParameter(f"names a count twice: {value!r}", param_hint=flag)
    return value


def _bench_checks(options: dict[str, Any]) -> None:
    """What the payload would refuse after TensorFlow has loaded, refused first (exit 2)."""
    per = options["steps_per_execution"]
    for flag in ("steps", "warmup"):
        if options[flag] % per:
            raise click.BadParameter(
                f"{options[flag]} is not a multiple of --steps-per-execution {per}",
                param_hint=f"--{flag}",
            )
    if options["strategy"] == "default" and options["gpus"] != "1":
        raise click.BadParameter(
            "--strategy default runs on one device: give --gpus 1", param_hint="--gpus"
        )
    options["jit"] = {True: "on", False: "off", None: "auto"}[options["jit"]]


def _precisions(value: str) -> str:
    bad = [p for p in value.split(",") if p not in BENCH_PRECISIONS]
    if bad:
        raise click.BadParameter(
            f"{', '.join(map(repr, bad))}: choose from {', '.join(BENCH_PRECISIONS)}",
            param_hint="--precision",
        )
    return value


def main() -> None:
    cli(prog_name="provision")


if __name__ == "__main__":
    main()
