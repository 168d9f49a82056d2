"""The child process: imports TensorFlow, runs the checks it is given one at a time and reports
each as one JSON event per line over a pipe to its parent (setup, start, result, done)."""

import argparse
import json
import os
import sys
import time
import traceback
from typing import Callable, Dict, NoReturn

from . import checks_build, checks_frameworks, checks_gpu, checks_train
from .context import Ctx, child_setup
from .report import Expected, Result, result
from .status import FAIL

FAULT_VAR = "PROVISION_SMOKE_FAULT"  # hang:<check> or crash:<check>, for tests

CHECK_FUNCS: Dict[str, Callable[[Ctx], Result]] = {
    "tf_version": checks_build.check_tf_version,
    "cuda_build": checks_build.check_cuda_build,
    "build_info": checks_build.check_build_info,
    "cuda_libraries": checks_build.check_cuda_libraries,
    "cudart": checks_build.check_cudart,
    "cudnn": checks_build.check_cudnn,
    "gpus": checks_gpu.check_gpus,
    "gpu_policy": checks_gpu.check_gpu_policy,
    "memory": checks_gpu.check_memory,
    "matmul": checks_gpu.check_matmul,
    "mirrored_strategy": checks_train.check_mirrored_strategy,
    "mixed_float16": checks_train.check_mixed_float16,
    "mixed_bfloat16": checks_train.check_mixed_bfloat16,
    "xla": checks_train.check_xla,
    "frameworks": checks_frameworks.check_frameworks,
}


def _fault(check: str) -> None:
    kind, _, where = os.environ.get(FAULT_VAR, "").partition(":")
    if where == check and kind == "hang":
        time.sleep(10**6)
    if where == check and kind == "crash":
        os.abort()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return "{}: {}".format(type(exc).__name__, text[0][:400] if text else "")


def child_main(
    args: argparse.Namespace, expected: Expected, emit: Callable[[Result], None]
) -> None:
    try:
        ctx = child_setup(args, expected)
    except BaseException as exc:
        emit(
            {"event": "setup", "error": one_line(exc), "traceback": traceback.format_exc()[-3000:]}
        )
        return
    emit({"event": "setup", "facts": ctx.facts})
    for name in args.checks:
        emit({"event": "start", "check": name})
        t = time.monotonic()
        _fault(name)
        try:
            r = CHECK_FUNCS[name](ctx)
        except Exception as exc:
            r = result(FAIL, one_line(exc), traceback=traceback.format_exc()[-3000:])
        r["seconds"] = round(time.monotonic() - t, 3)
        emit(dict(r, event="result", check=name))
    emit({"event": "done"})


def serve(args: argparse.Namespace, expected: Expected) -> NoReturn:
    """Run as the child: events to the pipe the parent passed (--events-fd), then exit at once."""
    out = os.fdopen(int(args.events_fd), "w", buffering=1)

    def emit(event: Result) -> None:
        out.write(json.dumps(event, default=str) + "\n")
        out.flush()

    child_main(args, expected, emit)
    out.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's threads can make an orderly interpreter exit hang or crash.
    os._exit(0)
