"""Smoke test for one TensorFlow environment: proves what TensorFlow really loads and runs.

Standalone (the standard library and TensorFlow, nothing else; Python 3.8+), run inside the
environment:

    python smoke_test.py                          readable summary on stdout; exit 0 or 1
    python smoke_test.py --json                   the report, one JSON object, on stdout
    python smoke_test.py --out report.json --require-gpu --timeout 120
    python smoke_test.py --expected expected.json compare with these versions

A rendered copy (envs/<name>/smoke_test.py) carries the versions its environment must have in
EXPECTED; `--expected FILE` (a JSON object) overrides them key by key. Keys: tf_version,
python, cuda, cudnn ("X.Y"), compute_min ("X.Y"), compute_targets (["sm_80", "compute_90"]),
gpu_memory ("growth", "<MiB>" or null), gpus ("0,1" or null). A key that is absent is not
compared (its check says so).

How it runs: this process never imports TensorFlow. It starts itself again as a child that
imports TensorFlow and runs the checks one at a time, reporting each over a pipe, while
TensorFlow's log on stderr is captured for classification. Every check has a deadline
(--timeout seconds; the matmul check gets that per GPU; importing TensorFlow gets
--setup-timeout): a check that hangs (a kernel, an NCCL
all-reduce) becomes a failure saying so, the child is killed and the remaining checks go on in a
fresh child; a child that dies is a failure naming the signal. What must precede TensorFlow's
initialisation (memory growth; two virtual CPU devices for MirroredStrategy when there is no
GPU) is done first in every child. When MirroredStrategy fails on several GPUs the check is
retried once with NCCL_P2P_DISABLE=1 and the reason says whether that helped.
For tests, PROVISION_SMOKE_FAULT=hang:<check> or crash:<check> makes the child hang or abort
at the start of that check.

Report: schema "provision-smoke-report", schema_version 1 (additions keep the version; a field
that changes meaning or disappears bumps it). One JSON object:
  schema, schema_version  "provision-smoke-report", 1
  expected                the expectations compared against ({} when none)
  environment             facts, each null when unknown: python, executable, prefix, platform,
                          cpu_count, variables {CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, ...: the
                          ones that are set}, driver {kernel_module, cuda, host_gpus, devices
                          [{index, name, compute_capability}], error}, tensorflow, keras,
                          numpy, tf_import_seconds, build_info {cuda_version, cudnn_version,
                          cuda_compute_capabilities, is_cuda_build, ...}, cuda_config {TF_*_VERSION
                          from TensorFlow's own cuda_config.h: the soname versions it dlopens},
                          cudnn_header (cuDNN version of the headers TF was built with),
                          gpus [{index, name, compute_capability}] (as TensorFlow sees them),
                          setup {memory_growth | memory_limit_mib | virtual_cpus, errors}
  checks                  list in run order of {name, status, reason, seconds, details}
                          status "pass" | "warn" | "skip" | "fail"; a warn or skip never fails
  summary                 {status "pass"|"fail", passed, warned, skipped, failed, gpu_count,
                          require_gpu, seconds}
Checks and their details:
  tf_version          {version}
  cuda_build          {is_built_with_cuda, is_built_with_gpu_support}
  build_info          {cuda_version, cudnn_version, cudnn_header, compute_capabilities}
  cuda_libraries      {libraries: {name: {soname, path, loaded_by_tf, error, hint}}: what TF
                       dlopens at GPU start-up (+ NCCL with several GPUs), optional {same, for
                       cuRAND}, cannot_open [sonames], search {tf_search_kind, dirs}}
  cudart, cudnn       {soname, path, version, loaded_by_tf, copies}
  gpus                {gpus: [{index, name, compute_capability, status, reason}], host_gpus}
  gpu_policy          {CUDA_VISIBLE_DEVICES, TF_FORCE_GPU_ALLOW_GROWTH,
                       PROVISION_GPU_MEMORY_LIMIT_MIB, limits_mib}: a hard limit is applied by
                       the provision_gpu_policy start-up hook, which this check looks for
  memory              {gpus: [{index, growth, limit_mib, current_mib, peak_mib,
                       device_used_mib, device_total_mib}]}
  matmul              {gpus: [{index, name, n, tflops {fp32, tf32, fp16, bf16},
                       rel_error {...}}]} or, without a GPU, {cpu: {n, gflops, rel_error}}
  mirrored_strategy   {replicas, devices, cross_device_ops, steps, max_disagreement,
                       max_error, retry}
  mixed_float16, mixed_bfloat16
                      {keras, compute_dtype, variable_dtype, output_dtype, optimizer,
                       loss_scale, loss}
  xla                 {device, compile_seconds, rel_error, hlo_chars}
  logs                {benign {label: count}, problems [...], warnings [...],
                       unclassified [...], lines}
Exit status: 0 when no check failed, 1 when one did, 2 on a usage error.
"""

import argparse
import contextlib
import ctypes
import json
import mmap
import os
import platform
import queue
import re
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

# A rendered copy assigns EXPECTED above this text; the plain module starts with none.
EXPECTED: Dict[str, Any] = dict(globals().get("EXPECTED") or {})

SCHEMA = "provision-smoke-report"
SCHEMA_VERSION = 1
PASS, WARN, SKIP, FAIL = "pass", "warn", "skip", "fail"
STATUSES = (PASS, WARN, SKIP, FAIL)
CHECKS = (
    "tf_version",
    "cuda_build",
    "build_info",
    "cuda_libraries",
    "cudart",
    "cudnn",
    "gpus",
    "gpu_policy",
    "memory",
    "matmul",
    "mirrored_strategy",
    "mixed_float16",
    "mixed_bfloat16",
    "xla",
    "logs",
)
PARENT_CHECKS = ("logs",)  # judged from the children's stderr, after they have finished
DEFAULT_TIMEOUT = 180.0
SETUP_TIMEOUT = 300.0
MATMUL_N = 8192
FAULT_VAR = "PROVISION_SMOKE_FAULT"
HOOK_MODULE = "provision_gpu_policy"
MEMORY_LIMIT_VAR = "PROVISION_GPU_MEMORY_LIMIT_MIB"
REPORTED_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    MEMORY_LIMIT_VAR,
    "LD_LIBRARY_PATH",
    "XLA_FLAGS",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_USE_LEGACY_KERAS",
    "NCCL_P2P_DISABLE",
    "CONDA_PREFIX",
    "VIRTUAL_ENV",
)

# The libraries TensorFlow dlopens at GPU start-up, with the cuda_config.h define that gives the
# version in each soname (lib<name>.so.<version>: exactly how TF's dso_loader builds the name).
CUDA_LIBRARIES = (
    ("cudart", "TF_CUDART_VERSION"),
    ("cublas", "TF_CUBLAS_VERSION"),
    ("cublasLt", "TF_CUBLAS_VERSION"),
    ("cufft", "TF_CUFFT_VERSION"),
    ("curand", "TF_CURAND_VERSION"),
    ("cusolver", "TF_CUSOLVER_VERSION"),
    ("cusparse", "TF_CUSPARSE_VERSION"),
    ("cudnn", "TF_CUDNN_VERSION"),
)
# Builds without cuda_config.h: the soname versions of each CUDA major's libraries (an ABI fact
# of the CUDA toolkit, e.g. CUDA 12 still ships cuSOLVER 11 as libcusolver.so.11).
SONAME_VERSIONS_BY_CUDA_MAJOR = {
    "11": {
        "TF_CUDART_VERSION": "11.0",
        "TF_CUBLAS_VERSION": "11",
        "TF_CUFFT_VERSION": "10",
        "TF_CURAND_VERSION": "10",
        "TF_CUSOLVER_VERSION": "11",
        "TF_CUSPARSE_VERSION": "11",
    },
    "12": {
        "TF_CUDART_VERSION": "12",
        "TF_CUBLAS_VERSION": "12",
        "TF_CUFFT_VERSION": "11",
        "TF_CURAND_VERSION": "10",
        "TF_CUSOLVER_VERSION": "11",
        "TF_CUSPARSE_VERSION": "12",
    },
}
NCCL_SONAME = "libnccl.so.2"
OPTIONAL_LIBRARIES = ("curand",)

Result = Dict[str, Any]


def result(status: str, reason: str, **details: Any) -> Result:
    return {"status": status, "reason": reason, "details": details}


# -- pure judgments (also used by provision.verify to re-judge a report against a spec) -------


def version_tuple(text: Any) -> Tuple[int, ...]:
    """'12.5.1' -> (12, 5, 1); 'v2.13.1' -> (2, 13, 1); '' or None -> ()."""
    m = re.search(r"\d+(?:\.\d+)*", str(text or ""))
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def same_release(found: Any, expected: Any) -> bool:
    """Equal on the components both give: '12.5.1' matches '12.5', '9' matches '9.3'."""
    f, e = version_tuple(found), version_tuple(expected)
    n = min(len(f), len(e))
    return n > 0 and f[:n] == e[:n]


def judge_library_version(what: str, found: str, expected: Optional[str]) -> Tuple[str, str]:
    """A loaded runtime against the spec: same major; a lower minor fails, a higher one warns."""
    f, e = version_tuple(found), version_tuple(expected)
    if not f:
        return FAIL, f"{what} version could not be read"
    if not e:
        return PASS, f"{what} {found} (no expected version given)"
    if f[0] != e[0]:
        return (
            FAIL,
            f"{what} {found} is loaded, but the spec needs {expected} (another major version)",
        )
    if len(e) > 1 and len(f) > 1 and f[1] < e[1]:
        return FAIL, f"{what} {found} is loaded, older than the {expected} TensorFlow was built for"
    if len(e) > 1 and len(f) > 1 and f[1] > e[1]:
        return WARN, (
            f"{what} {found} is loaded, newer than the spec's {expected}: it runs by minor-version "
            "compatibility, "
            "but the environment does not hold the pinned version"
        )
    return PASS, f"{what} {found}, as the spec says"


def parse_arch(target: str) -> Optional[Tuple[str, Tuple[int, int]]]:
    """'sm_89' -> ('sm', (8, 9)); 'compute_90' -> ('compute', (9, 0)); 'sm_100a' -> (10, 0)."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", str(target).strip())
    return (m.group(1), (int(m.group(2)), int(m.group(3)))) if m else None


def judge_compute(cc: str, targets: List[str], compute_min: Optional[str]) -> Tuple[str, str]:
    """Can this build run kernels on a GPU of compute capability `cc`?

    SASS (sm_XY) runs on the same major at an equal or higher minor; PTX (compute_XY) is
    JIT-compiled by the driver for any equal or newer GPU. A GPU of a newer major than every
    target has only PTX for an older architecture: that is how new GPUs failed with
    CUDA_ERROR_INVALID_PTX, so it warns (the matmul check then shows whether kernels run).
    """
    c = version_tuple(cc)[:2]
    if len(c) < 2:
        return FAIL, f"compute capability {cc!r} could not be read"
    cap = (c[0], c[1])
    low = version_tuple(compute_min)[:2]
    if len(low) == 2 and cap < (low[0], low[1]):
        return FAIL, f"compute capability {cc} is below this release's minimum {compute_min}"
    parsed = [p for p in (parse_arch(t) for t in targets) if p]
    if not parsed:
        return PASS, f"compute capability {cc} (the build names no targets)"
    sass = [a for kind, a in parsed if kind == "sm" and a[0] == cap[0] and a <= cap]
    if sass:
        return PASS, "compute capability {}: native kernels (sm_{}{})".format(cc, *max(sass))
    ptx = [a for kind, a in parsed if kind == "compute" and a <= cap]
    if not ptx:
        return FAIL, "no kernel image for compute capability {}: the build targets {}".format(
            cc, ", ".join(targets)
        )
    best = max(ptx)
    if best[0] == cap[0]:
        return PASS, "compute capability {}: PTX compute_{}{} compiled by the driver".format(
            cc, *best
        )
    return WARN, (
        "compute capability {} is newer than every target ({}): only PTX for compute_{}{} can "
        "run, JIT-compiled by the driver; such GPUs have failed with CUDA_ERROR_INVALID_PTX".format(
            cc, ", ".join(targets), *best
        )
    )


def sonames(cuda_config: Dict[str, str], build_info: Dict[str, Any]) -> Dict[str, str]:
    """library -> soname TensorFlow dlopens: from its cuda_config.h, or else from its CUDA major."""
    versions = dict(cuda_config)
    major = (
        str(version_tuple(build_info.get("cuda_version"))[:1][0])
        if version_tuple(build_info.get("cuda_version"))
        else ""
    )
    for key, value in SONAME_VERSIONS_BY_CUDA_MAJOR.get(major, {}).items():
        versions.setdefault(key, value)
    cudnn_major = version_tuple(build_info.get("cudnn_version"))[:1]
    if cudnn_major:
        versions.setdefault("TF_CUDNN_VERSION", str(cudnn_major[0]))
    out = {}
    for lib, key in CUDA_LIBRARIES:
        if versions.get(key):
            # TF's dso_loader uses only the major of a cuDNN version like "9.3".
            ver = versions[key].split(".")[0] if lib == "cudnn" else versions[key]
            out[lib] = f"lib{lib}.so.{ver}"
    return out


# Known TensorFlow log lines: (pattern, label, kind). kind "benign" is always harmless;
# "no_gpu" is harmless only on a host without an NVIDIA GPU; "problem" is a known failure.
LOG_RULES = (
    (r"oneDNN custom operations are on", "oneDNN notice", "benign"),
    (
        r"oneDNN supports DT_(HALF|BF16) only on platforms with",
        "oneDNN without fp16/bf16 on this CPU",
        "benign",
    ),
    (r"TF-TRT Warning: Could not find TensorRT", "TensorRT not installed (optional)", "benign"),
    (
        r"Unable to register (cuDNN|cuFFT|cuBLAS) factory",
        "duplicate factory registration",
        "benign",
    ),
    (r"Attempting to register factory for plugin", "duplicate factory registration", "benign"),
    (r"computation placer already registered", "duplicate XLA registration", "benign"),
    (r"optimized to use available CPU instructions", "CPU instruction notice", "benign"),
    (r"^To enable the following instructions", "CPU instruction notice", "benign"),
    (r"rebuild TensorFlow with the appropriate compiler flags", "CPU instruction notice", "benign"),
    (
        r"All log messages before absl::InitializeLog\(\) is called",
        "absl start-up notice",
        "benign",
    ),
    (r"NUMA node", "NUMA node notice", "benign"),
    (r"Created device /job:", "device created", "benign"),
    (r"Using MirroredStrategy with devices", "MirroredStrategy devices", "benign"),
    (r"Collective ops is not configured at program startup", "collective ops notice", "benign"),
    (r"XLA service .* initialized for platform", "XLA service", "benign"),
    (r"StreamExecutor (device )?[\[(]\d+[\])]", "XLA service", "benign"),
    (r"Compiled cluster using XLA", "XLA compiled", "benign"),
    # The matrix pins ptxas to the build's CUDA line on purpose (a newer one emits PTX that older
    # drivers reject); TensorFlow then cautions about a clamping edge case of ptxas <= 12.6.2.
    (
        r"Invoking ptxas with version 12\.[0-6]\.\d+, which corresponds to a CUDA version",
        "ptxas of the pinned CUDA 12 line (clamping caveat)",
        "benign",
    ),
    (r"disabling MLIR crash reproducer", "MLIR notice", "benign"),
    (r"Loaded cuDNN version", "cuDNN loaded", "benign"),
    (r"Plugin optimizer for device_type", "plugin optimizer", "benign"),
    (r"TensorFloat-32 will be used", "TF32 notice", "benign"),
    (r"Mixed precision compatibility check", "mixed precision check", "benign"),
    (
        r"Your GPU(s)? (will likely run quickly|may run slowly) with dtype policy",
        "mixed precision check",
        "benign",
    ),
    (r"^\s*\S+, compute capability \d+\.\d+$", "mixed precision check", "benign"),
    (r"Delay kernel timed out", "GPU timer accuracy", "benign"),
    (r"Local rendezvous is aborting with status: OUT_OF_RANGE", "end of dataset", "benign"),
    (r"ptxas warning : Registers are spilled", "ptxas register spill", "benign"),
    (
        r"Reduce to /job:localhost/replica:0/task:0/device:CPU:0 then broadcast",
        "CPU all-reduce",
        "benign",
    ),
    (r"Could not find cuda drivers on your machine", "no NVIDIA driver", "no_gpu"),
    (r"failed call to cuInit", "no NVIDIA driver", "no_gpu"),
    (r"CUDA_ERROR_NO_DEVICE|no CUDA-capable device is detected", "no NVIDIA driver", "no_gpu"),
    (r"Cannot dlopen some GPU libraries", "GPU libraries missing", "no_gpu"),
    (r"Could not load dynamic library", "GPU libraries missing", "no_gpu"),
    (r"kernel driver does not appear to be running", "no NVIDIA driver", "no_gpu"),
    (r"Loaded runtime CuDNN library: .* but source was compiled with", "cuDNN mismatch", "problem"),
    (r"libdevice not found|Can't find libdevice directory", "libdevice missing", "problem"),
    (
        r"Couldn't (invoke|get) ptxas|ptxas returned an error|Couldn't find ptxas",
        "ptxas missing",
        "problem",
    ),
    (r"Falling back to the CUDA driver for PTX compilation", "ptxas fallback", "warning"),
    (
        r"CUDA_ERROR_INVALID_PTX|no kernel image is available|device kernel image is invalid",
        "no kernel image",
        "problem",
    ),
    (
        r"driver version is insufficient|CUDA driver version is insufficient",
        "driver too old",
        "problem",
    ),
    (r"DNN library is not found|Failed to get convolution algorithm", "cuDNN broken", "problem"),
    (r"Check failed", "TensorFlow check failed", "problem"),
)
# TF <= 2.15 logs "2024-01-01 10:00:00.123456: W file.cc:12] ..."; newer (absl) "W0000 00:00:..."
_TF_LINE = re.compile(
    r"^(?:\d{4}-\d\d-\d\d [\d:.]+: ([IWEF]) \S+\]|([IWEF])\d{4} [\d:.]+\s+\d+ \S+\])\s?(.*)$"
)
_PY_LOG = re.compile(r"^(INFO|WARNING|ERROR|CRITICAL):(?:tensorflow|absl|root):(.*)$")


def classify_log(text: str, gpu_host: bool) -> Result:
    """Sort TensorFlow's stderr lines into known-benign, known problems and the unclassified."""
    benign: Dict[str, int] = {}
    problems: List[str] = []
    warnings: List[str] = []
    unclassified: List[str] = []
    rules = [(re.compile(p), label, kind) for p, label, kind in LOG_RULES]
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        m = _TF_LINE.match(line)
        py = _PY_LOG.match(line)
        level = (m.group(1) or m.group(2)) if m else (py.group(1)[0] if py else "")
        message = m.group(3) if m else (py.group(2) if py else line)
        for rx, label, kind in rules:
            if rx.search(message):
                if kind == "benign" or (kind == "no_gpu" and not gpu_host):
                    benign[label] = benign.get(label, 0) + 1
                elif kind == "warning":
                    warnings.append(line)
                else:
                    problems.append(line)
                break
        else:
            if level in ("W", "E", "F", "C") or re.search(
                r"Error|Warning|Traceback|Exception", message
            ):
                unclassified.append(line)
            else:
                benign["other information"] = benign.get("other information", 0) + 1
    return {
        "benign": benign,
        "problems": problems[:50],
        "warnings": warnings[:50],
        "unclassified": unclassified[:50],
        "lines": len(lines),
    }


def judge_log(classified: Result) -> Tuple[str, str]:
    n_benign = sum(classified["benign"].values())
    if classified["problems"]:
        return FAIL, "known problem in TensorFlow's log: {}".format(
            classified["problems"][0][-300:]
        )
    if classified["warnings"] or classified["unclassified"]:
        first = (classified["warnings"] + classified["unclassified"])[0]
        return WARN, "{} log line(s) not known to be harmless, first: {}".format(
            len(classified["warnings"]) + len(classified["unclassified"]), first[-300:]
        )
    return PASS, "{} log line(s), all known to be harmless{}".format(
        n_benign,
        " ({})".format(", ".join(sorted(classified["benign"]))) if classified["benign"] else "",
    )


def summarize(checks: List[Result], gpu_count: int, require_gpu: bool, seconds: float) -> Result:
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    return {
        "status": FAIL if counts[FAIL] else PASS,
        "passed": counts[PASS],
        "warned": counts[WARN],
        "skipped": counts[SKIP],
        "failed": counts[FAIL],
        "gpu_count": gpu_count,
        "require_gpu": require_gpu,
        "seconds": round(seconds, 2),
    }


def render_text(report: Result) -> str:
    """The readable summary of a report."""
    env = report.get("environment", {})
    gpus = env.get("gpus") or []
    head = "TensorFlow {} on Python {}, {}".format(
        env.get("tensorflow") or "?",
        env.get("python") or "?",
        "{} GPU(s): {}".format(len(gpus), ", ".join(str(g.get("name")) for g in gpus))
        if gpus
        else "no GPU (CPU mode)",
    )
    lines = ["smoke test: " + head]
    for c in report.get("checks", []):
        lines.append(
            "  {:<4}  {:<18} {}".format(
                str(c.get("status", "?")).upper(), c.get("name"), c.get("reason")
            )
        )
    s = report.get("summary", {})
    lines.append(
        "{}: {} passed, {} warned, {} skipped, {} failed in {} s".format(
            str(s.get("status", "?")).upper(),
            s.get("passed"),
            s.get("warned"),
            s.get("skipped"),
            s.get("failed"),
            s.get("seconds"),
        )
    )
    return "\n".join(lines) + "\n"


# -- the host, without TensorFlow -------------------------------------------------------------


def _cuda_driver() -> Optional[Any]:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def probe_driver() -> Result:
    """NVIDIA driver and GPUs as the driver API reports them, independent of TensorFlow."""
    info: Result = {
        "kernel_module": None,
        "cuda": None,
        "host_gpus": 0,
        "devices": [],
        "error": None,
    }
    try:
        with open("/proc/driver/nvidia/version") as fh:
            m = re.search(r"Module(?:\s+for\s+\S+)?\s+([0-9][0-9.]+)", fh.read())
            info["kernel_module"] = m.group(1) if m else None
    except OSError:
        pass
    cuda = _cuda_driver()
    if cuda is None:
        info["error"] = "libcuda.so.1 cannot be opened (no NVIDIA driver)"
        return info
    v = ctypes.c_int()
    if cuda.cuDriverGetVersion(ctypes.byref(v)) == 0:
        info["cuda"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
    rc = cuda.cuInit(0)
    if rc != 0:
        info["error"] = "cuInit failed with CUDA error {}{}".format(
            rc, " (no CUDA device)" if rc == 100 else ""
        )
        return info
    n = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(n))
    info["host_gpus"] = n.value
    for i in range(n.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        major, minor = ctypes.c_int(), ctypes.c_int()
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
        info["devices"].append(
            {
                "index": i,
                "name": name.value.decode(errors="replace"),
                "compute_capability": f"{major.value}.{minor.value}",
            }
        )
    return info


def device_memory(index: int) -> Optional[Tuple[int, int]]:
    """(used, total) MiB of one GPU, device-wide, through the primary context TensorFlow shares."""
    cuda = _cuda_driver()
    if cuda is None:
        return None
    dev, ctx, free, total = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    if cuda.cuDeviceGet(ctypes.byref(dev), index) != 0:
        return None
    if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
        return None
    try:
        if cuda.cuCtxPushCurrent_v2(ctx) != 0:
            return None
        try:
            if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
                return None
        finally:
            cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        release = (
            getattr(cuda, "cuDevicePrimaryCtxRelease_v2", None) or cuda.cuDevicePrimaryCtxRelease
        )
        release(dev)
    mib = 1 << 20
    return (total.value - free.value) // mib, total.value // mib


def loaded_libraries() -> List[str]:
    """Files mapped into this process (what the dynamic loader really loaded)."""
    seen: List[str] = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    path = parts[5].strip()
                    if path not in seen:
                        seen.append(path)
    except OSError:
        pass
    return seen


def elf_search_path(path: str) -> Tuple[str, List[str]]:
    """('RUNPATH'|'RPATH'|'', dirs) of an ELF64 shared object, $ORIGIN expanded."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as d:
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            return "", []
        phoff = struct.unpack_from("<Q", d, 0x20)[0]
        phentsize, phnum = struct.unpack_from("<HH", d, 0x36)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", d, phoff + i * phentsize
            )
            if p_type == 1:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return "", []
        strtab, wanted = None, {}
        for j in range(dynamic[1] // 16):
            tag, val = struct.unpack_from("<qQ", d, dynamic[0] + 16 * j)
            if tag == 0:
                break
            if tag == 5:
                strtab = val
            elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
                wanted[tag] = val
        if strtab is None or not wanted:
            return "", []
        base = next((off + strtab - va for va, off, sz in loads if va <= strtab < va + sz), None)
        if base is None:
            return "", []
        tag = 29 if 29 in wanted else 15
        start = base + wanted[tag]
        raw = d[start : d.find(b"\0", start)].decode(errors="replace")
    origin = os.path.dirname(os.path.realpath(path))
    dirs: List[str] = []
    for entry in raw.split(":"):
        entry = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        entry = os.path.normpath(entry) if entry else ""
        if entry and entry not in dirs:
            dirs.append(entry)
    return ("RUNPATH" if tag == 29 else "RPATH"), dirs


def _library_hint(soname: str) -> Optional[str]:
    """Where a library TensorFlow cannot find lies in this environment, if anywhere."""
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    roots += [os.path.join(sys.prefix, "lib")]
    for root in roots:
        nvidia = os.path.join(root, "nvidia")
        if os.path.isdir(nvidia):
            for sub in sorted(os.listdir(nvidia)):
                candidate = os.path.join(nvidia, sub, "lib", soname)
                if os.path.exists(candidate):
                    return candidate
        candidate = os.path.join(root, soname)
        if root.endswith("/lib") and os.path.exists(candidate):
            return candidate
    return None


# -- the child: TensorFlow checks ------------------------------------------------------------


class Ctx:
    """What the checks share inside one child process."""

    def __init__(self, tf: Any, args: argparse.Namespace, expected: Dict[str, Any]) -> None:
        self.tf = tf
        self.args = args
        self.expected = expected
        self.host_gpus: int = int(args.host_gpus)
        self.gpus: List[Any] = []
        self.setup: Result = {}
        self.facts: Result = {}
        self.located: Dict[str, Result] = {}
        self.search: Optional[Tuple[str, List[str]]] = None

    @property
    def gpu_host(self) -> bool:
        return bool(self.gpus) or self.host_gpus > 0

    @property
    def missing_is_failure(self) -> bool:
        return self.gpu_host or bool(self.args.require_gpu)

    def tf_search_path(self) -> Tuple[str, List[str]]:
        """The dirs TensorFlow's dso_loader searches besides the loader cache, in order."""
        if self.search is None:
            kind: str = ""
            dirs: List[str] = []
            framework = os.path.join(self.facts.get("tf_dir") or "", "libtensorflow_framework.so.2")
            if os.path.exists(framework):
                try:
                    kind, dirs = elf_search_path(framework)
                except (OSError, ValueError, struct.error):
                    kind, dirs = "", []
            ld = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
            # The caller's DT_RPATH comes before LD_LIBRARY_PATH; DT_RUNPATH after it.
            ordered = dirs + ld if kind == "RPATH" else ld + dirs
            self.search = (kind, ordered)
        return self.search

    def locate(self, lib: str, soname: str) -> Result:
        """Which file TensorFlow gets for `soname`, searching as its dlopen does."""
        if lib in self.located:
            return self.located[lib]
        entry: Result = {"soname": soname, "path": None, "loaded_by_tf": False, "error": None}
        mine = [p for p in loaded_libraries() if os.path.basename(p).startswith(soname)]
        if mine:
            entry.update(path=mine[0], loaded_by_tf=True)
        else:
            _, dirs = self.tf_search_path()
            tried = False
            for d in dirs:
                candidate = os.path.join(d, soname)
                if os.path.exists(candidate):
                    tried = True
                    try:
                        ctypes.CDLL(candidate)
                        entry["path"] = os.path.realpath(candidate)
                    except OSError as exc:
                        entry["error"] = str(exc)
                    break
            if not tried:
                try:
                    ctypes.CDLL(soname)
                    found = [
                        p for p in loaded_libraries() if os.path.basename(p).startswith(soname)
                    ]
                    entry["path"] = found[0] if found else soname
                except OSError as exc:
                    entry["error"] = str(exc)
            if entry["path"] is None:
                entry["hint"] = _library_hint(soname)
        self.located[lib] = entry
        return entry


def _fault(check: str) -> None:
    kind, _, where = os.environ.get(FAULT_VAR, "").partition(":")
    if where == check and kind == "hang":
        time.sleep(10**6)
    if where == check and kind == "crash":
        os.abort()


def _read_header_defines(path: str) -> Dict[str, str]:
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return {}
    return dict(re.findall(r'#define\s+(\w+)\s+"?([^"\s]*)"?', text))


def _dist_version(name: str) -> Optional[str]:
    try:
        from importlib import metadata

        return str(metadata.version(name))
    except Exception:
        return None


def child_setup(args: argparse.Namespace, expected: Dict[str, Any]) -> Ctx:
    """Import TensorFlow and make the settings that must precede its initialisation."""
    t0 = time.monotonic()
    import tensorflow as tf

    ctx = Ctx(tf, args, expected)
    ctx.facts["tf_import_seconds"] = round(time.monotonic() - t0, 2)
    setup: Result = {}
    gpus = list(tf.config.list_physical_devices("GPU"))
    ctx.gpus = gpus
    if gpus:
        limits = {}
        for g in gpus:
            conf = tf.config.get_logical_device_configuration(g)
            if conf and getattr(conf[0], "memory_limit", None):
                limits[g.name] = int(conf[0].memory_limit)
        if limits:
            setup["memory_limit_mib"] = limits
        else:
            try:
                for g in gpus:
                    tf.config.experimental.set_memory_growth(g, True)
                setup["memory_growth"] = True
            except (RuntimeError, ValueError) as exc:
                setup["memory_growth_error"] = str(exc)
    else:
        try:
            cpu = tf.config.list_physical_devices("CPU")[0]
            if len(tf.config.get_logical_device_configuration(cpu) or []) < 2:
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
                )
            setup["virtual_cpus"] = 2
        except (RuntimeError, ValueError, IndexError) as exc:
            setup["virtual_cpus_error"] = str(exc)
    ctx.setup = setup
    tf_dir = os.path.dirname(os.path.abspath(tf.__file__))
    build_info = {
        k: (list(v) if isinstance(v, (list, tuple)) else v)
        for k, v in dict(tf.sysconfig.get_build_info()).items()
    }
    include = os.path.join(tf_dir, "include", "third_party", "gpus")
    cuda_config = {
        k: v
        for k, v in _read_header_defines(os.path.join(include, "cuda", "cuda_config.h")).items()
        if k.startswith("TF_") and k.endswith("_VERSION")
    }
    cudnn_h = _read_header_defines(os.path.join(include, "cudnn", "include", "cudnn_version.h"))
    cudnn_header = (
        "{}.{}.{}".format(
            cudnn_h["CUDNN_MAJOR"], cudnn_h["CUDNN_MINOR"], cudnn_h["CUDNN_PATCHLEVEL"]
        )
        if {"CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"} <= set(cudnn_h)
        else None
    )
    gpu_facts = []
    for i, g in enumerate(gpus):
        try:
            det = tf.config.experimental.get_device_details(g)
        except Exception:
            det = {}
        cc = det.get("compute_capability")
        gpu_facts.append(
            {
                "index": i,
                "name": det.get("device_name"),
                "compute_capability": "{}.{}".format(*cc) if cc else None,
            }
        )
    import numpy

    ctx.facts.update(
        tensorflow=str(tf.__version__),
        keras=_dist_version("keras"),
        numpy=str(numpy.__version__),
        tf_dir=tf_dir,
        build_info=build_info,
        cuda_config=cuda_config,
        cudnn_header=cudnn_header,
        gpus=gpu_facts,
        setup=setup,
    )
    return ctx


def check_tf_version(ctx: Ctx) -> Result:
    found = ctx.facts["tensorflow"]
    want = ctx.expected.get("tf_version")
    if not want:
        return result(SKIP, f"TensorFlow {found}; no expected version given", version=found)
    if found == want:
        return result(PASS, f"TensorFlow {found}, as the spec says", version=found)
    return result(FAIL, f"TensorFlow {found} is installed; the spec says {want}", version=found)


def check_cuda_build(ctx: Ctx) -> Result:
    built = bool(ctx.tf.test.is_built_with_cuda())
    gpu = bool(ctx.tf.test.is_built_with_gpu_support())
    details = {"is_built_with_cuda": built, "is_built_with_gpu_support": gpu}
    if built:
        return result(PASS, "a CUDA build (is_built_with_cuda)", **details)
    return result(
        FAIL,
        "TensorFlow {} is a CPU-only build (is_built_with_cuda() is False): it can never use "
        "a GPU; install the CUDA build".format(ctx.facts["tensorflow"]),
        **details,
    )


def check_build_info(ctx: Ctx) -> Result:
    bi = ctx.facts["build_info"]
    cuda_v, cudnn_v = bi.get("cuda_version"), bi.get("cudnn_version")
    header = ctx.facts.get("cudnn_header")
    targets = list(bi.get("cuda_compute_capabilities") or [])
    details = {
        "cuda_version": cuda_v,
        "cudnn_version": cudnn_v,
        "cudnn_header": header,
        "compute_capabilities": targets,
    }
    if not bi.get("is_cuda_build", bool(cuda_v)):
        return result(FAIL, "build info names no CUDA: a CPU-only build", **details)
    problems = []
    want_cuda, want_cudnn = ctx.expected.get("cuda"), ctx.expected.get("cudnn")
    if want_cuda and not same_release(cuda_v, want_cuda):
        problems.append(f"built with CUDA {cuda_v}, the spec says {want_cuda}")
    built_cudnn = header or cudnn_v
    if want_cudnn and not same_release(built_cudnn, want_cudnn):
        problems.append(f"built with cuDNN {built_cudnn}, the spec says {want_cudnn}")
    if problems:
        return result(FAIL, "; ".join(problems), **details)
    text = f"built with CUDA {cuda_v}, cuDNN {built_cudnn}"
    want_targets = ctx.expected.get("compute_targets")
    if want_targets and sorted(want_targets) != sorted(targets):
        return result(
            WARN,
            "{}; compute targets {} differ from the spec's {}".format(
                text, ", ".join(targets), ", ".join(want_targets)
            ),
            **details,
        )
    if not want_cuda:
        return result(PASS, text + " (no expected versions given)", **details)
    return result(PASS, text + ", as the spec says", **details)


def _libraries(ctx: Ctx) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(required, optional) library -> soname. Required: what TensorFlow's dlopen check loads at
    GPU start-up (its dlopen_checker: no cuRAND), plus NCCL when there are several GPUs."""
    names = sonames(ctx.facts["cuda_config"], ctx.facts["build_info"])
    optional = {k: names.pop(k) for k in OPTIONAL_LIBRARIES if k in names}
    if len(ctx.gpus) > 1 or ctx.host_gpus > 1:
        names["nccl"] = NCCL_SONAME  # MirroredStrategy's all-reduce across GPUs
    else:
        optional["nccl"] = NCCL_SONAME
    return names, optional


def _not_opened(entry: Result) -> str:
    err = str(entry.get("error") or "")
    if err.startswith(str(entry["soname"]) + ":") and "No such file" in err:
        text = "not found"
    else:
        text = err
    if entry.get("hint"):
        text += (
            "; it is at {}, a folder TensorFlow does not search: put it on LD_LIBRARY_PATH".format(
                entry["hint"]
            )
        )
    return text


def check_cuda_libraries(ctx: Ctx) -> Result:
    required, optional = _libraries(ctx)
    if not required:
        return result(SKIP, "this build names no CUDA libraries")
    kind, dirs = ctx.tf_search_path()
    libs = {lib: ctx.locate(lib, so) for lib, so in required.items()}
    extra = {lib: ctx.locate(lib, so) for lib, so in optional.items()}
    missing = [e for e in libs.values() if e["path"] is None]
    details = {
        "libraries": libs,
        "optional": extra,
        "cannot_open": [e["soname"] for e in missing],
        "search": {"tf_search_kind": kind or None, "dirs": dirs},
    }
    absent = [e["soname"] for e in extra.values() if e["path"] is None]
    note = (
        " (optional, not loaded at start-up: {} not found)".format(", ".join(absent))
        if absent
        else ""
    )
    if not missing:
        where = sorted({os.path.dirname(str(e["path"])) for e in libs.values()})
        return result(
            PASS,
            "all {} libraries TensorFlow loads open ({} loaded by it) from {}{}".format(
                len(libs),
                sum(1 for e in libs.values() if e["loaded_by_tf"]),
                ", ".join(where),
                note,
            ),
            **details,
        )
    plain = [e["soname"] for e in missing if _not_opened(e) == "not found"]
    parts = [
        "{}: {}".format(e["soname"], _not_opened(e)) for e in missing if e["soname"] not in plain
    ]
    if plain:
        parts.insert(0, "{} not found".format(", ".join(plain)))
    reason = "cannot open {}".format("; ".join(parts))
    if ctx.missing_is_failure:
        return result(FAIL, reason + note, **details)
    return result(SKIP, "no GPU on this host, and " + reason, **details)


def _runtime_check(
    ctx: Ctx, lib: str, what: str, want: Optional[str], decode: Callable[[int], str]
) -> Result:
    names, _ = _libraries(ctx)
    if lib not in names:
        return result(SKIP, f"this build names no {what} library")
    entry = ctx.locate(lib, names[lib])
    # Every loaded piece (cuDNN 9 is a shim that loads libcudnn_graph, _ops, ... by name).
    copies = sorted(
        {p for p in loaded_libraries() if re.match(rf"lib{lib}[._]", os.path.basename(p))}
    )
    details = {
        "soname": entry["soname"],
        "path": entry["path"],
        "loaded_by_tf": entry["loaded_by_tf"],
        "version": None,
        "copies": copies,
    }
    if entry["path"] is None:
        reason = "cannot open {}: {}".format(entry["soname"], _not_opened(entry))
        if ctx.missing_is_failure:
            return result(FAIL, reason, **details)
        return result(SKIP, "no GPU on this host; " + reason, **details)
    try:
        details["version"] = decode(_raw_version(str(entry["path"]), lib, entry["loaded_by_tf"]))
    except (OSError, AttributeError, ValueError) as exc:
        status = FAIL if ctx.missing_is_failure else SKIP
        return result(
            status, "cannot read the version of {}: {}".format(entry["path"], exc), **details
        )
    status, reason = judge_library_version(what, details["version"], want)
    reason += " ({})".format(entry["path"])
    folders = sorted({os.path.dirname(p) for p in copies})
    if len(folders) > 1:
        reason += "; its pieces come from {} folders: {}".format(len(folders), ", ".join(copies))
        status = WARN if status == PASS else status
    if not entry["loaded_by_tf"] and status != FAIL:
        if ctx.gpus:
            return result(
                FAIL, "TensorFlow has a GPU but did not load " + entry["soname"], **details
            )
        return result(
            SKIP, "no GPU, so TensorFlow loads none; the copy it would load: " + reason, **details
        )
    return result(status, reason, **details)


_VERSION_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
if sys.argv[2] == "cudart":
    v = ctypes.c_int()
    rc = lib.cudaRuntimeGetVersion(ctypes.byref(v))
    print(v.value if rc == 0 else -abs(rc))
else:
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    print(lib.cudnnGetVersion())
"""


def _raw_version(path: str, lib: str, loaded_by_tf: bool) -> int:
    """cudaRuntimeGetVersion / cudnnGetVersion of the library at `path`.

    A library TensorFlow has loaded (and, for cuDNN, used) is asked in this process. Any other is
    asked in a throwaway process: cuDNN's dispatcher aborts the process when its sub-libraries
    (libcudnn_ops_infer.so.8, libcudnn_graph.so.9, ...) cannot be loaded.
    """
    if loaded_by_tf:
        handle = ctypes.CDLL(path)
        if lib == "cudart":
            v = ctypes.c_int()
            rc = handle.cudaRuntimeGetVersion(ctypes.byref(v))
            if rc != 0:
                raise OSError(f"cudaRuntimeGetVersion returned {rc}")
            return int(v.value)
        handle.cudnnGetVersion.restype = ctypes.c_size_t
        return int(handle.cudnnGetVersion())
    done = subprocess.run(
        [sys.executable, "-c", _VERSION_PROBE, path, lib],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )
    out = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or not out.lstrip("-").isdigit():
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [
            _describe_exit(-done.returncode if done.returncode < 0 else done.returncode)
        ]
        hint = "; cuDNN's sub-libraries (libcudnn_graph, _ops, ...) must lie next to it"
        raise OSError(
            f"asking it for its version failed ({why[0][-300:]}){hint if lib == 'cudnn' else ''}"
        )
    if int(out) < 0:
        raise OSError(f"cudaRuntimeGetVersion returned {-int(out)}")
    return int(out)


def _cudart_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _cudnn_version(v: int) -> str:
    # cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 and older major*1000 + minor*100.
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def check_cudart(ctx: Ctx) -> Result:
    return _runtime_check(ctx, "cudart", "CUDA runtime", ctx.expected.get("cuda"), _cudart_version)


def check_cudnn(ctx: Ctx) -> Result:
    if ctx.gpus:
        # A convolution makes TensorFlow load and initialise cuDNN, as training would.
        tf = ctx.tf
        with tf.device("/GPU:0"):
            y = tf.nn.conv2d(tf.ones([1, 8, 8, 4]), tf.ones([3, 3, 4, 4]), 1, "SAME")
        if abs(float(y[0, 4, 4, 0].numpy()) - 36.0) > 1e-3:
            return result(FAIL, "a cuDNN convolution gave a wrong result")
    return _runtime_check(ctx, "cudnn", "cuDNN", ctx.expected.get("cudnn"), _cudnn_version)


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
                f"CUDA_VISIBLE_DEVICES is {seen!r}, the environment sets {want_dev!r}: is it "
                "activated?"
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
                "TF_FORCE_GPU_ALLOW_GROWTH is {!r}, the environment sets 'true': is it "
                "activated?".format(env["TF_FORCE_GPU_ALLOW_GROWTH"])
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
                "is it activated?"
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
        dev = device_memory(i)
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


def _sync(t: Any) -> None:
    # Reading one element back waits for the stream, and so for every kernel queued before it.
    t[0, 0].numpy()


def _rel_error(got: Any, ref: Any) -> float:
    import numpy as np

    got64, ref64 = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(got64 - ref64) / max(np.linalg.norm(ref64), 1e-30))


MATMUL_KINDS = (  # name, dtype, TF32 on?, tolerated relative error
    ("fp32", "float32", False, 1e-5),
    ("tf32", "float32", True, 1e-2),
    ("fp16", "float16", None, 1e-2),
    ("bf16", "bfloat16", None, 3e-2),
)


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
                errors[name] = _rel_error(tf.cast(small, tf.float32).numpy(), ref)
                if errors[name] > tol:
                    raise ValueError(
                        f"{name} matmul on {device} is wrong: relative error "
                        f"{errors[name]:.2e} > {tol:g}"
                    )
                a, b = tf.cast(a32, dt), tf.cast(b32, dt)
                for _ in range(2):
                    _sync(tf.matmul(a, b))
                samples = []
                for _ in range(reps):
                    t = time.perf_counter()
                    for _ in range(iters):
                        c = tf.matmul(a, b)
                    _sync(c)
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
    error = max(_rel_error(v, ref) for v in values)
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
    return tf.keras, str(getattr(tf.keras, "__version__", "") or _dist_version("keras") or "")


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
    err = _rel_error(got, ref)
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


CHECK_FUNCS: Dict[str, Callable[[Ctx], Result]] = {
    "tf_version": check_tf_version,
    "cuda_build": check_cuda_build,
    "build_info": check_build_info,
    "cuda_libraries": check_cuda_libraries,
    "cudart": check_cudart,
    "cudnn": check_cudnn,
    "gpus": check_gpus,
    "gpu_policy": check_gpu_policy,
    "memory": check_memory,
    "matmul": check_matmul,
    "mirrored_strategy": check_mirrored_strategy,
    "mixed_float16": check_mixed_float16,
    "mixed_bfloat16": check_mixed_bfloat16,
    "xla": check_xla,
}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return "{}: {}".format(type(exc).__name__, text[0][:400] if text else "")


def child_main(
    args: argparse.Namespace, expected: Dict[str, Any], emit: Callable[[Result], None]
) -> None:
    try:
        ctx = child_setup(args, expected)
    except BaseException as exc:
        emit(
            {"event": "setup", "error": _one_line(exc), "traceback": traceback.format_exc()[-3000:]}
        )
        return
    emit({"event": "setup", "facts": ctx.facts})
    for name in args.checks:
        emit({"event": "start", "check": name})
        t = time.monotonic()
        _fault(name)
        try:
            r = CHECK_FUNCS[name](ctx)
        except Exception as exc:
            r = result(FAIL, _one_line(exc), traceback=traceback.format_exc()[-3000:])
        r["seconds"] = round(time.monotonic() - t, 3)
        emit(dict(r, event="result", check=name))
    emit({"event": "done"})


# -- the parent: children, deadlines, the report ----------------------------------------------


class ChildRun:
    """The outcome of one child: facts, results, which check it was in when it stopped."""

    def __init__(self) -> None:
        self.facts: Optional[Result] = None
        self.setup_error: Optional[str] = None
        self.results: Dict[str, Result] = {}
        self.stuck: Optional[str] = None  # "setup" or a check name
        self.why: Optional[str] = None
        self.stderr = ""


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _collect(stream: IO[bytes], into: List[bytes]) -> None:
    for chunk in iter(lambda: stream.read(65536), b""):
        into.append(chunk)


def run_child(
    args: argparse.Namespace,
    checks: List[str],
    budget: Callable[[str], float],
    extra_env: Dict[str, str],
) -> ChildRun:
    run = ChildRun()
    read_fd, write_fd = os.pipe()
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--events-fd",
        str(write_fd),
        "--checks",
        ",".join(checks),
        "--host-gpus",
        str(args.host_gpus),
        "--timeout",
        str(args.timeout),
    ]
    if args.expected:
        argv += ["--expected", args.expected]
    if args.require_gpu:
        argv.append("--require-gpu")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write_fd,),
        start_new_session=True,
        env=dict(os.environ, **extra_env),
    )
    os.close(write_fd)
    events: "queue.Queue[Optional[Result]]" = queue.Queue()

    def pump() -> None:
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    events.put(json.loads(line))
                except ValueError:
                    continue
        events.put(None)

    out_chunks: List[bytes] = []
    err_chunks: List[bytes] = []
    threads = [
        threading.Thread(target=pump, daemon=True),
        threading.Thread(target=_collect, args=(proc.stdout, out_chunks), daemon=True),
        threading.Thread(target=_collect, args=(proc.stderr, err_chunks), daemon=True),
    ]
    for th in threads:
        th.start()
    current, allowed = "setup", budget("setup")
    deadline = time.monotonic() + allowed
    finished = False
    while True:
        try:
            ev = events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            run.stuck = current
            run.why = "did not finish within {:g} s (a hang){}".format(
                allowed, "" if current == "setup" else "; the checks after it ran in a new process"
            )
            break
        if ev is None:
            break
        kind = ev.get("event")
        if kind == "setup":
            if "error" in ev:
                run.setup_error = str(ev["error"])
                run.facts = {"setup_traceback": ev.get("traceback")}
            else:
                run.facts = ev.get("facts") or {}
            current = "(between checks)"
        elif kind == "start":
            current = str(ev["check"])
        elif kind == "result":
            name = str(ev["check"])
            run.results[name] = {k: ev.get(k) for k in ("status", "reason", "details", "seconds")}
            current = "(between checks)"
        elif kind == "done":
            finished = True
            current = "(exit)"
        allowed = budget(current)
        deadline = time.monotonic() + allowed
    if proc.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10 if finished or run.stuck is None else 0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for th in threads[1:]:
        th.join(timeout=10)
    run.stderr = b"".join(err_chunks).decode("utf-8", errors="replace")
    if not finished and run.stuck is None and run.setup_error is None:
        run.stuck = current if current not in ("(between checks)", "(exit)") else None
        # The last line that is not known chatter is the best clue to why it died.
        tail = classify_log(run.stderr, gpu_host=args.host_gpus > 0)
        clue = (tail["problems"] + tail["warnings"] + tail["unclassified"])[-1:]
        run.why = "the test process died ({}){}".format(
            _describe_exit(proc.returncode), ": " + clue[0][-300:] if clue else ""
        )
        if run.stuck is None and current != "(exit)":
            run.stuck = "(between checks)"
    return run


def run_all(args: argparse.Namespace, checks: List[str]) -> Tuple[Result, Dict[str, Result], str]:
    """Run `checks` in as many children as hangs and crashes need; (tf facts, results, stderr)."""
    facts: Result = {}
    results: Dict[str, Result] = {}
    logs: List[str] = []
    todo = [c for c in checks if c not in PARENT_CHECKS]
    gpu_count = [0]

    def budget(where: str) -> float:
        if where == "matmul":
            return float(args.timeout) * max(1, gpu_count[0])
        if where == "setup":
            # Importing TensorFlow and finding the GPUs is not what --timeout is meant to bound.
            return float(args.setup_timeout)
        return float(args.timeout)

    attempts = 0
    while todo and attempts <= len(checks):
        attempts += 1
        run = run_child(args, todo, budget, {})
        logs.append(run.stderr)
        if run.facts and not facts:
            facts = run.facts
            gpu_count[0] = len(facts.get("gpus") or [])
        results.update(run.results)
        if run.setup_error or run.stuck == "setup":
            reason = (
                f"TensorFlow could not be imported: {run.setup_error}"
                if run.setup_error
                else f"while importing TensorFlow: {run.why}"
            )
            first = todo[0]
            results[first] = result(FAIL, reason)
            for c in todo[1:]:
                results[c] = result(SKIP, "not run: TensorFlow did not start")
            todo = []
            break
        todo = [c for c in todo if c not in results]
        if run.stuck and run.stuck in todo:
            results[run.stuck] = result(FAIL, str(run.why))
            todo.remove(run.stuck)
        elif todo and run.why:
            results[todo[0]] = result(FAIL, f"not run: {run.why}")
            todo.pop(0)
    for c in todo:
        results[c] = result(FAIL, "not run: the test process kept failing")
    mirrored = results.get("mirrored_strategy")
    if (
        mirrored
        and mirrored["status"] == FAIL
        and gpu_count[0] > 1
        and os.environ.get("NCCL_P2P_DISABLE") != "1"
    ):
        retry = run_child(args, ["mirrored_strategy"], budget, {"NCCL_P2P_DISABLE": "1"})
        logs.append(retry.stderr)
        again = retry.results.get("mirrored_strategy") or result(FAIL, str(retry.why))
        mirrored["reason"] = "{}; with NCCL_P2P_DISABLE=1: {}".format(
            mirrored["reason"],
            "it passes, so set NCCL_P2P_DISABLE=1 in this environment"
            if again["status"] == PASS
            else "it fails too ({})".format(again["reason"]),
        )
        mirrored.setdefault("details", {})["retry"] = {"env": {"NCCL_P2P_DISABLE": "1"}, **again}
    return facts, results, "".join(logs)


def _variables() -> Dict[str, str]:
    return {k: os.environ[k] for k in REPORTED_VARIABLES if k in os.environ}


def build_report(args: argparse.Namespace, expected: Dict[str, Any]) -> Result:
    t0 = time.monotonic()
    driver = probe_driver()
    args.host_gpus = int(driver["host_gpus"])
    checks = [c for c in CHECKS if c in args.checks]
    environment: Result = {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "variables": _variables(),
        "driver": driver,
    }
    if args.in_process:
        facts, results, stderr = _run_in_process(args, expected, checks)
    else:
        facts, results, stderr = run_all(args, checks)
    environment.update({k: v for k, v in facts.items() if k != "tf_dir"})
    environment.setdefault("gpus", [])
    if "logs" in checks:
        if args.in_process:
            results["logs"] = result(SKIP, "the log is not captured with --in-process")
        else:
            classified = classify_log(stderr, gpu_host=driver["host_gpus"] > 0)
            status, reason = judge_log(classified)
            results["logs"] = result(status, reason, **classified)
    ordered = []
    for name in checks:
        r = results.get(name) or result(FAIL, "no result")
        ordered.append(
            {
                "name": name,
                "status": r.get("status", FAIL),
                "reason": r.get("reason", ""),
                "seconds": r.get("seconds"),
                "details": r.get("details") or {},
            }
        )
    seconds = time.monotonic() - t0
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "expected": expected,
        "environment": environment,
        "checks": ordered,
        "summary": summarize(ordered, len(environment["gpus"]), bool(args.require_gpu), seconds),
    }


def _run_in_process(
    args: argparse.Namespace, expected: Dict[str, Any], checks: List[str]
) -> Tuple[Result, Dict[str, Result], str]:
    args.checks = [c for c in checks if c not in PARENT_CHECKS]
    events: List[Result] = []
    child_main(args, expected, events.append)
    facts: Result = {}
    results: Dict[str, Result] = {}
    for ev in events:
        if ev["event"] == "setup":
            facts = ev.get("facts") or {}
            if "error" in ev:
                results[args.checks[0]] = result(
                    FAIL, "TensorFlow could not be imported: " + ev["error"]
                )
                for c in args.checks[1:]:
                    results[c] = result(SKIP, "not run: TensorFlow did not start")
        elif ev["event"] == "result":
            results[ev["check"]] = {
                k: ev.get(k) for k in ("status", "reason", "details", "seconds")
            }
    return facts, results, ""


def load_expected(path: Optional[str]) -> Dict[str, Any]:
    merged = dict(EXPECTED)
    if path:
        with open(path) as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        merged.update(data)
    return merged


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="smoke_test.py",
        description="Prove what TensorFlow really uses in this environment (see the docstring).",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    p.add_argument("--expected", metavar="FILE", help="JSON object of expected versions")
    p.add_argument("--require-gpu", action="store_true", help="no GPU is a failure")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds each check may take before it counts as hung (default %(default)g)",
    )
    p.add_argument(
        "--setup-timeout",
        type=float,
        default=SETUP_TIMEOUT,
        metavar="S",
        help="seconds importing TensorFlow and finding GPUs may take (default %(default)g)",
    )
    p.add_argument(
        "--checks",
        default=",".join(CHECKS),
        metavar="A,B",
        help="run only these checks (default: all)",
    )
    p.add_argument(
        "--in-process", action="store_true", help="no child process, no deadlines (debugging)"
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--events-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--host-gpus", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = [c.strip() for c in str(args.checks).split(",") if c.strip()]
    unknown = [c for c in names if c not in CHECKS]
    if unknown:
        p.error("unknown check(s) {}; known: {}".format(", ".join(unknown), ", ".join(CHECKS)))
    args.checks = names
    if args.timeout <= 0 or args.setup_timeout <= 0:
        p.error("--timeout and --setup-timeout must be positive")
    return args


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        expected = load_expected(args.expected)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"smoke_test.py: cannot read --expected: {exc}\n")
        return 2
    if args.child:
        out = os.fdopen(int(args.events_fd), "w", buffering=1)

        def emit(event: Result) -> None:
            out.write(json.dumps(event, default=str) + "\n")
            out.flush()

        child_main(args, expected, emit)
        out.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # TensorFlow's threads can make an orderly interpreter exit hang or crash.
        os._exit(0)
    report = build_report(args, expected)
    text = json.dumps(report, indent=2, default=str) + "\n"
    if args.out:
        _write_atomic(args.out, text)
    sys.stdout.write(text if args.json else render_text(report))
    return 1 if report["summary"]["status"] == FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
