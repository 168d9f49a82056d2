"""A SIGINT or SIGTERM to provision's PID alone stops every process it started, however deep.

`kill -INT PID` (a supervisor, a CI runner's timeout) signals provision only, not its process group:
its children must go because provision goes. verify runs the payload, which runs each batch of
checks in a child of its own session (so that a hung check's whole group can be killed): that child
is two levels down and in another session, and once outlived everything above it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_verify import fake_tensorflow  # the same stand-in TensorFlow

PROVISION = Path(sys.executable).parent / "provision"


def processes_with(marker: str) -> list[str]:
    """'pid argv' of every live (not zombie) process whose command line contains marker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if state != "Z" and marker in argv:
            found.append(f"{entry} {argv.strip()}")
    return found


def wait_for(predicate: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("sig", "inherited"),
    [(signal.SIGINT, "default"), (signal.SIGINT, "ignored"), (signal.SIGTERM, "default")],
    ids=["sigint", "sigint-inherited-ignored", "sigterm"],
)
def test_a_signal_to_provision_alone_during_verify_stops_the_smoke_tests_child(
    tmp_path: Path, sig: signal.Signals, inherited: str
) -> None:
    """The smoke test's child is importing a TensorFlow that never finishes; the signal goes to
    provision's PID only. provision says it was interrupted (130), or terminated (143, SIGTERM:
    `timeout`, systemd, a scheduler's job kill), no process it started is left (not the payload,
    not the payload's child in its own session) and neither is verify's temporary folder. Also
    when provision was started with SIGINT ignored, as a background job of a non-interactive shell
    (`cmd &` in a script or a CI job) is."""
    ready = tmp_path / "importing"
    python = fake_tensorflow(
        tmp_path,
        f"""
        import pathlib, time
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(600)
        """,
    )
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = str(python)  # every process of the smoke test runs this interpreter
    proc = subprocess.Popen(
        [str(PROVISION), "verify", "--python", str(python)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_ignore_sigint if inherited == "ignored" else None,
        env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, "the import never started")
        assert proc.poll() is None, proc.communicate()
        children = processes_with(marker)
        assert any("--child" in p for p in children), children  # two levels down
        assert [p.name for p in tmp.glob("provision-verify-*")], "verify made no folder"
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=30)
        terminated = sig == signal.SIGTERM
        assert proc.returncode == (143 if terminated else 130), err
        word = "terminated" if terminated else "interrupted"
        assert err.strip().splitlines()[-1] == f"provision: {word}"
        assert "Traceback" not in err
        # The kernel delivers the parent-death signal as provision's children exit.
        wait_for(lambda: not processes_with(marker), f"left running: {processes_with(marker)}", 10)
        assert not list(tmp.glob("provision-verify-*")), "verify's temporary folder was left"
    finally:
        for line in processes_with(marker):
            os.kill(int(line.split()[0]), signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pipe in (proc.stdout, proc.stderr):  # closed even after a timed-out communicate
            if pipe is not None:
                pipe.close()


# -- a streamed child's whole process group: install.sh's pip, the benchmark's parts -----------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for its reaper is gone too
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("how", ["leader exits", "deadline"])
def test_a_streamed_group_goes_whole_at_its_deadline_or_when_it_outlives_its_leader(
    how: str, tmp_path: Path
) -> None:
    from provision import _proc
    from provision.errors import ProvisionError

    pid_file = tmp_path / "grandchild"
    # The grandchild keeps the pipes open; the leader exits at once, or sleeps past the deadline.
    script = f"sleep 300 & echo $! > {pid_file}; echo started; " + (
        "exit 0" if how == "leader exits" else "sleep 300"
    )
    lines: list[str] = []
    start = time.monotonic()
    if how == "deadline":
        with pytest.raises(ProvisionError, match="did not finish within 2 s"):
            _proc.stream(["bash", "-c", script], lambda ln, err: lines.append(ln), timeout=2,
                         group=True)  # fmt: skip
    else:
        done = _proc.stream(["bash", "-c", script], lambda ln, err: lines.append(ln), group=True)
        assert done.returncode == 0
    assert time.monotonic() - start < 60 and lines == ["started"]
    assert _gone(int(pid_file.read_text())), "the grandchild outlived the stream"
