"""Progress of long steps: what the core reports while it works, and how the CLI shows it.

The core never prints: a long step (create's steps, an installer downloading gigabytes, install.sh,
the smoke test, each benchmark configuration) calls a `Report` callback with an `Event`. The CLI
builds one `Presenter` per command from `-q`/`-v` and whether stderr is a terminal, and everything
it shows goes to stderr, so stdout (`--json` included) holds only the result:
- quiet (-q): nothing but errors;
- normal: the steps, what happens inside them (downloads with size and rate, install.sh's steps),
  estimates and warnings; on a terminal through rich (a spinner with the running step and its
  elapsed time), else plain lines that logs keep;
- verbose (-v): every line the installers print, too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

Kind = Literal["step", "info", "detail", "download", "warn", "done"]


@dataclass(frozen=True)
class Event:
    """One thing worth telling while a step runs.

    step: a step starts (text: what it does); done: the running step ended (text: its outcome);
    info: what is going on inside it; detail: a raw line of a tool (shown with -v only);
    download: a file arrived (size in bytes, seconds it took); warn: look before it is too late."""

    kind: Kind
    text: str
    size: int | None = None
    seconds: float | None = None


Report = Callable[[Event], None]


def nothing(event: Event) -> None:
    """The Report of callers that show nothing (tests, the library)."""


def human_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def describe(event: Event) -> str:
    """The plain text of an event, as a log line shows it."""
    if event.kind == "download":
        what = event.text
        if event.size is not None:
            what += f", {human_size(event.size)}"
        if event.seconds is not None and event.seconds > 0:
            what += f" in {event.seconds:.1f} s"
            if event.size is not None:
                what += f" ({human_size(event.size / event.seconds)}/s)"
        return f"downloaded {what}"
    if event.kind == "warn":
        return f"warning: {event.text}"
    return event.text


class Presenter:
    """Shows events on stderr according to the verbosity (0 quiet, 1 normal, 2 verbose)."""

    def __init__(
        self, verbosity: int = 1, stream: TextIO | None = None, rich: bool | None = None
    ) -> None:
        self.verbosity = verbosity
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.rich = tty if rich is None else rich
        self._status: Any = None  # rich's live status while a step runs
        self._console: Any = None
        self._step = ""
        self._started = 0.0

    def __call__(self, event: Event) -> None:
        if self.verbosity <= 0:
            return
        if event.kind == "detail" and self.verbosity < 2:
            return
        if self.rich:
            self._show_rich(event)
        else:
            self._show_plain(event)

    # -- plain: one line per event, for logs and pipes ------------------------------------------

    def _show_plain(self, event: Event) -> None:
        indent = "" if event.kind in ("step", "done") else "  "
        if event.kind == "step":
            self._step, self._started = event.text, time.monotonic()
        print(indent + describe(event), file=self.stream, flush=True)

    # -- rich: a spinner naming the running step, lines scrolling above it ------------------------

    def _console_of(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, soft_wrap=True)
        return self._console

    def _show_rich(self, event: Event) -> None:
        from rich.markup import escape

        console = self._console_of()
        if event.kind == "step":
            self.close()
            self._step, self._started = event.text, time.monotonic()
            self._status = console.status(escape(event.text), spinner="dots")
            self._status.start()
            return
        if event.kind == "done":
            self.close()
            console.print(escape(event.text))
            return
        style = {"warn": "bold yellow", "detail": "dim", "download": "cyan"}.get(event.kind, "")
        text = escape("  " + describe(event))
        console.print(f"[{style}]{text}[/]" if style else text)
        if self._status is not None:
            elapsed = time.monotonic() - self._started
            latest = describe(event)[:80]
            self._status.update(escape(f"{self._step} ({elapsed:.0f} s): {latest}"))

    def close(self) -> None:
        """Stop a running spinner (before the result is printed, or on an error)."""
        if self._status is not None:
            self._status.stop()
            self._status = None
