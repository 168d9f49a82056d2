"""CUDA's error numbers in words: the codes users meet when a GPU is not used.

The runtime API's `cudaError_t` (what `cudaRuntimeGetVersion` and every `cuda*` call return) and the
driver API's `CUresult` (what `cuInit` returns) are two enumerations with mostly the same numbers.
Names and texts are NVIDIA's own, as `cudaGetErrorName` / `cudaGetErrorString` print them:
- CUDA Runtime API, "Data types used by CUDA Runtime", enum cudaError
  (docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html);
- CUDA Driver API, "Data types used by CUDA driver", enum cudaError_enum
  (docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html).
Numbers are those of CUDA 10.1 and later (10.0 and older numbered "no device" 38).

Part of the payload: standard library only, Python >= 3.8.
"""

from typing import Dict, Tuple

# code: (cudaError_t name, what cudaGetErrorString says)
RUNTIME: Dict[int, Tuple[str, str]] = {
    1: ("cudaErrorInvalidValue", "invalid argument"),
    2: ("cudaErrorMemoryAllocation", "out of memory"),
    3: ("cudaErrorInitializationError", "initialization error"),
    4: ("cudaErrorCudartUnloading", "driver shutting down"),
    34: ("cudaErrorStubLibrary", "CUDA driver is a stub library"),
    35: (
        "cudaErrorInsufficientDriver",
        "CUDA driver version is insufficient for CUDA runtime version",
    ),
    36: (
        "cudaErrorCallRequiresNewerDriver",
        "API call is not supported in the installed CUDA driver",
    ),
    46: ("cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"),
    100: ("cudaErrorNoDevice", "no CUDA-capable device is detected"),
    101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    209: (
        "cudaErrorNoKernelImageForDevice",
        "no kernel image is available for execution on the device",
    ),
    218: ("cudaErrorInvalidPtx", "a PTX JIT compilation failed"),
    222: (
        "cudaErrorUnsupportedPtxVersion",
        "the provided PTX was compiled with an unsupported toolchain",
    ),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    803: (
        "cudaErrorSystemDriverMismatch",
        "system has unsupported display driver / cuda driver combination",
    ),
    804: (
        "cudaErrorCompatNotSupportedOnDevice",
        "forward compatibility was attempted on non supported HW",
    ),
    999: ("cudaErrorUnknown", "unknown error"),
}

# code: (CUresult name, what cuGetErrorString says), for cuInit and the driver API
DRIVER: Dict[int, Tuple[str, str]] = {
    1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    3: ("CUDA_ERROR_NOT_INITIALIZED", "initialization error"),
    4: ("CUDA_ERROR_DEINITIALIZED", "driver shutting down"),
    34: ("CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"),
    46: ("CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"),
    100: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    209: (
        "CUDA_ERROR_NO_BINARY_FOR_GPU",
        "no kernel image is available for execution on the device",
    ),
    218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
    222: (
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        "the provided PTX was compiled with an unsupported toolchain",
    ),
    803: (
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "system has unsupported display driver / cuda driver combination",
    ),
    804: (
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "forward compatibility was attempted on non supported HW",
    ),
    999: ("CUDA_ERROR_UNKNOWN", "unknown error"),
}


def explain(code: int, driver_api: bool = False) -> str:
    """'35 (cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime
    version)'; a code not in the table is shown as the number it is."""
    known = (DRIVER if driver_api else RUNTIME).get(code)
    if known is None:
        return f"{code} (a CUDA error code this table does not know)"
    return f"{code} ({known[0]}: {known[1]})"
