"""`provision matrix update`: Click wiring over provision.releases.update (a maintainer command)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from provision.cli.args import SafePath, nonblank


@click.command("update")
@click.option("--pre", is_flag=True, help="Include pre-releases (rows marked as such).")
@click.option(
    "--check", is_flag=True,
    help="Write nothing; exit 1 when the index has a release the matrix lacks (cron, CI).",
)  # fmt: skip
@click.option(
    "--tf", "tfs", metavar="X.Y", multiple=True, callback=nonblank,
    help="Only these releases (repeatable).",
)  # fmt: skip
@click.option(
    "--rederive", is_flag=True,
    help="Re-read the rows already in the matrix (all, or --tf) and report every derivable "
    "field that differs; writes nothing, exit 1 on a difference.",
)  # fmt: skip
@click.option(
    "--matrix", "path", type=SafePath(path_type=Path, dir_okay=False, exists=True),
    help="The data file to update (default: the one provision ships).",
)  # fmt: skip
def update_cmd(
    pre: bool, check: bool, tfs: tuple[str, ...], rederive: bool, path: Path | None
) -> None:
    """Add the TensorFlow releases on the package index that the matrix lacks, each row derived
    from its wheels (HTTP Range requests, a few MB) with citations; prints the diff."""
    from provision.matrix import DATA_FILE
    from provision.releases import update as upd

    target = path or DATA_FILE
    if rederive:
        if check or pre:
            raise click.UsageError("--rederive compares what is there; drop --check/--pre")
        found = upd.rederive(tfs=tfs, path=target)
        for line in found.differences:
            click.echo(line)
        count = len(found.differences)
        click.echo(
            (f"differences: {count}" if count else "no difference")
            + f" ({found.counter.bytes / 1e6:.1f} MB in {found.counter.requests} requests)"
        )
        sys.exit(1 if found.differences else 0)
    result = upd.update(pre=pre, check=check, tfs=tfs, path=target)
    for note in result.notes:
        click.echo(f"note: {note}")
    if check:
        if result.missing:
            again = "provision matrix update" + (" --pre" if pre else "")
            click.echo(f"the matrix lacks: {', '.join(result.missing)} (run `{again}`)")
            sys.exit(1)
        click.echo("the matrix has every release on the index")
        return
    if not result.written:
        click.echo("the matrix is up to date")
        return
    click.echo(result.diff, nl=False)
    done = [f"added {v}" for v in result.added] + [f"replaced {r}" for r in result.replaced]
    click.echo(
        f"{target.name}: {', '.join(done)} ({result.counter.bytes / 1e6:.1f} MB read in "
        f"{result.counter.requests} requests)"
    )
