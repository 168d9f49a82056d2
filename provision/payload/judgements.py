"""Pure judgements: versions against the spec, GPUs against the build, TensorFlow's log lines.

The smoke test uses them inside the environment; provision.verify uses them again on the host to
judge a report's facts against the spec as the matrix says now.
"""

import re
from typing import Dict, List, Optional, Sequence, Tuple

from . import targets as targets_mod
from .report import Result
from .status import FAIL, PASS, WARN, CheckStatus


def version_tuple(text: object) -> Tuple[int, ...]:
    """'12.5.1' -> (12, 5, 1); 'v2.13.1' -> (2, 13, 1); '' or None -> ()."""
    m = re.search(r"\d+(?:\.\d+)*", str(text or ""))
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def same_version(found: object, expected: object) -> bool:
    """The same version however it is spelled: TensorFlow's own '2.22.0-rc0' is the package's
    '2.22.0rc0' (PEP 440 allows a separator before a pre-, post- or dev-release segment)."""

    def norm(text: object) -> str:
        return re.sub(r"[-_.](?=[a-z])", "", str(text or "").strip().lower())

    return bool(norm(found)) and norm(found) == norm(expected)


def same_release(found: object, expected: object) -> bool:
    """Equal on the components both give: '12.5.1' matches '12.5', '9' matches '9.3'."""
    f, e = version_tuple(found), version_tuple(expected)
    n = min(len(f), len(e))
    return n > 0 and f[:n] == e[:n]


def judge_library_version(
    what: str, found: str, expected: Optional[str]
) -> Tuple[CheckStatus, str]:
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


def judge_locked_version(what: str, found: str, locked: str) -> Tuple[CheckStatus, str]:
    """A loaded runtime against the lock, where the lock moved it within the release's and-cuda
    range beside another framework: exactly the locked release, or a failure."""
    moved = " (moved within the release's and-cuda range beside another framework)"
    if same_release(found, locked):
        return PASS, f"{what} {found} is loaded, as the lock holds{moved}"
    return FAIL, f"{what} {found} is loaded, but the lock holds {locked}{moved}"


def judge_compute(
    cc: str, build_targets: Sequence[str], compute_min: Optional[str]
) -> Tuple[CheckStatus, str]:
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
    parsed = [t for t in (targets_mod.parse(name) for name in build_targets) if t]
    if not parsed:
        return PASS, f"compute capability {cc} (the build names no targets)"
    sass = [t for t in parsed if t.native_on(cap)]
    if sass:
        best = max(sass, key=lambda t: t.capability)
        return PASS, f"compute capability {cc}: native kernels ({best.name})"
    ptx = [t for t in parsed if t.jit_on(cap)]
    if not ptx:
        return FAIL, "no kernel image for compute capability {}: the build targets {}".format(
            cc, ", ".join(build_targets)
        )
    jit = max(ptx, key=lambda t: t.capability)
    if jit.major == cap[0]:
        return PASS, f"compute capability {cc}: PTX {jit.name} compiled by the driver"
    return WARN, (
        "compute capability {} is newer than every target ({}): only PTX for {} can "
        "run, JIT-compiled by the driver; such GPUs have failed with CUDA_ERROR_INVALID_PTX".format(
            cc, ", ".join(build_targets), jit.name
        )
    )


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


def judge_log(classified: Result) -> Tuple[CheckStatus, str]:
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
