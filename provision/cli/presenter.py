"""How the CLI shows the core's progress events (provision.progress): one Presenter per command,
from -q/-v and whether stderr is a terminal; rich's spinner on a terminal, plain lines in logs."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from provision.progress import Event, describe


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
