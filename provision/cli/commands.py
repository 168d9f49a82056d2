"""Click wiring only: gather options, call one core function, turn ProvisionError into an exit code.

Core modules are imported inside each command so that `provision --help` imports nothing but Click.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision import __version__
from provision.cli.args import SafePath, finite, nonblank, version_xy
from provision.cli.common import (
    PATH_CHOICES,
    VERBOSITY,
    _find,
    _os_error,
    _stop_progress,
    bundle_install_options,
    emit_json,
    find_option,
    gpu_options,
    jupyter_option,
    out_option,
    packages_given,
    packages_options,
    pre_option,
    presenter,
    solver_option,
)
from provision.cli.strict import refuse_given, refuse_other_paths, repeated_option
from provision.errors import ProvisionError, Terminated

if TYPE_CHECKING:
    from provision.install.build import BuildOptions


class Group(click.Group):
    """Translates every ProvisionError once: one line on stderr, the error's exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # the order of the workflow, not the alphabet

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        twice = repeated_option(command, rest) if command is not None else None
        if twice:
            raise click.UsageError(twice, ctx)
        return name, command, rest

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ProvisionError as exc:
            _stop_progress(ctx)
            click.echo(f"provision: error: {exc}", err=True)
            details = getattr(exc, "details", "")
            if details and ctx.find_root().meta.get(VERBOSITY, 1) > 1:
                click.echo(details.rstrip("\n"), err=True)  # e.g. the resolver's own words
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            _stop_progress(ctx)
            stopped = isinstance(exc, Terminated)
            click.echo(f"provision: {'terminated' if stopped else 'interrupted'}", err=True)
            ctx.exit(143 if stopped else 130)
        except OSError as exc:  # a path the file system refused, met where no module expected it
            _stop_progress(ctx)
            click.echo(f"provision: error: {_os_error(exc)}", err=True)
            ctx.exit(1)
        finally:
            _stop_progress(ctx)


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


@cli.group("matrix", cls=Group, invoke_without_command=True)
@click.option(
    "--tf", "tf", metavar="X.Y", callback=nonblank,
    help="Show one release with every field and its sources.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def matrix_cmd(ctx: click.Context, tf: str | None, as_json: bool) -> None:
    """The compatibility table: TensorFlow, Python, CUDA, cuDNN, driver, GPUs, channels, sources."""
    from provision import matrix
    from provision.cli import table

    if ctx.invoked_subcommand is not None:
        if tf or as_json:
            raise click.UsageError("--tf/--json belong after the subcommand here")
        return
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
@pre_option
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when files on disk are stale.")
@click.option("--force", is_flag=True, help="Overwrite files edited by hand since rendering.")
@packages_options
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
    pre: bool,
    with_: tuple[str, ...],
    requirement_files: tuple[Path, ...],
) -> None:
    """Render envs/<name>/: the lock inputs, hooks/runtime.env and the manifest provision.json.

    --with and -r add your packages to envs/<name>/packages.in, the file that is yours."""
    from provision import render
    from provision.errors import UsageError
    from provision.matrix.spec import EnvRequest, GpuPolicy

    if all_ == bool(tf):
        raise click.UsageError("give either --tf X.Y or --all")
    packages = packages_given(with_, requirement_files)
    if all_ and (python or name or gpu_memory or gpus or jupyter or packages):
        raise UsageError(
            "--all renders every release at its defaults; drop --tf/--python/"
            "--name/--gpu-memory/--gpus/--jupyter/--with, or render one release with --tf"
        )
    request = None if all_ else EnvRequest(
        str(tf), path, python, name, GpuPolicy(gpu_memory, gpus), jupyter, pre
    )  # fmt: skip
    result = render.run(out=out, request=request, check=check, force=force, packages=packages)
    for line in result.lines:
        click.echo(line)
    if not result.ok:
        sys.exit(1)


from provision.cli.packages import lock_cmd  # noqa: E402 (the workflow's order: after render)

cli.add_command(lock_cmd)


replace_option = click.option("--replace", "replace_other", is_flag=True, help="Rebuild NAME from "
                              "here though another directory built it.")  # fmt: skip


@cli.command("install", context_settings={"ignore_unknown_options": False})
@click.argument("name", required=False)
@find_option
@click.option("--prefix", type=SafePath(path_type=Path), help="Build here, not in the default.")
@click.option("--force", is_flag=True, help="Rebuild even when the environment is complete.")
@replace_option
@click.option(
    "--installer", type=click.Choice(("auto", "uv", "pip")), default="auto", show_default=True,
    help="pip path: what installs the lock into the venv (auto: uv, pip when uv is missing).",
)  # fmt: skip
@solver_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@bundle_install_options
@click.argument("script_args", nargs=-1, metavar="[-- INSTALL.SH OPTIONS]")
@click.pass_context
def install_cmd(
    ctx: click.Context,
    name: str | None,
    out: Path | None,
    prefix: Path | None,
    force: bool,
    replace_other: bool,
    installer: str,
    solver: str,
    as_json: bool,
    script_args: tuple[str, ...],
    bundle: Path | None,
    require_gpu: bool,
    no_verify: bool,
    quiet: bool,
    trust: Path | None,
    revoked: Path | None,
) -> None:
    """Build NAME on this machine from its lock (conda prefix, venv, or the system script).

    --force rebuilds a complete environment and accepts rendered files edited by hand.
    --from-bundle FILE builds, verifies and registers the bundle's environment with no network."""
    from provision import install
    from provision.install.build import BuildOptions

    options = BuildOptions(prefix, force, installer, solver, script_args, replace_other)  # type: ignore[arg-type]
    if bundle is not None:
        _install_from_bundle(name, out, options, as_json, bundle=bundle, require_gpu=require_gpu,
                             no_verify=no_verify, quiet=quiet, trust=(trust, revoked))  # fmt: skip
        return
    refuse_given(ctx, ["require_gpu"], "applies to --from-bundle only; after a build, check the "
                 "GPU with: provision verify NAME --require-gpu")  # fmt: skip
    refuse_given(ctx, ["trust", "revoked"], "applies to --from-bundle only")
    refuse_given(ctx, ["no_verify", "quiet"], "applies to --from-bundle only (an install from a "
                 "lock never verifies; provision -q silences progress)")  # fmt: skip
    if name is None:
        raise click.UsageError("give an environment NAME, or --from-bundle FILE")
    found = _find(name, out)
    refuse_other_paths(ctx, found.env.path)
    found.editable("provision install")
    if prefix is None and found.record is not None and found.record.owned:
        options = replace(options, prefix=Path(found.record.prefix))  # rebuild where it was built
    shown = presenter()
    result = install.install(found.env, options, report=shown)
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
@click.option("--tf", "tf", metavar="X.Y|auto", callback=nonblank,
              help="TensorFlow release; default: the newest this host runs.")  # fmt: skip
@click.option("--path", "path", type=click.Choice(PATH_CHOICES), help="Default: conda.")
@click.option("--python", "python", metavar="X.Y", callback=version_xy,
              help="Default: newest supported on this host.")  # fmt: skip
@click.option("--name", "name", help="Environment name (default: tf<X.Y>-<path>).")
@out_option
@gpu_options
@jupyter_option
@click.option("--prefix", type=SafePath(path_type=Path), help="Build here, not in the default.")
@click.option("--force", is_flag=True, help="Overwrite hand edits, re-lock, rebuild, re-verify.")
@replace_option
@solver_option
@click.option("--channel", "channels", multiple=True, callback=nonblank,
              help="conda path: lock against this channel.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary at the end.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke test (verify NAME runs it).")
@pre_option
@packages_options
@click.pass_context
def create_cmd(
    ctx: click.Context,
    tf: str | None,
    path: str | None,
    python: str | None,
    name: str | None,
    out: Path,
    gpu_memory: str | None,
    gpus: str | None,
    jupyter: bool,
    prefix: Path | None,
    force: bool,
    replace_other: bool,
    solver: str,
    channels: tuple[str, ...],
    as_json: bool,
    no_verify: bool,
    pre: bool,
    with_: tuple[str, ...],
    requirement_files: tuple[Path, ...],
) -> None:
    """Render, lock, install and verify an environment; each step is skipped when already done.

    --with and -r add your packages (envs/<name>/packages.in), locked with TensorFlow."""
    from provision import create
    from provision.cli.auto import pick
    from provision.install.build import BuildOptions
    from provision.matrix.spec import EnvRequest, GpuPolicy

    tf, path = pick(tf, path, pre)
    refuse_other_paths(ctx, path)
    request = EnvRequest(tf, path, python, name, GpuPolicy(gpu_memory, gpus), jupyter, pre)
    shown = presenter()
    result = create.create(
        request, BuildOptions(prefix=prefix, force=force, solver=solver, replace=replace_other),
        out=out,
        channels=channels, packages=packages_given(with_, requirement_files),
        progress=lambda step: _show_step(shown, step), report=shown, verify=not no_verify,
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
        state = "built, not verified (--no-verify)" if no_verify else "ready" + device
        click.echo(f"{result.name}: {state} at {result.prefix} (python: {result.python})")


def _show_step(shown: Any, step: Any) -> None:
    """create's steps: one starts (a spinner on a terminal, a line in a log), one ends."""
    from provision.progress import Event

    head = f"[{step.index}/4] {step.name:<8}"
    if step.outcome is None:
        shown(Event("step", f"{head} ..."))
        return
    shown(Event("done", f"{head} {step.outcome:<7} {step.seconds:6.1f} s  {step.detail}"))


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
    from provision.cli import doctor_report as report
    from provision.cli.args import platform_note

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
    from provision import built, environment, verify
    from provision.cli import present

    env = None
    if name is not None:
        found = _find(name, out)
        env = found.env
        if python is None and prefix is None:
            prefix = Path(built.require_built(found).prefix)  # not built here: 2, as run does
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
        emit_json({**result.as_json(), "bundle": present.bundle_json(env)})
    else:
        click.echo("\n".join(present.verify_lines(result)))
    if not result.ok:
        sys.exit(1)


def _install_from_bundle(
    name: str | None, out: Path | None, options: BuildOptions, as_json: bool, *, bundle: Path,
    require_gpu: bool, no_verify: bool, quiet: bool, trust: tuple[Path | None, Path | None],
) -> None:  # fmt: skip
    from provision.bundle import unbundle
    from provision.bundlefile import bundle_sign
    from provision.cli import present

    if name is not None and name.startswith("-"):  # `install --from-bundle B -- --opt`: no NAME
        options = replace(options, script_args=(name, *options.script_args))
        name = None
    shown = presenter(quiet)
    result = unbundle.install_from_bundle(
        bundle, options, name=name, out=out, require_gpu=require_gpu, verify=not no_verify,
        report=shown, trust=bundle_sign.trust_from(*trust),
    )  # fmt: skip
    shown.close()
    if as_json:
        emit_json(result.as_json())
    else:
        built = result.installed
        done = "already built" if built.skipped else f"built with {built.installer}"
        click.echo(f"{result.name}: {done} at {built.prefix} (inputs: {result.env_dir})")
        click.echo(f"{result.name}: {result.signature.line()}")
        if result.verified is not None:
            click.echo("\n".join(present.verify_lines(result.verified)))
    if not result.ok:
        sys.exit(1)


def _register_use_commands() -> None:
    """bench, list, show, remove, run, kernel, export, fleet, bundle, cache, check, add, drop,
    matrix update: after the workflow's own."""
    from provision.cli import bench_cmd, matrix_update, packages
    from provision.cli import use as cli_use
    from provision.cli.cachecmd import cache_cmd
    from provision.cli.drift_report import check_cmd
    from provision.cli.image_cmd import image_cmd

    for command in (
        bench_cmd.bench_cmd, cli_use.list_cmd, cli_use.show_cmd, cli_use.remove_cmd,
        cli_use.run_cmd, cli_use.kernel_cmd, cli_use.export_cmd, cli_use.fleet_cmd,
        cli_use.bundle_cmd, cache_cmd, check_cmd, packages.add_cmd, packages.drop_cmd, image_cmd,
    ):  # fmt: skip
        cli.add_command(command)
    matrix_cmd.add_command(matrix_update.update_cmd)
    matrix_cmd.add_command(packages.pairs_cmd)


_register_use_commands()


def main() -> None:
    # SIGINT stops provision however it was started. A background job of a non-interactive shell
    # (`provision create ... &` in a script, a CI job) inherits SIGINT ignored: Python then
    # installs no KeyboardInterrupt, and neither Ctrl-C to its group nor `kill -INT` would stop
    # an install, a verify or a bench. A caught SIGINT is reset to its default in the children
    # provision starts, so they can be interrupted too.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGTERM (`timeout`, systemd, a scheduler's job kill) unwinds the same way, exit 143: without
    # it, verify and bench left their temporary folders. A caller that started provision with
    # SIGTERM ignored is obeyed. A handled signal is default again in every child.
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _terminated)
    cli(prog_name="provision")


def _terminated(signum: int, frame: object) -> None:
    raise Terminated()
