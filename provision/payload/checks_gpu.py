"""Checks of the GPUs: compute capability against the build, the GPU policy the environment sets,
memory growth or limits in effect, and a real matmul on each GPU (on the CPU when there is none)."""

import os
import statistics
import sys
import time
from typing import Any, Dict

from . import probes
from .context import Ctx
from .judgements import judge_compute, version_tuple
from .report import HOOK_MODULE, MEMORY_LIMIT_VAR, Result, result
from .status import FAIL, PASS, SKIP, WARN

NOT_APPLIED = "neither the environment's start-up hook nor its activation applied it"
MATMUL_N = 8192
MATMUL_KINDS = (  # name, dtype, TF32 on?, tolerated relative error
    ("fp32", "float32", False, 1e-5),
    ("tf32", "float32", True, 1e-2),
    ("fp16", "float16", None, 1e-2),
    ("bf16", "bfloat16", None, 3e-2),
)


def check_gpus(ctx: Ctx) -> Result:
    bi_targets = list(ctx.facts["build_info"].get("cuda_compute_capabilities") or [])
    targets = bi_targets or list(ctx.expected.get("compute_targets") or [])
    cmin = ctx.expected.get("compute_min")
    host = ctx.host_gpus
    if not ctx.gpus:
        details = {"gpus": [], "host_gpus": host}
        if host:
            return result(
                FAIL,
                f"the host has {host} GPU(s) but TensorFlow registered none: see cuda_libraries "
                "and "
                "the log",
                **details,
            )
        if ctx.args.require_gpu:
            return result(FAIL, "no GPU, and --require-gpu was given", **details)
        return result(SKIP, "no GPU on this host (CPU mode)", **details)
    rows, worst = [], PASS
    order = {PASS: 0, SKIP: 1, WARN: 2, FAIL: 3}
    for g in ctx.facts["gpus"]:
        status, reason = judge_compute(str(g["compute_capability"]), targets, cmin)
        rows.append(dict(g, status=status, reason=reason))
        worst = status if order[status] > order[worst] else worst
    text = "; ".join("GPU {} {}: {}".format(r["index"], r["name"], r["reason"]) for r in rows)
    return result(worst, text, gpus=rows, host_gpus=host, targets=targets, compute_min=cmin)


def check_gpu_policy(ctx: Ctx) -> Result:
    want_mem, want_dev = ctx.expected.get("gpu_memory"), ctx.expected.get("gpus")
    env = {
        k: os.environ.get(k)
        for k in ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH", MEMORY_LIMIT_VAR)
    }
    if not want_mem and not want_dev:
        return result(SKIP, "this environment sets no GPU policy", **env)
    problems, done = [], []
    if want_dev:
        seen = env["CUDA_VISIBLE_DEVICES"]
        if seen != str(want_dev):
            problems.append(
                f"CUDA_VISIBLE_DEVICES is {seen!r}, the environment sets {want_dev!r}: "
                + NOT_APPLIED
            )
        elif ctx.gpus and len(ctx.gpus) != len(str(want_dev).split(",")):
            problems.append(
                "TensorFlow sees {} GPU(s), CUDA_VISIBLE_DEVICES={} names {}".format(
                    len(ctx.gpus), want_dev, len(str(want_dev).split(","))
                )
            )
        else:
            done.append(f"visible GPUs {want_dev}")
    limits: Dict[str, int] = {}
    if want_mem == "growth":
        if env["TF_FORCE_GPU_ALLOW_GROWTH"] != "true":
            problems.append(
                "TF_FORCE_GPU_ALLOW_GROWTH is {!r}, the environment sets 'true': {}".format(
                    env["TF_FORCE_GPU_ALLOW_GROWTH"], NOT_APPLIED
                )
            )
        else:
            done.append("memory growth (TF_FORCE_GPU_ALLOW_GROWTH=true)")
    elif want_mem:
        want = int(str(want_mem))
        hook = sys.modules.get(HOOK_MODULE)
        if hook is None:
            problems.append(
                f"the start-up hook {HOOK_MODULE} was not loaded: its .pth file is not in this "
                "environment's site-packages"
            )
        elif env[MEMORY_LIMIT_VAR] != str(want):
            problems.append(
                f"{MEMORY_LIMIT_VAR} is {env[MEMORY_LIMIT_VAR]!r}, the environment sets {want}: "
                + NOT_APPLIED
            )
        elif ctx.gpus:
            for g in ctx.gpus:
                conf = ctx.tf.config.get_logical_device_configuration(g)
                limits[g.name] = int(conf[0].memory_limit) if conf else 0
            wrong = {k: v for k, v in limits.items() if v != want}
            if wrong:
                problems.append(f"memory limits {wrong} instead of {want} MiB")
            else:
                done.append(f"a hard limit of {want} MiB per GPU")
        else:
            done.append(f"the start-up hook is loaded and asks for {want} MiB (no GPU here)")
    if problems:
        return result(FAIL, "; ".join(problems), limits_mib=limits, **env)
    return result(PASS, "in effect: " + ", ".join(done), limits_mib=limits, **env)


def check_memory(ctx: Ctx) -> Result:
    if not ctx.gpus:
        return result(SKIP, "no GPU on this host")
    tf, setup = ctx.tf, ctx.setup
    if setup.get("memory_growth_error"):
        return result(
            FAIL,
            "memory growth could not be set before TensorFlow initialised: {}".format(
                setup["memory_growth_error"]
            ),
        )
    rows, notes, status = [], [], PASS
    for i, g in enumerate(ctx.gpus):
        with tf.device(f"/GPU:{i}"):
            float(tf.reduce_sum(tf.ones([256, 256])).numpy())
        info = tf.config.experimental.get_memory_info(f"GPU:{i}")
        conf = tf.config.get_logical_device_configuration(g)
        limit = int(conf[0].memory_limit) if conf and conf[0].memory_limit else None
        growth = None if limit else bool(tf.config.experimental.get_memory_growth(g))
        dev = probes.device_memory(i)
        row = {
            "index": i,
            "growth": growth,
            "limit_mib": limit,
            "current_mib": round(info["current"] / 2**20, 1),
            "peak_mib": round(info["peak"] / 2**20, 1),
            "device_used_mib": dev[0] if dev else None,
            "device_total_mib": dev[1] if dev else None,
        }
        rows.append(row)
        if limit is None and not growth:
            status = FAIL
            notes.append(f"GPU {i}: memory growth is off")
        elif dev and limit and dev[0] > limit + 2048:
            status = WARN if status == PASS else status
            notes.append(
                f"GPU {i}: {dev[0]} MiB in use on the device, more than the {limit} MiB limit: "
                "other "
                "processes?"
            )
        elif dev and not limit and dev[0] > dev[1] // 2:
            status = WARN if status == PASS else status
            notes.append(
                f"GPU {i}: {dev[0]} of {dev[1]} MiB in use on the device after a small op: "
                "another process, or "
                "growth did not take effect"
            )
        else:
            notes.append(
                "GPU {}: {} MiB in use by TensorFlow after a small op{}{}".format(
                    i,
                    row["current_mib"],
                    f", {dev[0]} MiB on the device" if dev else "",
                    f", hard limit {limit} MiB" if limit else ", growth on (set before any op)",
                )
            )
    return result(status, "; ".join(notes), gpus=rows)


def sync(t: Any) -> None:
    # Reading one element back waits for the stream, and so for every kernel queued before it.
    t[0, 0].numpy()


def rel_error(got: object, ref: object) -> float:
    import numpy as np

    got64, ref64 = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(got64 - ref64) / max(np.linalg.norm(ref64), 1e-30))


def _matmul_on(ctx: Ctx, device: str, n: int, kinds: Any, iters: int, reps: int) -> Result:
    import numpy as np

    tf = ctx.tf
    rng = np.random.RandomState(0)
    a_small = rng.uniform(-1, 1, (256, 256)).astype(np.float32)
    b_small = rng.uniform(-1, 1, (256, 256)).astype(np.float32)
    ref = a_small.astype(np.float64) @ b_small.astype(np.float64)
    speed, errors = {}, {}
    default_tf32 = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    try:
        with tf.device(device):
            a32 = tf.random.uniform((n, n), -1, 1, dtype=tf.float32, seed=1)
            b32 = tf.random.uniform((n, n), -1, 1, dtype=tf.float32, seed=2)
            for name, dtype, tf32, tol in kinds:
                if tf32 is not None:
                    tf.config.experimental.enable_tensor_float_32_execution(tf32)
                dt = getattr(tf, dtype)
                small = tf.matmul(tf.cast(a_small, dt), tf.cast(b_small, dt))
                errors[name] = rel_error(tf.cast(small, tf.float32).numpy(), ref)
                if errors[name] > tol:
                    raise ValueError(
                        f"{name} matmul on {device} is wrong: relative error "
                        f"{errors[name]:.2e} > {tol:g}"
                    )
                a, b = tf.cast(a32, dt), tf.cast(b32, dt)
                for _ in range(2):
                    sync(tf.matmul(a, b))
                samples = []
                for _ in range(reps):
                    t = time.perf_counter()
                    for _ in range(iters):
                        c = tf.matmul(a, b)
                    sync(c)
                    samples.append(time.perf_counter() - t)
                speed[name] = 2.0 * n**3 * iters / statistics.median(samples)
                del a, b, c
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(default_tf32)
    return {
        "n": n,
        "flops": speed,
        "rel_error": {k: float(f"{v:.3g}") for k, v in errors.items()},
    }


def check_matmul(ctx: Ctx) -> Result:
    if not ctx.gpus:
        out = _matmul_on(ctx, "/CPU:0", 512, MATMUL_KINDS[:1], iters=3, reps=3)
        gflops = round(out["flops"]["fp32"] / 1e9, 1)
        return result(
            PASS,
            f"no GPU: a 512x512 fp32 matmul ran on the CPU, correct, {gflops} GFLOP/s",
            cpu={"n": 512, "gflops": gflops, "rel_error": out["rel_error"]},
        )
    rows, texts, status = [], [], PASS
    for i, g in enumerate(ctx.facts["gpus"]):
        n = MATMUL_N
        limit = (ctx.setup.get("memory_limit_mib") or {}).get(ctx.gpus[i].name)
        if limit:
            # Three n x n fp32 matrices and cuBLAS's workspace must fit in half the limit.
            n = min(n, max(256, int((limit * 2**20 / 2 / 12) ** 0.5) // 256 * 256))
        out = _matmul_on(ctx, f"/GPU:{i}", n, MATMUL_KINDS, iters=10, reps=5)
        tflops = {k: round(v / 1e12, 1) for k, v in out["flops"].items()}
        rows.append(dict(index=i, name=g["name"], n=n, tflops=tflops, rel_error=out["rel_error"]))
        texts.append(
            "GPU {} ({}x{}): {} TFLOP/s".format(
                i,
                n,
                n,
                ", ".join(f"{k} {tflops[k]}" for k in ("fp32", "tf32", "fp16", "bf16")),
            )
        )
        cc = version_tuple(g.get("compute_capability"))
        if cc >= (8, 0) and tflops["tf32"] < 1.5 * tflops["fp32"]:
            status = WARN
            texts.append(f"GPU {i}: TF32 is not faster than fp32, tensor cores unused?")
    return result(status, "; ".join(texts), gpus=rows)
