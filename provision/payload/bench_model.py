"""The benchmark's workload: the learnable synthetic task (or user-supplied images), the models,
the mixed-precision policy, and a matmul timing."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from types import ModuleType
from typing import Any, Protocol, Sequence, Tuple

from .bench_schema import Task

# ResNet50's BatchNormalization follows the batches this much faster than Keras's 0.99, so that
# its moving statistics match the weights after a benchmark's few dozen steps and held-out
# accuracy (inference mode) means what was learnt. Only a constant of the graph changes.
BN_MOMENTUM = 0.5
PATTERN_GRID = 4  # each class is a smooth image: a 4 x 4 x 3 random grid, resized bilinearly
LEARNING_RATE = 0.01


class BenchError(Exception):
    """A configuration the benchmark cannot run (the message says why); exit status 1."""


def synthetic(tf: ModuleType, args: argparse.Namespace, n: int, seed: int) -> Tuple[Any, Any]:
    """n images of the synthetic task (NHWC, on the CPU) and their labels.

    Class c's images are its fixed smooth pattern plus unit Gaussian noise: the label is the
    pattern the image carries, recoverable (almost) without error, so a model that learns shows
    accuracy far above chance within a benchmark's steps, and one that does not stays at chance.
    """
    with tf.device("/CPU:0"):
        g = tf.random.Generator.from_seed(args.seed)
        grid = g.normal((args.classes, PATTERN_GRID, PATTERN_GRID, 3))
        patterns = tf.image.resize(grid, (args.image_size, args.image_size), method="bilinear")
        gen = tf.random.Generator.from_seed(seed)
        y = gen.uniform((n,), 0, args.classes, dtype=tf.int32)
        x = tf.gather(patterns, y) + gen.normal((n, args.image_size, args.image_size, 3))
    return x, y


def task(args: argparse.Namespace, n_train: int, n_test: int, classes: int) -> Task:
    """What the accuracy column measures, for the report."""
    if args.dataset:
        what = f"images from {args.dataset} (.npz x, y): 90 % train, the rest is held out"
        kind = "dataset"
    else:
        what = (
            f"synthetic: {classes} classes, each a fixed smooth pattern ({PATTERN_GRID}x"
            f"{PATTERN_GRID}x3 random values resized to the image) plus unit Gaussian noise; "
            "the label is the pattern an image carries"
        )
        kind = "synthetic"
    if args.data == "synthetic-tensor":
        what += "; training sees one fixed batch (--data synthetic-tensor)"
    what += (
        f"; accuracy: held-out images, inference mode, after the run's {args.warmup + args.steps}"
        " training steps"
    )
    if args.model == "resnet50":
        what += f" (BatchNormalization momentum {BN_MOMENTUM})"
    return {
        "kind": kind,
        "description": what,
        "classes": classes,
        "chance": round(1.0 / classes, 4),
        "train_images": n_train,
        "test_images": n_test,
    }


def load_dataset(tf: ModuleType, path: str) -> Tuple[Any, Any, Any, Any]:
    import numpy as np

    files = sorted(f for f in os.listdir(path) if f.endswith(".npz"))
    if not files:
        raise BenchError(f"{path} holds no .npz files with arrays x and y")
    xs, ys = [], []
    for f in files:
        with np.load(os.path.join(path, f)) as data:
            xs.append(data["x"].astype("float32"))
            ys.append(data["y"].astype("int32"))
    x, y = np.concatenate(xs), np.concatenate(ys)
    if x.max() > 1.5:
        x = x / 255.0
    cut = int(len(x) * 0.9)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def to_format(tf: ModuleType, x: Any, data_format: str) -> Any:
    """NHWC images as the model takes them: NCHW for channels_first."""
    if data_format == "channels_first":
        with tf.device("/CPU:0"):
            return tf.transpose(x, (0, 3, 1, 2))
    return x


def build_model(tf: ModuleType, args: argparse.Namespace, classes: int) -> Any:
    """The model, in the image data format Keras is set to (the caller sets args.data_format)."""
    keras = tf.keras
    size = args.image_size
    shape = (3, size, size) if args.data_format == "channels_first" else (size, size, 3)
    if args.model == "resnet50":
        base = keras.applications.ResNet50(weights=None, input_shape=shape, classes=classes)
        for layer in base.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = BN_MOMENTUM
        inputs = keras.Input(shape)
        # The classifier's softmax stays float32 under mixed precision (numerical stability).
        logits = base(inputs)
        outputs = keras.layers.Activation("linear", dtype="float32")(logits)
        return keras.Model(inputs, outputs)
    if args.model == "mlp":
        # Wide dense layers: matmul-bound, the case where tensor-core precisions can pay off.
        layers = [keras.Input(shape), keras.layers.Flatten()]
        layers += [keras.layers.Dense(args.width, activation="relu") for _ in range(4)]
        layers += [keras.layers.Dense(classes), keras.layers.Activation("softmax", dtype="float32")]
        return keras.Sequential(layers)
    return keras.Sequential(
        [
            keras.Input(shape),
            keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu", padding="same"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(classes),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )


class Layered(Protocol):
    """A Keras model as compute_dtype reads it: its layers (a nested model has its own)."""

    @property
    def layers(self) -> Sequence[object]: ...


def compute_dtype(model: Layered) -> str:
    """The dtype the first layer with weights computes in (what the precision policy did)."""
    stack = list(model.layers)
    while stack:
        layer = stack.pop(0)
        inner = getattr(layer, "layers", None)
        if inner:
            stack = list(inner) + stack
        elif getattr(layer, "kernel", None) is not None:
            return str(getattr(layer, "compute_dtype", "") or "")
    return ""


def set_policy(tf: ModuleType, name: str) -> None:
    mp = getattr(tf.keras, "mixed_precision", None)
    if mp is None:  # pragma: no cover - very old Keras
        raise BenchError("this TensorFlow has no Keras mixed precision")
    mp.set_global_policy(name)


def matmul_tflops(tf: ModuleType, device: str, precision: str, n: int) -> float:
    dtype = {"float32": tf.float32, "mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}[
        precision
    ]
    with tf.device(device):
        a = tf.random.normal((n, n), dtype=tf.float32)
        b = tf.random.normal((n, n), dtype=tf.float32)
        a, b = tf.cast(a, dtype), tf.cast(b, dtype)

        @tf.function  # type: ignore[untyped-decorator]
        def mm(x: Any, y: Any) -> Any:
            return tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1], tf.float32))

        mm(a, b).numpy()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(4):
                r = mm(a, b)
            r.numpy()
            times.append((time.perf_counter() - t0) / 4)
    return 2 * n**3 / statistics.median(times) / 1e12
