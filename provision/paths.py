"""Where provision's own files are, and whether a path a user gave can be made: the file system's
limits (a name or path too long, an empty one) and a folder that is not writable, found before
any slow work starts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from provision.errors import ProvisionError, UsageError


def writable_target(path: Path, flag: str) -> None:
    """A file or folder provision will create at path: its nearest existing folder must be a
    folder we may write into. Checked before the work that produces it."""
    probe = Path(path).absolute()
    if probe.exists() and not probe.is_dir() and flag in ("--prefix", "--report-dir", "--wheel"):
        raise UsageError(f"{flag} {path} is a file, not a folder")
    parent = probe if probe.is_dir() else probe.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ProvisionError(f"{flag} {path}: {parent} is not writable; choose another place")


def output_file(path: Path, flag: str, force: bool) -> None:
    """A file provision will write at path (a bundle, a plot, a report): a path that is not there,
    or with `force` a regular file (replaced whole). Never a folder, a device, a FIFO or a socket,
    even with `force` (as root, replacing /dev/full would replace the device node), and never a
    symlink that leads nowhere. Checked before the work that produces it, and again just before
    the file is renamed into place."""
    from provision.diskread import kind

    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UsageError(
                f"{flag} {path} is a symlink that leads nowhere; provision will not replace it"
            ) from None
        writable_target(path, flag)
        return
    except OSError as exc:  # a symlink loop, a name too long, a folder we may not enter
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"{flag} {path} is {kind(st.st_mode)}; provision writes only regular files of its own"
        )
    if not force:
        raise UsageError(f"{flag} {path} exists; provision will not overwrite it without --force")
    writable_target(path.parent, flag)  # the file is replaced by a rename in its folder


def templates_dir() -> Path:
    """Templates ship inside the wheel (force-included); a source checkout keeps them at the top."""
    here = Path(__file__).resolve().parent
    packaged = here / "templates"
    return packaged if packaged.is_dir() else here.parent / "templates"
