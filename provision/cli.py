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
from provision.errors import ProvisionError

F = TypeVar("F", bound=Callable[..., Any])
PATH_CHOICES = ("conda", "system", "pip")


class Group(click.Group):
    """Translates every ProvisionError once: one line on stderr, the error's exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ProvisionError as exc:
            click.echo(f"provision: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("provision: interrupted", err=True)
            ctx.exit(130)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def out_option(f: F) -> F:
    return click.option(
        "--out",
        "out",
        type=click.Path(path_type=Path, file_okay=True, dir_okay=True),
        default=Path("envs"),
        show_default=True,
        help="Directory that holds the environment directories.",
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
def cli() -> None:
    """From a cited TensorFlow / CUDA / cuDNN matrix to a locked, built and verified environment."""


@cli.command("matrix")
@click.option("--tf", "tf", metavar="X.Y", help="Show one release with every field and its sources.")
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
@click.option("--tf", "tf", metavar="X.Y", help="TensorFlow release.")
@click.option("--path", "path", type=click.Choice(PATH_CHOICES), default="conda", show_default=True)
@click.option("--python", "python", metavar="X.Y", help="Python version (default: newest supported).")
@click.option("--name", "name", help="Environment name (default: tf<X.Y>-<path>).")
@out_option
@gpu_options
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
    all_: bool,
    check: bool,
    force: bool,
) -> None:
    """Render envs/<name>/: environment file or install script, hooks, lock inputs, smoke test."""
    from provision import render

    if all_ == bool(tf):
        raise click.UsageError("give either --tf X.Y or --all")
    result = render.run(
        out=out, tf=tf, path=path, python=python, name=name, all_=all_, check=check,
        force=force, gpu_memory=gpu_memory, gpus=gpus,
    )
    for line in result.lines:
        click.echo(line)
    if not result.ok:
        sys.exit(1)


def main() -> None:
    cli(prog_name="provision")


if __name__ == "__main__":
    main()
