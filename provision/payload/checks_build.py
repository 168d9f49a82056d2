"""Checks of the build and its libraries: TensorFlow's version, CUDA build, build info, the CUDA
libraries it loads, and the versions of the CUDA runtime and cuDNN it really gets."""

import os
import re
import subprocess
import sys
from typing import Callable, Dict, Tuple

from . import cudaerrors, cudalibs, probes
from .context import Ctx
from .judgements import judge_library_version, judge_locked_version, same_release, same_version
from .report import Result, result
from .smoke_parent import describe_exit, dies_with_parent
from .status import FAIL, PASS, SKIP, WARN


def check_tf_version(ctx: Ctx) -> Result:
    found = ctx.facts["tensorflow"]
    want = ctx.expected.get("tf_version")
    if not want:
        return result(SKIP, f"TensorFlow {found}; no expected version given", version=found)
    if same_version(found, want):
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
    if want_targets and targets and sorted(want_targets) != sorted(targets):
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
    names = cudalibs.sonames(ctx.facts["cuda_config"], ctx.facts["build_info"])
    optional = {k: names.pop(k) for k in cudalibs.OPTIONAL_LIBRARIES if k in names}
    if len(ctx.gpus) > 1 or ctx.host_gpus > 1:
        names["nccl"] = cudalibs.NCCL_SONAME  # MirroredStrategy's all-reduce across GPUs
    else:
        optional["nccl"] = cudalibs.NCCL_SONAME
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


def _runtime_check(ctx: Ctx, lib: str, what: str, key: str, decode: Callable[[int], str]) -> Result:
    """`key`: the spec's "cuda" or "cudnn"; the lock's version ("cuda_locked") wins when the lock
    moved the library beside another framework."""
    names, _ = _libraries(ctx)
    if lib not in names:
        return result(SKIP, f"this build names no {what} library")
    entry = ctx.locate(lib, names[lib])
    # Every loaded piece (cuDNN 9 is a shim that loads libcudnn_graph, _ops, ... by name).
    copies = sorted(
        {p for p in probes.loaded_libraries() if re.match(rf"lib{lib}[._]", os.path.basename(p))}
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
    locked = ctx.expected.get(key + "_locked")
    if locked:
        status, reason = judge_locked_version(what, details["version"], str(locked))
    else:
        want = ctx.expected.get(key)
        status, reason = judge_library_version(
            what, details["version"], str(want) if want else None
        )
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
        return probes.loaded_version(path, lib)
    done = subprocess.run(
        [sys.executable, "-c", _VERSION_PROBE, path, lib],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        preexec_fn=dies_with_parent(),  # a killed smoke test leaves no probe behind
    )
    out = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or not out.lstrip("-").isdigit():
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [
            describe_exit(-done.returncode if done.returncode < 0 else done.returncode)
        ]
        hint = "; cuDNN's sub-libraries (libcudnn_graph, _ops, ...) must lie next to it"
        raise OSError(
            f"asking it for its version failed ({why[0][-300:]}){hint if lib == 'cudnn' else ''}"
        )
    if int(out) < 0:
        raise OSError(f"cudaRuntimeGetVersion returned {cudaerrors.explain(-int(out))}")
    return int(out)


def check_cudart(ctx: Ctx) -> Result:
    return _runtime_check(ctx, "cudart", "CUDA runtime", "cuda", cudalibs.cudart_version)


def check_cudnn(ctx: Ctx) -> Result:
    if ctx.gpus:
        # A convolution makes TensorFlow load and initialise cuDNN, as training would.
        tf = ctx.tf
        with tf.device("/GPU:0"):
            y = tf.nn.conv2d(tf.ones([1, 8, 8, 4]), tf.ones([3, 3, 4, 4]), 1, "SAME")
        if abs(float(y[0, 4, 4, 0].numpy()) - 36.0) > 1e-3:
            return result(FAIL, "a cuDNN convolution gave a wrong result")
    return _runtime_check(ctx, "cudnn", "cuDNN", "cudnn", cudalibs.cudnn_version)
