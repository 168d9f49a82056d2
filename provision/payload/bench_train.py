"""One configuration's training, timed: Keras's model.fit or a tf.function loop of our own, fed by
a tf.data pipeline or one fixed batch, with or without XLA, N steps per execution.

Every execution of the training function (steps_per_execution steps) ends with its loss read
back, so its time is the device's, not the time to queue it. The first execution traces and
compiles and is never timed; the median of the executions after the warm-up gives the step time.
After the second execution an estimate of the rest goes out as a progress event, and a
configuration estimated past --max-seconds stops there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict

from .bench_model import LEARNING_RATE
from .bench_schema import EVENT, Config

FAULT_VAR = "PROVISION_BENCH_FAULT"  # tests: hang-first-step:<precision>


class Timing(TypedDict):
    """A configuration's clock: the first step, the median step after warm-up, and the count."""

    first_step_s: float
    step_s: float
    executions: int
    timed_steps: int
    estimate_s: Optional[float]


class Observed(TypedDict):
    """What the training really did: XLA for the step and the optimizer, the input's dataset
    ops, and how often our own loop's function was traced (None for Keras's fit)."""

    xla: bool
    optimizer_xla: Optional[bool]
    pipeline: List[str]
    custom_traces: Optional[int]


def event(**fields: object) -> None:
    """Progress for whoever runs the benchmark (`provision bench` shows it): which configuration
    starts, how long it will take once its first steps are timed, how it ended."""
    print(EVENT + json.dumps(fields), file=sys.stderr, flush=True)


class Skipped(Exception):
    """The configuration stopped on purpose (the message says why): not a failure."""


class Clock:
    """The end of each execution: (last step index, time); the probe and the summary."""

    def __init__(self, args: argparse.Namespace, label: Config, extra_steps: float) -> None:
        self.args = args
        self.label = label  # gpus, precision: which configuration the events are about
        self.extra_steps = extra_steps  # evaluation and extra training, in training steps
        self.total = args.warmup + args.steps
        self.start = 0.0
        self.marks: List[Tuple[int, float]] = []
        self.estimate_s: Optional[float] = None
        self.stop_reason = ""

    def begin(self) -> None:
        """The first step starts: it traces and compiles (the parent bounds it, --max-seconds)."""
        event(event="first_step_start", **self.label)
        self.start = time.perf_counter()
        kind, _, which = os.environ.get(FAULT_VAR, "").partition(":")
        if kind == "hang-first-step" and which == self.label["precision"]:
            time.sleep(10**6)  # tests: a compile that does not end

    def mark(self, end_step: int) -> bool:
        """Record an execution's end; False when the configuration must stop here."""
        self.marks.append((end_step, time.perf_counter()))
        if len(self.marks) == 1:
            event(event="first_step", seconds=round(self.marks[0][1] - self.start, 2), **self.label)
        if len(self.marks) != 2:
            return True
        (s0, t0), (s1, t1) = self.marks
        pace = (t1 - t0) / max(1, s1 - s0)
        left = pace * (self.total - 1 - s1 + self.extra_steps)
        self.estimate_s = round((t1 - self.start) + left, 1)
        event(event="estimate", seconds=round(left, 1), step_s=round(pace, 4), **self.label)
        limit = float(self.args.max_seconds or 0)
        if limit and self.estimate_s > limit:
            self.stop_reason = (
                f"estimated {self.estimate_s:.0f} s ({pace:.3f} s a step) exceeds --max-seconds "
                f"{limit:g}"
            )
            return False
        return True

    def summary(self) -> Timing:
        """first_step_s, step_s (median after warm-up), executions, timed_steps."""
        if not self.marks:
            raise Skipped("no step finished")
        timed = [
            ((t1 - t0) / (s1 - s0), s1 - s0)
            for (s0, t0), (s1, t1) in zip(self.marks, self.marks[1:])
            if s0 + 1 >= self.args.warmup and s1 > s0
        ]
        if not timed:
            raise Skipped("too few executions to time: raise --steps")
        return {
            "first_step_s": round(self.marks[0][1] - self.start, 3),
            "step_s": statistics.median(t for t, _ in timed),
            "executions": len(self.marks),
            "timed_steps": sum(n for _, n in timed),
            "estimate_s": self.estimate_s,
        }


def _sync(value: Any) -> None:
    """Wait for the device: reading a result back needs the step that made it."""
    if value is not None:
        with contextlib.suppress(TypeError, ValueError):
            float(value)


def pipeline(tf: ModuleType, args: argparse.Namespace, x: Any, y: Any, gb: int) -> Any:
    """The training input as a tf.data.Dataset: shuffled and batched, or one batch repeated."""
    if args.data == "synthetic-tensor":
        return tf.data.Dataset.from_tensors((x[:gb], y[:gb])).repeat()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=args.seed)
    return ds.repeat().batch(gb, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def pipeline_ops(tf: ModuleType, ds: Any) -> List[str]:
    """The dataset ops the input really runs (from its graph): what --data changed."""
    try:
        graph = tf.compat.v1.GraphDef()
        graph.ParseFromString(tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor).numpy())
        return [n.op for n in graph.node if "Dataset" in n.op]
    except Exception:  # a private attribute: record nothing rather than fail the run
        return []


def _jit_arg(args: argparse.Namespace) -> Dict[str, bool]:
    return {} if args.jit == "auto" else {"jit_compile": args.jit == "on"}


def optimizer(tf: ModuleType, args: argparse.Namespace) -> Any:
    """SGD with momentum; --optimizer-jit on/off sets Keras 2's jit_compile (its own XLA update,
    on by default where XLA can run). Keras 3's optimizers have no such switch: their update is
    compiled only as part of an XLA-compiled step (--jit on), and the option is refused there."""
    kwargs: Dict[str, Any] = {"learning_rate": LEARNING_RATE, "momentum": 0.9}
    if args.optimizer_jit != "auto":
        if hasattr(tf.keras, "ops"):
            raise ValueError(
                "--optimizer-jit: Keras 3's optimizers have no jit_compile; their update is "
                "XLA-compiled only with the step (--jit on)"
            )
        kwargs["jit_compile"] = args.optimizer_jit == "on"
    return tf.keras.optimizers.SGD(**kwargs)


class FitTrainer:
    """Keras's own loop: model.compile(jit_compile=..., steps_per_execution=...) and model.fit."""

    def __init__(
        self, tf: ModuleType, args: argparse.Namespace, model: Any, data: Any, gb: int
    ) -> None:
        self.tf, self.args, self.model = tf, args, model
        model.compile(
            optimizer=optimizer(tf, args),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
            steps_per_execution=args.steps_per_execution,
            **_jit_arg(args),
        )
        self.ds = pipeline(tf, args, data[0], data[1], gb)

    def train(self, steps: int, clock: Optional[Clock]) -> None:
        tf = self.tf

        class Marks(tf.keras.callbacks.Callback):  # type: ignore[misc,name-defined]
            def on_train_begin(self, logs: Any = None) -> None:
                if clock is not None:
                    clock.begin()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                _sync((logs or {}).get("loss"))
                if clock is not None and not clock.mark(int(batch)):
                    self.model.stop_training = True

        self.model.fit(
            self.ds, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[Marks()], shuffle=False
        )

    def optimizer_in_use(self) -> Any:
        return self.model.optimizer

    def observed(self) -> Observed:
        optimizer = self.model.optimizer
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        xla = getattr(inner, "jit_compile", None)
        return {
            "xla": bool(getattr(self.model, "jit_compile", False)),
            "optimizer_xla": None if xla is None else bool(xla),
            "pipeline": pipeline_ops(self.tf, self.ds),
            "custom_traces": None,
        }


class CustomTrainer:
    """Our own loop: per replica, the gradients in a tf.function (XLA-compiled with --jit on),
    the optimizer's update outside it (it needs the strategy's merge_call); N steps per call."""

    def __init__(
        self,
        tf: ModuleType,
        args: argparse.Namespace,
        model: Any,
        data: Any,
        gb: int,
        strategy: Any,
        mixed16: bool,
    ) -> None:
        self.tf, self.args, self.model, self.strategy = tf, args, model, strategy
        opt = optimizer(tf, args)
        if mixed16:
            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
        self.optimizer = opt
        opt.build(model.trainable_variables)  # its variables, mirrored, before tracing
        self.ds = None
        if args.data == "synthetic-tensor":
            x, y = data[0][:gb], data[1][:gb]
            per = gb // strategy.num_replicas_in_sync

            def piece(ctx: Any) -> Any:  # each replica's share, copied onto its device once
                part = slice(ctx.replica_id_in_sync_group * per, None)
                return tf.identity(x[part][:per]), tf.identity(y[part][:per])

            self.batch = strategy.experimental_distribute_values_from_function(piece)
        else:
            self.ds = pipeline(tf, args, data[0], data[1], gb)
            self.iterator = iter(strategy.experimental_distribute_dataset(self.ds))
        self.grads = self._gradients(gb)
        self.step = self._step_function()

    def _gradients(self, gb: int) -> Callable[..., Any]:
        tf, model, optimizer = self.tf, self.model, self.optimizer

        def grads(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                p = model(x, training=True)
                per_example = tf.keras.losses.sparse_categorical_crossentropy(y, p)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=gb)
                scaled = loss
                if hasattr(optimizer, "get_scaled_loss"):  # Keras 2's LossScaleOptimizer
                    scaled = optimizer.get_scaled_loss(loss)
                elif hasattr(optimizer, "scale_loss"):  # Keras 3's; its apply() unscales
                    scaled = optimizer.scale_loss(loss)
            g = tape.gradient(scaled, model.trainable_variables)
            if hasattr(optimizer, "get_unscaled_gradients"):
                g = optimizer.get_unscaled_gradients(g)
            return loss, g

        if self.args.jit == "auto":
            return grads
        return tf.function(grads, jit_compile=self.args.jit == "on")  # type: ignore[no-any-return]

    def _step_function(self) -> Any:
        tf, strategy, model, optimizer = self.tf, self.strategy, self.model, self.optimizer
        n = self.args.steps_per_execution
        grads = self.grads

        def replica_step(x: Any, y: Any) -> Any:
            loss, g = grads(x, y)
            optimizer.apply_gradients(zip(g, model.trainable_variables))
            return loss

        def one(x: Any, y: Any) -> Any:
            per_replica = strategy.run(replica_step, args=(x, y))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        if self.ds is None:

            @tf.function  # type: ignore[untyped-decorator]
            def fixed(batch: Any) -> Any:
                loss = tf.constant(0.0)
                for _ in tf.range(n):
                    loss = one(batch[0], batch[1])
                return loss

            return fixed

        @tf.function  # type: ignore[untyped-decorator]
        def fed(iterator: Any) -> Any:
            loss = tf.constant(0.0)
            for _ in tf.range(n):
                x, y = next(iterator)
                loss = one(x, y)
            return loss

        return fed

    def train(self, steps: int, clock: Optional[Clock]) -> None:
        if clock is not None:
            clock.begin()
        n = self.args.steps_per_execution
        source = self.batch if self.ds is None else self.iterator
        for done in range(n, steps + n, n):
            _sync(self.step(source))
            if clock is not None and not clock.mark(min(done, steps) - 1):
                return

    def optimizer_in_use(self) -> Any:
        return self.optimizer

    def observed(self) -> Observed:
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        xla = getattr(inner, "jit_compile", None)
        return {
            "xla": self.args.jit == "on",
            "optimizer_xla": None if xla is None else bool(xla),
            "pipeline": [] if self.ds is None else pipeline_ops(self.tf, self.ds),
            "custom_traces": int(self.step.experimental_get_tracing_count()),
        }


def accuracy(model: Any, x: Any, y: Any, batch: int, tf: Any = None, jit: bool = False) -> float:
    """Held-out accuracy in inference mode. With --jit on, inference is XLA-compiled as training
    was (a model that only XLA can run here, channels_first on the CPU, runs the same way)."""
    import numpy as np

    if jit and tf is not None:
        infer = tf.function(lambda t: model(t, training=False), jit_compile=True)
        parts = [np.asarray(infer(x[i : i + batch])) for i in range(0, len(x), batch)]
        p = np.concatenate(parts) if parts else np.zeros((0,))
    else:
        p = model.predict(x, batch_size=batch, verbose=0)
    return float(np.mean(np.argmax(p, axis=-1) == np.asarray(y)))


def loss_scale(optimizer: Any) -> Optional[float]:
    """A LossScaleOptimizer's dynamic loss scale now (mixed_float16), else None. It starts at
    2**15 and halves at every step whose gradients are not finite (the step is skipped): a scale
    far below its start says most steps were skipped."""
    for name in ("dynamic_scale", "loss_scale"):  # Keras 3, Keras 2
        value = getattr(optimizer, name, None)
        if value is None or callable(value):
            continue
        try:
            return float(value.numpy() if hasattr(value, "numpy") else value)
        except (TypeError, ValueError):
            return None
    return None
