"""TensorFlow and PyTorch (or JAX) in one process, as a user's script has them: each runs a matmul
and a convolution on the GPU (the convolution makes each load cuDNN), then the process's own map
says which cuDNN and cuBLAS files are loaded, and from where. Prints one JSON object.

    PREFIX/bin/python tests/gpu/frameworks_probe.py [tf-first|torch-first|jax-first] [torch|jax]

Both frameworks share the GPU's memory: TensorFlow grows its use (TF_FORCE_GPU_ALLOW_GROWTH) and
JAX allocates as it goes (XLA_PYTHON_CLIENT_PREALLOCATE=false) unless the caller set otherwise.
"""

import json
import os
import sys
import time


def loaded(stem: str) -> list[str]:
    with open("/proc/self/maps", encoding="utf-8") as fh:
        paths = {line.split()[-1] for line in fh if "/" in line}
    return sorted(p for p in paths if os.path.basename(p).startswith(stem))


def run_tf() -> dict:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    with tf.device("/GPU:0"):
        a = tf.random.normal([4096, 4096])
        m = tf.linalg.matmul(a, a)
        x = tf.ones([1, 32, 32, 8])
        c = tf.nn.conv2d(x, tf.ones([3, 3, 8, 8]), strides=1, padding="SAME")
    return {"version": tf.__version__, "gpus": [g.name for g in gpus], "matmul_on": m.device,
            "conv_on": c.device, "conv_centre": float(c[0, 16, 16, 0])}  # fmt: skip


def run_torch() -> dict:
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    m = a @ a
    x = torch.ones(1, 8, 32, 32, device="cuda")
    c = torch.nn.functional.conv2d(x, torch.ones(8, 8, 3, 3, device="cuda"), padding=1)
    torch.cuda.synchronize()
    return {"version": torch.__version__, "cuda": torch.version.cuda,
            "gpus": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
            "cudnn": torch.backends.cudnn.version(), "matmul_on": str(m.device),
            "conv_centre": float(c[0, 0, 16, 16])}  # fmt: skip


def run_jax() -> dict:
    import jax
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    a = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), (4096, 4096)), gpus[0])
    m = (a @ a).block_until_ready()
    x = jax.device_put(jnp.ones((1, 8, 32, 32)), gpus[0])  # NCHW
    c = jax.lax.conv(x, jax.device_put(jnp.ones((8, 8, 3, 3)), gpus[0]), (1, 1), "SAME")
    return {"version": jax.__version__, "gpus": [str(g) for g in gpus],
            "matmul_on": str(sorted(m.devices(), key=str)), "conv_on": str(c.devices()),
            "conv_centre": float(c[0, 0, 16, 16])}  # fmt: skip


RUNS = {"tensorflow": run_tf, "torch": run_torch, "jax": run_jax}


def main() -> None:
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    first = sys.argv[1] if len(sys.argv) > 1 else "tf-first"
    other = sys.argv[2] if len(sys.argv) > 2 else "torch"
    order = [other, "tensorflow"] if first == f"{other}-first" else ["tensorflow", other]
    out: dict = {"order": order, "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH")}
    start = time.time()
    for name in order:
        try:
            out[name] = RUNS[name]()
        except Exception as exc:  # the report says what failed; the caller judges
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    out["seconds"] = round(time.time() - start, 1)
    out["libcudnn"] = loaded("libcudnn")
    out["libcublas"] = loaded("libcublas")
    out["libcudart"] = loaded("libcudart")
    out["libnccl"] = loaded("libnccl")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
