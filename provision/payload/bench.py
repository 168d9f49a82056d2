"""Multi-GPU scaling and mixed-precision benchmark, run inside an environment (stdlib + TensorFlow;
matplotlib only for --plot).

For each precision and GPU count it trains the same model with MirroredStrategy on synthetic (or
user-supplied) data and reports images/s after warm-up, time per epoch, held-out accuracy, speed-up
over 1-GPU float32 and scaling efficiency; plus a compute-bound matmul row per precision, so tensor
core use shows even where the model cannot show it. `provision bench NAME` runs it with the
environment's interpreter from the payload's zipapp; it is also usable on its own:

    python -I payload.pyz bench --gpus 1,2 --precision float32,mixed_float16 --json r.json

Report schema (version 1): {"schema": 1, "tool": "provision-bench", "tensorflow": ..., "devices":
[...], "settings": {...}, "matmul": [{"precision", "n", "tflops"}], "runs": [{"gpus", "precision",
"global_batch", "images_per_s", "step_ms", "epoch_s", "accuracy", "speedup", "efficiency"}],
"failed": [{"gpus", "precision", "error"}], "messages": [...]}. Exit 0 when at least one
configuration ran, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from .bench_model import (
    BenchError,
    build_model,
    load_dataset,
    matmul_tflops,
    set_policy,
    synthetic,
)

SCHEMA = 1
EVENT = "provision-bench-event "  # a line on stderr: this prefix, then one JSON object


def event(**fields: Any) -> None:
    """Progress for whoever runs the benchmark (`provision bench` shows it): which configuration
    starts, how long it will take once its first steps are timed, how it ended."""
    print(EVENT + json.dumps(fields), file=sys.stderr, flush=True)


PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
MODELS = ("resnet50", "small_cnn", "mlp")


def parse_args(argv: list[str] | None = None, prog: str = "bench") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default="1", help="comma-separated GPU counts, e.g. 1,2,4")
    p.add_argument("--precision", default="float32,mixed_float16,mixed_bfloat16")
    p.add_argument("--model", default="resnet50", choices=MODELS)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--width", type=int, default=4096, help="hidden width of the mlp model")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-per-replica", type=int, default=128)
    p.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="fixed global batch; adjusted down to a multiple of the replica count",
    )
    p.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    p.add_argument("--epoch-images", type=int, default=50_000, help="images per epoch for epoch_s")
    p.add_argument(
        "--train-epochs",
        type=int,
        default=1,
        help="passes over the synthetic training split before measuring accuracy",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help="directory of .npz files with x (N,H,W,3) uint8/float and y (N,) int",
    )
    p.add_argument("--jit", action="store_true", help="compile the model with XLA")
    p.add_argument(
        "--matmul-n", type=int, default=None, help="matmul size (default 8192 GPU, 1024 CPU)"
    )
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        help="use N virtual CPU devices instead of GPUs (tests, hosts without a GPU)",
    )
    p.add_argument("--json", dest="json_out", default=None, help="write the report here")
    p.add_argument("--plot", default=None, help="write a speed-up PNG here (needs matplotlib)")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args(argv)


def _ints(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError as exc:
        raise BenchError(f"--gpus takes counts like 1,2,4, not {text!r}") from exc
    if not values or values[0] < 1:
        raise BenchError(f"--gpus takes positive counts, not {text!r}")
    return values


def setup_devices(tf: Any, args: argparse.Namespace, counts: list[int]) -> list[str]:
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
    if counts[-1] > len(names):
        kind = "virtual CPU devices" if args.cpu_devices else "GPUs"
        raise BenchError(f"asked for {counts[-1]} {kind} but this host has {len(names)}")
    return names


def run_config(
    tf: Any,
    args: argparse.Namespace,
    devices: list[str],
    precision: str,
    data: tuple[Any, Any, Any, Any],
    messages: list[str],
) -> dict[str, Any]:
    n = len(devices)
    if args.global_batch:
        gb = args.global_batch - args.global_batch % n
        if gb == 0:
            raise BenchError(f"--global-batch {args.global_batch} is smaller than {n} replicas")
        if gb != args.global_batch:
            messages.append(
                f"global batch {args.global_batch} is not divisible by {n} replicas; using {gb}"
            )
    else:
        gb = args.batch_per_replica * n
    set_policy(tf, precision)
    strategy = tf.distribute.MirroredStrategy(
        devices=devices,
        cross_device_ops=None if not args.cpu_devices else tf.distribute.ReductionToOneDevice(),
    )
    x_train, y_train, x_test, y_test = data
    classes = int(max(int(tf.reduce_max(y_train)), int(tf.reduce_max(y_test)))) + 1
    with strategy.scope():
        model = build_model(tf, args, classes)
        model.compile(
            optimizer=tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
            jit_compile=bool(args.jit),
        )
    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096, seed=args.seed)
    ds = ds.repeat().batch(gb, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    class Timer(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []
            self.t0 = 0.0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.times.append(time.perf_counter() - self.t0)

    timer = Timer()
    total_steps = args.warmup + args.steps

    class Estimate(tf.keras.callbacks.Callback):  # type: ignore[misc]
        """After the second step (the first compiles), the rest at the pace of the second."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 1 and total_steps > 2 and len(timer.times) >= 2:
                left = timer.times[1] * (total_steps - 2)
                event(event="estimate", gpus=n, precision=precision, seconds=round(left, 1),
                      step_s=round(timer.times[1], 4))  # fmt: skip

    model.fit(
        ds,
        steps_per_epoch=args.warmup + args.steps,
        epochs=1,
        verbose=0,
        callbacks=[timer, Estimate()],
        shuffle=False,
    )
    timed = timer.times[args.warmup :]
    step_s = statistics.median(timed) if timed else float("nan")
    steps_per_pass = max(1, len(x_train) // gb)
    if args.train_epochs > 1:
        model.fit(
            ds,
            steps_per_epoch=steps_per_pass,
            epochs=args.train_epochs - 1,
            verbose=0,
            shuffle=False,
        )
    _, acc = model.evaluate(x_test, y_test, batch_size=gb, verbose=0)
    tf.keras.backend.clear_session()
    set_policy(tf, "float32")
    ips = gb / step_s
    return {
        "gpus": n,
        "precision": precision,
        "global_batch": gb,
        "step_ms": round(step_s * 1000, 3),
        "images_per_s": round(ips, 1),
        "epoch_s": round(args.epoch_images / ips, 2),
        "accuracy": round(float(acc), 4),
    }


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    counts = sorted({r["gpus"] for r in report["runs"]})
    ax.plot(counts, counts, "k--", linewidth=1, label="ideal")
    for prec in dict.fromkeys(r["precision"] for r in report["runs"]):
        rows = sorted(
            (r for r in report["runs"] if r["precision"] == prec), key=lambda r: r["gpus"]
        )
        ax.plot([r["gpus"] for r in rows], [r["speedup"] for r in rows], "o-", label=prec)
    s = report["settings"]
    ax.set_title(
        f"{s['model']} {s['image_size']}px, batch {s['batch_per_replica']}/replica, "
        f"TF {report['tensorflow']}",
        fontsize=9,
    )
    ax.set_xlabel("devices" if s.get("cpu_devices") else "GPUs")
    ax.set_ylabel("speed-up over 1 device, float32")
    ax.set_xticks(counts)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None, prog: str = "bench") -> int:
    args = parse_args(argv, prog)
    try:
        counts = _ints(args.gpus)
        precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
        bad = [p for p in precisions if p not in PRECISIONS]
        if bad or not precisions:
            raise BenchError(f"--precision takes {', '.join(PRECISIONS)}, not {', '.join(bad)}")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        devices = setup_devices(tf, args, counts)
        messages: list[str] = []
        if args.dataset:
            data = load_dataset(tf, args.dataset)
        else:
            per_pass = max(args.batch_per_replica * counts[-1] * 4, 512)
            xtr, ytr = synthetic(tf, args, per_pass, args.seed + 1)
            xte, yte = synthetic(tf, args, max(per_pass // 4, 256), args.seed + 2)
            data = (xtr, ytr, xte, yte)
        n = args.matmul_n or (1024 if args.cpu_devices else 8192)
        report: dict[str, Any] = {
            "schema": SCHEMA,
            "tool": "provision-bench",
            "tensorflow": tf.__version__,
            "devices": devices,
            "settings": {k: v for k, v in vars(args).items() if k not in ("json_out", "plot")},
            "matmul": [
                {"precision": p, "n": n, "tflops": round(matmul_tflops(tf, devices[0], p, n), 2)}
                for p in precisions
            ],
            "runs": [],
            "messages": messages,
        }
        failed: list[dict[str, Any]] = []
        configs = [(prec, c) for prec in precisions for c in counts]
        for index, (prec, c) in enumerate(configs, start=1):
            event(event="config", index=index, total=len(configs), gpus=c, precision=prec)
            try:
                row = run_config(tf, args, devices[:c], prec, data, messages)
            except BenchError:
                raise
            except Exception as exc:  # one configuration failing must not hide the others
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                failed.append({"gpus": c, "precision": prec, "error": first[:300]})
                print(f"  {c} x {prec:<15} failed: {first[:120]}", file=sys.stderr, flush=True)
                tf.keras.backend.clear_session()
                set_policy(tf, "float32")
                continue
            report["runs"].append(row)
            print(
                f"  {c} x {prec:<15} {row['images_per_s']:>10.1f} img/s  acc {row['accuracy']:.3f}",
                file=sys.stderr,
                flush=True,
            )
        report["failed"] = failed
        if not report["runs"]:
            raise BenchError(f"every configuration failed; first: {failed[0]['error']}")
        base = next(
            (r for r in report["runs"] if r["precision"] == "float32" and r["gpus"] == 1), None
        )
        if base is None:
            base = min(report["runs"], key=lambda r: (r["gpus"], r["precision"]))
            messages.append(f"speed-up is relative to {base['gpus']} x {base['precision']}")
        for r in report["runs"]:
            r["speedup"] = round(r["images_per_s"] / base["images_per_s"], 3)
            # Scaling efficiency compares a precision with its own smallest run, not with float32.
            own = min(
                (o for o in report["runs"] if o["precision"] == r["precision"]),
                key=lambda o: o["gpus"],
            )
            r["efficiency"] = round(
                (r["images_per_s"] / own["images_per_s"]) / (r["gpus"] / own["gpus"]), 3
            )
    except BenchError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=2)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    if args.plot:
        plot(report, args.plot)
    return 0
