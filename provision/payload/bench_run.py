"""Multi-GPU scaling and mixed-precision benchmark, run inside an environment (stdlib +
TensorFlow).

For each precision and GPU count it trains the same model on the same learnable synthetic task
(or user-supplied images) and reports images/s after warm-up, time per epoch, held-out accuracy,
speed-up over 1-GPU float32 and scaling efficiency; plus a compute-bound matmul row per precision,
so tensor core use shows even where the model cannot show it. The settings that decide how
TensorFlow runs the step are options, each recorded with what it observably did: XLA (--jit
auto|on|off, where auto is Keras's own default), --steps-per-execution, --data-format, the input
(--data tf.data|synthetic-tensor), Keras's fit or our own tf.function loop (--loop), and
MirroredStrategy or TensorFlow's default strategy (--strategy), ResNet50's BatchNormalization
(--batchnorm), Keras 2's XLA optimizer update (--optimizer-jit), XLA's persistent cache
(--xla-cache), and a profile of a few steps (--profile). A count this host cannot run is skipped
with a reason; a configuration that fails is recorded and the others go on. Each configuration
runs in a child process of its own (bench_config; bench_procs starts and watches it), under the
environment's GPU policy (gpu_policy), so that --max-seconds can stop a first step (an XLA
compile) that runs longer: "compile over N s".
`provision bench NAME...` runs it with each environment's interpreter from the payload's zipapp;
it is also usable on its own:

    python -I payload.pyz bench --gpus 1,2 --precision float32,mixed_float16 --json r.json

The report's schema is in bench_schema.py. Progress goes to stderr as EVENT lines. Exit 0 when at
least one configuration ran, 1 otherwise (the report is still written when one was started).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional

from .bench_config import check, part_main
from .bench_model import BenchArgsError
from .bench_procs import run_part
from .bench_schema import (
    BATCHNORM,
    DATA,
    DATA_FORMATS,
    DEFAULTS,
    EVENT,
    JIT,
    LOOPS,
    MODELS,
    PRECISIONS,
    SCHEMA,
    STRATEGIES,
    TOOL,
    Config,
    Failure,
    Run,
    Skip,
)
from .bench_train import event
from .gpu_policy import GROWTH_VAR, LIMIT_VAR
from .gpu_policy import summary as policy_summary

__all__ = ["EVENT", "main"]


def parse_args(argv: list[str] | None = None, prog: str = "bench") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.set_defaults(**DEFAULTS)

    def add(flag: str, **kw: Any) -> None:
        p.add_argument(flag, **kw)

    add("--gpus", help="comma-separated GPU counts, e.g. 1,2,4")
    add("--precision", help="comma-separated: " + ", ".join(PRECISIONS))
    add("--model", choices=MODELS)
    add("--image-size", type=int)
    add("--width", type=int, help="hidden width of the mlp model")
    add("--classes", type=int)
    add("--batch-per-replica", type=int)
    add("--global-batch", type=int, help="fixed global batch (per replica count)")
    add("--steps", type=int, help="timed steps per configuration")
    add("--warmup", type=int, help="untimed steps before timing")
    add("--epoch-images", type=int, help="images per epoch for epoch_s")
    add("--train-epochs", type=int, help="passes of training before accuracy")
    add("--dataset", help="directory of .npz files: x (N,H,W,3), y (N,)")
    add("--jit", nargs="?", const="on", choices=JIT, help="XLA (auto: Keras's default)")
    add("--steps-per-execution", type=int)
    add("--data-format", choices=DATA_FORMATS)
    add("--data", choices=DATA)
    add("--loop", choices=LOOPS)
    add("--strategy", choices=STRATEGIES)
    add("--max-seconds", type=float, help="skip a configuration estimated to take longer")
    add("--matmul-n", type=int, help="matmul size (default 8192 GPU, 1024 CPU)")
    add("--cpu-devices", type=int, help="N virtual CPU devices instead of GPUs")
    add(
        "--batchnorm",
        choices=BATCHNORM,
        help="ResNet50's BatchNormalization: as Keras builds it, "
        "fused (one cuDNN kernel), unfused, or none",
    )
    add("--optimizer-jit", choices=JIT, help="XLA for the optimizer's update (Keras 2 only)")
    add("--gpu-memory", help="env (the environment's GPU policy), growth, or a limit in MiB")
    add("--xla-cache", help="a folder for XLA's persistent compilation cache")
    add("--profile", help="trace a few steps after the timed ones into this folder (tf.profiler)")
    add("--json", dest="json_out", default=None, help="write the report here")
    add("--seed", type=int)
    # One configuration in this process (the parent starts a child per configuration).
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)
    p.add_argument("--part-out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--part-matmul", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def chance_note(row: Run) -> str:
    """What a run at chance accuracy says: it learnt nothing, and why when the loss scale shows."""
    if not row.get("at_chance"):
        return ""
    text = (
        f"{row['gpus']} x {row['precision']}: accuracy {row['accuracy']:.3f} is at chance: it "
        "learnt nothing, so its speed is not a result to use"
    )
    scale = row.get("loss_scale")
    if scale is not None and scale < 1:
        text += f" (the loss scale fell to {scale:g}: gradients overflowed and steps were skipped)"
    return text


def speedups(runs: list[Run], messages: list[str]) -> None:
    """Each run's speed-up over 1 x float32 (else the smallest run), and its scaling
    efficiency."""
    base = next((r for r in runs if r["precision"] == "float32" and r["gpus"] == 1), None)
    if base is None:
        base = min(runs, key=lambda r: (r["gpus"], r["precision"]))
        messages.append(f"speed-up is relative to {base['gpus']} x {base['precision']}")
    for r in runs:
        r["speedup"] = round(r["images_per_s"] / base["images_per_s"], 3)
        # Scaling efficiency compares a precision with its own smallest run, not with float32.
        own = min((o for o in runs if o["precision"] == r["precision"]), key=lambda o: o["gpus"])
        r["efficiency"] = round(
            (r["images_per_s"] / own["images_per_s"]) / (r["gpus"] / own["gpus"]), 3
        )


def warnings_before(args: argparse.Namespace) -> None:
    if args.jit == "on" and args.model == "resnet50" and not args.cpu_devices:
        bound = (
            f"--max-seconds {args.max_seconds:g} stops a compile that takes longer"
            if args.max_seconds
            else "--max-seconds N stops a compile that takes longer"
        )
        event(
            event="warn",
            text="--jit on: XLA compiles the whole ResNet50 step before the first runs (minutes; "
            f"over 400 s was seen on an H200 at batch 256); {bound}",
        )


def xla_environment() -> Dict[str, Optional[str]]:
    """The XLA variables in effect (they change what XLA does; the report records them)."""
    return {k: os.environ.get(k) for k in ("XLA_FLAGS", "TF_XLA_FLAGS")}


def gpu_memory_override(value: str) -> str:
    """--gpu-memory growth|MiB: the GPU policy for every configuration instead of the
    environment's (its start-up hook keeps what a process set itself); one line saying so."""
    if value in ("env", "", None):
        return ""
    if value == "growth":
        os.environ[LIMIT_VAR] = ""  # no limit: the benchmark's memory growth
        os.environ[GROWTH_VAR] = "true"
        return "--gpu-memory growth: memory growth, whatever GPU policy the environment sets"
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise SystemExit(f"bench: --gpu-memory takes env, growth or a number of MiB, not {value!r}")
    os.environ[LIMIT_VAR] = value
    return f"--gpu-memory {value}: a limit of {value} MiB per GPU, whatever the environment sets"


def use_xla_cache(folder: str) -> None:
    """XLA's persistent compilation cache (TF_XLA_FLAGS, before TensorFlow loads): compiled
    executables are written to the folder and read back by later runs of the same step."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_persistent_cache_directory" not in flags:
        entry = "--tf_xla_persistent_cache_directory=" + os.path.abspath(folder)
        os.environ["TF_XLA_FLAGS"] = (flags + " " + entry).strip()


def main(argv: Optional[List[str]] = None, prog: str = "bench") -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(raw, prog)
    if args.xla_cache:
        use_xla_cache(args.xla_cache)
    if args.part:
        return part_main(args)
    override = gpu_memory_override(args.gpu_memory)
    report: Dict[str, Any] = {}
    runs: List[Run] = []
    failed: List[Failure] = []
    skipped: List[Skip] = []
    messages: List[str] = []
    try:
        counts, precisions = check(args)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        warnings_before(args)
        configs = [(prec, c) for prec in precisions for c in counts]
        for index, (prec, c) in enumerate(configs, start=1):
            where: Config = {"gpus": c, "precision": prec}
            event(event="config", index=index, total=len(configs), **where)
            part = run_part(raw, where, not report, float(args.max_seconds or 0))
            facts = part.get("facts")
            if facts and not report:
                report = new_report(args, facts, runs, failed, skipped, messages)
                line = policy_summary(facts.get("gpu_policy") or {})
                messages += [m for m in (line, override) if m]
            for m in part.get("messages") or []:
                if m not in messages:
                    messages.append(m)
            if part.get("software"):
                report["software"] = part["software"]
            outcome = part["outcome"]
            if "error" in outcome:
                raise BenchArgsError(outcome["error"])
            if "skipped" in outcome:
                skipped.append({**where, "reason": outcome["skipped"]})
                event(event="skipped", reason=outcome["skipped"], **where)
            elif "failed" in outcome:
                failed.append({**where, "error": outcome["failed"]})
                event(event="failed", error=outcome["failed"], **where)
            else:
                row: Run = outcome["run"]
                runs.append(row)
                note = chance_note(row)
                if note:
                    messages.append(note)
                    event(event="warn", text=note)
                event(
                    event="result",
                    images_per_s=row["images_per_s"],
                    accuracy=row["accuracy"],
                    seconds=row["seconds"],
                    **where,
                )
        if runs:
            speedups(runs, messages)
    except BenchArgsError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        if not report:
            return 1
    text = json.dumps(report, indent=2)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0 if report.get("runs") else 1


def new_report(
    args: argparse.Namespace,
    facts: Dict[str, Any],
    runs: List[Run],
    failed: List[Failure],
    skipped: List[Skip],
    messages: List[str],
) -> Dict[str, Any]:
    """The report, in its order, from the first configuration's facts; filled in as they run."""
    hidden = ("json_out", "part", "part_out", "part_matmul")
    return {
        "schema": SCHEMA,
        "tool": TOOL,
        "tensorflow": facts["tensorflow"],
        "devices": facts["devices"],
        "device_details": facts["device_details"],
        "software": None,
        "settings": {k: v for k, v in vars(args).items() if k not in hidden},
        "xla_environment": xla_environment(),
        "gpu_policy": facts["gpu_policy"],
        "task": facts["task"],
        "matmul": facts["matmul"],
        "runs": runs,
        "failed": failed,
        "skipped": skipped,
        "messages": messages,
    }
