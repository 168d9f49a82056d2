"""The one place a path kind is chosen from its name."""

from __future__ import annotations

from provision.errors import UsageError
from provision.matrix.kinds import conda_path, pip_path, system_path
from provision.matrix.kinds.base import PathKind, PathName

NAMES: tuple[PathName, ...] = ("conda", "system", "pip")  # the order tables and doctor use
KINDS: dict[str, PathKind] = {k.name: k for k in (conda_path.KIND, system_path.KIND, pip_path.KIND)}
DEFAULT: PathName = "conda"


def of(name: str) -> PathKind:
    """The kind called `name`; UsageError for a name that is none."""
    kind = KINDS.get(name)
    if kind is None:
        raise UsageError(f"unknown path {name!r}; choose one of {', '.join(NAMES)}")
    return kind
