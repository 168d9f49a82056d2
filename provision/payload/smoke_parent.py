"""The parent side of the smoke test: runs the checks in child processes under deadlines.

A check that hangs (a kernel, an NCCL all-reduce) becomes a failure saying so: the child is killed
and the remaining checks go on in a fresh child; a child that dies is a failure naming the signal.
When MirroredStrategy fails on several GPUs it is retried once with NCCL_P2P_DISABLE=1 and the
reason says whether that helped. This process never imports TensorFlow.
"""

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Callable, Dict, List, Optional, Tuple

from .judgements import classify_log
from .report import PARENT_CHECKS, Result, result
from .status import FAIL, PASS, SKIP


def self_argv() -> List[str]:
    """How to start this package again in a fresh interpreter: from the same place (a zipapp or a
    folder), under its own name, isolated (-I) when this process is."""
    package = __name__.rpartition(".")[0]
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in package.split("."):
        root = os.path.dirname(root)
    boot = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        f"from {package}.__main__ import main; sys.exit(main())"
    )
    return [sys.executable] + (["-I"] if sys.flags.isolated else []) + ["-c", boot, root]


class ChildRun:
    """The outcome of one child: facts, results, which check it was in when it stopped."""

    def __init__(self) -> None:
        self.facts: Optional[Result] = None
        self.setup_error: Optional[str] = None
        self.results: Dict[str, Result] = {}
        self.stuck: Optional[str] = None  # "setup" or a check name
        self.why: Optional[str] = None
        self.stderr = ""


def describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def dies_with_parent() -> Optional[Callable[[], None]]:
    """What the child runs before exec so the kernel kills it when this process dies, SIGKILL
    included. The child is in a session of its own (so a hang's whole group can be killed), so
    no signal meant for provision's group reaches it: without this it outlived a SIGINT sent to
    provision alone, still importing TensorFlow. Linux only; elsewhere nothing is done."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(137)

    return setup


def _collect(stream: IO[bytes], into: List[bytes]) -> None:
    for chunk in iter(lambda: stream.read(65536), b""):
        into.append(chunk)


def run_child(
    args: argparse.Namespace,
    checks: List[str],
    budget: Callable[[str], float],
    extra_env: Dict[str, str],
) -> ChildRun:
    run = ChildRun()
    read_fd, write_fd = os.pipe()
    argv = [
        *self_argv(),
        "smoke",
        "--child",
        "--events-fd",
        str(write_fd),
        "--checks",
        ",".join(checks),
        "--host-gpus",
        str(args.host_gpus),
        "--timeout",
        str(args.timeout),
    ]
    if args.expected:
        argv += ["--expected", args.expected]
    if args.require_gpu:
        argv.append("--require-gpu")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write_fd,),
        start_new_session=True,
        env=dict(os.environ, **extra_env),
        preexec_fn=dies_with_parent(),
    )
    os.close(write_fd)
    events: "queue.Queue[Optional[Result]]" = queue.Queue()

    def pump() -> None:
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    events.put(json.loads(line))
                except ValueError:
                    continue
        events.put(None)

    out_chunks: List[bytes] = []
    err_chunks: List[bytes] = []
    threads = [
        threading.Thread(target=pump, daemon=True),
        threading.Thread(target=_collect, args=(proc.stdout, out_chunks), daemon=True),
        threading.Thread(target=_collect, args=(proc.stderr, err_chunks), daemon=True),
    ]
    for th in threads:
        th.start()
    current, allowed = "setup", budget("setup")
    deadline = time.monotonic() + allowed
    finished = False
    while True:
        try:
            ev = events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            run.stuck = current
            run.why = "did not finish within {:g} s (a hang){}".format(
                allowed, "" if current == "setup" else "; the checks after it ran in a new process"
            )
            break
        if ev is None:
            break
        kind = ev.get("event")
        if kind == "setup":
            if "error" in ev:
                run.setup_error = str(ev["error"])
                run.facts = {"setup_traceback": ev.get("traceback")}
            else:
                run.facts = ev.get("facts") or {}
            current = "(between checks)"
        elif kind == "start":
            current = str(ev["check"])
        elif kind == "result":
            name = str(ev["check"])
            run.results[name] = {k: ev.get(k) for k in ("status", "reason", "details", "seconds")}
            current = "(between checks)"
        elif kind == "done":
            finished = True
            current = "(exit)"
        allowed = budget(current)
        deadline = time.monotonic() + allowed
    if proc.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10 if finished or run.stuck is None else 0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for th in threads[1:]:
        th.join(timeout=10)
    run.stderr = b"".join(err_chunks).decode("utf-8", errors="replace")
    if not finished and run.stuck is None and run.setup_error is None:
        run.stuck = current if current not in ("(between checks)", "(exit)") else None
        # The last line that is not known chatter is the best clue to why it died.
        tail = classify_log(run.stderr, gpu_host=args.host_gpus > 0)
        clue = (tail["problems"] + tail["warnings"] + tail["unclassified"])[-1:]
        run.why = "the test process died ({}){}".format(
            describe_exit(proc.returncode), ": " + clue[0][-300:] if clue else ""
        )
        if run.stuck is None and current != "(exit)":
            run.stuck = "(between checks)"
    return run


def run_all(args: argparse.Namespace, checks: List[str]) -> Tuple[Result, Dict[str, Result], str]:
    """Run `checks` in as many children as hangs and crashes need; (tf facts, results, stderr)."""
    facts: Result = {}
    results: Dict[str, Result] = {}
    logs: List[str] = []
    todo = [c for c in checks if c not in PARENT_CHECKS]
    gpu_count = [0]

    def budget(where: str) -> float:
        if where == "matmul":
            return float(args.timeout) * max(1, gpu_count[0])
        if where == "setup":
            # Importing TensorFlow and finding the GPUs is not what --timeout is meant to bound.
            return float(args.setup_timeout)
        return float(args.timeout)

    attempts = 0
    while todo and attempts <= len(checks):
        attempts += 1
        run = run_child(args, todo, budget, {})
        logs.append(run.stderr)
        if run.facts and not facts:
            facts = run.facts
            gpu_count[0] = len(facts.get("gpus") or [])
        results.update(run.results)
        if run.setup_error or run.stuck == "setup":
            reason = (
                f"TensorFlow could not be imported: {run.setup_error}"
                if run.setup_error
                else f"while importing TensorFlow: {run.why}"
            )
            first = todo[0]
            results[first] = result(FAIL, reason)
            for c in todo[1:]:
                results[c] = result(SKIP, "not run: TensorFlow did not start")
            todo = []
            break
        todo = [c for c in todo if c not in results]
        if run.stuck and run.stuck in todo:
            results[run.stuck] = result(FAIL, str(run.why))
            todo.remove(run.stuck)
        elif todo and run.why:
            results[todo[0]] = result(FAIL, f"not run: {run.why}")
            todo.pop(0)
    for c in todo:
        results[c] = result(FAIL, "not run: the test process kept failing")
    mirrored = results.get("mirrored_strategy")
    if (
        mirrored
        and mirrored["status"] == FAIL
        and gpu_count[0] > 1
        and os.environ.get("NCCL_P2P_DISABLE") != "1"
    ):
        retry = run_child(args, ["mirrored_strategy"], budget, {"NCCL_P2P_DISABLE": "1"})
        logs.append(retry.stderr)
        again = retry.results.get("mirrored_strategy") or result(FAIL, str(retry.why))
        mirrored["reason"] = "{}; with NCCL_P2P_DISABLE=1: {}".format(
            mirrored["reason"],
            "it passes, so set NCCL_P2P_DISABLE=1 in this environment"
            if again["status"] == PASS
            else "it fails too ({})".format(again["reason"]),
        )
        mirrored.setdefault("details", {})["retry"] = {"env": {"NCCL_P2P_DISABLE": "1"}, **again}
    return facts, results, "".join(logs)
