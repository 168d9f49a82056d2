"""Running the CLI from the tests, the one way every test module does it.

`provision(*args, ...)` runs it in a process of its own, as a user does (real argv, real exit
code, output captured as text); `run_cli(*args, ...)` runs it in this process with Click's
CliRunner. A module that always passes the same arguments binds them with functools.partial.
tests/test_test_helpers.py fails when a module grows a helper of its own again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent


def command(*, script: bool = False) -> list[str]:
    """The argv that starts provision: this interpreter's `-m provision`, or (script) the console
    script installed next to it (the one `pip install` wrote into the virtualenv)."""
    if script:
        return [str(Path(sys.executable).parent / "provision")]
    return [sys.executable, "-m", "provision"]


def provision(
    *args: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    stdin: int | IO[Any] | None = None,
    timeout: float | None = None,
    check: bool = False,
    script: bool = False,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`provision ARGS` in a process of its own; stdout and stderr captured as text.

    env: variables set on top of this process's environment (os.environ, less `unset`: names
    taken out first, e.g. the ones a fake host controls). cwd, input, stdin, timeout (seconds,
    None: no limit) and check are subprocess.run's. script: run the venv's `provision` console
    script instead of `python -m provision`. prefix: an argv to run it under, e.g.
    ["unshare", "-n"] (no network) or a `sh -c '...; "$@"' sh` that sets something up first.
    """
    dropped = set(unset)
    full = {k: v for k, v in os.environ.items() if k not in dropped}
    full.update(env or {})
    return subprocess.run(
        [*prefix, *command(script=script), *map(str, args)],
        env=full,
        cwd=cwd,
        input=input,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def run_cli(
    *args: str,
    quiet: bool = True,
    verbose: bool = False,
    env: Mapping[str, str | None] | None = None,
    crash: bool = True,
) -> tuple[int, str]:
    """(exit code, what it printed): `provision ARGS` in this process, with Click's CliRunner.

    quiet: -q first, progress off (CliRunner mixes stderr into the output, and most tests read
    results; tests/test_progress.py reads progress). verbose: -v first. env: CliRunner's (set, or
    None: unset, for the call only). crash: an exception other than SystemExit is appended to
    the output as its repr (a test then shows it instead of only an exit code of 1).
    """
    from click.testing import CliRunner

    from provision.cli.commands import cli

    flags = [*(["-q"] if quiet else []), *(["-v"] if verbose else [])]
    res = CliRunner().invoke(cli, [*flags, *args], env=env)
    shown = (
        repr(res.exception)
        if crash and res.exception is not None and not isinstance(res.exception, SystemExit)
        else ""
    )
    return res.exit_code, res.output + shown


# Python code that SIGKILLs its own process (no clean-up at all) just before the nth audit event
# EVENT whose first argument holds MATCH: a kill at a chosen point of a command, every time, with
# no race between a watcher and the command (it can be faster than any watcher).
KILL_AT = (
    "import os, signal, sys\n"
    "def _kill_at(event, args, seen=[0]):\n"
    "    if event == {event!r} and {match!r} in str(args[0]):\n"
    "        seen[0] += 1\n"
    "        if seen[0] == {nth}:\n"
    "            os.kill(os.getpid(), signal.SIGKILL)\n"
    "sys.addaudithook(_kill_at)\n"
)


def killed_at(event: str, match: str, nth: int) -> list[str]:
    """A `prefix` for provision(): the command runs with KILL_AT's hook installed first (python
    -c HOOK, then provision's __main__ with the argv after `-m provision`)."""
    run = "import runpy; del sys.argv[1:4]; runpy.run_module('provision', run_name='__main__')"
    return [sys.executable, "-c", KILL_AT.format(event=event, match=match, nth=nth) + run]


@contextmanager
def build_lock_held(prefix: Path) -> Iterator[None]:
    """Another provision process holds PREFIX's build lock (install's, add's and drop's) while the
    block runs: a process of its own, as a second command would be."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from provision.install.build import exclusive\n"
         "with exclusive(Path(sys.argv[1])):\n print('held', flush=True); sys.stdin.read()",
         str(prefix)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.communicate("", timeout=60)
