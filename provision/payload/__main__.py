"""The payload's command line: `python -I payload.pyz PROGRAM ARGS...`, PROGRAM smoke or bench.

The same entry serves `python -m provision.payload PROGRAM ...` from a source tree.
"""

import os
import sys
from typing import List, Optional

PROGRAMS = ("smoke", "bench")


def _name() -> str:
    """How the user called us, for usage lines: the zipapp's file name, or `-m` the package."""
    first = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if first and first not in ("__main__.py", "-c"):
        return first
    return "python -m " + (__package__ or "provision.payload")


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] not in PROGRAMS:
        sys.stderr.write(
            "usage: {} {{{}}} [ARGS...]   (PROGRAM --help for its options)\n".format(
                _name(), ",".join(PROGRAMS)
            )
        )
        return 2
    prog = f"{_name()} {args[0]}"
    if args[0] == "smoke":
        from .smoke import main as smoke_main

        return smoke_main(args[1:], prog)
    from .bench_run import main as bench_main

    return bench_main(args[1:], prog)


if __name__ == "__main__":
    sys.exit(main())
