"""Commands that use built environments and share them: list, show, remove, run, kernel,
export, fleet, bundle (bench: bench_cmd.py). Click wiring only, as commands.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from provision.cli.args import SafePath, nonblank, size, version_xy
from provision.cli.common import (
    _find,
    emit_json,
    find_option,
    presenter,
)


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
@click.option("--sbom", is_flag=True,
              help="Also write sbom.cdx.json, the lock's CycloneDX bill of materials.")  # fmt: skip
@click.option("--modulefile", is_flag=True,
              help="Also write modulefiles/NAME.lua, an Lmod module file for NAME's built prefix "
              "(module use DEST/modulefiles; module load NAME).")  # fmt: skip
def export_cmd(name: str, dest: Path, out: Path | None, sbom: bool, modulefile: bool) -> None:
    """A self-contained copy of NAME for another machine: inputs, lock, README, smoke test."""
    from provision import built, registry

    if not (dest.exists() or dest.is_symlink()):  # an existing DEST is refused as existing
        registry.refuse_inside_an_environment(dest, "export's DEST")
    files = built.export(_find(name, out), dest, sbom=sbom, modulefile=modulefile)
    click.echo(f"exported {name} to {dest} ({len(files)} files)")
    if modulefile:
        click.echo(f"module use {dest.absolute()}/modulefiles && module load {name}")


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
@click.option("--forks", type=click.IntRange(min=1, max=1000),
              help="Hosts worked on at once (at most 1000: each is a process here).")  # fmt: skip
@click.option("--bundle", type=SafePath(path_type=Path, dir_okay=False),
              help="Install from this offline bundle (provision bundle).")  # fmt: skip
@click.option("--trust", type=SafePath(path_type=Path, dir_okay=False, exists=True),
              help="--bundle: its signer must be in this allowed_signers file, here and on "
              "each host (the file is copied there).")  # fmt: skip
@click.option("--revoked", type=SafePath(path_type=Path, dir_okay=False, exists=True),
              help="--trust: keys no longer trusted (ssh-keygen -r), copied too.")  # fmt: skip
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
    trust: Path | None,
    revoked: Path | None,
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
    if ((trust or revoked) and bundle is None) or (revoked and not trust):
        raise click.UsageError("--trust is for a --bundle, and --revoked for a --trust")
    options = fleet.Options(inventory, limit, check, forks, bundle, report_dir, drift=drift,
                            schedule=schedule, trust=trust, revoked=revoked)  # fmt: skip
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
@click.option("--sign", "key", type=SafePath(path_type=Path, dir_okay=False, exists=True),
              help="Sign the manifest with this SSH key (ssh-keygen -Y sign; a private key, "
              "or a public key whose private half ssh-agent holds).")  # fmt: skip
def bundle_cmd(
    name: str, out: Path | None, output: Path | None, split: str | None, with_toolkit: bool,
    provision_python: str | None, glibc: str | None, platform: str | None,
    cache_dir: Path | None, provision_wheels: Path | None, quiet: bool, as_json: bool,
    force: bool, key: Path | None,
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
        wheelhouse=provision_wheels, report=report, sign=key,
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
