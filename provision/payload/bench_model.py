"""The benchmark's workload: the learnable synthetic task (or user-supplied images), the models,
the mixed-precision policy, and a matmul timing."""

from __future__ import annotations

import argparse
import os
import statistics
import time
import zipfile
from types import ModuleType
from typing import Any, Dict, List, Protocol, Sequence, Tuple

from .bench_schema import BenchTask

# ResNet50's BatchNormalization follows the batches this much faster than Keras's 0.99, so that
# its moving statistics match the weights after a benchmark's few dozen steps and held-out
# accuracy (inference mode) means what was learnt. Only a constant of the graph changes.
BN_MOMENTUM = 0.5
PATTERN_GRID = 4  # each class is a smooth image: a 4 x 4 x 3 random grid, resized bilinearly
LEARNING_RATE = 0.01


class BenchArgsError(Exception):
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


def task(args: argparse.Namespace, n_train: int, n_test: int, classes: int) -> BenchTask:
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
        raise BenchArgsError(f"{path} holds no .npz files with arrays x and y")
    xs, ys = [], []
    for f in files:
        try:
            with np.load(os.path.join(path, f)) as data:
                xs.append(data["x"].astype("float32"))
                ys.append(data["y"].astype("int32"))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            where = os.path.join(path, f)
            raise BenchArgsError(f"{where} is not a .npz of arrays x and y: {exc}") from None
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
        # The classifier gives logits; the softmax runs in float32 on top. Inside ResNet50 it
        # ran in the policy's dtype: in float16 a wrong, confident prediction's probability
        # underflows, the loss's gradient overflows at every step, the loss scale falls step
        # after step, every update is skipped and the model stays at chance (tests/gpu/
        # fp16_softmax.py measured it; Keras's mixed-precision guide asks for a float32 softmax).
        base = keras.applications.ResNet50(
            weights=None, input_shape=shape, classes=classes, classifier_activation=None
        )
        if args.batchnorm != "default":
            base = keras.models.clone_model(base, clone_function=batchnorm_as(tf, args.batchnorm))
        for layer in base.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = BN_MOMENTUM
        inputs = keras.Input(shape)
        logits = base(inputs)
        outputs = keras.layers.Activation("softmax", dtype="float32")(logits)
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


def keras3(tf: ModuleType) -> bool:
    return hasattr(tf.keras, "ops")  # Keras 2 (tf.keras of TF <= 2.15) has no keras.ops


def batchnorm_as(tf: ModuleType, how: str) -> Any:
    """clone_model's clone_function: each BatchNormalization as --batchnorm asks (fused, unfused,
    none: a linear activation in its place), every other layer a copy of itself."""
    keras = tf.keras
    norm = keras.layers.BatchNormalization
    fused_class = fused_batchnorm_class(tf) if keras3(tf) and how == "fused" else None

    def clone(layer: Any) -> Any:
        if not isinstance(layer, norm):
            return layer.__class__.from_config(layer.get_config())
        config = layer.get_config()
        if how == "none":
            return no_normalization_class(tf)(name=config["name"])
        if fused_class is not None:
            return fused_class.from_config(config)
        if not keras3(tf):  # Keras 2 chooses; Keras 3 has one, unfused, implementation
            config["fused"] = how == "fused"
        return norm.from_config(config)

    return clone


def no_normalization_class(tf: ModuleType) -> Any:
    """A layer that passes its input on, called as BatchNormalization is (training, mask)."""

    class NoNormalization(tf.keras.layers.Layer):  # type: ignore[misc,name-defined]
        def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
            return inputs

    return NoNormalization


def fused_batchnorm_class(tf: ModuleType) -> Any:
    """Keras 3's BatchNormalization computing with TensorFlow's fused kernel (cuDNN's on a GPU),
    as Keras 2 does: 4-D inputs normalised over the channel axis, in the input's dtype, with the
    moving statistics updated as Keras 3 updates them."""
    base = tf.keras.layers.BatchNormalization

    class FusedBatchNormalization(base):  # type: ignore[misc,valid-type]
        def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
            axis = self.axis if isinstance(self.axis, int) else self.axis[0]
            rank = len(inputs.shape)
            renorm = getattr(self, "renorm", False)  # Keras 3.13 has no renorm
            if rank != 4 or axis not in (1, 3, -1) or mask is not None or renorm:
                return super().call(inputs, training=training, mask=mask)
            fmt = "NCHW" if axis == 1 else "NHWC"
            channels = int(inputs.shape[axis])
            gamma = tf.convert_to_tensor(self.gamma) if self.scale else tf.ones((channels,))
            beta = tf.convert_to_tensor(self.beta) if self.center else tf.zeros((channels,))
            mean = tf.convert_to_tensor(self.moving_mean)
            variance = tf.convert_to_tensor(self.moving_variance)
            if training and self.trainable:
                y, batch_mean, batch_var = tf.compat.v1.nn.fused_batch_norm(
                    inputs, gamma, beta, epsilon=self.epsilon, data_format=fmt, is_training=True
                )
                m = self.momentum
                self.moving_mean.assign(mean * m + batch_mean * (1.0 - m))
                self.moving_variance.assign(variance * m + batch_var * (1.0 - m))
                return y
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                inputs, gamma, beta, mean=mean, variance=variance, epsilon=self.epsilon,
                data_format=fmt, is_training=False,
            )  # fmt: skip
            return y

    return FusedBatchNormalization


def batchnorm_kinds(tf: ModuleType, model: Any) -> List[str]:
    """The model's BatchNormalization layers by kind and count, e.g. "BatchNormalization(fused=
    True) x53" (the report: what --batchnorm did; [] when there are none)."""
    counts: Dict[str, int] = {}
    stack = list(model.layers)
    while stack:
        layer = stack.pop()
        stack.extend(getattr(layer, "layers", None) or [])
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            fused = getattr(layer, "fused", None)
            kind = type(layer).__name__ + ("" if fused is None else f"(fused={fused})")
            counts[kind] = counts.get(kind, 0) + 1
    return [f"{kind} x{n}" for kind, n in sorted(counts.items())]


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
        raise BenchArgsError("this TensorFlow has no Keras mixed precision")
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
