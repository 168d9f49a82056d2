"""`run`: a command inside a prefix, activated the way `conda run` activates it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from typing import NoReturn

from provision.solver.conda_errors import CondaError
from provision.solver.conda_prefix import require_environment, resolve_prefix


@dataclass(frozen=True)
class RunOptions:
    prefix: str | None
    name: str | None
    command: tuple[str, ...]  # may start with "--"


def cmd_run(opts: RunOptions) -> NoReturn:
    """Replace this process with the command, the prefix's bin first on PATH, its hooks sourced."""
    prefix = resolve_prefix(opts.prefix, opts.name)
    command = list(opts.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise CondaError("ArgumentError", "no command given to run")
    require_environment(prefix)
    env = dict(os.environ)
    env.update(
        CONDA_PREFIX=str(prefix),
        CONDA_DEFAULT_ENV=str(prefix),
        CONDA_SHLVL="1",
        PATH=os.pathsep.join([str(prefix / "bin"), env.get("PATH", "")]),
    )
    hooks = sorted((prefix / "etc" / "conda" / "activate.d").glob("*.sh"))
    sys.stdout.flush()
    sys.stderr.flush()
    if hooks:
        # Activation hooks are shell code; source them the way `conda activate` would, then exec.
        script = "".join(f". {shlex.quote(str(h))}\n" for h in hooks) + 'exec "$@"\n'
        bash = shutil.which("bash") or "/bin/sh"
        os.execve(bash, [bash, "-c", script, command[0], *command], env)
    exe = shutil.which(command[0], path=env["PATH"])
    if exe is None:
        raise CondaError("CondaError", f"{command[0]}: command not found in {prefix}/bin or PATH")
    os.execve(exe, command, env)
