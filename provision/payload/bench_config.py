"""One configuration of the benchmark in this process (`bench --part PRECISION:COUNT`, a child of
the benchmark's main process, bench_procs): TensorFlow's devices under the environment's GPU
policy, the data, the model trained and timed, and its outcome in a file the parent reads."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from .bench_facts import device_details, software
from .bench_model import (
    BenchArgsError,
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
from .bench_profile import PROFILED_STEPS, profile
from .bench_profile import summary as profile_summary
from .bench_schema import PRECISIONS, Config, Run, at_chance
from .bench_train import (
    Clock,
    CustomTrainer,
    FitTrainer,
    Skipped,
    accuracy,
    event,
    loss_scale,
)
from .gpu_policy import apply as apply_policy
from .gpu_policy import summary as policy_summary

IMAGE_BYTES_BUDGET = 1_500_000_000  # the synthetic training split, float32, in host memory


def check(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """GPU counts and precisions; BenchArgsError for what cannot run anywhere."""
    try:
        counts = sorted({int(v) for v in args.gpus.split(",") if v.strip()})
    except ValueError as exc:
        raise BenchArgsError(f"--gpus takes counts like 1,2,4, not {args.gpus!r}") from exc
    if not counts or counts[0] < 1:
        raise BenchArgsError(f"--gpus takes positive counts, not {args.gpus!r}")
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        raise BenchArgsError(f"--precision takes {', '.join(PRECISIONS)}, not {', '.join(bad)}")
    if len(set(precisions)) != len(precisions):
        raise BenchArgsError(f"--precision names a precision twice: {args.precision!r}")
    n = args.steps_per_execution
    if n < 1 or args.steps % n or args.warmup % n or args.steps < 1:
        raise BenchArgsError(
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
        raise BenchArgsError(
            "no GPU visible to TensorFlow; run `provision verify` or use --cpu-devices N"
        )
    return names, policy


def global_batch(args: argparse.Namespace, n: int, messages: list[str]) -> int:
    if not args.global_batch:
        return int(args.batch_per_replica * n)
    gb = args.global_batch - args.global_batch % n
    if gb == 0:
        raise BenchArgsError(f"--global-batch {args.global_batch} is smaller than {n} replicas")
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
        acc = accuracy(model, x_test, y_test, gb, tf, args.jit == "on")
        observed = trainer.observed()
        scale = loss_scale(trainer.optimizer_in_use())
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
        "loss_scale": scale,
        "at_chance": at_chance(acc, 1.0 / classes),
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
    except BenchArgsError as exc:
        out["outcome"] = {"error": str(exc)}
    except Skipped as exc:
        out["outcome"] = {"skipped": str(exc)}
    except Exception as exc:  # one configuration failing must not hide the others
        out["outcome"] = {"failed": failure_line(str(exc), type(exc).__name__)}
    if loaded is not None:
        with contextlib.suppress(Exception):
            out["software"] = software(loaded)
    save()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # TensorFlow's threads can make an orderly interpreter exit hang or crash


def failure_line(text: str, name: str) -> str:
    """One line for a configuration that failed. TensorFlow's errors open with a header such as
    'Graph execution error:', then the Python frames where the op was defined (indented), and say
    what went wrong last, before the node's own [[...]] line; Keras wraps the real exception
    after 'Exception encountered:'. The header (its first sentence) and that reason."""
    lines = [ANSI.sub("", ln).rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return name
    first = lines[0].strip()
    wrapped = any(ln.strip().endswith("Exception encountered:") for ln in lines[1:])
    if (first.endswith(":") or wrapped) and len(lines) > 1:
        said = [
            ln.strip()
            for ln in lines[1:]
            if not ln[0].isspace() and not ln.endswith(":") and not ln.startswith("Detected at")
        ]
        if said:
            head = first if len(first) < 80 else first.split(". ")[0] + "."
            first = f"{head} {said[-1]}"
    return first[:300]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
