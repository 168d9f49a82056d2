"""The host as the probes see it: a root directory (`/`, or a stand-in copy of a machine), the
environment variables, and a time budget for each external call.

Under a stand-in root (`provision doctor --root DIR`, PROVISION_HOST_ROOT) every file is read from
that tree and paths from the environment (PATH, LD_LIBRARY_PATH, HOME, ...) are taken as paths of
it. Paths shown to people are the host's own, with the home directory written `~`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from provision import _proc

DEFAULT_TIMEOUT = 10.0
# The child interpreter that loads driver libraries, so that they can crash or hang only it.
CHILD = Path(__file__).parent.parent / "_hostprobe.py"


class Context:
    """A root, the environment, a time budget per external call."""

    def __init__(self, root: str | Path | None, env: Mapping[str, str], timeout: float | None):
        self.root = Path(root or "/").resolve()
        self.stand_in = self.root != Path("/")
        self.env = env
        try:
            self.timeout = timeout or float(env.get("PROVISION_PROBE_TIMEOUT") or DEFAULT_TIMEOUT)
        except ValueError:
            self.timeout = DEFAULT_TIMEOUT
        self.home = env.get("HOME", "") if self.stand_in else str(Path.home())
        self.machine = platform.machine().lower()
        if self.stand_in:  # a copy of another machine says what it is (the kernel.arch sysctl)
            with contextlib.suppress(OSError, UnicodeDecodeError):
                arch = (self.root / "proc/sys/kernel/arch").read_text(encoding="utf-8").strip()
                self.machine = arch.lower() or self.machine

    def at(self, host_path: str) -> Path:
        """A host path ('/usr/lib', '~/miniconda3', a PATH entry) as a file of this filesystem."""
        if host_path.startswith("~") and self.home:
            host_path = self.home + host_path[1:]
        if not self.stand_in:
            return Path(host_path)
        if host_path.startswith(str(self.root) + os.sep):
            return Path(host_path)  # already inside the stand-in tree
        return self.root / host_path.lstrip("/")

    def host_path(self, path: Path | str) -> str:
        """A file of this filesystem as the host's absolute path."""
        text = str(path)
        if self.stand_in:
            with contextlib.suppress(ValueError):
                text = "/" + str(Path(text).relative_to(self.root))
        return text

    def show(self, path: Path | str) -> str:
        """A file of this filesystem as the host's path, home as '~' (nothing personal)."""
        text = self.host_path(path)
        home = self.home.rstrip("/")
        if home and (text == home or text.startswith(home + "/")):
            text = "~" + text[len(home) :]
        return text

    def dirs(self, var: str) -> list[Path]:
        """The folders of a PATH-like variable, as files of this filesystem."""
        return [self.at(p) for p in self.env.get(var, "").split(os.pathsep) if p]

    def real(self, path: Path) -> Path:
        return Path(os.path.realpath(path))

    def run(self, argv: list[str], stdin: str | None = None) -> _proc.Completed:
        return _proc.run(argv, timeout=self.timeout, check=False, input=stdin)

    def child(self, args: Sequence[str], stdin: str | None = None) -> _proc.Completed:
        """Run the driver-library child (`_hostprobe.py`) in an isolated interpreter."""
        return self.run([sys.executable, "-I", "-S", str(CHILD), *args], stdin=stdin)


def read_text(path: Path, limit: int = 1 << 16) -> str:
    """At most `limit` characters of a text file; "" when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return ""


def glob(base: Path, pattern: str) -> list[Path]:
    """Sorted matches of `pattern` under `base`; none when `base` cannot be read."""
    try:
        return sorted(base.glob(pattern))
    except OSError:
        return []
