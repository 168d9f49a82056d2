"""The benchmark's report: its schema, the choices of its settings, and reading a report of any
schema version. The host imports this module, and no other module of the benchmark, to check
options before TensorFlow loads and to read, compare and show reports.

Schema 2 (one environment): {"schema": 2, "tool": "provision-bench",
  "tensorflow": "2.21.0", "devices": ["/device:GPU:0", ...],
  "device_details": [{"device", "name", "compute_capability"}],
  "software": {"python", "tensorflow", "keras", "keras_module", "numpy",
               "build": {"cuda", "cudnn", "compute_capabilities"},
               "loaded": {"cudart": {"version", "path"} | null, "cudnn": ... | null}},
  "settings": {every option, "jit": "auto" | "on" | "off", "batchnorm", "optimizer_jit", ...},
  "xla_environment": {"XLA_FLAGS", "TF_XLA_FLAGS"} (as in effect, or null),
  "gpu_policy": {"policy": "limit" | "growth" | "none", "limit_mib", "devices": {name: what is
                 in effect}, "set_by": {name: who set it}, "errors": [...]} (gpu_policy.py),
  "task": {"kind": "synthetic" | "dataset", "description", "classes", "chance",
           "train_images", "test_images"},
  "matmul": [{"precision", "n", "tflops"}],
  "runs": [{"gpus", "precision", "global_batch", "images_per_s", "step_ms", "epoch_s",
            "accuracy", "speedup", "efficiency", "first_step_s", "seconds", "estimate_s",
            "executions", "timed_steps", "xla", "optimizer_xla", "compute_dtype",
            "batchnorm_layers", "input_shape", "strategy", "replicas", "pipeline",
            "custom_traces", "profile", "loss_scale", "at_chance"}],
  "failed": [{"gpus", "precision", "error"}], "skipped": [{"gpus", "precision", "reason"}]
  (a first step stopped by --max-seconds: "compile over N s: ..."),
  "messages": [...]}
and, added by the host: "hardware" (what `provision bench` read from NVML / nvidia-smi: GPUs,
driver, the CUDA version it supports, the interconnect, the CPU), "environment" ({"name",
"python"}) and "command" (the `provision bench` command line that made it).
Several environments compared in one run: {"schema": 2, "tool": "provision-bench-set",
"reports": [report, ...], "errors": [{"environment", "error"}]}.

Schema 1 reports (no hardware, software, task or the newer settings) still read: `upgrade` fills
in the settings their runs had and leaves what they did not record as null.
"""

from __future__ import annotations

import copy
from typing import Dict, List, Optional, TypedDict

SCHEMA = 2
TOOL = "provision-bench"
SET_TOOL = "provision-bench-set"
EVENT = "provision-bench-event "  # a progress line on stderr: this prefix, then one JSON object

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
MODELS = ("resnet50", "small_cnn", "mlp")
JIT = ("auto", "on", "off")  # auto: Keras's own default (Keras 3 "auto", Keras 2 no XLA)
LOOPS = ("fit", "custom")  # Keras model.fit, or a tf.function training loop of our own
DATA = ("tf.data", "synthetic-tensor")  # a shuffled, batched, prefetched pipeline, or one batch
DATA_FORMATS = ("channels_last", "channels_first")
STRATEGIES = ("mirrored", "default")  # MirroredStrategy, or TensorFlow's default (one device)
# ResNet50's BatchNormalization: as Keras builds it (Keras 2 fused, Keras 3 not), one fused
# cuDNN kernel (Keras 2: fused=True; Keras 3: tf.nn.fused_batch_norm), unfused, or none at all.
BATCHNORM = ("default", "fused", "unfused", "none")
# The options' defaults, here once: the payload's command line and `provision bench` use them.
DEFAULTS: Dict[str, str | int | None] = {
    "gpus": "1",
    "precision": ",".join(PRECISIONS),
    "model": "resnet50",
    "image_size": 32,
    "width": 4096,
    "classes": 10,
    "batch_per_replica": 128,
    "global_batch": None,
    "steps": 30,
    "warmup": 5,
    "epoch_images": 50_000,
    "train_epochs": 1,
    "dataset": None,
    "jit": "auto",
    "steps_per_execution": 1,
    "data_format": "channels_last",
    "data": "tf.data",
    "loop": "fit",
    "strategy": "mirrored",
    "max_seconds": 0,
    "gpu_memory": "env",
    "batchnorm": "default",
    "optimizer_jit": "auto",
    "xla_cache": None,
    "profile": None,
    "matmul_n": None,
    "cpu_devices": 0,
    "seed": 1234,
}
# Settings schema 1 did not record, at the values its runs had (it always compiled with
# jit_compile=bool(--jit): False was an explicit "off", not Keras's default).
SCHEMA1_SETTINGS: Dict[str, str | int] = {
    "steps_per_execution": 1,
    "data_format": "channels_last",
    "data": "tf.data",
    "loop": "fit",
    "strategy": "mirrored",
    "max_seconds": 0,
}
# Settings added to schema 2 later, at the values runs without them had.
LATER_SETTINGS: Dict[str, str | None] = {
    "gpu_memory": "env",
    "batchnorm": "default",
    "optimizer_jit": "auto",
    "xla_cache": None,
    "profile": None,
}
RUN_FIELDS = (
    "first_step_s",
    "seconds",
    "estimate_s",
    "executions",
    "timed_steps",
    "xla",
    "optimizer_xla",
    "compute_dtype",
    "batchnorm_layers",
    "input_shape",
    "strategy",
    "replicas",
    "pipeline",
    "custom_traces",
    "profile",
    "loss_scale",
    "at_chance",
)
# A run "at chance" learnt nothing: its held-out accuracy is within this of chance. The synthetic
# task holds out 512 images, where chance (0.10) has a standard error of 0.013: 0.05 is about four.
CHANCE_MARGIN = 0.05


def at_chance(accuracy: float, chance: float) -> bool:
    """Whether a run's held-out accuracy says it learnt nothing (its speed is then no result)."""
    return accuracy < chance + CHANCE_MARGIN


# What the benchmark writes, typed where it is made (the host reads reports of any schema version
# as parsed JSON, and narrows each field where it reads it).


class Config(TypedDict):
    """A configuration: how many devices, in which precision."""

    gpus: int
    precision: str


class Skip(Config):
    reason: str


class Failure(Config):
    error: str


class _Run(Config):
    global_batch: int
    step_ms: float
    images_per_s: float
    epoch_s: float
    accuracy: float
    first_step_s: float
    executions: int
    timed_steps: int
    estimate_s: Optional[float]
    seconds: float
    xla: bool
    optimizer_xla: Optional[bool]
    pipeline: List[str]
    custom_traces: Optional[int]
    profile: Optional[Dict[str, object]]  # --profile: folder, steps, top op types, error
    compute_dtype: str
    batchnorm_layers: List[str]
    input_shape: List[int]
    strategy: str
    replicas: int
    loss_scale: Optional[float]  # mixed_float16: the dynamic loss scale at the end, else null
    at_chance: bool


class Run(_Run, total=False):
    """A configuration that ran; speedup and efficiency come once every run is in."""

    speedup: float
    efficiency: float


class BenchTask(TypedDict):
    """What the accuracy column measures."""

    kind: str
    description: str
    classes: int
    chance: float
    train_images: int
    test_images: int


class DeviceDetail(TypedDict):
    device: str
    name: Optional[str]
    compute_capability: Optional[str]


class Build(TypedDict):
    """What TensorFlow was built with (tf.sysconfig.get_build_info)."""

    cuda: Optional[str]
    cudnn: Optional[str]
    compute_capabilities: List[str]


class _Loaded(TypedDict):
    path: str
    version: Optional[str]


class Loaded(_Loaded, total=False):
    """The copy of a library the process mapped, its version, or why it could not be read."""

    error: str


class Software(TypedDict):
    python: str
    tensorflow: str
    keras: Optional[str]
    keras_module: str
    numpy: Optional[str]
    build: Build
    loaded: Dict[str, Optional[Loaded]]


class ReportError(ValueError):
    """Not a benchmark report (the message says what it is instead)."""


def upgrade(report: object) -> Dict[str, object]:
    """A copy of one environment's report in the current schema's shape."""
    if not isinstance(report, dict) or report.get("tool") != TOOL:
        raise ReportError('not a provision-bench report (no "tool": "provision-bench")')
    schema = report.get("schema")
    if schema not in (1, SCHEMA):
        raise ReportError(f"report schema {schema!r}: this provision reads 1 and {SCHEMA}")
    out = copy.deepcopy(report)
    if schema == 1:
        settings = out.setdefault("settings", {})
        for key, value in SCHEMA1_SETTINGS.items():
            settings.setdefault(key, value)
        settings["jit"] = "on" if settings.get("jit") is True else "off"
        out["software"] = {"tensorflow": out.get("tensorflow")}
        out["task"] = {"kind": "synthetic", "description": "not recorded (schema 1)"}
    later = out.setdefault("settings", {})
    for key, later_value in LATER_SETTINGS.items():
        later.setdefault(key, later_value)
    for key in ("hardware", "environment", "command", "gpu_policy", "xla_environment"):
        out.setdefault(key, None)
    for key in ("failed", "skipped", "messages", "matmul", "device_details"):
        out.setdefault(key, [])
    for run in out.get("runs", []):
        if schema == 1:  # it compiled with jit_compile=bool(--jit): XLA exactly when asked
            run.setdefault("xla", out["settings"]["jit"] == "on")
        for key in RUN_FIELDS:
            run.setdefault(key, None)
    out["schema"] = SCHEMA
    return out


def read(document: object) -> List[Dict[str, object]]:
    """The reports in a report or a set of reports, each upgraded; ReportError otherwise."""
    if isinstance(document, dict) and document.get("tool") == SET_TOOL:
        return [upgrade(r) for r in document.get("reports", [])]
    return [upgrade(document)]
