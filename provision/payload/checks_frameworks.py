"""PyTorch and JAX beside TensorFlow: each one found in the environment sees the GPUs TensorFlow
sees, runs a matmul on one, and (PyTorch) names the cuDNN it loaded, which must be the one
TensorFlow loaded: one copy of each library in the process."""

import importlib.util
import os
import re
from typing import Any, Dict, List

from . import cudalibs, probes
from .context import Ctx
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
        got = jax.device_put(a, devices[0]) @ jax.device_put(a, devices[0])
        ref = jax.device_put(a, jax.devices("cpu")[0]) @ jax.device_put(a, jax.devices("cpu")[0])
        info["matmul_max_error"] = float(abs(jax.device_get(got) - jax.device_get(ref)).max())
    return info


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
    torch_cudnn = (details.get("torch") or {}).get("cudnn")
    tf_cudnn = ctx.expected.get("cudnn_locked") or None
    if torch_cudnn and tf_cudnn and not torch_cudnn.startswith(str(tf_cudnn)):
        problems.append(f"torch loaded cuDNN {torch_cudnn}, the lock holds {tf_cudnn}")
    if problems:
        return result(FAIL, "; ".join(problems), **details)
    return result(PASS, "beside TensorFlow: " + "; ".join(seen), **details)
