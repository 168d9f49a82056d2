"""Progress of long steps: what the core reports while it works, in words.

The core never prints: a long step (create's steps, an installer downloading gigabytes, install.sh,
the smoke test, each benchmark configuration) calls a `Report` callback with an `Event`. The CLI
builds one Presenter per command (provision/cli/presenter.py) from `-q`/`-v` and whether stderr is
a terminal, and everything it shows goes to stderr, so stdout (`--json` included) holds only the
result:
- quiet (-q): nothing but errors;
- normal: the steps, what happens inside them (downloads with size and rate, install.sh's steps),
  estimates and warnings; on a terminal through rich (a spinner with the running step and its
  elapsed time), else plain lines that logs keep;
- verbose (-v): every line the installers print, too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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
