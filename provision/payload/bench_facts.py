"""What the benchmark ran on, as this process sees it: TensorFlow's build, Keras, the CUDA runtime
and cuDNN it really loaded (read as the smoke test reads them), and the devices TensorFlow used."""

import os
import platform
import re
from types import ModuleType
from typing import List, Optional

from . import cudalibs, probes
from .bench_schema import DeviceDetail, Loaded, Software
from .context import dist_version

_DECODERS = {"cudart": cudalibs.cudart_version, "cudnn": cudalibs.cudnn_version}


def _loaded(lib: str) -> Optional[Loaded]:
    """The copy of lib<lib>.so this process mapped, and the version it reports; None if none."""
    paths = [
        p for p in probes.loaded_libraries() if re.match(rf"lib{lib}\.so", os.path.basename(p))
    ]
    if not paths:
        return None
    entry: Loaded = {"path": paths[0], "version": None}
    try:
        entry["version"] = _DECODERS[lib](probes.loaded_version(paths[0], lib))
    except (OSError, AttributeError, ValueError) as exc:
        entry["error"] = str(exc)[:200]
    return entry


def keras_version(tf: ModuleType) -> Optional[str]:
    """The version of the Keras that tf.keras is (Keras 3, Keras 2, or tf_keras)."""
    found = getattr(tf.keras, "__version__", None)
    if found:
        return str(found)
    module = str(getattr(tf.keras, "__name__", ""))
    return dist_version("tf_keras" if module.startswith("tf_keras") else "keras")


def software(tf: ModuleType) -> Software:
    """Versions as loaded: call it after training, when TensorFlow has loaded cuDNN."""
    build = dict(tf.sysconfig.get_build_info())
    try:
        import numpy

        numpy_version: Optional[str] = str(numpy.__version__)
    except ImportError:  # pragma: no cover - TensorFlow needs numpy
        numpy_version = None
    return {
        "python": platform.python_version(),
        "tensorflow": str(tf.__version__),
        "keras": keras_version(tf),
        "keras_module": str(getattr(tf.keras, "__name__", "")),
        "numpy": numpy_version,
        "build": {
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
            "compute_capabilities": list(build.get("cuda_compute_capabilities") or []),
        },
        "loaded": {"cudart": _loaded("cudart"), "cudnn": _loaded("cudnn")},
    }


def device_details(tf: ModuleType, names: List[str]) -> List[DeviceDetail]:
    """Name and compute capability of each GPU TensorFlow used (CPU devices: their names)."""
    gpus = tf.config.list_physical_devices("GPU")
    out = []
    for name in names:
        row: DeviceDetail = {"device": name, "name": None, "compute_capability": None}
        if "GPU" in name:
            index = int(name.rsplit(":", 1)[-1])
            try:
                det = tf.config.experimental.get_device_details(gpus[index])
            except (IndexError, ValueError, RuntimeError):
                det = {}
            cc = det.get("compute_capability")
            row["name"] = det.get("device_name")
            row["compute_capability"] = "{}.{}".format(*cc) if cc else None
        else:
            row["name"] = platform.processor() or platform.machine()
        out.append(row)
    return out
