"""`provision create` without a release (or `--tf auto`): ask the doctor, say what it picked."""

from __future__ import annotations

import os

import click


def pick(tf: str | None, path: str | None, pre: bool) -> tuple[str, str]:
    """The release and path to create: as given, or chosen for this host (printed in 1-2 lines)."""
    if tf not in (None, "auto"):
        from provision.matrix import kinds

        return str(tf), path or kinds.DEFAULT
    from provision import doctor, matrix
    from provision.doctor.choose import choose
    from provision.matrix import kinds

    kind = kinds.KINDS[path].name if path in kinds.KINDS else None
    # PROVISION_HOST_ROOT: the stand-in host `provision doctor --root` reads (tests, copies)
    found = doctor.run(root=os.environ.get("PROVISION_HOST_ROOT") or None)
    choice = choose(found, matrix.load(), kind, pre)
    for line in choice.why:
        click.echo(f"auto: {line}")
    return choice.tf, choice.path
