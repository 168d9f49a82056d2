"""Child side of the host probes: asks NVIDIA's own libraries what they are, then exits.

`provision.host` runs this file in a separate interpreter (by path, stdlib only, pynvml when asked)
because a driver library can hang or crash the process that loads it: here that costs this child
only, which the parent kills at its deadline. Output: one JSON object on stdout.

    python _hostprobe.py nvml [PYNVML_DIR] [PRELOAD]   driver, CUDA version and GPUs from NVML
    python _hostprobe.py versions < [[kind, path], ...] what each cuDNN / CUDA runtime reports
"""

from __future__ import annotations

import ctypes
import json
import sys
from types import ModuleType
from typing import Any, TypedDict


class ProbedGpu(TypedDict):
    """One GPU as NVML describes it; a field NVML will not give (old GPUs) is None or empty."""

    index: int
    name: str
    uuid: str
    cc: list[int]
    memory_bytes: int | None
    mig: int | None
    persistence: int | None


class Nvml(TypedDict, total=False):
    """ok with driver, cuda and gpus; else ok False, absent (no driver library) and the error."""

    ok: bool
    absent: bool
    code: int | None
    error: str
    driver: str
    cuda: int
    gpus: list[ProbedGpu]


class Version(TypedDict, total=False):
    """What one library reported: its version number, or why it could not be asked."""

    value: int
    error: str


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def nvml(pynvml_dir: str, preload: str) -> Nvml:
    if preload:
        # A stand-in host's libnvidia-ml: loading it by path first makes pynvml's
        # dlopen("libnvidia-ml.so.1") find it by its SONAME instead of the machine's own.
        try:
            ctypes.CDLL(preload, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return {"ok": False, "absent": True, "error": f"cannot load {preload}: {exc}"}
    if pynvml_dir:
        sys.path.insert(0, pynvml_dir)
    try:
        import pynvml
    except ImportError as exc:
        return {"ok": False, "absent": True, "error": f"nvidia-ml-py is not installed: {exc}"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        return {
            "ok": False,
            "absent": code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            "code": code,
            "error": _text(str(exc)),
        }
    gpus: list[ProbedGpu] = []
    out: Nvml = {"ok": True, "gpus": gpus}
    try:
        out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        out["cuda"] = int(pynvml.nvmlSystemGetCudaDriverVersion())
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpus.append(_gpu(pynvml, index))
    except pynvml.NVMLError as exc:
        out.update({"ok": False, "absent": False, "error": _text(str(exc))})
    finally:
        pynvml.nvmlShutdown()
    return out


def _gpu(pynvml: ModuleType, index: int) -> ProbedGpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def ask(fn: str, *args: object) -> Any:  # pynvml has no types
        # Old GPUs answer NOT_SUPPORTED for MIG and friends: one missing field, not a failed GPU.
        try:
            return getattr(pynvml, fn)(handle, *args)
        except pynvml.NVMLError:
            return None

    memory = ask("nvmlDeviceGetMemoryInfo")
    mig = ask("nvmlDeviceGetMigMode")
    return {
        "index": index,
        "name": _text(ask("nvmlDeviceGetName") or ""),
        "uuid": _text(ask("nvmlDeviceGetUUID") or ""),
        "cc": list(ask("nvmlDeviceGetCudaComputeCapability") or ()),
        "memory_bytes": int(memory.total) if memory is not None else None,
        "mig": None if mig is None else int(mig[0]),
        "persistence": ask("nvmlDeviceGetPersistenceMode"),
    }


def versions(items: list[list[str]]) -> dict[str, Version]:
    """What each library says it is, each asked in a process of its own (forked): cuDNN's
    libcudnn.so.N answers cudnnGetVersion from a sub-library it loads by soname, so a second cuDNN
    asked in the same process answers with the first one's sub-library (9.14 for a wheel's 9.3),
    and a shim whose sub-library does not load exits the process that asked it."""
    return {path: _forked(kind, path) for kind, path in items}


def _forked(kind: str, path: str) -> Version:
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: load, ask, answer on the pipe, and go (no cleanup of the parent's)
        os.close(read)
        try:
            os.write(write, json.dumps(_ask(kind, path)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    try:
        answer: Version = json.loads(data)
    except ValueError:  # nothing, or half an answer
        code = os.waitstatus_to_exitcode(status)
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        return {"error": f"the process that loaded it ended ({how}) before answering"}
    return answer


def _ask(kind: str, path: str) -> Version:
    try:
        lib = ctypes.CDLL(path)
        if kind == "cudnn":
            fn = lib.cudnnGetVersion
            fn.restype = ctypes.c_size_t
            return {"value": int(fn())}
        value = ctypes.c_int(0)
        rc = lib.cudaRuntimeGetVersion(ctypes.byref(value))
        return {"value": value.value} if rc == 0 else {"error": f"returned {rc}"}
    except (OSError, AttributeError) as exc:
        return {"error": str(exc).splitlines()[0][:200]}


def main(argv: list[str]) -> int:
    result: Nvml | dict[str, Version]
    if len(argv) >= 2 and argv[1] == "nvml":
        result = nvml(argv[2] if len(argv) > 2 else "", argv[3] if len(argv) > 3 else "")
    elif len(argv) == 2 and argv[1] == "versions":
        result = versions(json.loads(sys.stdin.read()))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
