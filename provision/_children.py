"""A lock's children: SIGINT stops them all, and none outlives a failed or interrupted lock.

Locking runs conda-lock, which runs the solver, which can wait minutes on a channel (or uv).
A SIGINT must stop all of them promptly. It did not, in two ways:
- started with SIGINT ignored (a background job of a non-interactive shell: `cmd &` in a script,
  some CI runners), Python installs no KeyboardInterrupt handler and every process of the tree
  inherits the ignore: a SIGINT, even to the whole process group, stops nothing;
- a SIGINT to provision alone (`kill -INT PID`, a supervisor): subprocess.run kills its direct
  child only (conda-lock, SIGKILL after 0.25 s), and the solver conda-lock started lives on,
  orphaned, still waiting on its channel.
So while locking, provision catches SIGINT itself (and a caught signal is reset to its default
in children at exec, so they can be interrupted too), is the subreaper of what it starts (an
orphan is re-parented to provision, not to init), and when the lock fails or is interrupted it
stops every process it started that is still there.
(_proc.run is the better home for this, with a process group per command; it is not lock's.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
STOP_GRACE_S = 1.0


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A temporary folder for one lock, removed after what the lock started has stopped."""
    with (
        tempfile.TemporaryDirectory(prefix="provision-lock-", ignore_cleanup_errors=True) as tmp,
        stop_descendants_on_failure(),
    ):
        yield Path(tmp)


@contextlib.contextmanager
def stop_descendants_on_failure() -> Iterator[None]:
    """While the block runs, SIGINT raises KeyboardInterrupt here (inherited ignore or not) and is
    at its default in what we start; orphans come to us. If the block raises, every process it
    started that is still running gets SIGTERM, then SIGKILL a second later."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    ours = previous in (signal.SIG_IGN, signal.SIG_DFL, signal.default_int_handler)
    if ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    before = _descendants()
    reaper = _set_subreaper(True)
    try:
        yield
    except BaseException:
        _stop(set(_descendants().items()) - set(before.items()))
        raise
    finally:
        if reaper:
            _set_subreaper(False)
        if ours:
            signal.signal(signal.SIGINT, previous)


def _set_subreaper(on: bool) -> bool:
    """Become (or stop being) the subreaper of our descendants; False where that is not possible
    or we already were one (then it stays as it was)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if on:
            was = ctypes.c_int(0)
            if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0 or was.value:
                return False
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _descendants() -> dict[int, str]:
    """pid -> start time (against reused pids) of every live descendant of this process."""
    parents: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
        started[int(entry)] = fields[19]
    out: dict[int, str] = {}
    todo = list(parents.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = started[pid]
            todo.extend(parents.get(pid, []))
    return out


def _stop(pids: Iterable[tuple[int, str]]) -> None:
    """SIGTERM, a moment's grace, then SIGKILL, for each process that is still the same one;
    then collect those that were our own children (conda-lock, an orphan re-parented to us)."""
    everyone = targets = set(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + STOP_GRACE_S
        while targets and time.monotonic() < deadline:
            time.sleep(0.02)
            live = _descendants()
            targets = {(pid, start) for pid, start in targets if live.get(pid) == start}
    for pid, _ in everyone:
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)
