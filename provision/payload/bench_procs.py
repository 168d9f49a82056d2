"""The benchmark's parent side: each configuration runs in a child process of its own, so that one
that does not finish compiling can be stopped, and one that crashes does not end the others.

TensorFlow cannot cancel an XLA compilation in its own process, so the bound is a kill: once a
child says its first step started (event "first_step_start"), this process waits for "first_step"
and, with --max-seconds, kills the child's process group when that many seconds pass first. The
configuration is then recorded as skipped, "compile over N s", and the next one starts. While the
first step runs, a "compiling" event with the seconds so far goes out every PROGRESS_S seconds
(more often under a short bound). This process never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Dict, List, Optional

from .bench_schema import EVENT, Config
from .bench_train import event
from .smoke_parent import describe_exit, dies_with_parent, self_argv

PROGRESS_S = 20.0  # seconds between progress events while a first step (a compile) runs
TICK_S = 0.5


def compile_over(limit: float) -> str:
    """The skip reason of a configuration whose first step outlived --max-seconds."""
    return (
        f"compile over {limit:g} s: the first step (tracing and XLA compilation) had not finished"
    )


def progress_interval(limit: float) -> float:
    return max(1.0, min(PROGRESS_S, limit / 3)) if limit else PROGRESS_S


def _pump(stream: IO[bytes], lines: "queue.Queue[Optional[str]]") -> None:
    for raw in iter(stream.readline, b""):
        lines.put(raw.decode("utf-8", "replace"))
    lines.put(None)


def _read(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_part(options: List[str], where: Config, matmul: bool, limit: float) -> Dict[str, Any]:
    """One configuration in a child given this process's options: what it wrote ({"facts",
    "outcome", "messages", "software"}), the outcome filled in here when it was stopped or died."""
    fd, out = tempfile.mkstemp(prefix="provision-bench-part-", suffix=".json")
    os.close(fd)
    child = [
        *self_argv(),
        "bench",
        *options,
        "--part",
        f"{where['precision']}:{where['gpus']}",
        "--part-out",
        out,
    ]
    if matmul:
        child.append("--part-matmul")
    sys.stderr.flush()
    proc = subprocess.Popen(
        child,
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr.fileno(),  # this process's stdout may be the report
        stderr=subprocess.PIPE,
        start_new_session=True,  # its whole group can be killed
        preexec_fn=dies_with_parent(),
    )
    lines: "queue.Queue[Optional[str]]" = queue.Queue()
    assert proc.stderr is not None
    threading.Thread(target=_pump, args=(proc.stderr, lines), daemon=True).start()
    started: Optional[float] = None  # when the first step began, until it ended
    next_note = 0.0
    interval = progress_interval(limit)
    stopped = ""
    last = ""
    try:
        while True:
            try:
                line = lines.get(timeout=TICK_S)
            except queue.Empty:
                line = ""
            if line is None:
                break
            if line:
                sys.stderr.write(line)
                sys.stderr.flush()
                if line.strip() and not line.startswith(EVENT):
                    last = line.strip()
                kind = _kind(line)
                if kind == "first_step_start":
                    started = time.monotonic()
                    next_note = started + interval
                elif kind == "first_step":
                    started = None
            now = time.monotonic()
            if started is None:
                continue
            if now >= next_note:
                event(event="compiling", seconds=round(now - started, 1), limit=limit, **where)
                next_note = now + interval
            if limit and now - started > limit:
                stopped = compile_over(limit)
                _kill(proc)
                break
        code = proc.wait()
        data = _read(out)
    finally:
        if proc.poll() is None:
            _kill(proc)
            proc.wait()
        os.unlink(out)
    if stopped:
        data["outcome"] = {"skipped": stopped}
    elif not data.get("outcome"):
        why = f"the configuration's process ended ({describe_exit(code)})"
        data["outcome"] = {"failed": f"{why}: {last[-200:]}" if last else why}
    return data


def _kind(line: str) -> str:
    if not line.startswith(EVENT):
        return ""
    try:
        return str(json.loads(line[len(EVENT) :]).get("event", ""))
    except (ValueError, AttributeError):
        return ""


def _kill(proc: "subprocess.Popen[bytes]") -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
