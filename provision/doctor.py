"""Doctor: judges a HostReport against the matrix.

For every release and path: `runs` (ready on this host now), `fix` (runs after the fixes listed,
each an exact command), `cannot` (with why: driver too old for the release's CUDA, GPU too old or
too new for the build, native Windows), or `n/a` (the path does not serve the release anywhere).
Host-wide findings (reboot due, two cuDNN copies on the loader's path, libraries newer than the
driver, ...) come first. Pure: the probing is provision.host's; `run` only ties the two together.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from provision import __version__
from provision.errors import ProvisionError
from provision.host import Gpu, HostReport, Library
from provision.matrix import DATA_FILE, Cuda, Cudnn, Matrix, Release
from provision.payload import targets as gpu_targets
from provision.spec import PATHS, PathKind, refusal, resolve

SCHEMA = 1
STATUS_TEXT = {"runs": "runs", "fix": "runs after a fix", "cannot": "cannot", "n/a": "not offered"}
KIND_TEXT = {"cudart": "CUDA runtime", "cudnn": "cuDNN", "cublas": "cuBLAS"}


@dataclass(frozen=True)
class Finding:
    level: str  # error | warning | note
    text: str
    fix: str = ""


@dataclass(frozen=True)
class Verdict:
    tf: str
    path: str
    status: str  # runs | fix | cannot | n/a
    reasons: tuple[str, ...] = ()  # why it cannot, or what is missing before the fixes
    fixes: tuple[str, ...] = ()  # commands, in the order to run them
    notes: tuple[str, ...] = ()  # caveats that do not change the status


@dataclass(frozen=True)
class Registered:
    """An environment provision built here, and its last verify ("" when never verified)."""

    name: str
    tf: str
    path: str
    prefix: str
    present: bool
    last_verify: str


@dataclass(frozen=True)
class Diagnosis:
    host: HostReport
    findings: tuple[Finding, ...]
    verdicts: tuple[Verdict, ...]
    tf: str | None = None
    matrix_sha256: str = ""
    schema: int = SCHEMA
    registered: tuple[Registered, ...] = ()  # environments provision built on this host

    @property
    def ok(self) -> bool:
        """The host can run the release asked for (any, without --tf), perhaps after fixes."""
        return any(v.status in ("runs", "fix") for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "provision": __version__,
            "tf": self.tf,
            "matrix_sha256": self.matrix_sha256,
            "ok": self.ok,
            "findings": [asdict(f) for f in self.findings],
            "verdicts": [asdict(v) for v in self.verdicts],
            "registered": [asdict(r) for r in self.registered],
            "host": self.host.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Diagnosis:
        if data.get("schema") != SCHEMA:
            raise ProvisionError(f"doctor report schema {data.get('schema')!r} is not {SCHEMA}")
        return cls(
            host=HostReport.from_json(data["host"]),
            findings=tuple(Finding(**f) for f in data["findings"]),
            verdicts=tuple(
                Verdict(**{**v, **{k: tuple(v[k]) for k in ("reasons", "fixes", "notes")}})
                for v in data["verdicts"]
            ),
            tf=data.get("tf"),
            matrix_sha256=data.get("matrix_sha256", ""),
            registered=tuple(Registered(**r) for r in data.get("registered", ())),
        )


def matrix_digest(path: Path = DATA_FILE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(tf: str | None = None, root: str | Path | None = None) -> Diagnosis:
    from provision import host, matrix

    m = matrix.load()
    if tf:
        m.release(tf)  # an unknown release is a usage mistake: say so before probing
    d = diagnose(host.probe(root=root), m, tf, matrix_digest())
    return replace(d, registered=() if root else _registered())


def _registered() -> tuple[Registered, ...]:
    from provision import registry

    found = []
    for name, rec in registry.records():
        if isinstance(rec, str):
            found.append(Registered(name, "?", "?", "?", False, f"unreadable record: {rec}"))
            continue
        last = rec.last_verify
        verdict = ""
        if last is not None:
            verdict = f"{last.summary} ({last.when})"
        present = Path(rec.interpreter).exists()
        found.append(Registered(name, rec.tf, rec.path, rec.prefix, present, verdict))
    return tuple(found)


def diagnose(
    host: HostReport, matrix: Matrix, tf: str | None = None, digest: str = ""
) -> Diagnosis:
    releases = [matrix.release(tf)] if tf else list(matrix.releases)
    verdicts = tuple(_verdict(host, matrix, rel, path) for rel in releases for path in PATHS)
    return Diagnosis(host, tuple(_findings(host)), verdicts, tf, digest)


# --- versions -----------------------------------------------------------------------------------


def _v(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _mm(text: str) -> tuple[int, int] | None:
    """(major, minor) of '12.5', '12.5.82' or '13.0'; None when unreadable."""
    v = _v(text)
    if v is None:
        return None
    return (v.major, v.minor)


def _driver_version(host: HostReport) -> str:
    d = host.driver
    return d.version or d.kernel_module or d.user_space


# --- host-wide findings -------------------------------------------------------------------------


def _findings(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    d = host.driver
    if host.stand_in:
        out.append(Finding("note", "read from a stand-in root, not from this machine (--root)"))
    if not host.has_driver:
        out.append(
            Finding(
                "error",
                "no NVIDIA driver: no nvidia-smi, no NVML library, no /proc/driver/nvidia/version; "
                "TensorFlow can only use the CPU here",
                "install the NVIDIA driver from your distribution's packages (the version each "
                "release needs is below), then reboot",
            )
        )
    if d.error:
        out.append(Finding("error", f"the driver does not answer: {d.error}"))
    if d.kernel_module and d.user_space and d.kernel_module != d.user_space:
        out.append(
            Finding(
                "error",
                f"kernel module {d.kernel_module} but user-space driver {d.user_space}: the driver "
                "was upgraded without a reboot, so NVML and CUDA fail ('Driver/library version "
                "mismatch'); hold the driver packages to stop unattended upgrades doing this",
                "sudo reboot",
            )
        )
    elif d.user_space and not d.kernel_module and not host.wsl and host.os == "linux":
        out.append(
            Finding(
                "error",
                f"user-space driver {d.user_space} is installed but its kernel module is not "
                "loaded",
                "sudo modprobe nvidia  # or reboot; check `dmesg | grep -i nvidia` if it fails",
            )
        )
    if len(d.user_space_all) > 1:
        out.append(
            Finding(
                "warning",
                f"libraries of several drivers are installed ({', '.join(d.user_space_all)}); "
                f"the loader takes {d.user_space or 'none of them as libcuda.so.1'}",
                "remove the old driver's packages",
            )
        )
    out += _wsl_findings(host)
    for g in host.gpus:
        if g.mig == "enabled":
            out.append(
                Finding(
                    "warning",
                    f"GPU {g.index} ({g.name}) is in MIG mode: TensorFlow sees one MIG instance "
                    "per process, chosen with CUDA_VISIBLE_DEVICES=MIG-<uuid> (`nvidia-smi -L`)",
                )
            )
        if g.persistence == "disabled" and not host.wsl and host.os == "linux":
            out.append(
                Finding(
                    "note",
                    f"GPU {g.index}: persistence mode is off, so each program's first CUDA call "
                    "waits for the driver to start",
                    "sudo nvidia-smi -pm 1",
                )
            )
    out += _library_findings(host)
    for p in host.probes:
        if p.status in ("failed", "timeout"):
            out.append(Finding("warning", f"probe {p.name} {p.status}: {p.detail}"))
    return out


def _wsl_findings(host: HostReport) -> list[Finding]:
    if not host.wsl:
        return []
    out = [
        Finding(
            "note",
            "WSL2: the GPU driver is the Windows host's; never install a Linux driver inside WSL",
        )
    ]
    if not host.wsl_lib:
        out.append(
            Finding(
                "error",
                "WSL without /usr/lib/wsl/lib/libcuda.so.1: GPU support is not enabled (WSL 1, "
                "or a Windows driver without WSL support)",
                "update the NVIDIA driver on Windows and run `wsl --update` there",
            )
        )
    elif "/usr/lib/wsl/lib" not in (*host.loader_dirs, *host.ld_library_path):
        out.append(
            Finding(
                "error",
                "/usr/lib/wsl/lib is not on the loader's path, so libcuda.so.1 is not found",
                "export LD_LIBRARY_PATH=/usr/lib/wsl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
            )
        )
    if host.driver.user_space_all:
        out.append(
            Finding(
                "error",
                "a Linux NVIDIA driver is installed inside WSL "
                f"(libcuda.so.{host.driver.user_space_all[0]}); it shadows the Windows driver's "
                "/usr/lib/wsl/lib/libcuda.so.1",
                "sudo apt-get remove --purge 'libnvidia-compute-*'  # the Linux driver's libraries",
            )
        )
    return out


def _library_findings(host: HostReport) -> list[Finding]:
    out: list[Finding] = []
    by_soname: dict[str, list[Library]] = {}
    for lib in host.libraries:
        if lib.loader_rank is not None and lib.soname:
            by_soname.setdefault(lib.soname, []).append(lib)
    for soname, libs in sorted(by_soname.items()):
        if len(libs) < 2:
            continue
        libs.sort(key=lambda lib: lib.loader_rank or 0)
        listed = "; ".join(
            f"{lib.version or '?'} at {lib.path} ({', '.join(lib.found_in)})" for lib in libs
        )
        same = len({lib.version for lib in libs}) == 1
        out.append(
            Finding(
                "note" if same else "warning",
                f"{len(libs)} copies of {soname} on the loader's path: {listed}; the loader takes "
                f"{libs[0].path}" + ("" if same else ", whatever each program was built for"),
                ""
                if same
                else "remove the copy you do not want, or put its folder first in LD_LIBRARY_PATH",
            )
        )
    for kind in ("cudnn", "cudart"):
        for major in sorted(
            {lib.major for lib in host.libraries if lib.kind == kind and lib.major}
        ):
            same_major = [lib for lib in host.libraries if lib.kind == kind and lib.major == major]
            if len(same_major) > 1 and len({lib.version for lib in same_major}) > 1:
                where = "; ".join(f"{lib.version or '?'} at {lib.path}" for lib in same_major)
                out.append(
                    Finding(
                        "note",
                        f"{KIND_TEXT[kind]} {major} is installed {len(same_major)} times, in "
                        f"different versions: {where}; each environment uses its own",
                    )
                )
    dc = _mm(host.driver.cuda)
    if dc is None:
        return out
    for lib in host.libraries:
        mm = _mm(lib.version)
        if lib.kind == "cudart" and mm and lib.version_from != "soname" and mm > dc:
            if mm[0] > dc[0]:
                out.append(
                    Finding(
                        "warning",
                        f"{lib.path} is CUDA {lib.version}, newer than this driver supports "
                        f"(CUDA {host.driver.cuda}): programs using it fail with 'CUDA driver "
                        "version is insufficient'",
                        "upgrade the driver, or use a CUDA runtime of the driver's major version",
                    )
                )
            else:
                out.append(
                    Finding(
                        "note",
                        f"{lib.path} is CUDA {lib.version}, newer than the driver's CUDA "
                        f"{host.driver.cuda}: it runs through minor-version compatibility, but PTX "
                        "it JIT-compiles may be refused",
                    )
                )
    for ptx in host.ptxas:
        mm = _mm(ptx.version)
        if mm and mm > dc:
            out.append(
                Finding(
                    "warning",
                    f"{ptx.path} is from CUDA {ptx.version}, newer than the driver's CUDA "
                    f"{host.driver.cuda}: PTX it writes cannot be loaded by this driver (XLA: "
                    "'unsupported PTX version')",
                    f"put a ptxas of CUDA {host.driver.cuda} or older first on PATH, or upgrade "
                    "the driver",
                )
            )
    return out


# --- per release and path -----------------------------------------------------------------------


def _verdict(host: HostReport, matrix: Matrix, rel: Release, path: PathKind) -> Verdict:
    why_not = refusal(matrix, rel, path)
    if why_not:
        return Verdict(rel.tf, path, "n/a", (why_not,))
    cuda, cudnn = matrix.cuda_of(rel), matrix.cudnn_of(rel)
    reasons: list[str] = []
    fixes: list[str] = []
    notes: list[str] = []
    if host.os == "windows":
        _windows(matrix, rel, path, reasons)
    if not host.has_driver:
        reasons.append(
            f"no NVIDIA driver on this host: TensorFlow {rel.tf} (CUDA {cuda.version}) needs "
            f"driver >= {cuda.driver_min}"
        )
    else:
        minor_compat = _driver(host, rel, cuda, reasons, notes)
        _gpus(host, rel, minor_compat, reasons, notes)
        fixes += [f.fix for f in _findings(host) if f.level == "error" and f.fix]
    if reasons:
        return Verdict(rel.tf, path, "cannot", tuple(reasons), (), tuple(notes))
    missing: list[str] = []
    if path == "conda":
        _conda(host, rel, cuda, cudnn, missing, fixes, notes)
    elif path == "pip":
        _pip(host, matrix, rel, cuda, cudnn, missing, fixes, notes)
    else:
        _system(host, rel, cuda, cudnn, missing, fixes, notes)
    fixes = list(dict.fromkeys(fixes))
    return Verdict(
        rel.tf, path, "fix" if fixes else "runs", tuple(missing), tuple(fixes), tuple(notes)
    )


def _windows(matrix: Matrix, rel: Release, path: str, reasons: list[str]) -> None:
    last = [r.tf for r in matrix.releases if r.windows_native_gpu]
    if not rel.windows_native_gpu:
        since = f" (the last one with it is {last[-1]})" if last else ""
        reasons.append(
            f"native Windows: TensorFlow {rel.tf} has no GPU build for Windows{since}; "
            "run it inside WSL2 instead"
        )
    elif path == "system":
        reasons.append(
            "native Windows: the system path installs with a Linux shell script; use the conda path"
        )


def _driver(
    host: HostReport, rel: Release, cuda: Cuda, reasons: list[str], notes: list[str]
) -> bool:
    """Add what the driver rules out or limits; True when only minor-version compatibility
    serves the release (then PTX JIT is out of reach)."""
    version = _driver_version(host)
    have = _mm(host.driver.cuda)
    need = _mm(cuda.version)
    windows_numbers = host.wsl or host.os == "windows"
    wanted = (
        f"a Windows driver that supports CUDA {cuda.version}"
        if windows_numbers
        else f"driver >= {cuda.driver_min} (>= {cuda.driver_compat_min} through CUDA "
        "minor-version compatibility)"
    )
    if have and need:
        if have[0] < need[0]:
            reasons.append(
                f"driver {version} supports CUDA <= {host.driver.cuda}; TensorFlow {rel.tf} needs "
                f"CUDA {cuda.version}: {wanted}"
            )
            return False
        if have < need:
            dv = _v(version)
            floor = _v(cuda.driver_compat_min)
            if not windows_numbers and dv and floor and dv < floor:
                reasons.append(
                    f"driver {version} is older than CUDA {cuda.major}'s compatibility floor: "
                    f"{wanted}"
                )
                return False
            notes.append(
                f"driver {version} supports CUDA {host.driver.cuda}, older than {cuda.version}: "
                "this runs through CUDA minor-version compatibility, where PTX JIT of newer code "
                f"fails ('unsupported PTX version'); {wanted.split(' (')[0]} lifts that"
            )
            return True
        return False
    dv, floor, full = _v(version), _v(cuda.driver_compat_min), _v(cuda.driver_min)
    if dv is None or floor is None or full is None or windows_numbers:
        notes.append("the driver's version is unknown here, so it could not be checked")
        return False
    if dv < floor:
        reasons.append(f"driver {version} is too old for CUDA {cuda.version}: {wanted}")
        return False
    if dv < full:
        notes.append(
            f"driver {version} is older than CUDA {cuda.version}'s own {cuda.driver_min}: this "
            "runs through minor-version compatibility, where PTX JIT of newer code fails"
        )
        return True
    return False


def gpu_fit(rel: Release, gpu: Gpu) -> tuple[str, str]:
    """How a build serves one GPU (native, ptx, too-old, too-new, unknown) and a sentence why."""
    cc = _mm(gpu.compute_capability)
    label = f"GPU {gpu.index} ({gpu.name}, compute capability {gpu.compute_capability or '?'})"
    if cc is None:
        return "unknown", f"{label}: its compute capability is unknown, so it could not be checked"
    floor = _mm(rel.compute_min)
    if floor and cc < floor:
        return (
            "too-old",
            f"{label} is below TensorFlow {rel.tf}'s minimum compute capability {rel.compute_min}",
        )
    parsed = [t for t in map(gpu_targets.parse, rel.compute_targets) if t is not None]
    sass = [t for t in parsed if t.kind == "sm"]
    if not parsed:
        return "native", f"{label}: the matrix lists no build targets for TensorFlow {rel.tf}"
    native = next((t for t in sass if t.native_on(cc)), None)
    if native is not None:
        return "native", f"{label} has native kernels ({native.name})"
    usable = [t for t in parsed if t.jit_on(cc)]
    targets = ", ".join(rel.compute_targets)
    if usable:
        best = max(usable, key=lambda t: t.capability)
        text = (
            f"{label} has no native kernels in TensorFlow {rel.tf} ({targets}): the driver "
            f"JIT-compiles the {best.name} PTX when a program starts (can take "
            "minutes the first time; CUDA_CACHE_MAXSIZE keeps the result)"
        )
        if cc[0] >= 10:
            text += (
                "; Blackwell GPUs have failed here with CUDA_ERROR_INVALID_PTX "
                "(tensorflow/tensorflow#89272)"
            )
        return "ptx", text
    if sass and cc > max(t.capability for t in sass):
        return (
            "too-new",
            f"{label} is newer than TensorFlow {rel.tf}'s build targets ({targets}), which "
            "carry no PTX for it",
        )
    return "too-old", f"{label} has no kernels in TensorFlow {rel.tf}'s build targets ({targets})"


def _gpus(
    host: HostReport, rel: Release, minor_compat: bool, reasons: list[str], notes: list[str]
) -> None:
    if not host.gpus:
        if host.has_driver:
            notes.append(
                "no GPU was listed (NVML and nvidia-smi could not answer), so none could be checked"
            )
        return
    usable: list[str] = []
    unusable: list[str] = []
    for g in host.gpus:
        fit, text = gpu_fit(rel, g)
        if fit == "ptx" and minor_compat:
            text += ", but this driver is too old to compile PTX of that CUDA version"
            fit = "too-new"
        if fit in ("native", "ptx", "unknown"):
            usable.append(text)
            if fit != "native":
                notes.append(text)
        else:
            unusable.append(text)
    if not usable:
        reasons += unusable
    else:
        notes += [f"{text}: that GPU cannot be used" for text in unusable]


def _env_libs(host: HostReport, prefix: str, kind: str, major: int) -> list[Library]:
    return [
        lib
        for lib in host.libraries
        if lib.env == prefix and lib.kind == kind and lib.major == major
    ]


def _matching_envs(host: HostReport, rel: Release, kinds: Sequence[str]) -> list[str]:
    return [
        e.prefix for e in host.environments if e.kind in kinds and _mm(e.tensorflow) == _mm(rel.tf)
    ]


def _create(rel: Release, path: str, python: str = "") -> str:
    return f"provision create --tf {rel.tf} --path {path}" + (
        f" --python {python}" if python else ""
    )


def _python_fix(host: HostReport, rel: Release, fixes: list[str], notes: list[str]) -> str:
    """For venv-based paths: a host Python the release supports; '' when the host has one."""
    have = [p for p in host.pythons if p in rel.python]
    if have or not host.pythons:
        return ""
    want = rel.python[-1]
    fixes.append(f"uv python install {want}")
    notes.append(
        f"TensorFlow {rel.tf} supports Python {', '.join(rel.python)}; this host has "
        f"{', '.join(host.pythons)}"
    )
    return want


def _conda(
    host: HostReport, rel: Release, cuda: Cuda, cudnn: Cudnn,
    missing: list[str], fixes: list[str], notes: list[str],
) -> None:  # fmt: skip
    for prefix in _matching_envs(host, rel, ("conda",)):
        if _env_libs(host, prefix, "cudart", cuda.major) and _env_libs(
            host, prefix, "cudnn", cudnn.major
        ):
            notes.append(f"ready in {prefix}")
            return
        missing.append(
            f"{prefix} has TensorFlow {rel.tf} but not the CUDA {cuda.major} / cuDNN "
            f"{cudnn.major} libraries"
        )
    fixes.append(_create(rel, "conda"))


def _pip(
    host: HostReport, matrix: Matrix, rel: Release, cuda: Cuda, cudnn: Cudnn,
    missing: list[str], fixes: list[str], notes: list[str],
) -> None:  # fmt: skip
    for prefix in _matching_envs(host, rel, ("venv", "python")):
        has_libs = _env_libs(host, prefix, "cudart", cuda.major) and _env_libs(
            host, prefix, "cudnn", cudnn.major
        )
        if has_libs:
            folders = sorted(
                {str(Path(lib.path).parent) for lib in host.libraries if lib.env == prefix}
            )
            if any(e.prefix == prefix and e.hooked for e in host.environments):
                notes.append(
                    f"ready in {prefix}; built by provision: its interpreter loads these "
                    "libraries itself when TensorFlow is imported, with no activation"
                )
                return
            notes.append(
                f"ready in {prefix}; if TensorFlow lists no GPU there, put its NVIDIA libraries "
                f"on the loader's path: export LD_LIBRARY_PATH={':'.join(folders)}"
                "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            )
            return
        if any(e.prefix == prefix and e.kind == "venv" for e in host.environments):
            reqs = " ".join(shlex.quote(r) for r in resolve(matrix, rel.tf, "pip").pip_requirements)
            missing.append(
                f"{prefix} has TensorFlow {rel.tf} without NVIDIA's CUDA {cuda.major} wheels"
            )
            fixes.append(f"{prefix}/bin/python -m pip install {reqs}")
            return
    python = _python_fix(host, rel, fixes, notes)
    fixes.append(_create(rel, "pip", python))


def _system(
    host: HostReport, rel: Release, cuda: Cuda, cudnn: Cudnn,
    missing: list[str], fixes: list[str], notes: list[str],
) -> None:  # fmt: skip
    system = [lib for lib in host.libraries if not lib.env or lib.loader_rank is not None]
    needs = [
        ("cudart", cuda.major, cuda.version),
        ("cudnn", cudnn.major, cudnn.version),
        ("cublas", cuda.major, ""),
    ]
    install = False
    for kind, major, at_least in needs:
        copies = [lib for lib in system if lib.kind == kind and lib.major == major]
        loaded = next((lib for lib in copies if lib.loader_rank == 0), None)
        name = f"lib{kind}.so.{major}"
        if loaded is None:
            off_path = [lib for lib in copies if lib.loader_rank is None]
            if off_path:
                folder = str(Path(off_path[0].path).parent)
                missing.append(f"{name} is in {folder}, which is not on the loader's path")
                if any("not in the loader cache" in w for w in off_path[0].found_in):
                    fixes.append("sudo ldconfig")
                else:
                    fixes.append(
                        f"export LD_LIBRARY_PATH={folder}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
                    )
                continue
            others = sorted(
                {
                    f"{lib.soname} {lib.version}".strip()
                    for lib in system
                    if lib.kind == kind and lib.major != major
                }
            )
            also = (
                f" (found {', '.join(others)}: another major version, which TensorFlow {rel.tf} "
                "does not load)"
                if others
                else ""
            )
            missing.append(f"no {name} on the loader's path{also}")
            install = True
            continue
        have, want = _mm(loaded.version), _mm(at_least)
        if have and want and have < want and loaded.version_from != "soname":
            missing.append(
                f"the {KIND_TEXT[kind]} the loader takes is {loaded.version} ({loaded.path}); "
                f"TensorFlow {rel.tf} was built with {at_least} and needs that or newer within "
                f"{major}.x"
            )
            install = True
        elif loaded.built_for and loaded.built_for != str(cuda.major):
            missing.append(
                f"the {KIND_TEXT[kind]} the loader takes ({loaded.version}, {loaded.path}) is "
                f"built for CUDA {loaded.built_for}; TensorFlow {rel.tf} needs a build for "
                f"CUDA {cuda.major}"
            )
            install = True
        elif have is None or loaded.version_from == "soname":
            notes.append(
                f"the version of {loaded.path} could not be read; TensorFlow {rel.tf} wants "
                f"{at_least or major}"
            )
    ready_env = [
        p
        for p in _matching_envs(host, rel, ("venv", "python"))
        if not _env_libs(host, p, "cudnn", cudnn.major)
    ]
    ptxas = [p for p in host.ptxas if (_mm(p.version) or (0, 0))[0] == cuda.major and not p.env]
    if not install and not fixes and not ptxas:
        notes.append(
            f"no ptxas of CUDA {cuda.major} outside environments: XLA (jit_compile) needs one"
        )
    if install or not ready_env:
        python = _python_fix(host, rel, fixes, notes)
        fixes.append(_create(rel, "system", python))
    else:
        notes.append(f"ready in {ready_env[0]}")


# --- the report ---------------------------------------------------------------------------------
