"""`provision check`: Click wiring and the text presentation of provision.drift.check."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.args import SafePath, finite
from provision.cli.common import emit_json, presenter

if TYPE_CHECKING:
    from provision.drift.check import CheckResult, EnvCheck


@click.command("check")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option(
    "--verify", "reverify", is_flag=True,
    help="Run the smoke test of each environment that changed (a pass records its facts anew).",
)  # fmt: skip
@click.option("--all", "all_", is_flag=True, help="With --verify: run it for every environment.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--prom", type=SafePath(path_type=Path, dir_okay=False), metavar="FILE",
    help="Also write the result for node_exporter's textfile collector into FILE (named *.prom, "
    "as it reads; written atomically).",
)  # fmt: skip
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=180, show_default=True, metavar="S",
    callback=finite, help="--verify: seconds each check of the smoke test may take.",
)  # fmt: skip
def check_cmd(
    names: tuple[str, ...], reverify: bool, all_: bool, as_json: bool, prom: Path | None,
    timeout: float,
) -> None:  # fmt: skip
    """What changed under each built environment since its last passing verify (or its install),
    and what each change does to it: driver, GPUs, CUDA libraries, hooks and GPU policy,
    packages against the lock, files against their installers' records, the interpreter.

    Reads files and asks the driver only (no TensorFlow). Exit 0 when nothing that matters
    changed (or --verify passed again), 1 otherwise: one line for cron and monitoring."""
    from provision import environment
    from provision.drift import check
    from provision.drift import prom as prom_out
    from provision.progress import Event

    if all_ and not reverify:
        raise click.UsageError("--all goes with --verify")
    for name in names:
        environment.check_name(name)
    if prom is not None:
        prom_out.check_target(prom)  # before the check, which may run smoke tests
    if reverify:
        presenter()(Event("step", "checking, then running the smoke test where needed ..."))
    result = check.check(names, verify=reverify, all_=all_, timeout=timeout)
    presenter().close()
    if prom is not None:
        prom_out.write(result, prom)
    if as_json:
        emit_json(result.as_json())
    else:
        click.echo("\n".join(lines(result)))
    if not result.ok:
        sys.exit(1)


def lines(result: CheckResult) -> list[str]:
    h = result.host
    gpus = ", ".join(f"{g.index}: {g.name} ({g.cc})" for g in h.gpus) or "none"
    driver = f"driver {h.driver} (CUDA {h.cuda})" if h.driver else "no NVIDIA driver answered"
    out = [f"host: {driver}; GPUs: {gpus}"]
    if not result.envs:
        out.append("no environment is registered on this machine (provision list)")
    for e in result.envs:
        out += _env_lines(e)
    bad = [e.name for e in result.envs if not e.ok]
    verdict = (
        f"{len(bad)} need attention: {', '.join(bad)}" if bad else "nothing that matters changed"
    )
    out.append(f"check: {len(result.envs)} environment(s), {verdict} ({result.seconds:.2f} s)")
    return out


def _env_lines(e: EnvCheck) -> list[str]:
    since = f" since {e.baseline}" if e.baseline else ""
    if e.state == "ok":
        head = f"{e.name}: unchanged{since}"
    elif e.state == "drift":
        broke = f", {e.breaks} break it" if e.breaks else ""
        head = f"{e.name}: {len(e.changes)} change(s){since}{broke}"
    else:
        head = f"{e.name}: {e.state}: {e.problem.removeprefix(e.name + ': ')}"
    out = [head]
    for c in e.changes:
        mark = "BREAKS" if c.severity == "breaks" else "change"
        out.append(f"  {mark:<6}  {c.line()}")
    if e.reverified is not None:
        if e.reverified.result is not None:
            from provision.cli import present

            out += [f"  {line}" for line in present.verify_lines(e.reverified.result)]
        else:
            out.append(f"  verify: {e.reverified.summary}")
        if e.reverified.ok:
            out.append(f"  {e.name}: verified again; what it runs on now is its new baseline")
    return out
