"""The smoke test's report: its schema, status words, check names, summary and readable text.

Schema "provision-smoke-report", schema_version 1 (additions keep the version; a field that
changes meaning or disappears bumps it). One JSON object:
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
                          status "pass" | "warn" | "skip" | "fail" (status.CheckStatus); a
                          warn or skip never fails
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
                       the provision_env_hook start-up hook, which this check looks for
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

The host imports this module (with judge, and status for the status words) to read reports; the
report stays plain JSON dicts.
"""

from typing import Any, Dict, List, Optional, TypedDict

from .status import CHECK_STATUSES, FAIL, PASS, SKIP, WARN, CheckStatus

SCHEMA = "provision-smoke-report"
SCHEMA_VERSION = 1
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
    "frameworks",
    "logs",
)
# Checks a report of an earlier payload may lack (its verdict stands without them).
ADDED_LATER = ("frameworks",)
PARENT_CHECKS = ("logs",)  # judged from the children's stderr, after they have finished
DEFAULT_TIMEOUT = 180.0  # seconds one check may take before it counts as hung
SETUP_TIMEOUT = 300.0  # seconds importing TensorFlow and finding the GPUs may take
MEMORY_LIMIT_VAR = "PROVISION_GPU_MEMORY_LIMIT_MIB"
# The start-up hook `provision install` puts into every environment (provision/hooks/).
HOOK_MODULE = "provision_env_hook"
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

Result = Dict[str, Any]


class Expected(TypedDict, total=False):
    """What the smoke test must find: the spec's expectations, which `provision verify` writes to
    the --expected file (matrix.spec.expected). No file: nothing is expected ({})."""

    schema: int
    name: str
    path: str
    python: str
    tf_version: str
    cuda: str
    cudnn: str
    compute_min: str
    compute_targets: List[str]
    gpu_memory: Optional[str]  # "growth" or a limit in MiB
    gpus: Optional[str]  # CUDA_VISIBLE_DEVICES, "0,1"


def result(status: CheckStatus, reason: str, **details: object) -> Result:
    return {"status": status, "reason": reason, "details": details}


def summarize(checks: List[Result], gpu_count: int, require_gpu: bool, seconds: float) -> Result:
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in CHECK_STATUSES}
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
