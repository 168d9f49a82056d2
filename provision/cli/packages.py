"""The commands about what an environment holds: `lock` (its lock, `--upgrade` moving the user's
packages forward), `add` and `drop` (the user's packages, changed in a built environment in place).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.args import SafePath, nonblank
from provision.cli.common import _find, find_option, presenter, solver_option
from provision.cli.strict import refuse_other_paths

if TYPE_CHECKING:
    from provision.change import Changed


@click.command("lock")
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
@solver_option
@click.option("--check", is_flag=True, help="Lock nothing; exit 1 when the lock is stale.")
@click.option(
    "--upgrade",
    is_flag=True,
    help="Move every package of packages.in to now (TensorFlow's own stay).",
)
@click.option(
    "--upgrade-package",
    "upgrade_packages",
    multiple=True,
    metavar="PKG",
    callback=nonblank,
    help="Move this package of packages.in, and what only it needs, to now (repeatable).",
)
@click.option(
    "--cache-dir", type=SafePath(path_type=Path, file_okay=False),
    help="Where conda-lock, the solver and uv cache (default: the user's cache).",
)  # fmt: skip
@click.pass_context
def lock_cmd(
    ctx: click.Context,
    name: str,
    out: Path | None,
    platforms: tuple[str, ...],
    channels: tuple[str, ...],
    solver: str,
    check: bool,
    upgrade: bool,
    upgrade_packages: tuple[str, ...],
    cache_dir: Path | None,
) -> None:
    """Lock envs/NAME: conda-lock.yml (conda path), requirements.lock with hashes (pip, system)."""
    from provision import lock
    from provision.errors import StaleError
    from provision.progress import Event

    found = _find(name, out)
    refuse_other_paths(ctx, found.env.path)
    if not check:
        found.rewritable("provision lock")
    if check and (upgrade or upgrade_packages):
        raise click.UsageError("--check locks nothing; it takes no --upgrade")
    moving = () if upgrade else upgrade_packages if upgrade_packages else None
    shown = presenter()
    if not check:
        shown(Event("step", f"locking {name} ({found.env.path} path) ..."))
    result = lock.run(
        found.env, platforms=platforms, channels=channels, solver=solver,
        check=check, cache_dir=cache_dir, upgrade=moving,
    )  # fmt: skip
    shown.close()
    if result.outcome == "stale":
        raise StaleError(result.summary)
    for line in result.lines:
        click.echo(line)


@click.command("add")
@click.argument("name")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@find_option
@click.option(
    "--pypi",
    is_flag=True,
    help="conda path: the specs are packages from the package index (pypi:SPEC).",
)
@click.option("--no-verify", is_flag=True, help="Sync the built environment; skip the smoke test.")
def add_cmd(name: str, specs: tuple[str, ...], out: Path | None, pypi: bool,
            no_verify: bool) -> None:  # fmt: skip
    """Add packages to NAME: packages.in, the lock (smallest change), the built prefix, verify.

    Every other pin stays unless the new packages need it to move; what moved is printed. When
    anything fails, packages.in, the lock and the prefix are as they were."""
    from provision import change

    found = _find(name, out)
    given = [f"pypi:{s}" if pypi else s for s in specs]
    shown = presenter()
    done = change.add(found, given, verify=not no_verify, report=shown)
    shown.close()
    _print(done)


@click.command("drop")
@click.argument("name")
@click.argument("packages", nargs=-1, required=True, metavar="PKG...")
@find_option
@click.option("--no-verify", is_flag=True, help="Sync the built environment; skip the smoke test.")
def drop_cmd(name: str, packages: tuple[str, ...], out: Path | None, no_verify: bool) -> None:
    """Drop packages of yours (packages.in) from NAME: the lock, the built prefix, verify.

    Only what packages.in names can go; TensorFlow's pins stay. (`provision remove NAME` deletes
    the whole environment.)"""
    from provision import change

    found = _find(name, out)
    shown = presenter()
    done = change.drop(found, packages, verify=not no_verify, report=shown)
    shown.close()
    _print(done)


def _print(done: Changed) -> None:
    if done.moved:
        click.echo("moved in the lock:")
        for line in done.moved:
            click.echo(f"  {line}")
    for line in done.lines:
        click.echo(line)


@click.command("pairs")
@click.argument("framework", type=click.Choice(("torch", "jax")))
@click.option(
    "--tf",
    "tfs",
    multiple=True,
    metavar="X.Y",
    callback=nonblank,
    help="Only this release (repeatable; default: every final release's pip path).",
)
def pairs_cmd(framework: str, tfs: tuple[str, ...]) -> None:
    """Which FRAMEWORK release locks beside each TensorFlow release, in one CUDA line.

    For each release's pip path at its newest Python: the newest FRAMEWORK whose NVIDIA wheels
    fit the release's own and-cuda ranges (today's package index)."""
    from provision import matrix
    from provision._children import workdir
    from provision.lock import frameworks
    from provision.matrix import kinds, spec
    from provision.progress import Event

    m = matrix.load()
    releases = [m.release(t) for t in tfs] if tfs else list(m.finals)
    wanted = "jax[cuda12]" if framework == "jax" else framework
    shown = presenter()
    rows = []
    with workdir() as tmp:
        for release in releases:
            if kinds.of("pip").refusal(m, release):
                continue
            s = spec.resolve(m, release.tf, "pip")
            shown(Event("step", f"TensorFlow {release.pin}, Python {s.python}: {wanted} ..."))
            pairing = frameworks.pair(s, wanted, Path(tmp) / release.tf)
            line = f"CUDA {s.cuda.version}" + ("" if frameworks.ranges(s) else " (exact pins)")
            rows.append((release.pin, s.python, line, pairing.shown()))
    shown.close()
    click.echo(f"{'tensorflow':<12} {'python':<7} {'nvidia libraries':<22} {framework}")
    for pin, python, line, got in rows:
        click.echo(f"{pin:<12} {python:<7} {line:<22} {got}")
