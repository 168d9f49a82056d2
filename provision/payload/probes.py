"""What the process can learn without TensorFlow: the NVIDIA driver and its GPUs (driver API through
ctypes), a GPU's memory in use, the files mapped into this process, where a library lies."""

import ctypes
import os
import re
import sys
from typing import Any, List, Optional, Tuple

from . import cudaerrors
from .report import Result


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
        info["error"] = f"cuInit failed with CUDA error {cudaerrors.explain(rc, driver_api=True)}"
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


def loaded_version(path: str, lib: str) -> int:
    """cudaRuntimeGetVersion / cudnnGetVersion of a library this process has loaded already (one
    not loaded yet is asked in a throwaway process: cuDNN's dispatcher can abort its caller)."""
    handle = ctypes.CDLL(path)
    if lib == "cudart":
        v = ctypes.c_int()
        rc = handle.cudaRuntimeGetVersion(ctypes.byref(v))
        if rc != 0:
            raise OSError(f"cudaRuntimeGetVersion returned {cudaerrors.explain(rc)}")
        return int(v.value)
    handle.cudnnGetVersion.restype = ctypes.c_size_t
    return int(handle.cudnnGetVersion())


def library_hint(soname: str) -> Optional[str]:
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
