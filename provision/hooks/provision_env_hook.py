"""provision: an environment that works without activation (Jupyter, IDEs, cron, `env/bin/python`).

`provision install` puts this module and provision_env_hook.pth into the environment's
site-packages; Python imports it at start-up, where it only puts a finder in front of
sys.meta_path. When `tensorflow` is imported, before TensorFlow's own code runs, it:

- reads etc/provision/runtime.env of this prefix (written by provision install);
- sets the environment's GPU policy where the process has not set it itself: CUDA_VISIBLE_DEVICES,
  TF_FORCE_GPU_ALLOW_GROWTH, the memory limit, and XLA_FLAGS' --xla_gpu_cuda_data_dir (ptxas);
- loads the environment's CUDA libraries (NVIDIA's wheels, the conda prefix's lib, the system
  toolkit) with RTLD_GLOBAL, so TensorFlow's dlopen by soname finds them whatever LD_LIBRARY_PATH
  says: a start-up hook cannot change the loader's search path of its own process.

Right after the import, a memory limit gives every visible GPU one logical device of that size
(provision_gpu_policy, the code the smoke test and the benchmark apply it with too).
`state` records what happened; the smoke test reports it. Stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing`: every Python start in the environment imports this module
if TYPE_CHECKING:
    from typing import Any

RUNTIME = os.path.join("etc", "provision", "runtime.env")
LIMIT_VAR = "PROVISION_GPU_MEMORY_LIMIT_MIB"
# The CUDA libraries TensorFlow opens (and what they need), by file-name prefix.
STEMS = (
    "libcudart.", "libcublasLt.", "libcublas.", "libcufft.", "libcurand.", "libcusolver.",
    "libcusparse.", "libnvJitLink.", "libcudnn", "libnccl.", "libnvrtc", "libcupti.",
)  # fmt: skip
state: dict[str, Any] = {
    "runtime": None,  # the runtime.env read, or None
    "variables": {},  # what was set in os.environ
    "loaded": [],  # libraries loaded, in order
    "failed": {},  # library -> why it could not be loaded
    "seconds": None,  # time spent loading
    "limit_mib": None,
    "gpus": None,
    "policy": None,  # what provision_gpu_policy.apply recorded
    "error": None,
}


def _read_runtime(path: str) -> dict[str, str]:
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1].replace("'\"'\"'", "'")
            values[key] = value
    return values


def _library_dirs(prefix: str, values: dict[str, str]) -> list[str]:
    import glob

    found: list[str] = []
    for entry in filter(None, values.get("PROVISION_LIBRARY_DIRS", "").split(":")):
        pattern = entry if os.path.isabs(entry) else os.path.join(prefix, entry)
        found.extend(sorted(p for p in glob.glob(pattern) if os.path.isdir(p)))
    home = values.get("PROVISION_CUDA_HOME")
    if home:
        found.append(os.path.join(home, "lib64"))
    return found


def _candidates(dirs: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if not name.startswith(STEMS) or ".so." not in name + ".":
                continue
            real = os.path.realpath(os.path.join(folder, name))
            if real not in seen and os.path.isfile(real):
                seen.add(real)
                out.append(os.path.join(folder, name))
    return out


def _load_libraries(paths: list[str]) -> None:
    """Load each with RTLD_GLOBAL; one whose dependencies are not loaded yet is retried."""
    import ctypes
    import time

    start = time.monotonic()
    pending = list(paths)
    errors: dict[str, str] = {}
    while pending:
        left: list[str] = []
        for path in pending:
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                errors[path] = str(exc)
                left.append(path)
            else:
                state["loaded"].append(path)
                errors.pop(path, None)
        if len(left) == len(pending):
            break
        pending = left
    state["failed"] = errors
    state["seconds"] = round(time.monotonic() - start, 3)


def _setdefault(name: str, value: str) -> None:
    if name not in os.environ:
        os.environ[name] = value
        state["variables"][name] = value


def _runtime() -> dict[str, str] | None:
    path = os.path.join(sys.prefix, RUNTIME)
    try:
        values = _read_runtime(path)
    except OSError:
        return None
    state["runtime"] = path
    return values


def apply_policy() -> dict[str, str] | None:
    """The environment's variables, where the process has not set its own; cheap, no loading.
    The smoke test calls it before starting its checks, so its report shows what is in effect."""
    values = _runtime()
    if values is None:
        return None
    prefix = sys.prefix
    if values.get("PROVISION_GPUS"):
        _setdefault("CUDA_VISIBLE_DEVICES", values["PROVISION_GPUS"])
    memory = values.get("PROVISION_GPU_MEMORY", "")
    if memory == "growth":
        _setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    elif memory:
        _setdefault(LIMIT_VAR, memory)
    xla = values.get("PROVISION_XLA_DIR", "")
    xla = (
        prefix
        if xla == "."
        else (xla and os.path.join(prefix, xla)) or values.get("PROVISION_CUDA_HOME", "")
    )
    flags = os.environ.get("XLA_FLAGS", "")
    if xla and "--xla_gpu_cuda_data_dir" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " if flags else "") + "--xla_gpu_cuda_data_dir=" + xla
        state["variables"]["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    return values


def prepare() -> None:
    """Everything that must happen before TensorFlow's code runs."""
    values = apply_policy()
    if values is not None:
        _load_libraries(_candidates(_library_dirs(sys.prefix, values)))


def apply_limit(tf: Any) -> None:
    """A hard memory limit per GPU (TensorFlow has no variable for it), through the policy code
    the smoke test and the benchmark share (provision_gpu_policy, installed next to this file);
    growth is TF_FORCE_GPU_ALLOW_GROWTH's, which TensorFlow reads itself."""
    if not os.environ.get(LIMIT_VAR):
        return
    try:
        import provision_gpu_policy as policy

        record = policy.apply(tf, growth_by_default=False, by="provision_env_hook")
        state["policy"] = record
        state["limit_mib"] = record["limit_mib"]
        state["gpus"] = len(record["devices"])
        if record["errors"]:
            state["error"] = "; ".join(record["errors"])
    except Exception as exc:  # a missing module, or TensorFlow initialised by someone before us
        state["error"] = f"{type(exc).__name__}: {exc}"
    if state["error"]:
        sys.stderr.write(
            "provision_env_hook: GPU memory limit not applied: {}\n".format(state["error"])
        )


class _BeforeTensorFlow:
    """Finds `tensorflow` through the other finders and wraps its loader's exec_module."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once is enough, and the finders below must not see us
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        original = getattr(spec.loader, "exec_module", None)
        if original is None:
            return spec

        def exec_module(module: Any) -> None:
            try:
                prepare()
            except Exception as exc:  # never stop TensorFlow from importing
                state["error"] = f"{type(exc).__name__}: {exc}"
            original(module)
            apply_limit(module)

        spec.loader.exec_module = exec_module
        return spec

    def invalidate_caches(self) -> None:
        pass


if "tensorflow" not in sys.modules and not any(
    isinstance(f, _BeforeTensorFlow) for f in sys.meta_path
):
    sys.meta_path.insert(0, _BeforeTensorFlow())
