"""What installers print, read as it comes: uv's and pip's downloads and summaries, install.sh's
steps, turned into progress events (provision/progress.py shows them)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import ClassVar

from provision.progress import Event, Report


class InstallerLines:
    """Turns what uv, pip and install.sh print into progress events as the lines come: each
    download with its size and how long it took, the installers' summaries, install.sh's steps;
    every other line as a detail (shown with -v)."""

    UV_START = re.compile(r"^Downloading (\S+) \(([\d.]+) ?([KMG]i?B|B)\)$")
    UV_DONE = re.compile(r"^\s*Downloaded (\S+)$")
    PIP_START = re.compile(
        r"^Downloading (\S+?)-\d\S*\.(?:whl|tar\.gz|zip) \(([\d.]+) ?([kKMG]i?B|B)\)$"
    )
    SUMMARY = re.compile(r"^(Resolved|Prepared|Installed|Successfully installed)\b")
    UNITS: ClassVar[dict[str, float]] = {
        "B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9,
        "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3,
    }  # fmt: skip

    def __init__(self, report: Report, clock: Callable[[], float] = time.monotonic) -> None:
        self.report = report
        self.clock = clock
        self.started: dict[str, tuple[float, int]] = {}
        self.pip_current: str | None = None

    def _finish_pip(self) -> None:
        if self.pip_current is not None:
            self._done(self.pip_current)
            self.pip_current = None

    def _done(self, name: str) -> None:
        now = self.clock()
        at, size = self.started.pop(name, (now, 0))
        self.report(Event("download", name, size=size or None, seconds=now - at))

    def __call__(self, line: str, is_stderr: bool) -> None:
        text = line.strip()
        if not text:
            return
        pip = self.PIP_START.match(text)  # pip names the file, uv the package
        uv = None if pip else self.UV_START.match(text)
        if uv or pip:
            self._finish_pip()
            m = uv or pip
            assert m is not None
            size = int(float(m[2]) * self.UNITS.get(m[3], 1))
            self.started[m[1]] = (self.clock(), size)
            if pip:
                self.pip_current = m[1]
            self.report(Event("info", f"downloading {m[1]} ({m[2]} {m[3]})"))
            return
        self._finish_pip()
        done = self.UV_DONE.match(text)
        if done:
            self._done(done[1])
        elif text.startswith("[") or self.SUMMARY.match(text):
            self.report(Event("info", text))  # install.sh's steps, the installers' summaries
        elif is_stderr and text.lower().startswith("warning:"):
            self.report(Event("warn", text.split(":", 1)[1].strip()))
        else:
            self.report(Event("detail", text))

    def close(self) -> None:
        self._finish_pip()
