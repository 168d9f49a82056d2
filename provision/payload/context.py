"""Inside a child: import TensorFlow, make the settings that must precede its initialisation, and
gather the facts and library lookups that the checks share."""

import argparse
import ctypes
import os
import time
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from . import cudalibs, elf, gpu_policy, probes
from .report import Expected, Result


class Ctx:
    """What the checks share inside one child process."""

    def __init__(self, tf: ModuleType, args: argparse.Namespace, expected: Expected) -> None:
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
            framework = os.path.join(self.facts.get("tf_dir") or "", "libtensorflow_framework.so.2")
            kind, dirs = elf.search_path(framework) if os.path.exists(framework) else ("", [])
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
        mine = [p for p in probes.loaded_libraries() if os.path.basename(p).startswith(soname)]
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
                        p
                        for p in probes.loaded_libraries()
                        if os.path.basename(p).startswith(soname)
                    ]
                    entry["path"] = found[0] if found else soname
                except OSError as exc:
                    entry["error"] = str(exc)
            if entry["path"] is None:
                entry["hint"] = probes.library_hint(soname)
        self.located[lib] = entry
        return entry


def _read_header_defines(path: str) -> Dict[str, str]:
    try:
        with open(path) as fh:
            return cudalibs.header_defines(fh.read())
    except OSError:
        return {}


def dist_version(name: str) -> Optional[str]:
    try:
        from importlib import metadata

        return str(metadata.version(name))
    except Exception:
        return None


def _device_settings(tf: Any, gpus: List[Any]) -> Result:
    """The environment's GPU policy (gpu_policy: the limit the start-up hook set stays, else
    memory growth), or two virtual CPU devices when there is no GPU."""
    setup: Result = {}
    record = gpu_policy.apply(tf, growth_by_default=True, by="the smoke test")
    if gpus:
        limits = {}
        for g in gpus:
            conf = tf.config.get_logical_device_configuration(g)
            if conf and getattr(conf[0], "memory_limit", None):
                limits[g.name] = int(conf[0].memory_limit)
        if limits:
            setup["memory_limit_mib"] = limits
        elif not record["errors"]:
            setup["memory_growth"] = True
        if record["errors"]:
            setup["memory_growth_error"] = "; ".join(record["errors"])
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
    return setup


def child_setup(args: argparse.Namespace, expected: Expected) -> Ctx:
    """Import TensorFlow and make the settings that must precede its initialisation."""
    t0 = time.monotonic()
    import tensorflow as tf

    ctx = Ctx(tf, args, expected)
    ctx.facts["tf_import_seconds"] = round(time.monotonic() - t0, 2)
    gpus = list(tf.config.list_physical_devices("GPU"))
    ctx.gpus = gpus
    setup = _device_settings(tf, gpus)
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
    # Since 2.22 build_info.py names no CUDA or cuDNN version; the shipped cuda_config.h does.
    defines = {"cuda_version": "TF_CUDA_VERSION", "cudnn_version": "TF_CUDNN_VERSION"}
    filled = [k for k, d in defines.items() if not build_info.get(k) and cuda_config.get(d)]
    for key in filled:
        build_info[key] = cuda_config[defines[key]]
    if filled:
        build_info["filled_from_cuda_config_h"] = filled
    cudnn_h = _read_header_defines(os.path.join(include, "cudnn", "include", "cudnn_version.h"))
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
        keras=dist_version("keras"),
        numpy=str(numpy.__version__),
        tf_dir=tf_dir,
        build_info=build_info,
        cuda_config=cuda_config,
        cudnn_header=cudalibs.cudnn_header_version(cudnn_h),
        gpus=gpu_facts,
        setup=setup,
    )
    return ctx
