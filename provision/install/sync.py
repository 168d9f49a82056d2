"""Bringing a built pip-path (or system-path) venv from one lock to the next, in place.

Only the difference moves: uv installs the new lock with its hashes checked (what is already there
at the locked version is left alone), then the packages the old lock had and the new one has not
are uninstalled. A package a user installed by hand, in neither lock, is not touched. The list of
what provision installed (owned) and the build marker follow the change, so `remove` and `check`
see the prefix as it now is. Any failure puts the prefix back to the old lock, the same way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from provision import _proc, tools
from provision.environment import EnvDir, interpreter
from provision.errors import InstallError, ProvisionError
from provision.install import installers, owned
from provision.install.place import read_marker, write_marker
from provision.lock.requirements import parse_lock, pins
from provision.progress import Event, Report, nothing


@dataclass(frozen=True)
class Synced:
    installed: dict[str, str]  # name -> version now in the prefix, that was not before
    removed: dict[str, str]  # name -> version that left
    seconds: float


def _files_of(prefix: Path, names: set[str]) -> set[str]:
    """What the distributions `names` (normalised) installed into the prefix, by their RECORD,
    as the owned list spells it (relative to the prefix; the folders they need end in /).
    Reading a few RECORDs instead of walking a TensorFlow venv (57,000 entries) keeps a sync of
    one package as fast as installing it."""
    from provision.lock.requirements import norm

    out: set[str] = set()
    for site in prefix.glob("lib/python*/site-packages"):
        base = site.relative_to(prefix).as_posix()
        for dist in site.glob("*.dist-info"):
            if norm(dist.name[: -len(".dist-info")].rsplit("-", 1)[0]) not in names:
                continue
            try:
                lines = (dist / "RECORD").read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                lines = []
            for line in lines:
                rel = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
                path = os.path.normpath(f"{base}/{rel}")
                if not rel or path.startswith(".."):
                    continue
                out.add(path)
                parent = os.path.dirname(path)
                while parent and parent != base and parent + "/" not in out:
                    out.add(parent + "/")
                    parent = os.path.dirname(parent)
            out.add(f"{base}/{dist.name}/")
    return out


def difference(old_lock: str, new_lock: str) -> str:
    """The pins of new_lock that old_lock does not hold at that version, with their hashes and
    markers, as a requirements file: all that has to be installed."""
    before = {p.name: p.version for p in parse_lock(old_lock)}
    lines = []
    for pin in parse_lock(new_lock):
        if before.get(pin.name) == pin.version:
            continue
        marker = f" ; {pin.marker}" if pin.marker else ""
        hashes = "".join(f" \\\n    --hash={h}" for h in pin.hashes)
        lines.append(f"{pin.name}=={pin.version}{marker}{hashes}\n")
    return "".join(lines)


def _apply(prefix: Path, old_lock: str, new_lock: str, report: Report) -> None:
    """Install what new_lock adds or changes (hashes checked), uninstall what it drops."""
    uv = tools.uv()
    python = str(interpreter(prefix))
    gone = sorted({p.name for p in parse_lock(old_lock)} - {p.name for p in parse_lock(new_lock)})
    wanted = difference(old_lock, new_lock)
    everything = {**tools.child_env(extra_index=True)}
    if wanted:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="provision-sync-") as tmp:
            part = Path(tmp) / "difference.lock"
            part.write_text(wanted, encoding="utf-8")
            argv = installers.uv_install_argv(uv, interpreter(prefix), part)
            report(Event("info", f"uv pip install ({wanted.count('==')} changed, hashes checked)"))
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
    marker = read_marker(prefix)
    # The system path's venv is made by install.sh, with no marker of provision's.
    if env.path != "system" and (marker is None or marker.get("state") != "complete"):
        raise InstallError(f"{prefix} is not a complete provision build; provision install it")
    listed = owned.recorded(prefix)
    changed = {n for n in before_pins.keys() | after_pins.keys()
               if before_pins.get(n) != after_pins.get(n)}  # fmt: skip
    before = _files_of(prefix, changed)
    try:
        _apply(prefix, old_lock, new_text, report)
    except BaseException:
        restore(prefix, old_lock, new_text, listed, marker, report)
        raise
    after = _files_of(prefix, changed)
    if listed is not None:
        # What the old versions had and the new ones have not left; what the new ones brought
        # came (a folder another package still uses stays listed: removing a prefix only
        # deletes folders that became empty).
        _write_list(prefix, (listed - (before - after)) | after)
    if marker is not None:
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
    marker: dict[str, object] | None,
    report: Report = nothing,
) -> None:
    """Put the venv back to old_lock: its packages at their versions, those the new lock added
    uninstalled, the list and the marker as they were. Raises InstallError when it cannot."""

    try:
        _apply(prefix, new_lock, old_lock, report)
    except ProvisionError as exc:
        raise InstallError(
            f"{prefix} could not be put back to its previous lock ({exc}); rebuild it with "
            "provision install NAME --force"
        ) from exc
    if listed is not None:
        _write_list(prefix, listed)
    if marker is not None:
        write_marker(prefix, marker)


def _write_list(prefix: Path, names: set[str]) -> None:
    tmp = prefix / (owned.FILES + ".tmp")
    tmp.write_text(owned.LIST_HEADER + "".join(n + "\n" for n in sorted(names)), encoding="utf-8")
    os.replace(tmp, prefix / owned.FILES)


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()
