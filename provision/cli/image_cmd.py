"""`provision image NAME`: Click wiring only; the work is provision.image's."""

from __future__ import annotations

import re
from pathlib import Path

import click

from provision.cli.args import SafePath
from provision.cli.common import _find, emit_json, find_option, presenter

# An image reference as podman and skopeo read it: a lower-case name of components, a tag
_REFERENCE = re.compile(
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)


def _tag(value: str | None) -> str | None:
    if value is not None and (len(value) > 255 or not _REFERENCE.fullmatch(value)):
        raise click.BadParameter(f"{value!r} is not an image name (e.g. localhost/tf2.21:latest)")
    return value


@click.command("image")
@click.argument("name", required=False)
@find_option
@click.option("-o", "--output", type=SafePath(path_type=Path, dir_okay=False),
              help="The OCI archive (default: NAME.oci.tar).")  # fmt: skip
@click.option("--base", type=SafePath(path_type=Path, exists=True), required=True,
              help="The base: an OCI archive or layout, or a root filesystem folder (debootstrap "
              "--variant=minbase --include=python3,python3-venv,ca-certificates).")  # fmt: skip
@click.option("--from-bundle", "bundle", type=SafePath(path_type=Path, dir_okay=False, exists=True),
              help="Build from this bundle (or its first part); default: NAME's, made here from "
              "the cache as provision bundle makes it.")  # fmt: skip
@click.option("--provision-wheels", type=SafePath(path_type=Path, file_okay=False, exists=True),
              help="Without --from-bundle: take provision's wheels and its dependencies' from "
              "DIR, as provision bundle does.")  # fmt: skip
@click.option("--format", "formats", type=click.Choice(["oci", "apptainer"]), multiple=True,
              help="apptainer: also an Apptainer definition beside the archive (NAME.def) that "
              "builds a SIF from it with no network.")  # fmt: skip
@click.option(
    "--tag",
    callback=lambda ctx, param, value: _tag(value),
    help="The name podman load gives the image (default localhost/NAME:latest).",
)
@click.option("--compression-level", "level", type=click.IntRange(1, 9), default=6,
              show_default=True, help="gzip level of the layers.")  # fmt: skip
@click.option("--trust", type=SafePath(path_type=Path, dir_okay=False, exists=True),
              help="Refuse a bundle not signed by a signer in this allowed_signers file."
              )  # fmt: skip
@click.option("--no-layer-cache", is_flag=True,
              help="Build and compress every layer again, reusing nothing (what is made is "
              "still kept for the next build).")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace an existing output file (never a device).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def image_cmd(
    name: str | None, out: Path | None, output: Path | None, base: Path, bundle: Path | None,
    provision_wheels: Path | None, formats: tuple[str, ...], tag: str | None, level: int,
    trust: Path | None, no_layer_cache: bool, force: bool, quiet: bool, as_json: bool,
) -> None:  # fmt: skip
    """An OCI image of NAME (an OCI archive: podman load -i FILE), built with no network from
    its bundle on a base of Debian's packages; provision verify NAME is its health check."""
    from provision import caches
    from provision.bundlefile import bundle_sign
    from provision.image import assemble

    if name is None and bundle is None:
        raise click.UsageError("give an environment NAME, or --from-bundle FILE")
    make_bundle = None
    if bundle is None and name is not None:
        env = _find(name, out).env

        def make_bundle(dest: Path) -> Path:  # the bundle of NAME, as provision bundle makes it
            from provision.bundle import make

            return make.build(env, dest, report=report, wheelhouse=provision_wheels).files[0]

    shown = name or bundle.name.split(".")[0]  # type: ignore[union-attr]
    report = presenter(quiet)
    request = assemble.ImageRequest(
        output=output or Path(f"{shown}.oci.tar"), base=base, bundle=bundle,
        make_bundle=make_bundle, name=name,
        force=force, level=level, tag=tag or "", apptainer="apptainer" in formats,
        trust=bundle_sign.trust_from(trust),
        cache=caches.root() / "image-layers", reuse=not no_layer_cache,
    )  # fmt: skip
    result = assemble.build_image(request, report)
    report.close()
    if as_json:
        emit_json(result.as_json())
        return
    click.echo(
        f"wrote {result.output} ({result.size / 1e6:.1f} MB, {len(result.layers)} layers; "
        f"bundle {result.bundle_size / 1e6:.1f} MB + base {result.base_size / 1e6:.1f} MB) "
        f"in {result.seconds['total']:.1f} s"
    )
    click.echo(f"digest {result.digest}")
    if result.definition is not None:
        click.echo(f"apptainer build {result.name}.sif {result.definition}")
    click.echo(f"podman load -i {result.output}; health check: provision verify {result.name}")
