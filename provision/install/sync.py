"""Bringing a built pip-path (or system-path) venv from one lock to the next, in place.

Only the difference moves: uv installs the new lock with its hashes checked (what is already there
at the locked version is left alone), then the packages the old lock had and the new one has not
are uninstalled. A package a user installed by hand, in neither lock, is not touched. The list of
what provision installed (owned) and the build marker follow the change, so `remove` and `check`
see the prefix as it now is. Any failure puts the prefix back to the old lock, the same way.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from provision import _proc, tools
from provision.environment import EnvDir, interpreter
from provision.errors import InstallError, ProvisionError
from provision.install import installers, owned
from provision.install.place import read_marker, write_marker
from provision.lock.requirements import pins
from provision.progress import Event, Report, nothing


@dataclass(frozen=True)
class Synced:
    installed: dict[str, str]  # name -> version now in the prefix, that was not before
    removed: dict[str, str]  # name -> version that left
    seconds: float


def _names(prefix: Path) -> set[str]:
    return {
        path + ("/" if stat.S_ISDIR(st.st_mode) else "")
        for path, st in owned.walk(prefix)
        if path not in owned.OWN
    }


def _apply(prefix: Path, lock_file: Path, gone: list[str], report: Report) -> None:
    uv = tools.uv()
    python = str(interpreter(prefix))
    argv = installers.uv_install_argv(uv, interpreter(prefix), lock_file)
    everything = {**tools.child_env(extra_index=True)}
    report(Event("info", f"uv pip install -r {lock_file.name} (only what changed)"))
    done = _proc.run(argv, env=everything, timeout=installers.INSTALL_TIMEOUT, check=False)
    if not done:
        raise installers.explain("uv pip install", done, prefix)
    if gone:
        report(Event("info", f"uv pip uninstall {' '.join(gone)}"))
        done = _proc.run(
            [uv, "pip", "uninstall", "--python", python, *gone],
            env=everything, timeout=600, check=False,
        )  # fmt: skip
        if not done:
            raise installers.explain("uv pip uninstall", done, prefix)


def sync(env: EnvDir, prefix: Path, old_lock: str, digest: str, report: Report = nothing) -> Synced:
    """Move the venv at `prefix` from `old_lock` (its text) to env's lock as it now is; `digest`:
    the build marker's new inputs_sha256. On any failure the prefix is put back to old_lock."""
    start = time.monotonic()
    new_text = env.lock.read_text(encoding="utf-8")
    before_pins, after_pins = pins(old_lock), pins(new_text)
    gone = sorted(set(before_pins) - set(after_pins))
    marker = read_marker(prefix)
    if marker is None or marker.get("state") != "complete":
        raise InstallError(f"{prefix} is not a complete provision build; provision install it")
    listed = owned.recorded(prefix)
    before = _names(prefix)
    try:
        _apply(prefix, env.lock.absolute(), gone, report)
    except BaseException:
        restore(prefix, old_lock, new_text, listed, marker, report)
        raise
    after = _names(prefix)
    if listed is not None:
        _write_list(prefix, (listed - (before - after)) | (after - before))
    write_marker(prefix, {**marker, "inputs_sha256": digest, "lock_sha256": _sha(new_text)})
    return Synced(
        {n: v for n, v in after_pins.items() if before_pins.get(n) != v},
        {n: v for n, v in before_pins.items() if n not in after_pins},
        time.monotonic() - start,
    )


def restore(
    prefix: Path,
    old_lock: str,
    new_lock: str,
    listed: set[str] | None,
    marker: dict[str, object],
    report: Report = nothing,
) -> None:
    """Put the venv back to old_lock: its packages at their versions, those the new lock added
    uninstalled, the list and the marker as they were. Raises InstallError when it cannot."""
    import tempfile

    added = sorted(set(pins(new_lock)) - set(pins(old_lock)))
    fd, name = tempfile.mkstemp(prefix="provision-old-", suffix=".lock")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(old_lock)
        _apply(prefix, Path(name), added, report)
    except ProvisionError as exc:
        raise InstallError(
            f"{prefix} could not be put back to its previous lock ({exc}); rebuild it with "
            "provision install NAME --force"
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    if listed is not None:
        _write_list(prefix, listed)
    write_marker(prefix, marker)


def _write_list(prefix: Path, names: set[str]) -> None:
    tmp = prefix / (owned.FILES + ".tmp")
    tmp.write_text(owned.LIST_HEADER + "".join(n + "\n" for n in sorted(names)), encoding="utf-8")
    os.replace(tmp, prefix / owned.FILES)


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()
