"""provision-conda's command line: conda's arguments in, typed options to a command, conda's
error report and exit code out."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from provision import __version__
from provision.solver.conda_commands import (
    CreateOptions,
    InfoOptions,
    ListOptions,
    cmd_create,
    cmd_env,
    cmd_info,
    cmd_list,
    emit,
)
from provision.solver.conda_errors import CondaError
from provision.solver.config import PROG, rattler_version
from provision.solver.run import RunOptions, cmd_run


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="conda-compatible solver and installer over py-rattler (driven by conda-lock)",
    )
    top.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="command_name")

    def prefix_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("-p", "--prefix")
        p.add_argument("-n", "--name")
        p.add_argument("--json", action="store_true")
        p.add_argument("-q", "--quiet", action="store_true")
        p.add_argument("-v", "--verbose", action="count", default=0)

    for name in ("create", "install", "update"):
        p = sub.add_parser(
            name, help=f"conda {name}: solve (--dry-run) or install an explicit lockfile"
        )
        prefix_opts(p)
        p.add_argument("-c", "--channel", action="append")
        p.add_argument("--override-channels", action="store_true")
        p.add_argument("--dry-run", "-d", action="store_true")
        p.add_argument("-y", "--yes", action="store_true")
        p.add_argument("--copy", action="store_true")
        p.add_argument("--file")
        p.add_argument("--subdir", "--platform", dest="subdir")
        p.add_argument("specs", nargs="*")
    p = sub.add_parser("list", help="packages installed in a prefix")
    prefix_opts(p)
    p.add_argument("--no-pip", action="store_true")
    p.add_argument("--explicit", action="store_true")
    p.add_argument("--md5", action="store_true")
    p = sub.add_parser("info", help="caches, platform and virtual packages")
    p.add_argument("--json", action="store_true")
    p.add_argument("-a", "--all", action="store_true")
    p = sub.add_parser("run", help="run a command inside a prefix")
    p.add_argument("-p", "--prefix")
    p.add_argument("-n", "--name")
    p.add_argument("--no-capture-output", "--live-stream", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("env", help="not supported (use a lockfile)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    return top


def _create(args: argparse.Namespace, *, update: bool) -> int:
    return cmd_create(
        CreateOptions(
            prefix=args.prefix,
            name=args.name,
            channels=tuple(args.channel or ()),
            specs=tuple(args.specs),
            file=args.file,
            subdir=args.subdir,
            dry_run=args.dry_run,
            json=args.json,
            update=update,
        )
    )


def _list(args: argparse.Namespace) -> int:
    return cmd_list(
        ListOptions(
            prefix=args.prefix, name=args.name, json=args.json, explicit=args.explicit, md5=args.md5
        )
    )


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "create": lambda a: _create(a, update=False),
    "install": lambda a: _create(a, update=True),
    "update": lambda a: _create(a, update=True),
    "list": _list,
    "info": lambda a: cmd_info(InfoOptions(json=a.json)),
    "run": lambda a: cmd_run(RunOptions(prefix=a.prefix, name=a.name, command=tuple(a.command))),
    "env": lambda a: cmd_env(),
}


def run(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    if args.version:
        print(f"{PROG} {__version__} (py-rattler {rattler_version()})")
        return 0
    if args.command_name not in HANDLERS:
        parser().print_usage(sys.stderr)
        return 2
    as_json = bool(getattr(args, "json", False))
    try:
        return HANDLERS[args.command_name](args)
    except CondaError as exc:
        if as_json:
            emit({
                "caused_by": None, "error": f"{exc.name}: {exc.message}",
                "exception_name": exc.name, "message": exc.message,
            })  # fmt: skip
        print(f"{PROG}: {exc.name}: {exc.message}", file=sys.stderr)
        return exc.code


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        # conda-lock asks on every lock: answer before argparse, asyncio and rattler load.
        print(f"{PROG} {__version__} (py-rattler {rattler_version()})")
        sys.exit(0)
    code = run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # rattler's runtime can crash while the interpreter tears down after a failed request;
    # everything is flushed, so leave without running finalizers.
    os._exit(code)
