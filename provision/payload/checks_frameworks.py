"""PyTorch and JAX beside TensorFlow: each one found in the environment sees the GPUs TensorFlow
sees, runs a matmul and a convolution on one, and names the cuDNN it loaded, which must be the
one TensorFlow loaded and the lock's: one copy of each library in the process."""

import importlib.util
import os
import re
from typing import Any, Dict, List, Optional

from . import cudalibs, probes
from .context import Ctx
from .judgements import same_release
from .report import Result, result
from .status import FAIL, PASS, SKIP


def _torch(ctx: Ctx) -> Dict[str, Any]:
    import torch

    info: Dict[str, Any] = {"version": str(torch.__version__).split("+")[0]}
    info["cuda"] = bool(torch.cuda.is_available())
    info["gpus"] = int(torch.cuda.device_count()) if info["cuda"] else 0
    cudnn = torch.backends.cudnn.version() if info["cuda"] else None
    info["cudnn"] = cudalibs.cudnn_version(int(cudnn)) if cudnn else None
    if info["cuda"]:
        a = torch.arange(256 * 256, dtype=torch.float32).reshape(256, 256) / 65536.0
        ref = a @ a
        got = (a.cuda() @ a.cuda()).cpu()
        info["matmul_max_error"] = float((got - ref).abs().max())
        # A convolution makes PyTorch load cuDNN, as TensorFlow's check did.
        x = torch.ones(1, 4, 8, 8, device="cuda")
        w = torch.ones(4, 4, 3, 3, device="cuda")
        info["conv"] = float(torch.nn.functional.conv2d(x, w, padding=1)[0, 0, 4, 4])
    return info


def _jax(ctx: Ctx) -> Dict[str, Any]:
    import jax
    import jax.numpy as jnp

    devices = [d for d in jax.devices() if d.platform == "gpu"]
    info: Dict[str, Any] = {"version": str(jax.__version__), "gpus": len(devices)}
    if devices:
        a = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) / 65536.0
        # In float32: JAX's default precision on a GPU with tensor cores is TF32 (errors of 3e-2
        # here on an H100), which says nothing about whether the GPU computes right.
        on_gpu, on_cpu = jax.device_put(a, devices[0]), jax.device_put(a, jax.devices("cpu")[0])
        got = jnp.matmul(on_gpu, on_gpu, precision=jax.lax.Precision.HIGHEST)
        ref = jnp.matmul(on_cpu, on_cpu, precision=jax.lax.Precision.HIGHEST)
        info["matmul_max_error"] = float(abs(jax.device_get(got) - jax.device_get(ref)).max())
        # A convolution makes JAX load cuDNN, as TensorFlow's check did.
        x = jax.device_put(jnp.ones((1, 4, 8, 8), dtype=jnp.float32), devices[0])
        w = jax.device_put(jnp.ones((4, 4, 3, 3), dtype=jnp.float32), devices[0])
        info["conv"] = float(jax.lax.conv(x, w, (1, 1), "SAME")[0, 0, 4, 4])
        info["cudnn"] = _jax_cudnn()
    return info


def _jax_cudnn() -> Optional[str]:
    """The cuDNN jaxlib's CUDA plugin loaded, as its own version check asks it (None when this
    jaxlib has no such module)."""
    try:
        from jax._src.lib import cuda_versions

        value = cuda_versions.cudnn_get_version() if cuda_versions is not None else None
    except Exception:
        return None
    return cudalibs.cudnn_version(int(value)) if value else None


def _cudnn_copies() -> List[str]:
    return sorted(
        {p for p in probes.loaded_libraries() if re.match(r"libcudnn[._]", os.path.basename(p))}
    )


def check_frameworks(ctx: Ctx) -> Result:
    found = [m for m in ("torch", "jax") if importlib.util.find_spec(m) is not None]
    if not found:
        return result(SKIP, "no PyTorch or JAX in the environment")
    details: Dict[str, Any] = {}
    problems, seen = [], []
    for name in found:
        try:
            info = _torch(ctx) if name == "torch" else _jax(ctx)
        except Exception as exc:
            problems.append(f"{name} failed: {type(exc).__name__}: {exc}")
            continue
        details[name] = info
        gpus = int(info.get("gpus") or 0)
        if ctx.gpus and not gpus:
            problems.append("{} {} sees no GPU, TensorFlow sees {}".format(
                name, info["version"], len(ctx.gpus)))  # fmt: skip
        if float(info.get("matmul_max_error") or 0.0) > 1e-3:
            problems.append(f"{name}'s GPU matmul is wrong")
        seen.append("{} {} ({} GPU(s){})".format(
            name, info["version"], gpus,
            ", cuDNN " + info["cudnn"] if info.get("cudnn") else ""))  # fmt: skip
    copies = _cudnn_copies()
    details["cudnn_copies"] = copies
    folders = {os.path.dirname(os.path.realpath(p)) for p in copies}
    if len(folders) > 1:
        problems.append(f"cuDNN is loaded from {len(folders)} places: {sorted(folders)}")
    locked = ctx.expected.get("cudnn_locked") or None
    for name in found:
        cudnn = (details.get(name) or {}).get("cudnn")
        if cudnn and locked and not same_release(cudnn, locked):
            problems.append(f"{name} loaded cuDNN {cudnn}, the lock holds {locked}")
    if problems:
        return result(FAIL, "; ".join(problems), **details)
    return result(PASS, "beside TensorFlow: " + "; ".join(seen), **details)
