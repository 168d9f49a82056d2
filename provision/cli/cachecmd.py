"""provision cache info | prune: the disk provision's caches take, and getting it back (as `uv cache
dir|clean` and `pixi clean cache`). Click wiring only."""

from __future__ import annotations

import click

from provision.cli.common import emit_json


@click.group("cache")
def cache_cmd() -> None:
    """provision's caches (uv's wheels, downloads for bundles, the solver's packages)."""


@cache_cmd.command("info")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def cache_info_cmd(as_json: bool) -> None:
    """Where each cache is and its size on disk."""
    from provision import caches
    from provision.cli.present import grid

    found = caches.info()
    if as_json:
        emit_json(
            [{"name": c.name, "path": str(c.path), "size": c.size, "owned": c.owned} for c in found]
        )
        return
    rows = [
        [c.name, caches.human(c.size), str(c.path), "provision's" if c.owned else "yours (kept)"]
        for c in found
    ]
    click.echo(grid(("cache", "size", "path", "pruned"), rows))
    click.echo(f"total: {caches.human(sum(c.size for c in found))}")


@cache_cmd.command("prune")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def cache_prune_cmd(as_json: bool) -> None:
    """Delete provision's caches (built environments keep working; the next lock or build
    downloads again). Caches you chose (UV_CACHE_DIR, PIP_CACHE_DIR) are left as they are."""
    from provision import caches

    done = caches.prune()
    if as_json:
        emit_json(
            {
                "freed": done.freed,
                "removed": [str(p) for p in done.removed],
                "kept": [str(c.path) for c in done.kept],
            }
        )
        return
    click.echo(f"freed {caches.human(done.freed)}" + (":" if done.removed else ""))
    for path in done.removed:
        click.echo(f"  removed {path}")
    for cache in done.kept:
        click.echo(f"  kept {cache.path} ({cache.name}: your setting, not provision's)")
