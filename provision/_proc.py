"""The one place provision starts processes: argv lists, never a shell string, always a timeout."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import ProvisionError, ToolMissing


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def __bool__(self) -> bool:
        return self.returncode == 0

    def last_line(self, default: str = "(no output)") -> str:
        """The last line the command printed, stderr first: usually its own reason for failing."""
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[-1] if lines else default


def cannot_run(program: str, exc: OSError) -> ProvisionError:
    """A program that exists but cannot be started: not executable, not a program at all."""
    import errno

    if exc.errno == errno.ENOEXEC:
        why = "is not a program this machine can run (exec format error)"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = "cannot be run: permission denied (is it executable?)"
    elif exc.errno == errno.ENAMETOOLONG:
        why = "cannot be run: its path is too long"
    else:
        why = f"cannot be run: {exc.strerror or exc}"
    return ProvisionError(f"{program} {why}")


def which(name: str) -> str | None:
    return shutil.which(name)


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent: a child between fork and exec must not import."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


def _child_setup(prctl: Callable[..., int], parent: int) -> Callable[[], None]:
    def setup() -> None:
        """In the child, before exec: the kernel kills it when provision dies (SIGKILL too), so
        no orphan goes on writing into a prefix that a re-run is rebuilding."""
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # provision died before prctl took effect
            os._exit(137)

    return setup


def _child_options(env: Mapping[str, str] | None, keep_fds: Sequence[int]) -> dict[str, Any]:
    """What every child gets, from run() and stream() alike: the caller's variables over ours, the
    descriptors it keeps, and death with provision (Linux)."""
    prctl = _prctl()
    return {
        "env": None if env is None else {**os.environ, **env},
        "pass_fds": tuple(keep_fds),
        "preexec_fn": _child_setup(prctl, os.getpid()) if prctl else None,
    }


def _not_started(program: str, exc: OSError) -> ProvisionError:
    if isinstance(exc, FileNotFoundError):
        return ToolMissing(f"{program} is not installed or not on PATH")
    return cannot_run(program, exc)


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
    capture: bool = True,
    input: str | bytes | None = None,
    keep_fds: Sequence[int] = (),
    group: bool = False,
) -> Completed:
    """Run argv; ProvisionError naming the command on a missing program, a timeout, or a failure.

    The child dies with provision. keep_fds stay open in it (and in what it starts): a build lock
    held this way stays held while any of them lives. `timeout` is the one deadline for all of
    it: a child that exits while something it started still holds its output is waited on for a
    moment (PIPE_GRACE_S), not for as long as that lives. group: the child gets a process group
    of its own, and the whole group is killed when the deadline passes (what a program under test
    starts, which may hang in any way)."""
    import time

    args = tuple(os.fspath(a) for a in argv)
    deadline = time.monotonic() + timeout
    try:
        options: dict[str, Any] = _child_options(env, keep_fds)
        if group:
            options["process_group"] = 0
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            args,
            cwd=cwd,
            stdin=subprocess.PIPE if input is not None else None,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            **options,
        )
    except OSError as exc:
        raise _not_started(args[0], exc) from exc
    try:
        out, err = _communicate(proc, input, deadline, group)
    except subprocess.TimeoutExpired as exc:
        raise ProvisionError(
            f"{' '.join(args[:3])} ... did not finish within {timeout:g} s"
        ) from exc
    done = Completed(args, proc.returncode, out, err)
    if check and not done:
        raise ProvisionError(
            f"{Path(args[0]).name} failed (exit {done.returncode}): {done.last_line()}"
        )
    return done


PIPE_GRACE_S = 2.0  # how long output is still read after the child itself has exited


def _kill(proc: subprocess.Popen[Any], group: bool) -> None:
    import contextlib

    with contextlib.suppress(OSError):
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()


OUTPUT_LIMIT = 64 << 20  # what is kept of one stream; the rest is read and dropped


def _drain(pipe: Any, into: list[bytes]) -> None:
    import contextlib

    kept = 0
    with contextlib.suppress(OSError, ValueError):
        while chunk := pipe.read1(1 << 16):
            if kept < OUTPUT_LIMIT:
                into.append(chunk[: OUTPUT_LIMIT - kept])
                kept += len(chunk)


def _feed(pipe: Any, data: bytes) -> None:
    import contextlib

    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


def _wind_up(proc: subprocess.Popen[Any], readers: Sequence[Any], until: float, group: bool
             ) -> None:  # fmt: skip
    """After proc exited: its readers have until `until` (monotonic) to finish; a group that
    outlived its leader holding the pipes is killed; the pipes whose readers ended are closed (one
    still blocked on a grandchild's pipe keeps its own)."""
    import time

    for th in readers:
        th.join(max(0.0, until - time.monotonic()))
    if group and any(th.is_alive() for th in readers):
        _kill(proc, group)
        for th in readers:
            th.join(PIPE_GRACE_S)
    for pipe, th in zip((proc.stdout, proc.stderr), readers, strict=False):
        if pipe is not None and not th.is_alive():
            pipe.close()


def _communicate(
    proc: subprocess.Popen[bytes], input: str | bytes | None, deadline: float, group: bool
) -> tuple[str, str]:
    """Output of proc, read until it exits and its pipes close, by `deadline` (TimeoutExpired
    after killing it). Once the child has exited, output is read for PIPE_GRACE_S more: what it
    started and left holding the pipes is not waited for (killed, when it is in the group)."""
    import threading
    import time

    out: list[bytes] = []
    err: list[bytes] = []
    threads = [
        threading.Thread(target=_drain, args=(pipe, into), daemon=True)
        for pipe, into in ((proc.stdout, out), (proc.stderr, err))
        if pipe is not None
    ]
    if input is not None:
        threads.append(
            threading.Thread(
                target=_feed,
                args=(proc.stdin, input if isinstance(input, bytes) else input.encode()),
                daemon=True,
            )
        )
    for th in threads:
        th.start()
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc, group)
        proc.wait()
        raise
    except BaseException:  # KeyboardInterrupt: the child (and its group) goes with us
        _kill(proc, group)
        proc.wait()
        raise
    _wind_up(proc, threads, min(deadline, time.monotonic() + PIPE_GRACE_S), group)
    return (
        b"".join(out).decode("utf-8", errors="replace"),
        b"".join(err).decode("utf-8", errors="replace"),
    )


def stream(
    argv: Sequence[str | os.PathLike[str]],
    on_line: Callable[[str, bool], None],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    keep_fds: Sequence[int] = (),
    group: bool = False,
) -> Completed:
    """Run argv as run(check=False) does, and hand each line it prints to on_line(line, is_stderr)
    as it comes (installers that download gigabytes, install.sh's steps), not only at the end.
    ProvisionError on a missing program or a timeout; a failure is the caller's to judge.
    group: as run's, the whole process group is killed at the deadline or an interrupt, and when
    it still holds the output after its leader exited (install.sh's pip, the benchmark's parts)."""
    import threading
    import time

    args = tuple(os.fspath(a) for a in argv)
    options: dict[str, Any] = _child_options(env, keep_fds)
    if group:
        options["process_group"] = 0
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            bufsize=1,
            **options,
        )
    except OSError as exc:
        raise _not_started(args[0], exc) from exc
    out: list[str] = []
    err: list[str] = []
    lock = threading.Lock()  # on_line is called from one reader at a time

    def read(pipe: Any, into: list[str], is_err: bool) -> None:
        for line in pipe:
            into.append(line)
            with lock:
                on_line(line.rstrip("\r\n"), is_err)

    readers = [
        threading.Thread(target=read, args=(proc.stdout, out, False), daemon=True),
        threading.Thread(target=read, args=(proc.stderr, err, True), daemon=True),
    ]
    for reader in readers:
        reader.start()

    def finish(grace: float) -> None:
        _wind_up(proc, readers, time.monotonic() + grace, group)

    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _kill(proc, group)
        proc.wait()
        finish(PIPE_GRACE_S)
        raise ProvisionError(
            f"{' '.join(args[:3])} ... did not finish within {timeout:g} s"
        ) from exc
    except BaseException:  # KeyboardInterrupt: the child (and its group) goes with us
        _kill(proc, group)
        proc.wait()
        finish(PIPE_GRACE_S)
        raise
    finish(10)  # what a grandchild holding the pipes still prints
    return Completed(args, proc.returncode, "".join(out), "".join(err))
