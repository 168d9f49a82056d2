"""What every command of the CLI shares: its options, how names are found, JSON, progress.

Kept apart from commands.py (the group and the workflow's commands) and use.py
(the commands that use, share and measure built environments), which both build on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from provision.cli.args import SafePath, nonblank
from provision.tools import SOLVERS

if TYPE_CHECKING:
    from provision.cli.presenter import Presenter
    from provision.environment import Found

F = TypeVar("F", bound=Callable[..., object])
PATH_CHOICES = ("conda", "system", "pip")


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


def presenter(quiet: bool = False) -> Presenter:
    """The progress shown on stderr for this command: -q none, -v every tool's line; rich on a
    terminal, plain lines otherwise. One per command (a spinner must be stopped before errors)."""
    from provision.cli.presenter import Presenter

    ctx = click.get_current_context()
    shown = ctx.meta.get(PRESENTER)
    if not isinstance(shown, Presenter):
        verbosity = 0 if quiet else int(ctx.meta.get(VERBOSITY, 1))
        shown = ctx.meta[PRESENTER] = Presenter(verbosity)
    return shown


def emit_json(data: object) -> None:
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


def _find(name: str, out: Path | None) -> Found:
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


solver_option = click.option(
    "--solver", type=click.Choice(SOLVERS), default="auto", show_default=True,
    help="conda path: what conda-lock solves with (auto: the host's, else the built-in one).",
)  # fmt: skip

pre_option = click.option(
    "--pre", is_flag=True, help="Allow a release the matrix holds only as a pre-release."
)


def bundle_install_options(f: F) -> F:
    """install --from-bundle: what only a bundle install takes."""
    f = click.option("-q", "--quiet", is_flag=True, help="--from-bundle: no progress on stderr.")(f)
    f = click.option(
        "--revoked", type=SafePath(path_type=Path, dir_okay=False, exists=True),
        help="--from-bundle: keys no longer trusted (public keys or a KRL, as ssh-keygen -r "
        "reads; default PROVISION_REVOKED, or PROVISION_HOME/revoked_signers).",
    )(f)  # fmt: skip
    f = click.option(
        "--trust", type=SafePath(path_type=Path, dir_okay=False, exists=True),
        help="--from-bundle: refuse a bundle not signed by a signer in this OpenSSH "
        "allowed_signers file (default PROVISION_TRUST, or PROVISION_HOME/allowed_signers).",
    )(f)  # fmt: skip
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


def packages_options(f: F) -> F:
    """render and create: the user's packages, added to envs/NAME/packages.in."""
    f = click.option(
        "-r", "--requirements", "requirement_files", multiple=True,
        type=SafePath(path_type=Path, dir_okay=False),
        help="Add the packages of this requirements file (from the package index; repeatable).",
    )(f)  # fmt: skip
    return click.option(
        "--with", "with_", multiple=True, metavar="SPEC", callback=nonblank,
        help="Add a package (repeatable). conda path: a conda-forge package, `pypi:SPEC` for one "
        "from the package index; pip and system paths: a requirement.",
    )(f)  # fmt: skip


def packages_given(with_: Sequence[str], files: Sequence[Path]) -> list[str]:
    """--with specs, then -r files' lines (as `pypi:` specs); UsageError for an unreadable file."""
    from provision import diskread
    from provision.errors import UsageError
    from provision.userpackages import requirements_file

    out = list(with_)
    for path in files:
        try:
            text = diskread.read_text(path, 1 << 20)
        except (OSError, diskread.Unreadable) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise UsageError(f"-r {path}: cannot read it ({why})") from None
        out += requirements_file(text, f"-r {path}")
    return out
