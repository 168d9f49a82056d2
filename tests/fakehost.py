"""Fake hosts for `provision doctor`: a stand-in root directory with what a real machine has.

A FakeHost is a directory tree in tmp_path that `provision doctor --root` reads instead of `/`:
/proc/driver/nvidia/version, /proc/version, /etc/ld.so.conf.d, /usr/local/cuda-X.Y, library folders,
site-packages and conda prefixes, dpkg records; an `nvidia-smi` executable on its PATH that prints
captured output (tests/fixtures/h200 holds real captures, tests/fixtures/hosts crafted ones); and,
when asked, a libnvidia-ml.so.1 that answers NVML's calls with a given driver and GPUs.

Every library is a real ELF shared object built with the C compiler: it has the SONAME of NVIDIA's
library and answers the call a real one answers with its version (cudnnGetVersion,
cudaRuntimeGetVersion, NVML's queries), so the doctor reads versions the way it does on a real host.
Compiled objects are cached per session (`lib_cache`), so a test builds each one once.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200"
HOSTS = FIXTURES / "hosts"
# The query the captures answer (tests/fixtures/h200/README.md); written out, not imported from
# provision.host, so that a change in what the doctor asks shows up as a fake that cannot answer.
SMI_QUERY = (
    "--query-gpu=index,name,uuid,driver_version,compute_cap,memory.total,memory.used,"
    "memory.free,pci.bus_id,persistence_mode,mig.mode.current --format=csv"
)
SMI_QUERY_NO_CC = SMI_QUERY.replace("compute_cap,", "")
SMI_NO_CC = 'Field "compute_cap" is not a valid field to query.\n\n'
SMI_MISMATCH = (
    "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {}\n"
)
# Variables of the real environment that would otherwise leak into the stand-in host.
SCRUB = (
    "LD_LIBRARY_PATH",
    "CONDA_PREFIX",
    "CONDA_EXE",
    "MAMBA_EXE",
    "MAMBA_ROOT_PREFIX",
    "VIRTUAL_ENV",
    "PROVISION_NO_NVML",
    "PROVISION_NO_DLOPEN",
    "PROVISION_PROBE_TIMEOUT",
    "PROVISION_HOST_ROOT",
)
MULTIARCH = "/usr/lib/x86_64-linux-gnu"


def compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler: fake hosts need real ELF libraries built with one")
    return cc


def build_so(cache: Path, soname: str, source: str, flags: Sequence[str] = ()) -> Path:
    """A real shared object with this SONAME, compiled once per (SONAME, source, flags)."""
    key = hashlib.sha256(f"{soname}\0{source}\0{' '.join(flags)}".encode()).hexdigest()[:16]
    out = cache / f"{key}-{soname}"
    if not out.exists():
        src = cache / f"{key}.c"
        src.write_text(source)
        tmp = out.with_suffix(".tmp")
        command = [compiler(), "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}", "-o", tmp, src]
        subprocess.run(
            [*command, *flags],
            check=True,
            capture_output=True,
        )
        tmp.rename(out)
    return out


def cudnn_source(version: str) -> str:
    major, minor, patch = (int(x) for x in [*version.split("."), "0", "0"][:3])
    # cuDNN 9 reports major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch.
    value = (
        major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch
    )
    return f"#include <stddef.h>\nsize_t cudnnGetVersion(void) {{ return {value}; }}\n"


def cudnn_sub_library(major: str) -> str:
    """The sub-library cuDNN's libcudnn.so.N forwards cudnnGetVersion to (and the rest)."""
    return f"libcudnn_graph.so.{major}" if int(major) >= 9 else f"libcudnn_ops_infer.so.{major}"


def cudnn_shim_source(major: str) -> str:
    """libcudnn.so.N as NVIDIA ships it since cuDNN 8: a shim (RUNPATH $ORIGIN) that loads its
    sub-library by soname and answers from it; when that does not load, it aborts the process."""
    sub = cudnn_sub_library(major)
    return f"""#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
size_t cudnnGetVersion(void) {{
    void *sub = dlopen("{sub}", RTLD_NOW);
    if (!sub) {{ fprintf(stderr, "Unable to load any of {{{sub}}}\\n"); abort(); }}
    return ((size_t (*)(void))dlsym(sub, "cudnnGetVersion"))();
}}
"""


def cudart_source(version: str) -> str:
    major, minor = (int(x) for x in version.split(".")[:2])
    return (
        f"int cudaRuntimeGetVersion(int *v) {{ *v = {major * 1000 + minor * 10}; return 0; }}\n"
        "int cudaDriverGetVersion(int *v) { *v = 0; return 35; }\n"
    )


def plain_source(symbol: str) -> str:
    return f"int {symbol}(void) {{ return 0; }}\n"


@dataclass(frozen=True)
class FakeGpu:
    name: str
    cc: str  # "3.7"
    memory_mib: int
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    mig: int | None = None  # None: NOT_SUPPORTED (pre-Ampere)
    persistence: int = 1


def nvml_source(driver: str, cuda: str, gpus: Sequence[FakeGpu], init_error: int = 0) -> str:
    """C for a libnvidia-ml.so.1 answering the NVML calls pynvml makes for the doctor."""
    n = max(len(gpus), 1)

    def arr(ctype: str, values: Iterable[Any]) -> str:
        return f"{{{', '.join(str(v) for v in values)}}}"

    major, minor = (int(x) for x in cuda.split("."))
    names = arr("", (f'"{g.name}"' for g in gpus)) if gpus else '{""}'
    uuids = arr("", (f'"{g.uuid}"' for g in gpus)) if gpus else '{""}'
    ccmaj = arr("", (int(g.cc.split(".")[0]) for g in gpus)) if gpus else "{0}"
    ccmin = arr("", (int(g.cc.split(".")[1]) for g in gpus)) if gpus else "{0}"
    mem = arr("", (f"{g.memory_mib}ULL * 1048576ULL" for g in gpus)) if gpus else "{0}"
    mig = arr("", (-1 if g.mig is None else g.mig for g in gpus)) if gpus else "{0}"
    pers = arr("", (g.persistence for g in gpus)) if gpus else "{0}"
    return f"""
#include <string.h>
typedef struct {{ unsigned long long total, free, used; }} mem_t;
static const char *NAMES[{n}] = {names};
static const char *UUIDS[{n}] = {uuids};
static const int CCMAJ[{n}] = {ccmaj}, CCMIN[{n}] = {ccmin}, MIG[{n}] = {mig}, PERS[{n}] = {pers};
static const unsigned long long MEM[{n}] = {mem};
static int put(char *dst, unsigned size, const char *src) {{
    if (strlen(src) + 1 > size) return 7;
    strcpy(dst, src); return 0;
}}
#define I(h) ((unsigned)(unsigned long)(h) - 1)
int nvmlInitWithFlags(unsigned flags) {{ return {init_error}; }}
int nvmlInit_v2(void) {{ return {init_error}; }}
int nvmlInit(void) {{ return {init_error}; }}
int nvmlShutdown(void) {{ return 0; }}
const char *nvmlErrorString(int r) {{
    switch (r) {{
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }}
}}
int nvmlSystemGetDriverVersion(char *v, unsigned n) {{ return put(v, n, "{driver}"); }}
int nvmlSystemGetCudaDriverVersion(int *v) {{ *v = {major * 1000 + minor * 10}; return 0; }}
int nvmlSystemGetCudaDriverVersion_v2(int *v) {{ *v = {major * 1000 + minor * 10}; return 0; }}
int nvmlDeviceGetCount_v2(unsigned *c) {{ *c = {len(gpus)}; return 0; }}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {{
    if (i >= {len(gpus)}) return 2;
    *h = (void *)(unsigned long)(i + 1); return 0;
}}
int nvmlDeviceGetName(void *h, char *s, unsigned n) {{ return put(s, n, NAMES[I(h)]); }}
int nvmlDeviceGetUUID(void *h, char *s, unsigned n) {{ return put(s, n, UUIDS[I(h)]); }}
int nvmlDeviceGetCudaComputeCapability(void *h, int *a, int *b) {{
    *a = CCMAJ[I(h)]; *b = CCMIN[I(h)]; return 0;
}}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {{
    m->total = MEM[I(h)]; m->free = MEM[I(h)]; m->used = 0; return 0;
}}
int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend) {{
    if (MIG[I(h)] < 0) return 3;
    *cur = *pend = MIG[I(h)]; return 0;
}}
int nvmlDeviceGetPersistenceMode(void *h, int *m) {{ *m = PERS[I(h)]; return 0; }}
"""


class FakeHost:
    """A stand-in machine under `base`; `doctor(...)` runs the real CLI against it."""

    def __init__(self, base: Path, lib_cache: Path, *, home: str = "/home/lab"):
        self.root = base / "root"
        self.cache = lib_cache
        self.home = home
        self.env: dict[str, str | None] = {k: None for k in SCRUB}
        self.env.update(HOME=home, PATH="/usr/local/bin:/usr/bin:/bin")
        for d in ("proc", "etc/ld.so.conf.d", "usr/bin", "usr/local", MULTIARCH.lstrip("/")):
            self.at(d).mkdir(parents=True, exist_ok=True)
        self.write(
            "/proc/version",
            "Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) (x86_64-linux-gnu-gcc-13 "
            "(Ubuntu 13.2.0-23ubuntu4) 13.2.0) #49-Ubuntu SMP\n",
        )
        self.write("/proc/sys/kernel/osrelease", "6.8.0-49-generic\n")
        self.write("/etc/os-release", 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\n')
        self.write("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
        self.ld_conf("x86_64-linux-gnu", "/usr/local/lib/x86_64-linux-gnu", MULTIARCH)

    # --- files ---

    def at(self, host_path: str) -> Path:
        if host_path.startswith("~"):
            host_path = self.home + host_path[1:]
        return self.root / host_path.lstrip("/")

    def write(self, host_path: str, text: str, mode: int = 0o644) -> Path:
        path = self.at(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return path

    def link(self, host_path: str, target: str) -> None:
        """A relative symbolic link, as packages make them (never leaves the stand-in root)."""
        path = self.at(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        path.symlink_to(target)

    def install_so(
        self, folder: str, file_name: str, soname: str, source: str, links: Sequence[str] = (),
        flags: Sequence[str] = (),
    ) -> str:  # fmt: skip
        built = build_so(self.cache, soname, source, flags)
        dest = self.at(f"{folder}/{file_name}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, dest)
        for name in links:
            if name != file_name:
                self.link(f"{folder}/{name}", file_name)
        return f"{folder}/{file_name}"

    def ld_conf(self, name: str, *folders: str) -> None:
        self.write(f"/etc/ld.so.conf.d/{name}.conf", "".join(f"{f}\n" for f in folders))

    # --- the driver ---

    def kernel_module(self, version: str, *, open_module: bool = True) -> None:
        if open_module:
            line = (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                f"{version}  Release Build  "
                "(dvs-builder@U22-I3-AF03-09-1)  Thu Oct 16 06:21:21 UTC 2025"
            )
        else:
            line = (
                f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  "
                "Tue Jul  9 20:49:29 UTC 2024"
            )
        self.write(
            "/proc/driver/nvidia/version",
            line + "\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n",
        )

    def driver_libs(self, version: str, folder: str = MULTIARCH) -> None:
        """The user-space driver's libcuda.so.<version>, with the links its package makes."""
        self.install_so(
            folder,
            f"libcuda.so.{version}",
            "libcuda.so.1",
            plain_source("cuInit"),
            ["libcuda.so.1", "libcuda.so"],
        )

    def nvml(
        self,
        driver: str,
        cuda: str,
        gpus: Sequence[FakeGpu],
        *,
        init_error: int = 0,
        folder: str = MULTIARCH,
    ) -> None:
        """A libnvidia-ml.so.1 that answers NVML with this driver and these GPUs."""
        self.install_so(
            folder,
            f"libnvidia-ml.so.{driver}",
            "libnvidia-ml.so.1",
            nvml_source(driver, cuda, gpus, init_error),
            ["libnvidia-ml.so.1"],
        )

    def nvidia_smi(
        self,
        answers: Mapping[str, tuple[str, int]] | None = None,
        *,
        captures: Path | None = None,
        folder: str = "/usr/bin",
        hang: bool = False,
        fail: tuple[str, int] | None = None,
    ) -> Path:
        """An nvidia-smi on the stand-in PATH printing captured output for the queries it knows.

        `captures`: a folder of nvidia-smi.txt, nvidia-smi-q.txt, nvidia-smi-query.csv and (for
        drivers before R510) nvidia-smi-query-nocc.csv. `fail`: (output, exit code) for every call.
        `hang`: it never answers.
        """
        table: dict[str, tuple[str, int]] = {}
        if captures is not None:
            for args, file in (
                ("", "nvidia-smi.txt"),
                ("-q", "nvidia-smi-q.txt"),
                (SMI_QUERY, "nvidia-smi-query.csv"),
            ):
                if (captures / file).exists():
                    table[args] = ((captures / file).read_text(), 0)
            if (captures / "nvidia-smi-query-nocc.csv").exists():
                table[SMI_QUERY] = (SMI_NO_CC, 2)
                table[SMI_QUERY_NO_CC] = ((captures / "nvidia-smi-query-nocc.csv").read_text(), 0)
        table.update(answers or {})
        data = self.at(f"/usr/share/fake-nvidia-smi{folder.replace('/', '-')}")
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            "#!/bin/sh",
            "# fake nvidia-smi: answers with captured output (tests/fakehost.py)",
            "PATH=/usr/bin:/bin",
        ]
        if hang:
            lines.append("exec sleep 3600")
        elif fail is not None:
            (data / "fail").write_text(fail[0])
            lines += [f"cat '{data}/fail'", f"exit {fail[1]}"]
        else:
            lines.append('case "$*" in')
            for i, (args, (text, code)) in enumerate(sorted(table.items())):
                (data / f"{i}.out").write_text(text)
                lines.append(f"  '{args}') cat '{data}/{i}.out'; exit {code} ;;")
            lines.append("""  *) echo "fake nvidia-smi: no capture for: $*" >&2; exit 2 ;;""")
            lines.append("esac")
        return self.write(f"{folder}/nvidia-smi", "\n".join(lines) + "\n", 0o755)

    # --- CUDA libraries ---

    def cudart(self, folder: str, version: str, *, full_name: bool = True) -> str:
        major = version.split(".")[0]
        name = f"libcudart.so.{version}" if full_name else f"libcudart.so.{major}"
        return self.install_so(
            folder,
            name,
            f"libcudart.so.{major}",
            cudart_source(version),
            [f"libcudart.so.{major}", "libcudart.so"],
        )

    def cudnn(
        self, folder: str, version: str, *, full_name: bool = True, header: bool = False
    ) -> str:
        """libcudnn.so.N (the shim) and the sub-library that answers for it, in `folder`."""
        major = version.split(".")[0]
        sub = cudnn_sub_library(major)
        stem = sub.split(".so.")[0]
        self.install_so(
            folder,
            f"{stem}.so.{version}" if full_name else sub,
            sub,
            cudnn_source(version),
            [sub],
        )
        name = f"libcudnn.so.{version}" if full_name else f"libcudnn.so.{major}"
        path = self.install_so(
            folder,
            name,
            f"libcudnn.so.{major}",
            cudnn_shim_source(major),
            [f"libcudnn.so.{major}", "libcudnn.so"],
            flags=["-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags", "-ldl"],
        )
        if header:
            parts = [*version.split("."), "0", "0"][:3]
            self.write(
                f"{folder.rsplit('/', 1)[0]}/include/cudnn_version.h",
                "".join(
                    f"#define CUDNN_{k} {v}\n"
                    for k, v in zip(("MAJOR", "MINOR", "PATCHLEVEL"), parts, strict=True)
                ),
            )
        return path

    def cublas(self, folder: str, version: str, *, full_name: bool = True) -> str:
        major = version.split(".")[0]
        name = f"libcublas.so.{version}" if full_name else f"libcublas.so.{major}"
        return self.install_so(
            folder,
            name,
            f"libcublas.so.{major}",
            plain_source("cublasCreate_v2"),
            [f"libcublas.so.{major}", "libcublas.so"],
        )

    def ptxas(self, path: str, version: str) -> None:
        """ptxas answering --version as NVIDIA's does."""
        self.write(
            path,
            "#!/bin/sh\ncat <<'EOF'\nptxas: NVIDIA (R) Ptx optimizing assembler\n"
            "Copyright (c) 2005-2025 NVIDIA Corporation\nBuilt on Wed_Aug_20_01:55:12_PM_PDT_2025\n"
            f"Cuda compilation tools, release {'.'.join(version.split('.')[:2])}, "
            f"V{version}\nEOF\n",
            0o755,
        )

    def toolkit(
        self, version: str, *, cudnn: str | None = None, on_loader_path: bool = True
    ) -> str:
        """/usr/local/cuda-X.Y laid out as NVIDIA's runfile does (lib64 -> targets/.../lib)."""
        mm = ".".join(version.split(".")[:2])
        top = f"/usr/local/cuda-{mm}"
        lib = f"{top}/targets/x86_64-linux/lib"
        self.cudart(lib, version)
        self.cublas(lib, f"{version.split('.')[0]}.{version.split('.')[1]}.3.2")
        if cudnn:
            self.cudnn(lib, cudnn)
        self.link(f"{top}/lib64", "targets/x86_64-linux/lib")
        self.ptxas(f"{top}/bin/ptxas", version)
        self.link("/usr/local/cuda", f"cuda-{mm}")
        if on_loader_path:
            self.ld_conf(f"cuda-{mm.replace('.', '-')}", lib)
        return lib

    def dpkg(self, package: str, version: str, files: Iterable[str]) -> None:
        """What dpkg records for an installed package: its file list and its status stanza."""
        self.write(f"/var/lib/dpkg/info/{package}:amd64.list", "".join(f"{f}\n" for f in files))
        status = self.at("/var/lib/dpkg/status")
        before = status.read_text() if status.exists() else ""
        self.write(
            "/var/lib/dpkg/status",
            before
            + f"Package: {package}\nStatus: install ok installed\nArchitecture: amd64\n"
            + f"Version: {version}\n\n",
        )

    # --- Pythons and environments ---

    def python(self, version: str, folder: str = "/usr/bin") -> None:
        self.write(f"{folder}/python{version}", "#!/bin/sh\nexit 1\n", 0o755)

    def site_packages(self, prefix: str, python: str) -> str:
        sp = f"{prefix}/lib/python{python}/site-packages"
        self.at(sp).mkdir(parents=True, exist_ok=True)
        return sp

    def dist(self, site: str, name: str, version: str) -> None:
        self.write(
            f"{site}/{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        )

    def venv(self, prefix: str, python: str, *, tensorflow: str | None = None) -> str:
        self.write(f"{prefix}/pyvenv.cfg", f"home = /usr/bin\nversion = {python}\n")
        site = self.site_packages(prefix, python)
        if tensorflow:
            self.dist(site, "tensorflow", tensorflow)
        return site

    def pip_wheels(
        self, site: str, cuda: str, cudnn: str, *, cudnn_dist: str | None = None
    ) -> None:
        """NVIDIA's CUDA wheels as pip unpacks them: nvidia/<part>/lib/lib*.so.<major> only."""
        major = cuda.split(".")[0]
        self.cudart(f"{site}/nvidia/cuda_runtime/lib", cuda, full_name=False)
        self.dist(site, f"nvidia_cuda_runtime_cu{major}", cuda)
        self.cublas(f"{site}/nvidia/cublas/lib", f"{cuda.rsplit('.', 1)[0]}.3.2", full_name=False)
        self.dist(site, f"nvidia_cublas_cu{major}", f"{cuda.rsplit('.', 1)[0]}.3.2")
        self.cudnn(f"{site}/nvidia/cudnn/lib", cudnn, full_name=False)
        self.dist(site, cudnn_dist or f"nvidia_cudnn_cu{major}", cudnn)

    def conda_env(
        self, prefix: str, python: str, *, tensorflow: str | None, cuda: str, cudnn: str
    ) -> str:
        """A conda prefix as the conda path builds it: CUDA from conda-forge, TF from pip."""
        self.write(f"{prefix}/conda-meta/history", "")
        self.write(f"{prefix}/conda-meta/cuda-cudart-{cuda}-h5888daf_0.json", "{}")
        self.write(f"{prefix}/conda-meta/cudnn-{cudnn}-h7b6a552_0.json", "{}")
        self.cudart(f"{prefix}/lib", cuda)
        self.cudnn(f"{prefix}/lib", cudnn)
        site = self.site_packages(prefix, python)
        if tensorflow:
            self.dist(site, "tensorflow", tensorflow)
        return site

    # --- running the doctor ---

    def doctor(self, *args: str, **env: str | None) -> tuple[int, str]:
        from provision.cli.commands import cli

        result = CliRunner().invoke(
            cli, ["doctor", "--root", str(self.root), *args], env={**self.env, **env}
        )
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout

    def doctor_json(self, *args: str, **env: str | None) -> tuple[int, dict[str, Any]]:
        import json

        code, out = self.doctor("--json", *args, **env)
        return code, json.loads(out)

    def doctor_process(
        self, *args: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """The installed CLI in a fresh process (real argv, real exit code, real environment)."""
        import clitools

        full = {k: v for k, v in self.env.items() if v is not None}
        full.update(env, PROVISION_HOST_ROOT=str(self.root), HOME=self.home)
        return clitools.provision(
            "doctor", *args, env=full, unset=SCRUB, cwd=clitools.ROOT, timeout=timeout
        )


# --- the hosts the tests use -------------------------------------------------------------------


def h200(base: Path, cache: Path) -> FakeHost:
    """The H200 machine of tests/fixtures/h200/README.md: driver 580.159.04 (CUDA 13.0), the
    CUDA 13.0 toolkit, cuDNN 9.14 from Ubuntu's packages (the CUDA 13 build), a second cuDNN 9.19
    inside a Python environment, Python 3.12, no CUDA 12 libraries."""
    h = FakeHost(base, cache)
    h.kernel_module("580.159.04")
    h.driver_libs("580.159.04")
    h.nvidia_smi(captures=H200)
    h.toolkit("13.0.96")
    cudnn = h.cudnn(MULTIARCH, "9.14.0")
    h.dpkg("libcudnn9-cuda-13", "9.14.0.64-1", [cudnn, f"{MULTIARCH}/libcudnn.so.9"])
    h.write(
        "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h",
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 14\n#define CUDNN_PATCHLEVEL 0\n",
    )
    h.python("3.12")
    site = h.site_packages("/usr/local", "3.12").replace("site-packages", "dist-packages")
    h.at(site).mkdir(parents=True, exist_ok=True)
    h.cudnn(f"{site}/nvidia/cudnn/lib", "9.19.0", full_name=False)
    h.dist(site, "nvidia_cudnn_cu13", "9.19.0.56")
    return h


def k80(base: Path, cache: Path, *, nvml: bool) -> FakeHost:
    """Driver 470.256.02 (CUDA 11.4), the last branch for Kepler, with a Tesla K80 board (two GPUs).
    nvml=False: only nvidia-smi answers, and R470's nvidia-smi cannot report compute capability."""
    h = FakeHost(base, cache)
    h.kernel_module("470.256.02", open_module=False)
    h.driver_libs("470.256.02")
    h.nvidia_smi(captures=HOSTS / "driver470-k80")
    if nvml:
        gpus = [
            FakeGpu(
                "Tesla K80", "3.7", 11441, "GPU-5a0e3c41-7d2b-9f06-1c8e-0b3f62d4a917", persistence=0
            ),
            FakeGpu(
                "Tesla K80", "3.7", 11441, "GPU-e27b9f10-43c6-58a1-d2f4-7c90b1e6a385", persistence=0
            ),
        ]
        h.nvml("470.256.02", "11.4", gpus)
    h.python("3.8")
    return h


def blackwell(base: Path, cache: Path, *, nvml: bool) -> FakeHost:
    """Driver 580.95.05 (CUDA 13.0) with a Blackwell GPU: an RTX PRO 6000 (compute capability 12.0)
    seen through nvidia-smi, or a B200 (10.0) seen through NVML."""
    h = FakeHost(base, cache)
    h.kernel_module("580.95.05")
    h.driver_libs("580.95.05")
    if nvml:
        h.nvml("580.95.05", "13.0", [FakeGpu("NVIDIA B200", "10.0", 183359, mig=0)])
    else:
        h.nvidia_smi(captures=HOSTS / "rtx6000-blackwell")
    h.python("3.12")
    return h


def wsl2(base: Path, cache: Path, *, loader_conf: bool = True, linux_driver: str = "") -> FakeHost:
    """WSL2 on a Windows machine with an RTX 4090 (Windows driver 566.36, CUDA 12.7): the driver's
    libraries and nvidia-smi come from Windows through /usr/lib/wsl/lib; no kernel module."""
    h = FakeHost(base, cache)
    h.write(
        "/proc/version",
        "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@f9c826d3017f) (gcc (GCC) 11.2.0, "
        "GNU ld (GNU Binutils) 2.37) #1 SMP Tue Nov 5 00:21:55 UTC 2024\n",
    )
    h.write("/proc/sys/kernel/osrelease", "5.15.167.4-microsoft-standard-WSL2\n")
    h.install_so(
        "/usr/lib/wsl/lib",
        "libcuda.so.1.1",
        "libcuda.so.1",
        plain_source("cuInit"),
        ["libcuda.so.1", "libcuda.so"],
    )
    h.nvidia_smi(captures=HOSTS / "wsl2-rtx4090", folder="/usr/lib/wsl/lib")
    if loader_conf:
        h.write(
            "/etc/ld.so.conf.d/ld.wsl.conf",
            "# This file was automatically generated by WSL.\n/usr/lib/wsl/lib\n",
        )
    if linux_driver:
        h.driver_libs(linux_driver)
    h.python("3.12")
    return h


def mismatch(base: Path, cache: Path) -> FakeHost:
    """The driver packages were upgraded (570.133.20 -> 580.95.05) without a reboot: the kernel
    still runs the old module, NVML refuses to start and nvidia-smi says so."""
    h = FakeHost(base, cache)
    h.kernel_module("570.133.20")
    h.driver_libs("580.95.05")
    h.nvml("580.95.05", "13.0", [FakeGpu("NVIDIA L40S", "8.9", 46068)], init_error=18)
    h.nvidia_smi(fail=(SMI_MISMATCH.format("580.95"), 18))
    h.python("3.12")
    return h


def lab(
    base: Path, cache: Path, *, cuda: str, cudnn: str, tensorflow: str, shadow_cudnn: str = ""
) -> FakeHost:
    """A lab workstation set up by hand for the system path: driver 555.42.06 (CUDA 12.5), an RTX
    A6000 (8.6), the CUDA toolkit in /usr/local/cuda-X.Y on the loader's path, cuDNN from the
    distribution in /usr/lib/x86_64-linux-gnu, a venv with TensorFlow and nothing else, and a
    conda environment with TensorFlow. `shadow_cudnn`: an older cuDNN in /opt, first on
    LD_LIBRARY_PATH (what a forgotten line in ~/.bashrc does)."""
    h = FakeHost(base, cache)
    h.kernel_module("555.42.06")
    h.driver_libs("555.42.06")
    h.nvidia_smi(captures=HOSTS / "a6000-555")
    h.toolkit(cuda)
    h.cudnn(MULTIARCH, cudnn)
    h.python("3.12")
    h.venv("~/venvs/tf", "3.12", tensorflow=tensorflow)
    h.write("~/miniconda3/conda-meta/history", "")
    h.conda_env("~/miniconda3/envs/tf", "3.12", tensorflow=tensorflow, cuda=cuda, cudnn=cudnn)
    if shadow_cudnn:
        h.cudnn("/opt/cudnn/lib", shadow_cudnn)
        h.env["LD_LIBRARY_PATH"] = "/opt/cudnn/lib"
    return h
