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
import json
import os
import sys
import time
from types import ModuleType
from typing import Any

from .bench_facts import device_details, software
from .bench_model import (
    BenchError,
    build_model,
    compute_dtype,
    load_dataset,
    matmul_tflops,
    set_policy,
    synthetic,
    task,
    to_format,
)
from .bench_schema import (
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
    add("--json", dest="json_out", default=None, help="write the report here")
    add("--seed", type=int)
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


def setup_devices(tf: ModuleType, args: argparse.Namespace) -> list[str]:
    """Configure devices before TensorFlow initialises; return the device names to spread over."""
    if args.cpu_devices:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(args.cpu_devices)]
        )
        names = [d.name for d in tf.config.list_logical_devices("CPU")]
    else:
        gpus = tf.config.list_physical_devices("GPU")
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
    if not names:
        raise BenchError(
            "no GPU visible to TensorFlow; run `provision verify` or use --cpu-devices N"
        )
    return names


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
        if extra_steps:
            trainer.train(extra_steps, None)
        acc = accuracy(model, x_test, y_test, gb)
        observed = trainer.observed()
        shape = [int(d) for d in model.input_shape[1:]]
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
        "compute_dtype": dtype,
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
        event(
            event="warn",
            text="--jit on: XLA compiles the whole ResNet50 step before the first runs (minutes; "
            "over 400 s was seen on an H200 at batch 256)",
        )


def main(argv: list[str] | None = None, prog: str = "bench") -> int:
    args = parse_args(argv, prog)
    report: dict[str, object] = {}
    runs: list[Run] = []
    failed: list[Failure] = []
    skipped: list[Skip] = []
    try:
        counts, precisions = check(args)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        devices = setup_devices(tf, args)
        messages: list[str] = []
        runnable = [c for c in counts if not why_not(args, c, len(devices))]
        largest = max([global_batch(args, c, []) for c in runnable] or [1])
        data, classes = load_data(tf, args, largest)
        n = args.matmul_n or (1024 if args.cpu_devices else 8192)
        report = {
            "schema": SCHEMA,
            "tool": TOOL,
            "tensorflow": tf.__version__,
            "devices": devices,
            "device_details": device_details(tf, devices),
            "software": None,
            "settings": {k: v for k, v in vars(args).items() if k != "json_out"},
            "task": task(args, len(data[0]), len(data[2]), classes),
            "matmul": [
                {"precision": p, "n": n, "tflops": round(matmul_tflops(tf, devices[0], p, n), 2)}
                for p in precisions
            ],
            "runs": runs,
            "failed": failed,
            "skipped": skipped,
            "messages": messages,
        }
        warnings_before(args)
        configs = [(prec, c) for prec in precisions for c in counts]
        for index, (prec, c) in enumerate(configs, start=1):
            where: Config = {"gpus": c, "precision": prec}
            event(event="config", index=index, total=len(configs), **where)
            reason = why_not(args, c, len(devices))
            try:
                if reason:
                    raise Skipped(reason)
                row = run_config(tf, args, devices[:c], prec, data, classes, messages)
            except BenchError:
                raise
            except Skipped as exc:
                skipped.append({**where, "reason": str(exc)})
                event(event="skipped", reason=str(exc), **where)
                continue
            except Exception as exc:  # one configuration failing must not hide the others
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                failed.append({**where, "error": first[:300]})
                event(event="failed", error=first[:300], **where)
                continue
            runs.append(row)
            event(
                event="result",
                images_per_s=row["images_per_s"],
                accuracy=row["accuracy"],
                seconds=row["seconds"],
                **where,
            )
        report["software"] = software(tf)
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
