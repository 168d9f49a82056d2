"""CUDA libraries: the sonames TensorFlow dlopens, and the one decoder of the version numbers that
cudaRuntimeGetVersion, cudnnGetVersion and cudnn_version.h give (pure: nothing is loaded here).
"""

import re
from typing import Dict, Mapping, Optional

from .judgements import version_tuple

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


def sonames(cuda_config: Mapping[str, str], build_info: Mapping[str, object]) -> Dict[str, str]:
    """library -> soname TensorFlow dlopens: from its cuda_config.h, or else from its CUDA major."""
    versions = dict(cuda_config)
    cuda_major = version_tuple(build_info.get("cuda_version"))[:1]
    major = str(cuda_major[0]) if cuda_major else ""
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


def cudart_version(value: int) -> str:
    """cudaRuntimeGetVersion's number as 'major.minor': 12050 -> '12.5'."""
    return f"{value // 1000}.{value % 1000 // 10}"


def cudnn_version(value: int) -> str:
    """cudnnGetVersion's number as 'major.minor.patch': 90300 -> '9.3.0', 8907 -> '8.9.7'."""
    # cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 and older major*1000 + minor*100.
    if value >= 90000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def header_defines(text: str) -> Dict[str, str]:
    """NAME -> value of a C header's `#define NAME value` lines (quotes stripped; "" for a bare
    `#define NAME`, whose line ends there: the next line's define is not its value)."""
    found = re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]*(.*?)[ \t]*$", text, re.MULTILINE)
    return {name: value.strip('"') for name, value in found}


def cudnn_header_version(defines: Mapping[str, str]) -> Optional[str]:
    """'major.minor.patch' from cudnn_version.h's defines; None when they are not all there."""
    parts = [defines.get(f"CUDNN_{k}", "") for k in ("MAJOR", "MINOR", "PATCHLEVEL")]
    return ".".join(parts) if all(p.isdigit() for p in parts) else None
