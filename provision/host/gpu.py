"""The driver and its GPUs: NVML (in a child interpreter), else nvidia-smi, and what the files say
(/proc/driver/nvidia/version for the kernel module, libcuda.so.<version> for the user-space part).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from provision import _proc
from provision.errors import ProvisionError, ToolMissing
from provision.host.loader import search_dirs
from provision.host.model import Driver, Gpu, Probe, ProbeStatus
from provision.host.root import Context, glob, read_text

SMI_FIELDS = (
    "index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "memory.used",
    "memory.free", "pci.bus_id", "persistence_mode", "mig.mode.current",
)  # fmt: skip
SMI_PLACES = (
    "/usr/bin/nvidia-smi",
    "/usr/lib/wsl/lib/nvidia-smi",
    "/usr/local/nvidia/bin/nvidia-smi",
)
WSL_LIB = "/usr/lib/wsl/lib"


@dataclass(frozen=True)
class GpuFacts:
    """What NVML or nvidia-smi said: the driver (None when neither could say), its GPUs."""

    driver: Driver | None
    gpus: tuple[Gpu, ...]
    probes: tuple[Probe, ...]


@dataclass(frozen=True)
class _Answer:
    status: ProbeStatus
    detail: str
    driver: Driver | None = None
    gpus: tuple[Gpu, ...] = ()


def probe_gpus(ctx: Context) -> GpuFacts:
    """NVML first; nvidia-smi when NVML cannot answer (its driver error is kept if smi has none)."""
    t0 = time.monotonic()
    nvml = _nvml(ctx)
    probes = [Probe("nvml", nvml.status, nvml.detail, round(time.monotonic() - t0, 3))]
    if nvml.status == "ok":
        return GpuFacts(nvml.driver, nvml.gpus, tuple(probes))
    t0 = time.monotonic()
    smi = _nvidia_smi(ctx)
    probes.append(Probe("nvidia-smi", smi.status, smi.detail, round(time.monotonic() - t0, 3)))
    chosen = smi if smi.driver is not None or nvml.driver is None else nvml
    return GpuFacts(chosen.driver, chosen.gpus, tuple(probes))


def kernel_module(ctx: Context) -> str:
    """The loaded kernel module's version (/proc/driver/nvidia/version), "" when none is."""
    text = read_text(ctx.at("/proc/driver/nvidia/version"))
    m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else ""


def libcuda_versions(ctx: Context) -> tuple[str, tuple[str, ...]]:
    """The driver version of the libcuda.so.1 the loader picks, and every one present."""
    first, every = "", []
    for d in search_dirs(ctx):
        one = d / "libcuda.so.1"
        if not first and one.exists():
            m = re.match(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", ctx.real(one).name)
            first = m.group(1) if m else ""
        for lib in glob(d, "libcuda.so.*.*"):
            m = re.match(r"libcuda\.so\.(\d{3,}\.\d+(?:\.\d+)?)$", lib.name)
            if m and m.group(1) not in every:
                every.append(m.group(1))
    return first, tuple(every)


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc.__cause__, subprocess.TimeoutExpired)


def _nvml(ctx: Context) -> _Answer:
    if ctx.env.get("PROVISION_NO_NVML"):
        return _Answer("skipped", "PROVISION_NO_NVML is set")
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin:
        return _Answer("absent", "nvidia-ml-py (pynvml) is not installed")
    # Where the loader would find NVML; looking first spares a child interpreter on hosts
    # without a driver, and under a stand-in root names the library the child must load.
    found = next(
        (
            d / "libnvidia-ml.so.1"
            for d in search_dirs(ctx, WSL_LIB)
            if (d / "libnvidia-ml.so.1").exists()
        ),
        None,
    )
    if found is None:
        return _Answer("absent", "libnvidia-ml.so.1 is not in the loader's folders")
    preload = str(found) if ctx.stand_in else ""
    try:
        done = ctx.child(["nvml", str(Path(spec.origin).parent), preload])
    except ProvisionError as exc:
        return _Answer("timeout" if _timed_out(exc) else "failed", str(exc))
    try:
        out = json.loads(done.stdout)
    except ValueError:
        return _Answer("failed", _crash(done))
    if not out.get("ok"):
        error = str(out.get("error", "unknown error"))
        if out.get("absent"):
            return _Answer("absent", error)
        return _Answer("failed", error, Driver(error=error))
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
    return _Answer("ok", f"{len(gpus)} GPU(s), driver {driver.version}", driver, gpus)


def _crash(done: _proc.Completed) -> str:
    if done.returncode < 0:
        return f"the probe process died of signal {-done.returncode}"
    tail = done.last_line("no output")
    return f"the probe process failed (exit {done.returncode}): {tail[:200]}"


def _find_nvidia_smi(ctx: Context) -> Path | None:
    if not ctx.stand_in and sys.platform.startswith("win"):
        found = _proc.which("nvidia-smi")
        return Path(found) if found else None
    for d in ctx.dirs("PATH"):
        if os.access(d / "nvidia-smi", os.X_OK):
            return d / "nvidia-smi"
    return next((ctx.at(p) for p in SMI_PLACES if os.access(ctx.at(p), os.X_OK)), None)


def _nvidia_smi(ctx: Context) -> _Answer:
    exe = _find_nvidia_smi(ctx)
    if exe is None:
        return _Answer("absent", "nvidia-smi not found")
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
            return _Answer("failed", f"{ctx.show(exe)}: {said}", Driver(error=said))
        rows = _parse_smi_csv(done.stdout)
        banner = ctx.run([str(exe)])
    except ToolMissing as exc:
        return _Answer("absent", str(exc))
    except ProvisionError as exc:
        return _Answer("timeout" if _timed_out(exc) else "failed", f"{ctx.show(exe)}: {exc}")
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
    return _Answer("ok", detail, driver, gpus)


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
