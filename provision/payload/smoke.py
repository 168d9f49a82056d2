"""The smoke test's program: proves what TensorFlow really loads and runs in one environment.

Runs with the environment's own interpreter (the standard library and TensorFlow, nothing else;
Python 3.8+), from the zipapp provision builds of this package:

    python -I payload.pyz smoke                   readable summary on stdout; exit 0 or 1
    python -I payload.pyz smoke --json            the report, one JSON object, on stdout
    python -I payload.pyz smoke --out report.json --require-gpu --timeout 120
    python -I payload.pyz smoke --expected expected.json   compare with these versions

`--expected FILE` (a JSON object) holds the versions the environment must have. Keys: tf_version,
python, cuda, cudnn ("X.Y"), compute_min ("X.Y"), compute_targets (["sm_80", "compute_90"]),
gpu_memory ("growth", "<MiB>" or null), gpus ("0,1" or null). A key that is absent is not
compared (its check says so).

How it runs: this process never imports TensorFlow. It starts itself again as a child that
imports TensorFlow and runs the checks one at a time, reporting each over a pipe, while
TensorFlow's log on stderr is captured for classification. Every check has a deadline
(--timeout seconds; the matmul check gets that per GPU; importing TensorFlow gets
--setup-timeout). What must precede TensorFlow's initialisation (memory growth; two virtual CPU
devices for MirroredStrategy when there is no GPU) is done first in every child.
For tests, PROVISION_SMOKE_FAULT=hang:<check> or crash:<check> makes the child hang or abort
at the start of that check. The report is described in report.py.
Exit status: 0 when no check failed, 1 when one did, 2 on a usage error.
"""

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from typing import Dict, List, Optional, Tuple, cast

from .judgements import classify_log, judge_log
from .probes import probe_driver
from .report import (
    CHECKS,
    DEFAULT_TIMEOUT,
    HOOK_MODULE,
    PARENT_CHECKS,
    REPORTED_VARIABLES,
    SCHEMA,
    SCHEMA_VERSION,
    SETUP_TIMEOUT,
    Expected,
    Result,
    render_text,
    result,
    summarize,
)
from .smoke_parent import run_all
from .status import FAIL, SKIP


def _variables() -> Dict[str, str]:
    """The variables in effect, the environment's own GPU policy included: an environment built by
    provision applies it when TensorFlow is imported (its start-up hook), with no activation, and
    the checks run in children that inherit what the hook sets here."""
    hook = sys.modules.get(HOOK_MODULE)
    apply_policy = getattr(hook, "apply_policy", None)
    if callable(apply_policy):
        with contextlib.suppress(Exception):  # the checks below report what is missing
            apply_policy()
    return {k: os.environ[k] for k in REPORTED_VARIABLES if k in os.environ}


def build_report(args: argparse.Namespace, expected: Expected) -> Result:
    t0 = time.monotonic()
    driver = probe_driver()
    args.host_gpus = int(driver["host_gpus"])
    checks = [c for c in CHECKS if c in args.checks]
    environment: Result = {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "variables": _variables(),
        "driver": driver,
    }
    if args.in_process:
        facts, results, stderr = _run_in_process(args, expected, checks)
    else:
        facts, results, stderr = run_all(args, checks)
    environment.update({k: v for k, v in facts.items() if k != "tf_dir"})
    environment.setdefault("gpus", [])
    if "logs" in checks:
        if args.in_process:
            results["logs"] = result(SKIP, "the log is not captured with --in-process")
        else:
            classified = classify_log(stderr, gpu_host=driver["host_gpus"] > 0)
            status, reason = judge_log(classified)
            results["logs"] = result(status, reason, **classified)
    ordered = []
    for name in checks:
        r = results.get(name) or result(FAIL, "no result")
        ordered.append(
            {
                "name": name,
                "status": r.get("status", FAIL),
                "reason": r.get("reason", ""),
                "seconds": r.get("seconds"),
                "details": r.get("details") or {},
            }
        )
    seconds = time.monotonic() - t0
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "expected": expected,
        "environment": environment,
        "checks": ordered,
        "summary": summarize(ordered, len(environment["gpus"]), bool(args.require_gpu), seconds),
    }


def _run_in_process(
    args: argparse.Namespace, expected: Expected, checks: List[str]
) -> Tuple[Result, Dict[str, Result], str]:
    from .child import child_main

    args.checks = [c for c in checks if c not in PARENT_CHECKS]
    events: List[Result] = []
    child_main(args, expected, events.append)
    facts: Result = {}
    results: Dict[str, Result] = {}
    for ev in events:
        if ev["event"] == "setup":
            facts = ev.get("facts") or {}
            if "error" in ev:
                results[args.checks[0]] = result(
                    FAIL, "TensorFlow could not be imported: " + ev["error"]
                )
                for c in args.checks[1:]:
                    results[c] = result(SKIP, "not run: TensorFlow did not start")
        elif ev["event"] == "result":
            results[ev["check"]] = {
                k: ev.get(k) for k in ("status", "reason", "details", "seconds")
            }
    return facts, results, ""


def load_expected(path: Optional[str]) -> Expected:
    if not path:
        return {}
    with open(path) as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    # Written by `provision verify` from the spec; the checks read each field with .get().
    return cast(Expected, data)


def parse_args(argv: Optional[List[str]] = None, prog: str = "smoke") -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Prove what TensorFlow really uses in this environment (see the docstring).",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    p.add_argument("--expected", metavar="FILE", help="JSON object of expected versions")
    p.add_argument("--require-gpu", action="store_true", help="no GPU is a failure")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds each check may take before it counts as hung (default %(default)g)",
    )
    p.add_argument(
        "--setup-timeout",
        type=float,
        default=SETUP_TIMEOUT,
        metavar="S",
        help="seconds importing TensorFlow and finding GPUs may take (default %(default)g)",
    )
    p.add_argument(
        "--checks",
        default=",".join(CHECKS),
        metavar="A,B",
        help="run only these checks (default: all)",
    )
    p.add_argument(
        "--in-process", action="store_true", help="no child process, no deadlines (debugging)"
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--events-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--host-gpus", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = [c.strip() for c in str(args.checks).split(",") if c.strip()]
    unknown = [c for c in names if c not in CHECKS]
    if unknown:
        p.error("unknown check(s) {}; known: {}".format(", ".join(unknown), ", ".join(CHECKS)))
    args.checks = names
    if args.timeout <= 0 or args.setup_timeout <= 0:
        p.error("--timeout and --setup-timeout must be positive")
    return args


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main(argv: Optional[List[str]] = None, prog: str = "smoke") -> int:
    args = parse_args(argv, prog)
    try:
        expected = load_expected(args.expected)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{prog}: cannot read --expected: {exc}\n")
        return 2
    if args.child:
        from .child import serve

        serve(args, expected)
    report = build_report(args, expected)
    text = json.dumps(report, indent=2, default=str) + "\n"
    if args.out:
        _write_atomic(args.out, text)
    sys.stdout.write(text if args.json else render_text(report))
    return 1 if report["summary"]["status"] == FAIL else 0
