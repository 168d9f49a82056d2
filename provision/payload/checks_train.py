"""Checks of training: MirroredStrategy over every device, Keras mixed precision (float16 with a
loss scale, bfloat16), and an XLA-compiled function."""

import time
from typing import Any, Optional, Tuple

from .checks_gpu import rel_error
from .context import Ctx, dist_version
from .judgements import version_tuple
from .report import Result, result
from .status import FAIL, PASS


def _mirrored_step(ctx: Ctx) -> Result:
    import numpy as np

    tf = ctx.tf
    if ctx.gpus:
        devices = [f"/gpu:{i}" for i in range(len(ctx.gpus))]
    else:
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(devices) < 2:
            return result(
                FAIL,
                "only {} CPU device: the two virtual CPU devices were not configured before "
                "TensorFlow initialised ({})".format(
                    len(devices), ctx.setup.get("virtual_cpus_error")
                ),
                devices=devices,
            )
    strategy = tf.distribute.MirroredStrategy(devices)
    n = int(strategy.num_replicas_in_sync)
    try:
        ops = type(strategy.extended._cross_device_ops).__name__
    except AttributeError:
        ops = None
    dim, batch, lr, steps = 8, 16, 0.1, 3
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((n, batch, dim)).astype(np.float32)
    ys = rng.standard_normal((n, batch, 1)).astype(np.float32)
    with strategy.scope():
        w = tf.Variable(tf.zeros([dim, 1]), aggregation=tf.VariableAggregation.MEAN)
    x_all, y_all = tf.constant(xs), tf.constant(ys)

    def one_step() -> Any:
        def replica() -> Any:
            i = tf.distribute.get_replica_context().replica_id_in_sync_group
            x, y = tf.gather(x_all, i), tf.gather(y_all, i)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            w.assign_sub(lr * tape.gradient(loss, w))
            return loss

        return strategy.run(replica)

    step = tf.function(one_step)
    losses = []
    for _ in range(steps):
        per = strategy.experimental_local_results(step())
        losses.append([round(float(v.numpy()), 6) for v in per])
    values = [v.numpy() for v in strategy.experimental_local_results(w)]
    ref = np.zeros((dim, 1))
    for _ in range(steps):
        grads = [2.0 / batch * xs[i].T.astype(np.float64) @ (xs[i] @ ref - ys[i]) for i in range(n)]
        ref = ref - lr * np.mean(grads, axis=0)
    disagreement = max(float(np.max(np.abs(v - values[0]))) for v in values)
    error = max(rel_error(v, ref) for v in values)
    details = {
        "replicas": n,
        "devices": devices,
        "cross_device_ops": ops,
        "steps": steps,
        "losses": losses,
        "max_disagreement": disagreement,
        "max_error": float(f"{error:.3g}"),
    }
    if disagreement > 1e-6:
        return result(
            FAIL,
            f"the {n} replicas disagree after {steps} steps by {disagreement:.2e}",
            **details,
        )
    if error > 1e-4:
        return result(
            FAIL,
            f"the replicas agree but are wrong: relative error {error:.2e} against NumPy",
            **details,
        )
    return result(
        PASS,
        "{} replicas over {}; {} training steps, replicas agree and match a NumPy reference".format(
            n, ", ".join(devices), steps
        ),
        **details,
    )


def check_mirrored_strategy(ctx: Ctx) -> Result:
    tf = ctx.tf
    default_tf32 = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        return _mirrored_step(ctx)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(default_tf32)


def _keras(tf: Any) -> Tuple[Any, str]:
    """The Keras that TensorFlow uses: Keras 3 (`keras`) from TF 2.16, tf.keras (Keras 2) before."""
    try:
        import keras

        version = str(getattr(keras, "__version__", ""))
        if version_tuple(version)[:1] >= (3,):
            return keras, version
    except ImportError:
        pass
    return tf.keras, str(getattr(tf.keras, "__version__", "") or dist_version("keras") or "")


def _dtype_name(x: Any) -> str:
    d = getattr(x, "dtype", x)
    return str(getattr(d, "name", d))


MIXED_MAX_STEPS = 8


def _mixed(ctx: Ctx, policy: str, compute: str) -> Result:
    import numpy as np

    tf = ctx.tf
    keras, kversion = _keras(tf)
    mp = keras.mixed_precision
    mp.set_global_policy(policy)
    try:
        dense1 = keras.layers.Dense(16, activation="relu")
        dense2 = keras.layers.Dense(1)
        head = keras.layers.Activation("linear", dtype="float32")
        rng = np.random.RandomState(0)
        x = tf.constant(rng.standard_normal((32, 8)).astype(np.float32))
        t = tf.constant(rng.standard_normal((32, 1)).astype(np.float32))
        hidden = dense1(x)
        out = head(dense2(hidden))
        variables = dense1.trainable_variables + dense2.trainable_variables
        before = [np.array(v.numpy(), dtype=np.float64) for v in variables]
        opt = keras.optimizers.SGD(learning_rate=0.01)
        scaled_opt = None
        if compute == "float16":
            # Keras 2 keeps it in mixed_precision; Keras 3 in optimizers (and an alias).
            lso = getattr(keras.mixed_precision, "LossScaleOptimizer", None)
            lso = lso or keras.optimizers.LossScaleOptimizer
            scaled_opt = lso(opt)
        # A dynamic loss scaler skips a step whose scaled gradients overflow float16 and halves
        # its scale; so train until the weights move, a few steps at most, and say how many.
        steps = 0
        for steps in range(1, MIXED_MAX_STEPS + 1):  # noqa: B007 - steps is reported
            with tf.GradientTape() as tape:
                y = head(dense2(dense1(x)))
                loss = tf.reduce_mean(tf.square(tf.cast(y, tf.float32) - t))
                if scaled_opt is not None:
                    # Keras 2: get_scaled_loss/get_unscaled_gradients; Keras 3: scale_loss, and
                    # apply_gradients unscales.
                    scaled = (
                        scaled_opt.get_scaled_loss(loss)
                        if hasattr(scaled_opt, "get_scaled_loss")
                        else scaled_opt.scale_loss(loss)
                    )
                else:
                    scaled = loss
            grads = tape.gradient(scaled, variables)
            if scaled_opt is not None and hasattr(scaled_opt, "get_unscaled_gradients"):
                grads = scaled_opt.get_unscaled_gradients(grads)
            (scaled_opt or opt).apply_gradients(zip(grads, variables))
            moved = [np.array(v.numpy(), dtype=np.float64) for v in variables]
            if not all(np.array_equal(a, b) for a, b in zip(moved, before)):
                break
        after = [np.array(v.numpy(), dtype=np.float64) for v in variables]
        loss_scale: Optional[float] = None
        if scaled_opt is not None:
            ls: Any = getattr(scaled_opt, "loss_scale", None)
            ls = ls if ls is not None else getattr(scaled_opt, "dynamic_scale", None)
            loss_scale = float(ls.numpy()) if hasattr(ls, "numpy") else ls
        details: Result = {
            "keras": kversion,
            "policy": policy,
            "compute_dtype": str(dense1.compute_dtype),
            "variable_dtype": str(dense1.variable_dtype),
            "hidden_dtype": _dtype_name(hidden),
            "output_dtype": _dtype_name(out),
            "kernel_dtype": _dtype_name(variables[0]),
            "optimizer": type(scaled_opt or opt).__name__,
            "loss_scale": loss_scale,
            "loss": float(loss.numpy()),
            "steps": steps,
        }
    finally:
        mp.set_global_policy("float32")
    problems = []
    if details["compute_dtype"] != compute or details["hidden_dtype"] != compute:
        problems.append(
            "compute dtype is {} (layer output {}), not {}".format(
                details["compute_dtype"], details["hidden_dtype"], compute
            )
        )
    if details["variable_dtype"] != "float32" or details["kernel_dtype"] != "float32":
        problems.append("variables are {}, not float32".format(details["kernel_dtype"]))
    if details["output_dtype"] != "float32":
        problems.append("the float32 output layer gave {}".format(details["output_dtype"]))
    if scaled_opt is not None and "LossScale" not in details["optimizer"]:
        problems.append(
            "the optimizer is {}, not a LossScaleOptimizer".format(details["optimizer"])
        )
    if not np.isfinite(details["loss"]) or not all(np.all(np.isfinite(a)) for a in after):
        problems.append("the training step produced non-finite values")
    elif all(np.array_equal(a, b) for a, b in zip(after, before)):
        problems.append(f"{steps} training step(s) changed no weight")
    if problems:
        return result(FAIL, "; ".join(problems), **details)
    return result(
        PASS,
        "{} compute, float32 variables{}; a training step ran (Keras {})".format(
            compute,
            ", {} (loss scale {:g})".format(details["optimizer"], loss_scale)
            if scaled_opt is not None and loss_scale is not None
            else "",
            kversion,
        ),
        **details,
    )


def check_mixed_float16(ctx: Ctx) -> Result:
    return _mixed(ctx, "mixed_float16", "float16")


def check_mixed_bfloat16(ctx: Ctx) -> Result:
    return _mixed(ctx, "mixed_bfloat16", "bfloat16")


def check_xla(ctx: Ctx) -> Result:
    import numpy as np

    tf = ctx.tf
    device = "/GPU:0" if ctx.gpus else "/CPU:0"

    def body(a: Any, b: Any) -> Any:
        return tf.reduce_sum(tf.nn.relu(tf.matmul(a, b)) * 0.5 + 1.0, axis=0)

    jitted = tf.function(body, jit_compile=True)
    rng = np.random.RandomState(0)
    a = tf.constant(rng.standard_normal((256, 256)).astype(np.float32))
    b = tf.constant(rng.standard_normal((256, 256)).astype(np.float32))
    with tf.device(device):
        t = time.monotonic()
        got = jitted(a, b).numpy()
        compile_s = time.monotonic() - t
        ref = body(a, b).numpy()
    hlo_chars = None
    try:
        hlo_chars = len(jitted.experimental_get_compiler_ir(a, b)(stage="hlo"))
    except Exception:
        hlo_chars = None
    err = rel_error(got, ref)
    details = {
        "device": device,
        "compile_seconds": round(compile_s, 2),
        "rel_error": float(f"{err:.3g}"),
        "hlo_chars": hlo_chars,
    }
    if err > 1e-2:
        return result(
            FAIL,
            f"the XLA-compiled function disagrees with eager: relative error {err:.2e}",
            **details,
        )
    return result(
        PASS,
        "a jit_compile=True function compiled and ran on {} in {:.2f} s, matching eager".format(
            device.strip("/"), compile_s
        ),
        **details,
    )
