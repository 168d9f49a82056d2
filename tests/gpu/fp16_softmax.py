"""Why mixed_float16 trained ResNet50 to chance accuracy: a minimal reproduction.

ResNet50 on the benchmark's synthetic task (10 classes, each a smooth pattern under unit noise),
SGD with momentum, model.fit on one GPU under mixed_float16, once with the classifier's softmax
inside ResNet50 (it then runs in float16, as the benchmark built it before the fix) and once with
logits out of ResNet50 and the softmax in float32 (Keras's mixed-precision guide), each with
Keras's own BatchNormalization and with the fused one. Per step it records the loss and the
LossScaleOptimizer's dynamic loss scale (it halves at every step whose gradients are not finite,
and that step's update is skipped); at the end, held-out accuracy. One JSON object on stdout.

    PYTHONPATH=CHECKOUT ENV/bin/python tests/gpu/fp16_softmax.py [--steps 30] [--batch 64]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np
import tensorflow as tf

from provision.payload import bench_model
from provision.payload.bench_train import loss_scale


def one(softmax: str, batchnorm: str, ns: argparse.Namespace) -> dict[str, object]:
    keras = tf.keras
    keras.mixed_precision.set_global_policy("mixed_float16")
    args = argparse.Namespace(
        seed=0, classes=10, image_size=ns.image_size, batchnorm=batchnorm, model="resnet50",
        data_format="channels_last",
    )  # fmt: skip
    shape = (ns.image_size, ns.image_size, 3)
    inside = "softmax" if softmax == "float16" else None
    base = keras.applications.ResNet50(
        weights=None, input_shape=shape, classes=10, classifier_activation=inside
    )
    if batchnorm != "default":
        base = keras.models.clone_model(
            base, clone_function=bench_model.batchnorm_as(tf, batchnorm)
        )
    for layer in base.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = bench_model.BN_MOMENTUM
    inputs = keras.Input(shape)
    top = "linear" if softmax == "float16" else "softmax"
    model = keras.Model(inputs, keras.layers.Activation(top, dtype="float32")(base(inputs)))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=bench_model.LEARNING_RATE, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    x, y = bench_model.synthetic(tf, args, ns.batch * 8, 1)
    xt, yt = bench_model.synthetic(tf, args, 512, 2)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=0).repeat()
    ds = ds.batch(ns.batch, drop_remainder=True).prefetch(2)
    losses: list[float] = []
    scales: list[float | None] = []

    class Watch(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            losses.append(round(float((logs or {}).get("loss", float("nan"))), 4))  # type: ignore[attr-defined]
            scales.append(loss_scale(model.optimizer))

    start = time.perf_counter()
    model.fit(ds, steps_per_epoch=ns.steps, epochs=1, verbose=0, callbacks=[Watch()])
    p = model.predict(xt, batch_size=ns.batch, verbose=0)
    acc = float(np.mean(np.argmax(p, axis=-1) == np.asarray(yt)))
    halvings = sum(
        1
        for i in range(1, len(scales))
        if None not in scales[i - 1 : i + 1] and scales[i] < scales[i - 1]  # type: ignore[operator]
    )
    keras.backend.clear_session()
    return {
        "softmax": softmax,
        "batchnorm": batchnorm,
        "accuracy": round(acc, 4),
        "steps": ns.steps,
        "scale_halvings": halvings,
        "loss_scale_first": scales[0] if scales else None,
        "loss_scale_last": scales[-1] if scales else None,
        "loss": losses,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batchnorm", default="default,fused")
    ns = p.parse_args()
    runs = [
        one(softmax, bn, ns) for bn in ns.batchnorm.split(",") for softmax in ("float16", "float32")
    ]
    print(
        json.dumps(
            {
                "tensorflow": tf.__version__,
                "keras": tf.keras.__version__ if hasattr(tf.keras, "__version__") else None,
                "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
                "runs": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
