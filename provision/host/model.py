"""The host report: facts about a machine, no verdicts, and its JSON form (`schema` 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Final, Literal

from provision import records
from provision.errors import ProvisionError

SCHEMA = 1
# What one host probe (provision.host) got: an answer, nothing to ask, an error, no answer in
# time, or not asked (a PROVISION_NO_* knob).
ProbeStatus = Literal["ok", "absent", "failed", "timeout", "skipped"]
OK: Final[ProbeStatus] = "ok"
ABSENT: Final[ProbeStatus] = "absent"
FAILED: Final[ProbeStatus] = "failed"
TIMEOUT: Final[ProbeStatus] = "timeout"
SKIPPED: Final[ProbeStatus] = "skipped"
PROBE_STATUSES: Final[tuple[ProbeStatus, ...]] = (OK, ABSENT, FAILED, TIMEOUT, SKIPPED)


KINDS = ("cudart", "cudnn", "cublas")


@dataclass(frozen=True)
class Probe:
    name: str
    status: ProbeStatus
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
    # 0: the copy the dynamic loader picks for its SONAME; None: not on its path
    loader_rank: int | None
    env: str = ""  # prefix of the Python/conda environment that holds it, "" for the system
    # CUDA major its package was built for (nvidia-cudnn-cu12, libcudnn9-cuda-13)
    built_for: str = ""

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
class HostEnvironment:
    prefix: str
    kind: str  # conda | venv | python
    python: str  # "3.12"
    tensorflow: str  # installed version, "" when none
    # provision's start-up hook is installed: the interpreter loads its CUDA libraries itself
    hooked: bool = False


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
    environments: tuple[HostEnvironment, ...]
    probes: tuple[Probe, ...]
    schema: int = SCHEMA

    @property
    def has_driver(self) -> bool:
        d = self.driver
        return bool(d.version or d.kernel_module or d.user_space or self.wsl_lib or self.gpus)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> HostReport:
        """The report `to_json` wrote (parsed JSON); ProvisionError for another schema, or for a
        report of another shape (the message names the field)."""
        if data.get("schema") != SCHEMA:
            raise ProvisionError(f"host report schema {data.get('schema')!r} is not {SCHEMA}")
        return records.read(cls, data, "host report", ProvisionError)
