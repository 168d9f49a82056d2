"""Host probes: what this machine offers TensorFlow on a GPU, as a HostReport (facts, no verdicts).

Each probe (system, gpus, libraries, ptxas, environments) runs in its own thread under a deadline;
one that fails, finds nothing or hangs records that in `HostReport.probes` and hides nothing else.
Nothing here needs root. Driver libraries (NVML, cuDNN, the CUDA runtime) are only ever loaded in
a child interpreter (`_hostprobe.py`), so a broken driver can neither crash nor hang the doctor.

Every file is read through a root directory, `/` on a real host. Tests, and anyone inspecting a
copy of a machine, point it at a stand-in tree (`provision doctor --root DIR` or
PROVISION_HOST_ROOT): /proc, /etc/ld.so.conf.d, /usr/local/cuda-*, site-packages and conda prefixes
are then read from there, and paths from the environment (PATH, LD_LIBRARY_PATH, HOME,
CONDA_PREFIX, ...) are taken as paths of that tree. Paths in the report are the host's paths, with
the home directory shown as `~`, so that a report can be pasted into an issue as it is.
Environment knobs: PROVISION_NO_NVML=1 (use nvidia-smi), PROVISION_NO_DLOPEN=1 (never load a
library, read versions from files only), PROVISION_PROBE_TIMEOUT (seconds per external call).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from provision import _proc
from provision.errors import ProvisionError, ToolMissing
from provision.payload import cudalibs, elf

SCHEMA = 1
KINDS = ("cudart", "cudnn", "cublas")
DEFAULT_TIMEOUT = 10.0
CHILD = Path(__file__).with_name("_hostprobe.py")
SMI_FIELDS = (
    "index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "memory.used",
    "memory.free", "pci.bus_id", "persistence_mode", "mig.mode.current",
)  # fmt: skip
SMI_PLACES = (
    "/usr/bin/nvidia-smi",
    "/usr/lib/wsl/lib/nvidia-smi",
    "/usr/local/nvidia/bin/nvidia-smi",
)
TRUSTED_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
WSL_LIB = "/usr/lib/wsl/lib"
CONDA_BASES = (
    "~/miniconda3", "~/anaconda3", "~/miniforge3", "~/mambaforge", "~/micromamba",
    "~/.local/share/mamba", "/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/opt/miniforge3",
)  # fmt: skip
PYTHON_PREFIXES = ("/usr", "/usr/local", "~/.local")
# Where people keep virtual environments (virtualenvwrapper, pyenv-virtualenv, habit).
VENV_FOLDERS = ("~/.virtualenvs", "~/venvs", "~/.venvs", "~/envs", "~/.pyenv/versions")
LIB_RE = re.compile(r"^lib(cudart|cudnn|cublas)\.so(?:\.(\d+(?:\.\d+)*))?$")
# Which wheel (pip) or conda package ships each library, to read its version from package metadata.
WHEEL_OF = {"cudart": "nvidia_cuda_runtime", "cudnn": "nvidia_cudnn", "cublas": "nvidia_cublas"}
CONDA_OF = {
    "cudart": ("cuda-cudart", "cudatoolkit"),
    "cudnn": ("cudnn",),
    "cublas": ("libcublas", "cudatoolkit"),
}
ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21}


@dataclass(frozen=True)
class Probe:
    name: str
    status: str  # ok | absent | failed | timeout | skipped
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str  # anonymised: GPU-<index>
    compute_capability: str  # "9.0"; "" when nothing could say
    memory_mib: int | None
    mig: str  # enabled | disabled | "" (not supported or unknown)
    persistence: str  # enabled | disabled | ""


@dataclass(frozen=True)
class Driver:
    version: str = ""  # as NVML / nvidia-smi report it
    cuda: str = ""  # the highest CUDA version it supports, "13.0"
    source: str = ""  # nvml | nvidia-smi
    error: str = ""  # what NVML / nvidia-smi said when they could not answer
    kernel_module: str = ""  # /proc/driver/nvidia/version
    user_space: str = ""  # version in the file name of the libcuda.so.1 the loader finds
    user_space_all: tuple[str, ...] = ()  # every libcuda.so.<version> in the loader's folders


@dataclass(frozen=True)
class Library:
    kind: str  # cudart | cudnn | cublas
    path: str  # the file itself (symbolic links resolved)
    soname: str  # from the ELF dynamic section
    version: str  # "" when nothing could say
    # cudnnGetVersion, cudaRuntimeGetVersion, file name, cudnn_version.h, package metadata, soname
    version_from: str
    found_in: tuple[str, ...]  # LD_LIBRARY_PATH, loader cache, CUDA toolkit, pip, conda, ...
    loader_rank: (
        int | None
    )  # 0: the copy the dynamic loader picks for its SONAME; None: not on its path
    env: str = ""  # prefix of the Python/conda environment that holds it, "" for the system
    built_for: str = (
        ""  # CUDA major its package was built for (nvidia-cudnn-cu12, libcudnn9-cuda-13)
    )

    @property
    def major(self) -> int | None:
        digits = self.soname.rsplit(".so.", 1)[-1].split(".")[0]
        return int(digits) if digits.isdigit() else None


@dataclass(frozen=True)
class Ptxas:
    path: str
    version: str  # CUDA release, "12.5"
    env: str = ""


@dataclass(frozen=True)
class Environment:
    prefix: str
    kind: str  # conda | venv | python
    python: str  # "3.12"
    tensorflow: str  # installed version, "" when none


@dataclass(frozen=True)
class HostReport:
    os: str  # linux | windows | darwin
    machine: str
    distro: str
    kernel: str
    wsl: bool
    wsl_lib: str  # /usr/lib/wsl/lib when it holds libcuda.so.1
    stand_in: bool  # read from a stand-in root, not this machine
    driver: Driver
    gpus: tuple[Gpu, ...]
    ld_library_path: tuple[str, ...]
    loader_dirs: tuple[str, ...]
    libraries: tuple[Library, ...]
    ptxas: tuple[Ptxas, ...]
    pythons: tuple[str, ...]
    environments: tuple[Environment, ...]
    probes: tuple[Probe, ...]
    schema: int = SCHEMA

    @property
    def has_driver(self) -> bool:
        d = self.driver
        return bool(d.version or d.kernel_module or d.user_space or self.wsl_lib or self.gpus)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostReport:
        d = dict(data)
        if d.get("schema") != SCHEMA:
            raise ProvisionError(f"host report schema {d.get('schema')!r} is not {SCHEMA}")
        drv = dict(d["driver"])
        drv["user_space_all"] = tuple(drv.get("user_space_all", ()))
        libs = [Library(**{**lib, "found_in": tuple(lib["found_in"])}) for lib in d["libraries"]]
        return cls(
            **{
                k: d[k] for k in ("os", "machine", "distro", "kernel", "wsl", "wsl_lib", "stand_in")
            },
            driver=Driver(**drv),
            gpus=tuple(Gpu(**g) for g in d["gpus"]),
            ld_library_path=tuple(d["ld_library_path"]),
            loader_dirs=tuple(d["loader_dirs"]),
            libraries=tuple(libs),
            ptxas=tuple(Ptxas(**p) for p in d["ptxas"]),
            pythons=tuple(d["pythons"]),
            environments=tuple(Environment(**e) for e in d["environments"]),
            probes=tuple(Probe(**p) for p in d["probes"]),
        )


class _Context:
    """The host as the probes see it: a root, the environment, a time budget per external call."""

    def __init__(self, root: str | Path | None, env: Mapping[str, str], timeout: float | None):
        self.root = Path(root or "/").resolve()
        self.stand_in = self.root != Path("/")
        self.env = env
        try:
            self.timeout = timeout or float(env.get("PROVISION_PROBE_TIMEOUT") or DEFAULT_TIMEOUT)
        except ValueError:
            self.timeout = DEFAULT_TIMEOUT
        self.home = env.get("HOME", "") if self.stand_in else str(Path.home())
        self.machine = platform.machine().lower()

    def at(self, host_path: str) -> Path:
        """A host path ('/usr/lib', '~/miniconda3', a PATH entry) as a file of this filesystem."""
        if host_path.startswith("~") and self.home:
            host_path = self.home + host_path[1:]
        if not self.stand_in:
            return Path(host_path)
        if host_path.startswith(str(self.root) + os.sep):
            return Path(host_path)  # already inside the stand-in tree
        return self.root / host_path.lstrip("/")

    def host_path(self, path: Path | str) -> str:
        """A file of this filesystem as the host's absolute path."""
        text = str(path)
        if self.stand_in:
            with contextlib.suppress(ValueError):
                text = "/" + str(Path(text).relative_to(self.root))
        return text

    def show(self, path: Path | str) -> str:
        """A file of this filesystem as the host's path, home as '~' (nothing personal)."""
        text = self.host_path(path)
        home = self.home.rstrip("/")
        if home and (text == home or text.startswith(home + "/")):
            text = "~" + text[len(home) :]
        return text

    def dirs(self, var: str) -> list[Path]:
        return [self.at(p) for p in self.env.get(var, "").split(os.pathsep) if p]

    def real(self, path: Path) -> Path:
        return Path(os.path.realpath(path))

    def run(self, argv: list[str], stdin: str | None = None) -> _proc.Completed:
        return _proc.run(argv, timeout=self.timeout, check=False, input=stdin)


def _read(path: Path, limit: int = 1 << 16) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return ""


def _glob(base: Path, pattern: str) -> list[Path]:
    try:
        return sorted(base.glob(pattern))
    except OSError:
        return []


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc.__cause__, subprocess.TimeoutExpired)


# --- the loader's folders ---------------------------------------------------------------------


def loader_conf_dirs(ctx: _Context) -> list[str]:
    """Folders named in /etc/ld.so.conf (following `include`), then the loader's trusted folders."""
    out: list[str] = []
    seen: set[str] = set()

    def read_conf(path: Path, depth: int) -> None:
        for raw in _read(path).splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include") and depth < 4:
                pattern = line.split(None, 1)[1] if " " in line else ""
                if not pattern.startswith("/"):
                    pattern = "/etc/" + pattern
                parent, _, leaf = pattern.rpartition("/")
                for conf in _glob(ctx.at(parent or "/"), leaf):
                    read_conf(conf, depth + 1)
            elif line.startswith("/") and line not in seen:
                seen.add(line)
                out.append(line.rstrip("/") or "/")

    read_conf(ctx.at("/etc/ld.so.conf"), 0)
    if not (ctx.at("/etc/ld.so.conf").exists()):
        for conf in _glob(ctx.at("/etc/ld.so.conf.d"), "*.conf"):
            read_conf(conf, 1)
    for d in TRUSTED_DIRS:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _ldconfig_cache(ctx: _Context) -> dict[str, list[Path]] | None:
    """SONAME -> files in the loader cache's own order (`ldconfig -p`); None for a stand-in."""
    if ctx.stand_in:
        return None
    exe = _proc.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None
    )
    if exe is None:
        return None
    try:
        done = ctx.run([exe, "-p"])
    except ProvisionError:
        return None
    cache: dict[str, list[Path]] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", line)
        if m:
            cache.setdefault(m.group(1), []).append(Path(m.group(3)))
    return cache


# --- probes -------------------------------------------------------------------------------------

Result = tuple[dict[str, Any], list[Probe]]


def _probe_system(ctx: _Context) -> Result:
    proc_version = _read(ctx.at("/proc/version"))
    os_name = "linux" if ctx.stand_in else _os_family(sys.platform)
    release = ""
    for line in _read(ctx.at("/etc/os-release")).splitlines():
        if line.startswith("PRETTY_NAME="):
            release = line.split("=", 1)[1].strip().strip('"')
    kernel = _read(ctx.at("/proc/sys/kernel/osrelease")).strip()
    if not kernel and proc_version.startswith("Linux version "):
        kernel = proc_version.split()[2]
    wsl = "microsoft" in proc_version.lower()
    wsl_lib = WSL_LIB if ctx.at(WSL_LIB + "/libcuda.so.1").exists() else ""
    module_text = _read(ctx.at("/proc/driver/nvidia/version"))
    m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", module_text)
    module = m.group(1) if m else ""
    first, every = _libcuda_versions(ctx)
    facts = {
        "os": os_name,
        "machine": ctx.machine,
        "distro": release,
        "kernel": kernel,
        "wsl": wsl,
        "wsl_lib": wsl_lib,
        "driver": Driver(kernel_module=module, user_space=first, user_space_all=tuple(every)),
    }
    detail = f"kernel module {module or 'not loaded'}, user-space driver {first or 'not found'}"
    return facts, [Probe("system", "ok", detail)]


def _os_family(plat: str) -> str:
    if plat.startswith("win") or plat == "cygwin":
        return "windows"
    return "darwin" if plat == "darwin" else "linux"


def _libcuda_versions(ctx: _Context) -> tuple[str, list[str]]:
    """The driver version of the libcuda.so.1 the loader picks, and every one present."""
    dirs = [*ctx.dirs("LD_LIBRARY_PATH"), *(ctx.at(d) for d in loader_conf_dirs(ctx))]
    first, every = "", []
    for d in dirs:
        one = d / "libcuda.so.1"
        if not first and one.exists():
            m = re.match(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", ctx.real(one).name)
            first = m.group(1) if m else ""
        for lib in _glob(d, "libcuda.so.*.*"):
            m = re.match(r"libcuda\.so\.(\d{3,}\.\d+(?:\.\d+)?)$", lib.name)
            if m and m.group(1) not in every:
                every.append(m.group(1))
    return first, every


def _probe_gpus(ctx: _Context) -> Result:
    probes: list[Probe] = []
    t0 = time.monotonic()
    facts, status, detail = _nvml(ctx)
    probes.append(Probe("nvml", status, detail, round(time.monotonic() - t0, 3)))
    if status == "ok":
        return facts, probes
    t0 = time.monotonic()
    smi_facts, status, detail = _nvidia_smi(ctx)
    probes.append(Probe("nvidia-smi", status, detail, round(time.monotonic() - t0, 3)))
    if "driver" in smi_facts or "driver" not in facts:
        facts = smi_facts
    return facts, probes


def _nvml(ctx: _Context) -> tuple[dict[str, Any], str, str]:
    if ctx.env.get("PROVISION_NO_NVML"):
        return {}, "skipped", "PROVISION_NO_NVML is set"
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin:
        return {}, "absent", "nvidia-ml-py (pynvml) is not installed"
    # Where the loader would find NVML; looking first spares a child interpreter on hosts
    # without a driver, and under a stand-in root names the library the child must load.
    dirs = [*ctx.dirs("LD_LIBRARY_PATH"), *(ctx.at(d) for d in (*loader_conf_dirs(ctx), WSL_LIB))]
    found = next(
        (d / "libnvidia-ml.so.1" for d in dirs if (d / "libnvidia-ml.so.1").exists()), None
    )
    if found is None:
        return {}, "absent", "libnvidia-ml.so.1 is not in the loader's folders"
    preload = str(found) if ctx.stand_in else ""
    argv = [sys.executable, "-I", "-S", str(CHILD), "nvml", str(Path(spec.origin).parent), preload]
    try:
        done = ctx.run(argv)
    except ProvisionError as exc:
        return {}, "timeout" if _timed_out(exc) else "failed", str(exc)
    try:
        out = json.loads(done.stdout)
    except ValueError:
        return {}, "failed", _crash(done)
    if not out.get("ok"):
        error = str(out.get("error", "unknown error"))
        status = "absent" if out.get("absent") else "failed"
        return ({} if status == "absent" else {"driver": Driver(error=error)}), status, error
    gpus = tuple(
        Gpu(
            index=int(g["index"]),
            name=g["name"],
            uuid=f"GPU-{g['index']}",
            compute_capability=".".join(str(x) for x in g["cc"]) if g["cc"] else "",
            memory_mib=None if g["memory_bytes"] is None else g["memory_bytes"] // (1 << 20),
            mig={None: "", 0: "disabled", 1: "enabled"}.get(g["mig"], ""),
            persistence={None: "", 0: "disabled", 1: "enabled"}.get(g["persistence"], ""),
        )
        for g in out["gpus"]
    )
    cuda = int(out.get("cuda") or 0)
    driver = Driver(
        version=out.get("driver", ""),
        cuda=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "",
        source="nvml",
    )
    return {"driver": driver, "gpus": gpus}, "ok", f"{len(gpus)} GPU(s), driver {driver.version}"


def _crash(done: _proc.Completed) -> str:
    if done.returncode < 0:
        return f"the probe process died of signal {-done.returncode}"
    tail = done.last_line("no output")
    return f"the probe process failed (exit {done.returncode}): {tail[:200]}"


def _find_nvidia_smi(ctx: _Context) -> Path | None:
    if not ctx.stand_in and sys.platform.startswith("win"):
        found = _proc.which("nvidia-smi")
        return Path(found) if found else None
    for d in ctx.dirs("PATH"):
        if os.access(d / "nvidia-smi", os.X_OK):
            return d / "nvidia-smi"
    return next((ctx.at(p) for p in SMI_PLACES if os.access(ctx.at(p), os.X_OK)), None)


def _nvidia_smi(ctx: _Context) -> tuple[dict[str, Any], str, str]:
    exe = _find_nvidia_smi(ctx)
    if exe is None:
        return {}, "absent", "nvidia-smi not found"
    fields = list(SMI_FIELDS)
    notes: list[str] = []
    try:
        done = ctx.run([str(exe), f"--query-gpu={','.join(fields)}", "--format=csv"])
        if "compute_cap" in done.stdout and "not a valid field" in done.stdout:
            # Drivers before R510 have no compute_cap field; ask for the rest.
            fields.remove("compute_cap")
            notes.append("this nvidia-smi cannot report compute capability")
            done = ctx.run([str(exe), f"--query-gpu={','.join(fields)}", "--format=csv"])
        if done.returncode != 0:
            said = _first_line(done)
            return {"driver": Driver(error=said)}, "failed", f"{ctx.show(exe)}: {said}"
        rows = _parse_smi_csv(done.stdout)
        banner = ctx.run([str(exe)])
    except ToolMissing as exc:
        return {}, "absent", str(exc)
    except ProvisionError as exc:
        return {}, "timeout" if _timed_out(exc) else "failed", f"{ctx.show(exe)}: {exc}"
    cuda = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", banner.stdout)
    version = re.search(r"Driver Version\s*:\s*(\d+(?:\.\d+)+)", banner.stdout)
    driver = Driver(
        version=rows[0].get("driver_version", "")
        if rows
        else (version.group(1) if version else ""),
        cuda=cuda.group(1) if cuda else "",
        source="nvidia-smi",
    )
    gpus = tuple(_smi_gpu(r) for r in rows)
    detail = "; ".join([f"{len(gpus)} GPU(s), driver {driver.version}", *notes])
    return {"driver": driver, "gpus": gpus}, "ok", detail


def _first_line(done: _proc.Completed) -> str:
    lines = [ln.strip() for ln in (done.stdout + "\n" + done.stderr).splitlines() if ln.strip()]
    return lines[0][:200] if lines else f"exit {done.returncode}"


def _parse_smi_csv(text: str) -> list[dict[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
    return [dict(zip(header, (v.strip() for v in ln.split(",")), strict=False)) for ln in lines[1:]]


def _smi_gpu(row: Mapping[str, str]) -> Gpu:
    def mode(value: str) -> str:
        return value.lower() if value.lower() in ("enabled", "disabled") else ""

    mem = re.match(r"(\d+)", row.get("memory.total", ""))
    cc = row.get("compute_cap", "")
    index = int(row.get("index", "0"))
    return Gpu(
        index=index,
        name=row.get("name", ""),
        uuid=f"GPU-{index}",
        compute_capability=cc if re.fullmatch(r"\d+\.\d+", cc) else "",
        memory_mib=int(mem.group(1)) if mem else None,
        mig=mode(row.get("mig.mode.current", "")),
        persistence=mode(row.get("persistence_mode", "")),
    )


# --- CUDA libraries -----------------------------------------------------------------------------


@dataclass
class _Found:
    kind: str
    real: Path
    names: set[str] = field(default_factory=set)
    found_in: list[str] = field(default_factory=list)
    env: str = ""
    version: str = ""
    version_from: str = ""
    built_for: str = ""


def _python_prefixes(ctx: _Context) -> list[tuple[Path, str]]:
    """(prefix, kind) of every Python installation or environment worth looking into."""
    wanted: list[Path] = []
    if not ctx.stand_in:
        wanted += [Path(sys.prefix), *_registered_prefixes()]
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if ctx.env.get(var):
            wanted.append(ctx.at(ctx.env[var]))
    wanted += _conda_prefixes(ctx)
    wanted += [ctx.at(p) for p in PYTHON_PREFIXES]
    for folder in VENV_FOLDERS:
        wanted += _glob(ctx.at(folder), "*")
    out: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    for prefix in wanted:
        real = ctx.real(prefix)
        if real in seen or not prefix.is_dir():
            continue
        seen.add(real)
        kind = (
            "conda"
            if (prefix / "conda-meta").is_dir()
            else "venv"
            if (prefix / "pyvenv.cfg").exists()
            else "python"
        )
        out.append((prefix, kind))
    return out


def _registered_prefixes() -> list[Path]:
    """The environments provision built here (its registry), wherever their prefixes are."""
    from provision import registry

    try:
        return [Path(r.prefix) for _, r in registry.records() if not isinstance(r, str)]
    except OSError:
        return []


def _conda_prefixes(ctx: _Context) -> list[Path]:
    bases: list[Path] = [ctx.at(b) for b in CONDA_BASES]
    for var in ("CONDA_EXE", "MAMBA_EXE"):
        if ctx.env.get(var):
            bases.append(ctx.at(ctx.env[var]).parent.parent)
    if ctx.env.get("MAMBA_ROOT_PREFIX"):
        bases.append(ctx.at(ctx.env["MAMBA_ROOT_PREFIX"]))
    prefixes = [
        ctx.at(v) for k, v in sorted(ctx.env.items()) if re.fullmatch(r"CONDA_PREFIX(_\d+)?", k)
    ]
    for line in _read(ctx.at("~/.conda/environments.txt")).splitlines():
        if line.strip():
            prefixes.append(ctx.at(line.strip()))
    for base in bases:
        if (base / "conda-meta").is_dir():
            prefixes.append(base)
            prefixes += [p for p in _glob(base, "envs/*") if (p / "conda-meta").is_dir()]
    return prefixes


def _site_packages(prefix: Path) -> list[Path]:
    found = _glob(prefix, "lib/python3*/site-packages") + _glob(
        prefix, "lib/python3*/dist-packages"
    )
    return [p for p in found if p.is_dir()]


def _python_of(site: Path) -> str:
    m = re.match(r"python(\d+\.\d+)$", site.parent.name)
    return m.group(1) if m else ""


def _toolkit_roots(ctx: _Context) -> list[Path]:
    return [p for p in _glob(ctx.at("/usr/local"), "cuda*") if p.is_dir()]


def _probe_libraries(ctx: _Context) -> Result:
    cache = _ldconfig_cache(ctx)
    conf_dirs = loader_conf_dirs(ctx)
    ld_dirs = ctx.dirs("LD_LIBRARY_PATH")
    places: list[tuple[Path, str, str]] = [(d, "LD_LIBRARY_PATH", "") for d in ld_dirs]
    cached: set[Path] = set()
    if cache is not None:
        for name, files in cache.items():
            if LIB_RE.match(name):
                cached.update(ctx.real(f) for f in files)
                places += [(f.parent, "loader cache", "") for f in files]
    conf_label = "loader cache" if cache is None else "ld.so.conf folder"
    places += [(ctx.at(d), conf_label, "") for d in conf_dirs]
    for root in _toolkit_roots(ctx):
        for sub in ("lib64", "lib", "targets/*/lib"):
            places += [(d, "CUDA toolkit", "") for d in _glob(root, sub)]
    for prefix, kind in _python_prefixes(ctx):
        if kind == "conda":
            places.append((prefix / "lib", "conda", ctx.show(prefix)))
        for site in _site_packages(prefix):
            places += [(d, "pip", ctx.show(prefix)) for d in _glob(site, "nvidia/*/lib")]

    found: dict[Path, _Found] = {}
    seen_dirs: set[tuple[Path, str]] = set()
    for folder, label, env in places:
        key = (ctx.real(folder), label)
        if key in seen_dirs or not folder.is_dir():
            continue
        seen_dirs.add(key)
        for kind in KINDS:
            for f in _glob(folder, f"lib{kind}.so*"):
                if not LIB_RE.match(f.name) or not f.is_file():
                    continue
                real = ctx.real(f)
                item = found.setdefault(real, _Found(kind, real))
                item.names.update({f.name, real.name})
                if label == "ld.so.conf folder" and real not in cached:
                    label_here = "ld.so.conf folder, not in the loader cache"
                else:
                    label_here = label
                if label_here not in item.found_in:
                    item.found_in.append(label_here)
                item.env = item.env or env

    objects = {real: elf.read(str(real)) for real in found}
    _versions(ctx, found, objects)
    ranks = _loader_ranks(ctx, found, objects, ld_dirs, cache, conf_dirs)
    libraries = tuple(
        Library(
            kind=item.kind,
            path=ctx.show(real),
            soname=_soname(objects.get(real)),
            version=item.version,
            version_from=item.version_from,
            found_in=tuple(item.found_in),
            loader_rank=ranks.get(real),
            env=item.env,
            built_for=item.built_for,
        )
        for real, item in sorted(
            found.items(), key=lambda kv: (KINDS.index(kv[1].kind), str(kv[0]))
        )
    )
    facts = {
        "libraries": libraries,
        "ld_library_path": tuple(ctx.show(d) for d in ld_dirs),
        "loader_dirs": tuple(conf_dirs),
    }
    counts = ", ".join(f"{sum(lib.kind == k for lib in libraries)} {k}" for k in KINDS)
    return facts, [Probe("libraries", "ok", counts)]


def _loader_ranks(
    ctx: _Context,
    found: Mapping[Path, _Found],
    objects: Mapping[Path, elf.Elf | None],
    ld_dirs: list[Path],
    cache: Mapping[str, list[Path]] | None,
    conf_dirs: list[str],
) -> dict[Path, int]:
    """Per SONAME, the order in which the loader finds its copies: LD_LIBRARY_PATH, then cache."""
    ranks: dict[Path, int] = {}
    for soname in sorted({_soname(o) for o in objects.values()} - {""}):
        order: list[Path] = []
        candidates = [d / soname for d in ld_dirs]
        if cache is not None:
            candidates += cache.get(soname, [])
        else:
            candidates += [ctx.at(d) / soname for d in conf_dirs]
        for c in candidates:
            if c.exists():
                real = ctx.real(c)
                if real in found and real not in order:
                    order.append(real)
        ranks.update({real: i for i, real in enumerate(order)})
    return ranks


def _soname(obj: elf.Elf | None) -> str:
    return obj.soname if obj is not None else ""


def _versions(
    ctx: _Context, found: Mapping[Path, _Found], objects: Mapping[Path, elf.Elf | None]
) -> None:
    """Fill each library's version, from the best source available, naming the source."""
    reported = _ask_libraries(ctx, found, objects)
    dpkg = _Dpkg(ctx)
    for real, item in found.items():
        from_name = max(
            (
                m.group(2)
                for n in item.names
                if (m := LIB_RE.match(n)) and m.group(2) and "." in m.group(2)
            ),
            key=lambda v: (v.count("."), v),
            default="",
        )
        soname = _soname(objects.get(real))
        package, item.built_for = _package_version(item.kind, real, soname)
        if not package and not item.env:
            package, item.built_for = dpkg.owner(real, item.names)
        choices: list[tuple[str, str]] = []
        asked = reported.get(real)
        if item.kind == "cudnn":
            choices += [
                (cudalibs.cudnn_version(asked) if asked else "", "cudnnGetVersion"),
                (from_name, "file name"),
            ]
            choices.append((_cudnn_header(ctx, real), "cudnn_version.h"))
        else:
            choices.append((from_name, "file name"))
            said = cudalibs.cudart_version(asked) if asked and item.kind == "cudart" else ""
            if said and package and package.startswith(said + "."):
                # The runtime reports major.minor only; its wheel or conda package has the patch.
                choices.append((package, "cudaRuntimeGetVersion + package metadata"))
            choices.append((said, "cudaRuntimeGetVersion"))
        choices.append((package, "package metadata"))
        major = soname.rsplit(".so.", 1)[-1] if ".so." in soname else ""
        choices.append((major if major.isdigit() else "", "soname"))
        item.version, item.version_from = next(((v, s) for v, s in choices if v), ("", ""))


def _ask_libraries(
    ctx: _Context, found: Mapping[Path, _Found], objects: Mapping[Path, elf.Elf | None]
) -> dict[Path, int]:
    """What cuDNN (cudnnGetVersion) and unnamed CUDA runtimes (cudaRuntimeGetVersion) say they are.

    Loaded only in a child interpreter, only when the file is an ELF object for this machine,
    and never when PROVISION_NO_DLOPEN is set.
    """
    if ctx.env.get("PROVISION_NO_DLOPEN") or sys.platform != "linux":
        return {}
    here = ELF_MACHINES.get(ctx.machine)
    wanted = []
    for real, item in found.items():
        info = objects.get(real)
        if info is None or info.machine != here or info.bits != 64:
            continue
        named = any((m := LIB_RE.match(n)) and m.group(2) and "." in m.group(2) for n in item.names)
        if item.kind == "cudnn" or (item.kind == "cudart" and not named):
            wanted.append([item.kind, str(real)])
    if not wanted:
        return {}
    try:
        done = ctx.run(
            [sys.executable, "-I", "-S", str(CHILD), "versions"], stdin=json.dumps(wanted)
        )
        answers = json.loads(done.stdout)
    except (ProvisionError, ValueError):
        return {}
    return {Path(p): int(a["value"]) for p, a in answers.items() if "value" in a}


def _cudnn_header(ctx: _Context, lib: Path) -> str:
    candidates = [lib.parent.parent / "include" / "cudnn_version.h"]
    candidates += _glob(ctx.at("/usr/include"), "cudnn_version*.h")
    candidates += _glob(ctx.at("/usr/include"), "*/cudnn_version*.h")
    major = re.match(r"libcudnn\.so\.(\d+)", lib.name)
    for header in candidates:
        version = cudalibs.cudnn_header_version(cudalibs.header_defines(_read(header)))
        if version and (major is None or version.split(".")[0] == major.group(1)):
            return version
    return ""


def _package_version(kind: str, lib: Path, soname: str) -> tuple[str, str]:
    """(version, CUDA major it was built for) of the wheel or conda package that installed `lib`."""
    want_major = soname.rsplit(".so.", 1)[-1].split(".")[0] if ".so." in soname else ""
    for up in lib.parents[:5]:
        dists = _glob(up, f"{WHEEL_OF[kind]}*.dist-info") + _glob(
            up / "dist-info", f"{WHEEL_OF[kind]}*.dist-info"
        )
        found: list[tuple[str, str]] = []
        for d in dists:
            name, _, version = d.name[: -len(".dist-info")].rpartition("-")
            suffix = re.search(r"_cu(\d+)$", name)
            # cuDNN wheels name the CUDA major they are built for; CUDA's own wheels are that major.
            built_for = (
                suffix.group(1) if suffix else "" if kind == "cudnn" else version.split(".")[0]
            )
            if not want_major or version.split(".")[0] == want_major:
                found.append((version, built_for))
        if found:
            return max(found)
        meta = up / "conda-meta"
        if meta.is_dir():
            for pkg in CONDA_OF[kind]:
                for j in _glob(meta, f"{pkg}-[0-9]*.json"):
                    version = j.name[len(pkg) + 1 :].rsplit("-", 1)[0]
                    if not want_major or version.split(".")[0] == want_major:
                        return version, version.split(".")[0] if kind != "cudnn" else ""
            return "", ""
    return "", ""


class _Dpkg:
    """Which Debian/Ubuntu package installed a system library, read from dpkg's own records."""

    PATTERNS = ("libcudnn*.list", "cuda-cudart*.list", "libcublas*.list", "libcudart*.list")

    def __init__(self, ctx: _Context):
        self.ctx = ctx
        self._owners: dict[str, str] | None = None

    def owner(self, real: Path, names: Iterable[str]) -> tuple[str, str]:
        if self._owners is None:
            self._owners = {}
            info = self.ctx.at("/var/lib/dpkg/info")
            for pattern in self.PATTERNS:
                for listing in _glob(info, pattern):
                    package = listing.name[: -len(".list")].split(":")[0]
                    for line in _read(listing, 1 << 20).splitlines():
                        self._owners.setdefault(line.strip(), package)
        host = self.ctx.host_path(real)
        folder = host.rsplit("/", 1)[0]
        package = self._owners.get(host) or next(
            (
                self._owners[f"{folder}/{n}"]
                for n in sorted(names)
                if f"{folder}/{n}" in self._owners
            ),
            "",
        )
        if not package:
            return "", ""
        m = re.search(r"cuda-?(\d+)", package)
        return self._version(package), m.group(1) if m else ""

    def _version(self, package: str) -> str:
        stanza = False
        for line in _read(self.ctx.at("/var/lib/dpkg/status"), 1 << 24).splitlines():
            if line.startswith("Package: "):
                stanza = line[len("Package: ") :].strip() == package
            elif stanza and line.startswith("Version: "):
                version = line[len("Version: ") :].strip()
                return version.split(":")[-1].rsplit("-", 1)[0]
        return ""


# --- ptxas, Pythons and environments ------------------------------------------------------------


def _probe_ptxas(ctx: _Context) -> Result:
    candidates: list[tuple[Path, str]] = [
        (root / "bin" / "ptxas", "") for root in _toolkit_roots(ctx)
    ]
    candidates += [(d / "ptxas", "") for d in ctx.dirs("PATH")]
    for prefix, kind in _python_prefixes(ctx):
        env = ctx.show(prefix)
        if kind == "conda":
            candidates.append((prefix / "bin" / "ptxas", env))
        for site in _site_packages(prefix):
            candidates += [(p, env) for p in _glob(site, "nvidia/*/bin/ptxas")]
    seen: set[Path] = set()
    found: list[Ptxas] = []
    for path, env in candidates:
        if not os.access(path, os.X_OK):
            continue
        real = ctx.real(path)
        if real in seen:
            continue
        seen.add(real)
        try:
            said = ctx.run([str(path), "--version"]).stdout
        except ProvisionError:
            said = ""
        m = re.search(r"release (\d+\.\d+)", said)
        found.append(Ptxas(ctx.show(real), m.group(1) if m else "", env))
    detail = ", ".join(f"{p.version or '?'}" for p in found) or "none found"
    return {"ptxas": tuple(found)}, [Probe("ptxas", "ok" if found else "absent", detail)]


def _probe_environments(ctx: _Context) -> Result:
    pythons: dict[str, str] = {}
    for d in [*ctx.dirs("PATH"), ctx.at("/usr/bin"), ctx.at("/usr/local/bin")]:
        for exe in _glob(d, "python3.*"):
            m = re.fullmatch(r"python(3\.\d+)", exe.name)
            if m and os.access(exe, os.X_OK):
                pythons.setdefault(m.group(1), ctx.show(exe))
    envs: list[Environment] = []
    for prefix, kind in _python_prefixes(ctx):
        for site in _site_packages(prefix):
            tf = [
                d.name[: -len(".dist-info")].split("-")[1]
                for d in _glob(site, "tensorflow-*.dist-info")
            ]
            if tf:
                envs.append(Environment(ctx.show(prefix), kind, _python_of(site), max(tf)))
    ordered = tuple(sorted(pythons, key=lambda v: tuple(int(x) for x in v.split("."))))
    detail = f"Python {', '.join(ordered) or 'none'}; {len(envs)} environment(s) with TensorFlow"
    return {"pythons": ordered, "environments": tuple(envs)}, [Probe("environments", "ok", detail)]


# --- running them all ---------------------------------------------------------------------------

PROBES: dict[str, Callable[[_Context], Result]] = {
    "system": _probe_system,
    "gpus": _probe_gpus,
    "libraries": _probe_libraries,
    "ptxas": _probe_ptxas,
    "environments": _probe_environments,
}


def probe(
    root: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> HostReport:
    """Run every probe at once, each in its own thread: none can stop the others or hang us."""
    ctx = _Context(root, os.environ if env is None else env, timeout)
    results: dict[str, Result | BaseException] = {}
    started = time.monotonic()

    def work(name: str, fn: Callable[[_Context], Result]) -> None:
        t0 = time.monotonic()
        try:
            facts, done = fn(ctx)
            seconds = round(time.monotonic() - t0, 3)
            results[name] = (facts, [p if p.seconds else replace(p, seconds=seconds) for p in done])
        except Exception as exc:  # a probe's bug must not hide the others' findings
            results[name] = exc

    threads = {
        name: threading.Thread(target=work, args=(name, fn), name=f"probe-{name}", daemon=True)
        for name, fn in PROBES.items()
    }
    for t in threads.values():
        t.start()
    # The GPU probe may make three external calls in a row (NVML, then nvidia-smi twice).
    deadline = started + 3 * ctx.timeout + 2
    for t in threads.values():
        t.join(max(0.0, deadline - time.monotonic()))
    facts: dict[str, Any] = {}
    probes: list[Probe] = []
    drivers: list[Driver] = []
    for name in PROBES:
        got = results.get(name)
        elapsed = round(time.monotonic() - started, 3)
        if got is None:
            probes.append(
                Probe(name, "timeout", f"did not finish within {deadline - started:.0f} s", elapsed)
            )
        elif isinstance(got, BaseException):
            probes.append(Probe(name, "failed", f"{type(got).__name__}: {got}", elapsed))
        else:
            part, done = got
            drivers += [part.pop("driver")] if "driver" in part else []
            facts.update(part)
            probes += done
    return HostReport(
        os=facts.get("os", _os_family(sys.platform)),
        machine=facts.get("machine", ctx.machine),
        distro=facts.get("distro", ""),
        kernel=facts.get("kernel", ""),
        wsl=facts.get("wsl", False),
        wsl_lib=facts.get("wsl_lib", ""),
        stand_in=ctx.stand_in,
        driver=_merge(drivers),
        gpus=facts.get("gpus", ()),
        ld_library_path=facts.get(
            "ld_library_path", tuple(ctx.show(d) for d in ctx.dirs("LD_LIBRARY_PATH"))
        ),
        loader_dirs=facts.get("loader_dirs", ()),
        libraries=facts.get("libraries", ()),
        ptxas=facts.get("ptxas", ()),
        pythons=facts.get("pythons", ()),
        environments=facts.get("environments", ()),
        probes=tuple(probes),
    )


def _merge(parts: Iterable[Driver]) -> Driver:
    merged = Driver()
    for part in parts:
        merged = replace(merged, **{k: v for k, v in asdict(part).items() if v})
    return merged
