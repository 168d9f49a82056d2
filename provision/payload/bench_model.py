"""The benchmark's workload: synthetic or user-supplied images, the models, and a matmul timing."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any


class BenchError(Exception):
    """A configuration the benchmark cannot run (the message says why); exit status 1."""


def synthetic(tf: Any, args: argparse.Namespace, n: int, seed: int) -> tuple[Any, Any]:
    """Learnable synthetic images: each class adds its own fixed pattern to noise."""
    g = tf.random.Generator.from_seed(args.seed)
    patterns = g.normal((args.classes, args.image_size, args.image_size, 3))
    gen = tf.random.Generator.from_seed(seed)
    y = gen.uniform((n,), 0, args.classes, dtype=tf.int32)
    x = tf.gather(patterns, y) * 0.5 + gen.normal((n, args.image_size, args.image_size, 3))
    return x, y


def load_dataset(tf: Any, path: str) -> tuple[Any, Any, Any, Any]:
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


def build_model(tf: Any, args: argparse.Namespace, classes: int) -> Any:
    keras = tf.keras
    shape = (args.image_size, args.image_size, 3)
    if args.model == "resnet50":
        base = keras.applications.ResNet50(weights=None, input_shape=shape, classes=classes)
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


def set_policy(tf: Any, name: str) -> None:
    mp = getattr(tf.keras, "mixed_precision", None)
    if mp is None:  # pragma: no cover - very old Keras
        raise BenchError("this TensorFlow has no Keras mixed precision")
    mp.set_global_policy(name)


def matmul_tflops(tf: Any, device: str, precision: str, n: int) -> float:
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
