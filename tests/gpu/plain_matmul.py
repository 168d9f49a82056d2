"""Plain TensorFlow matmul throughput: the baseline for the smoke test's matmul figures.

8192x8192, 20 iterations after warm-up, per precision (fp32 with TF32 off and on, fp16, bf16).
"""

import time

import tensorflow as tf

n, iters = 8192, 20
for name, dtype, tf32 in [
    ("fp32", tf.float32, False),
    ("tf32", tf.float32, True),
    ("fp16", tf.float16, True),
    ("bf16", tf.bfloat16, True),
]:
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    with tf.device("/GPU:0"):
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)
        for _ in range(3):
            c = tf.matmul(a, b)
        _ = c[0, 0].numpy()  # waits for the queued matmuls without copying the whole result
        t0 = time.perf_counter()
        for _ in range(iters):
            c = tf.matmul(a, b)
        _ = c[0, 0].numpy()
        dt = (time.perf_counter() - t0) / iters
    print(f"plain TensorFlow {name}: {2 * n**3 / dt / 1e12:.1f} TFLOP/s")
