"""Multi-GPU scaling and mixed-precision benchmark, run inside an environment (stdlib +
TensorFlow).

For each precision and GPU count it trains the same model on the same learnable synthetic task
(or user-supplied images) and reports images/s after warm-up, time per epoch, held-out accuracy,
speed-up over 1-GPU float32 and scaling efficiency; plus a compute-bound matmul row per precision,
so tensor core use shows even where the model cannot show it. The settings that decide how
TensorFlow runs the step are options, each recorded with what it observably did: XLA (--jit
auto|on|off, where auto is Keras's own default), --steps-per-execution, --data-format, the input
(--data tf.data|synthetic-tensor), Keras's fit or our own tf.function loop (--loop), and
MirroredStrategy or TensorFlow's default strategy (--strategy). A count this host cannot run is
skipped with a reason; a configuration that fails is recorded and the others go on.
`provision bench NAME...` runs it with each environment's interpreter from the payload's zipapp;
it is also usable on its own:

    python -I payload.pyz bench --gpus 1,2 --precision float32,mixed_float16 --json r.json

The report's schema is in bench_schema.py. Progress goes to stderr as EVENT lines. Exit 0 when at
least one configuration ran, 1 otherwise (the report is still written when one was started).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from .bench_facts import device_details, software
from .bench_model import (
    BenchError,
    batchnorm_kinds,
    build_model,
    compute_dtype,
    load_dataset,
    matmul_tflops,
    set_policy,
    synthetic,
    task,
    to_format,
)
from .bench_procs import run_part
from .bench_profile import PROFILED_STEPS, profile
from .bench_profile import summary as profile_summary
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
from .bench_train import Clock, CustomTrainer, FitTrainer, Skipped, accuracy, event
from .gpu_policy import apply as apply_policy
from .gpu_policy import summary as policy_summary

__all__ = ["EVENT", "main"]
IMAGE_BYTES_BUDGET = 1_500_000_000  # the synthetic training split, float32, in host memory


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
    add("--xla-cache", help="a folder for XLA's persistent compilation cache")
    add("--profile", help="trace a few steps after the timed ones into this folder (tf.profiler)")
    add("--json", dest="json_out", default=None, help="write the report here")
    add("--seed", type=int)
    # One configuration in this process (the parent starts a child per configuration).
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)
    p.add_argument("--part-out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--part-matmul", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def check(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """GPU counts and precisions; BenchError for what cannot run anywhere."""
    try:
        counts = sorted({int(v) for v in args.gpus.split(",") if v.strip()})
    except ValueError as exc:
        raise BenchError(f"--gpus takes counts like 1,2,4, not {args.gpus!r}") from exc
    if not counts or counts[0] < 1:
        raise BenchError(f"--gpus takes positive counts, not {args.gpus!r}")
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        raise BenchError(f"--precision takes {', '.join(PRECISIONS)}, not {', '.join(bad)}")
    n = args.steps_per_execution
    if n < 1 or args.steps % n or args.warmup % n or args.steps < 1:
        raise BenchError(
            f"--steps {args.steps} and --warmup {args.warmup} must be multiples of "
            f"--steps-per-execution {n}"
        )
    return counts, precisions


def setup_devices(tf: ModuleType, args: argparse.Namespace) -> Tuple[List[str], Dict[str, Any]]:
    """Configure devices before TensorFlow initialises: the environment's GPU policy (gpu_policy,
    as the smoke test and the start-up hook apply it: a limit the hook set stays), or virtual CPU
    devices. The device names to spread over, and what the policy did."""
    policy = apply_policy(tf, growth_by_default=True, by="the benchmark")
    if args.cpu_devices:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(args.cpu_devices)]
        )
        names = [d.name for d in tf.config.list_logical_devices("CPU")]
    else:
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
    if not names:
        raise BenchError(
            "no GPU visible to TensorFlow; run `provision verify` or use --cpu-devices N"
        )
    return names, policy


def global_batch(args: argparse.Namespace, n: int, messages: list[str]) -> int:
    if not args.global_batch:
        return int(args.batch_per_replica * n)
    gb = args.global_batch - args.global_batch % n
    if gb == 0:
        raise BenchError(f"--global-batch {args.global_batch} is smaller than {n} replicas")
    note = f"global batch {args.global_batch} is not divisible by {n} replicas; using {gb}"
    if gb != args.global_batch and note not in messages:
        messages.append(note)
    return int(gb)


def why_not(args: argparse.Namespace, count: int, available: int) -> str:
    """Why a GPU count cannot run here ("" when it can)."""
    if count > available:
        kind = "virtual CPU devices" if args.cpu_devices else "GPUs"
        return f"needs {count} {kind}; this host has {available}"
    if count > 1 and args.strategy == "default":
        return "--strategy default runs on one device"
    return ""


def run_config(
    tf: ModuleType,
    args: argparse.Namespace,
    devices: list[str],
    precision: str,
    data: tuple[Any, Any, Any, Any],  # x_train, y_train, x_test, y_test: tensors or arrays
    classes: int,
    messages: list[str],
) -> Run:
    t_start = time.perf_counter()
    n = len(devices)
    gb = global_batch(args, n, messages)
    label: Config = {"gpus": n, "precision": precision}
    set_policy(tf, precision)
    tf.keras.backend.set_image_data_format(args.data_format)
    if args.strategy == "default":
        strategy = tf.distribute.get_strategy()
    else:
        strategy = tf.distribute.MirroredStrategy(
            devices=devices,
            cross_device_ops=tf.distribute.ReductionToOneDevice() if args.cpu_devices else None,
        )
    x_train, _, x_test, y_test = data
    extra_steps = (args.train_epochs - 1) * max(1, len(x_train) // gb)
    eval_steps = len(x_test) / gb / 3  # a forward pass is about a third of a training step
    try:
        with strategy.scope():
            model = build_model(tf, args, classes)
            trainer: FitTrainer | CustomTrainer
            if args.loop == "fit":
                trainer = FitTrainer(tf, args, model, data, gb)
            else:
                mixed16 = precision == "mixed_float16"
                trainer = CustomTrainer(tf, args, model, data, gb, strategy, mixed16)
        clock = Clock(args, label, extra_steps + eval_steps)
        trainer.train(args.warmup + args.steps, clock)
        if clock.stop_reason:
            raise Skipped(clock.stop_reason)
        timing = clock.summary()
        traced = None
        if args.profile:
            per = args.steps_per_execution
            folder = os.path.join(args.profile, f"{n}x{precision}")
            count = -(-PROFILED_STEPS // per) * per
            traced = profile(tf, folder, lambda k: trainer.train(k, None), count)
            messages.append(f"{n} x {precision}: {profile_summary(traced)}")
        if extra_steps:
            trainer.train(extra_steps, None)
        acc = accuracy(model, x_test, y_test, gb)
        observed = trainer.observed()
        shape = [int(d) for d in model.input_shape[1:]]
        norms = batchnorm_kinds(tf, model)
        dtype = compute_dtype(model)
    finally:
        tf.keras.backend.clear_session()
        set_policy(tf, "float32")
        tf.keras.backend.set_image_data_format("channels_last")
    step_s = timing["step_s"]
    ips = gb / step_s
    return {  # the report's order: the configuration, its speed, its clock, what it did
        "gpus": n,
        "precision": precision,
        "global_batch": gb,
        "step_ms": round(step_s * 1000, 3),
        "images_per_s": round(ips, 1),
        "epoch_s": round(args.epoch_images / ips, 2),
        "accuracy": round(acc, 4),
        "first_step_s": timing["first_step_s"],
        "executions": timing["executions"],
        "timed_steps": timing["timed_steps"],
        "estimate_s": timing["estimate_s"],
        "seconds": round(time.perf_counter() - t_start, 2),
        "xla": observed["xla"],
        "optimizer_xla": observed["optimizer_xla"],
        "pipeline": observed["pipeline"],
        "custom_traces": observed["custom_traces"],
        "profile": traced,
        "compute_dtype": dtype,
        "batchnorm_layers": norms,
        "input_shape": shape,
        "strategy": type(strategy).__name__,
        "replicas": int(strategy.num_replicas_in_sync),
    }


def load_data(
    tf: ModuleType, args: argparse.Namespace, largest_batch: int
) -> tuple[tuple[Any, Any, Any, Any], int]:
    """(x_train, y_train, x_test, y_test) in the model's data format, and the class count."""
    if args.dataset:
        xtr, ytr, xte, yte = load_dataset(tf, args.dataset)
        classes = int(max(ytr.max(), yte.max())) + 1
    else:
        cap = max(largest_batch, IMAGE_BYTES_BUDGET // (args.image_size**2 * 3 * 4))
        n_train = min(max(largest_batch * 4, 512), cap)
        xtr, ytr = synthetic(tf, args, n_train, args.seed + 1)
        xte, yte = synthetic(tf, args, min(512, cap), args.seed + 2)
        classes = args.classes
    xtr, xte = to_format(tf, xtr, args.data_format), to_format(tf, xte, args.data_format)
    return (xtr, ytr, xte, yte), classes


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


def use_xla_cache(folder: str) -> None:
    """XLA's persistent compilation cache (TF_XLA_FLAGS, before TensorFlow loads): compiled
    executables are written to the folder and read back by later runs of the same step."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_persistent_cache_directory" not in flags:
        entry = "--tf_xla_persistent_cache_directory=" + os.path.abspath(folder)
        os.environ["TF_XLA_FLAGS"] = (flags + " " + entry).strip()


def part_main(args: argparse.Namespace) -> int:
    """One configuration (--part PRECISION:COUNT) in this process, as a child of main: the facts
    of the run, the matmul rows (--part-matmul) and the outcome, into --part-out as they come."""
    precision, _, count = args.part.partition(":")
    n = int(count)
    out: Dict[str, Any] = {"facts": None, "outcome": None, "messages": [], "software": None}

    def save() -> None:
        tmp = args.part_out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(out, fh)
        os.replace(tmp, args.part_out)

    loaded: Optional[ModuleType] = None
    try:
        counts, precisions = check(args)
        import tensorflow as tf

        loaded = tf
        devices, policy = setup_devices(tf, args)
        line = policy_summary(policy)
        if line and args.part_matmul:  # the first configuration says it, once
            event(event="policy", text=line)
        messages: List[str] = out["messages"]
        runnable = [c for c in counts if not why_not(args, c, len(devices))]
        largest = max([global_batch(args, c, []) for c in runnable] or [1])
        data, classes = load_data(tf, args, largest)
        size = args.matmul_n or (1024 if args.cpu_devices else 8192)
        matmul = [
            {"precision": p, "n": size, "tflops": round(matmul_tflops(tf, devices[0], p, size), 2)}
            for p in (precisions if args.part_matmul else [])
        ]
        out["facts"] = {
            "tensorflow": tf.__version__,
            "devices": devices,
            "device_details": device_details(tf, devices),
            "gpu_policy": policy,
            "task": task(args, len(data[0]), len(data[2]), classes),
            "matmul": matmul,
        }
        save()
        reason = why_not(args, n, len(devices))
        if reason:
            raise Skipped(reason)
        out["outcome"] = {
            "run": run_config(tf, args, devices[:n], precision, data, classes, messages)
        }
    except BenchError as exc:
        out["outcome"] = {"error": str(exc)}
    except Skipped as exc:
        out["outcome"] = {"skipped": str(exc)}
    except Exception as exc:  # one configuration failing must not hide the others
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        out["outcome"] = {"failed": first[:300]}
    if loaded is not None:
        with contextlib.suppress(Exception):
            out["software"] = software(loaded)
    save()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # TensorFlow's threads can make an orderly interpreter exit hang or crash


def main(argv: Optional[List[str]] = None, prog: str = "bench") -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(raw, prog)
    if args.xla_cache:
        use_xla_cache(args.xla_cache)
    if args.part:
        return part_main(args)
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
                if line:
                    messages.append(line)
            for m in part.get("messages") or []:
                if m not in messages:
                    messages.append(m)
            if part.get("software"):
                report["software"] = part["software"]
            outcome = part["outcome"]
            if "error" in outcome:
                raise BenchError(outcome["error"])
            if "skipped" in outcome:
                skipped.append({**where, "reason": outcome["skipped"]})
                event(event="skipped", reason=outcome["skipped"], **where)
            elif "failed" in outcome:
                failed.append({**where, "error": outcome["failed"]})
                event(event="failed", error=outcome["failed"], **where)
            else:
                row: Run = outcome["run"]
                runs.append(row)
                event(
                    event="result",
                    images_per_s=row["images_per_s"],
                    accuracy=row["accuracy"],
                    seconds=row["seconds"],
                    **where,
                )
        if runs:
            speedups(runs, messages)
    except BenchError as exc:
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
