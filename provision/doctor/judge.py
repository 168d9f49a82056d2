"""The verdict on each release and path: `runs` (ready on this host now), `fix` (runs after the
fixes listed, each an exact command), `cannot` (with why) or `n/a` (the path does not serve the
release anywhere).

Pure: each verdict is a function of the host report, its findings (computed once, by `diagnose`)
and the matrix. Each path has its own judge returning what it needs on this host (`Needs`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision.doctor.diagnosis import CANNOT, FIX, KIND_TEXT, NOT_OFFERED, RUNS, Diagnosis, Verdict
from provision.doctor.findings import HostFindings, host_findings
from provision.doctor.hardware import driver_fit, gpus_fit
from provision.doctor.version_numbers import major_minor
from provision.host import HostReport, Library
from provision.matrix import Cuda, Cudnn, Matrix, Release, kinds
from provision.matrix.kinds import PathName
from provision.matrix.spec import resolve


def diagnose(
    host: HostReport, matrix: Matrix, tf: str | None = None, digest: str = ""
) -> Diagnosis:
    """Every release of the matrix (or the one asked for) on every path, judged on `host`."""
    found = host_findings(host)
    releases = [matrix.release(tf)] if tf else list(matrix.finals)
    verdicts = tuple(
        verdict(host, found, matrix, rel, path) for rel in releases for path in kinds.NAMES
    )
    return Diagnosis(host, found.findings, verdicts, tf, digest)


@dataclass(frozen=True)
class Needs:
    """What one path needs on this host before the release runs there."""

    missing: tuple[str, ...] = ()  # what is not there, said before the fixes
    fixes: tuple[str, ...] = ()  # commands, in the order to run them
    notes: tuple[str, ...] = ()

    def __add__(self, other: Needs) -> Needs:
        return Needs(
            self.missing + other.missing, self.fixes + other.fixes, self.notes + other.notes
        )


def verdict(
    host: HostReport, found: HostFindings, matrix: Matrix, rel: Release, path: PathName
) -> Verdict:
    kind = kinds.of(path)
    why_not = kind.refusal(matrix, rel)
    if why_not:
        return Verdict(rel.tf, path, NOT_OFFERED, (why_not,))
    cuda, cudnn = matrix.cuda_of(rel), matrix.cudnn_of(rel)
    reasons = _windows(matrix, rel, path) if host.os == "windows" else ()
    notes: tuple[str, ...] = ()
    if not host.has_driver:
        reasons += (
            f"no NVIDIA driver on this host: TensorFlow {rel.tf} (CUDA {cuda.version}) needs "
            f"driver >= {cuda.driver_min}",
        )
    else:
        driver = driver_fit(host, rel, cuda)
        gpus = gpus_fit(host, rel, driver.minor_compat)
        reasons += driver.reasons + gpus.reasons
        notes += driver.notes + gpus.notes
    if reasons:
        return Verdict(rel.tf, path, CANNOT, reasons, (), notes)
    if kind.conda_env:
        needs = _conda(host, rel, cuda, cudnn)
    elif kind.host_toolkit:
        needs = _system(host, found, rel, cuda, cudnn)
    else:
        needs = _pip(host, matrix, rel, cuda, cudnn)
    fixes = tuple(dict.fromkeys(found.fixes + needs.fixes))
    return Verdict(rel.tf, path, FIX if fixes else RUNS, needs.missing, fixes, notes + needs.notes)


def _windows(matrix: Matrix, rel: Release, path: PathName) -> tuple[str, ...]:
    last = [r.tf for r in matrix.releases if r.windows_native_gpu]
    if not rel.windows_native_gpu:
        since = f" (the last one with it is {last[-1]})" if last else ""
        return (
            f"native Windows: TensorFlow {rel.tf} has no GPU build for Windows{since}; "
            "run it inside WSL2 instead",
        )
    why = kinds.of(path).windows_refusal()
    return (why,) if why else ()


# --- what each path finds on the host -----------------------------------------------------------


def _env_libs(host: HostReport, prefix: str, kind: str, major: int) -> list[Library]:
    return [
        lib
        for lib in host.libraries
        if lib.env == prefix and lib.kind == kind and lib.major == major
    ]


def _matching_envs(host: HostReport, rel: Release, kinds: Sequence[str]) -> list[str]:
    return [
        e.prefix
        for e in host.environments
        if e.kind in kinds and major_minor(e.tensorflow) == major_minor(rel.tf)
    ]


def _create(rel: Release, path: PathName, python: str = "") -> str:
    pre = " --pre" if rel.prerelease else ""
    return f"provision create --tf {rel.tf}{pre} --path {path}" + (
        f" --python {python}" if python else ""
    )


def _python_fix(host: HostReport, rel: Release) -> tuple[str, Needs]:
    """For venv-based paths: a host Python the release supports ('' when the host has one or
    none is known), and the fix that installs it."""
    have = [p for p in host.pythons if p in rel.python]
    if have or not host.pythons:
        return "", Needs()
    want = rel.python[-1]
    return want, Needs(
        fixes=(f"uv python install {want}",),
        notes=(
            f"TensorFlow {rel.tf} supports Python {', '.join(rel.python)}; this host has "
            f"{', '.join(host.pythons)}",
        ),
    )


def _conda(host: HostReport, rel: Release, cuda: Cuda, cudnn: Cudnn) -> Needs:
    missing: list[str] = []
    for prefix in _matching_envs(host, rel, ("conda",)):
        if _env_libs(host, prefix, "cudart", cuda.major) and _env_libs(
            host, prefix, "cudnn", cudnn.major
        ):
            return Needs(tuple(missing), notes=(f"ready in {prefix}",))
        missing.append(
            f"{prefix} has TensorFlow {rel.tf} but not the CUDA {cuda.major} / cuDNN "
            f"{cudnn.major} libraries"
        )
    return Needs(tuple(missing), fixes=(_create(rel, "conda"),))


def _pip(host: HostReport, matrix: Matrix, rel: Release, cuda: Cuda, cudnn: Cudnn) -> Needs:
    for prefix in _matching_envs(host, rel, ("venv", "python")):
        has_libs = _env_libs(host, prefix, "cudart", cuda.major) and _env_libs(
            host, prefix, "cudnn", cudnn.major
        )
        if has_libs:
            if any(e.prefix == prefix and e.hooked for e in host.environments):
                return Needs(
                    notes=(
                        f"ready in {prefix}; built by provision: its interpreter loads these "
                        "libraries itself when TensorFlow is imported, with no activation",
                    )
                )
            folders = sorted(
                {str(Path(lib.path).parent) for lib in host.libraries if lib.env == prefix}
            )
            return Needs(
                notes=(
                    f"ready in {prefix}; if TensorFlow lists no GPU there, put its NVIDIA "
                    f"libraries on the loader's path: export LD_LIBRARY_PATH={':'.join(folders)}"
                    "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
                )
            )
        if any(e.prefix == prefix and e.kind == "venv" for e in host.environments):
            reqs = " ".join(shlex.quote(r) for r in resolve(matrix, rel.tf, "pip").pip_requirements)
            return Needs(
                (f"{prefix} has TensorFlow {rel.tf} without NVIDIA's CUDA {cuda.major} wheels",),
                (f"{prefix}/bin/python -m pip install {reqs}",),
            )
    python, needs = _python_fix(host, rel)
    return needs + Needs(fixes=(_create(rel, "pip", python),))


def _system(host: HostReport, found: HostFindings, rel: Release, cuda: Cuda, cudnn: Cudnn) -> Needs:
    system = [lib for lib in host.libraries if not lib.env or lib.loader_rank is not None]
    wanted = [
        ("cudart", cuda.major, cuda.version),
        ("cudnn", cudnn.major, cudnn.version),
        ("cublas", cuda.major, ""),
    ]
    needs = Needs()
    install = False
    for kind, major, at_least in wanted:
        lacks, reinstall = _system_library(system, rel, cuda, kind, major, at_least)
        needs += lacks
        install = install or reinstall
    ready_env = [
        p
        for p in _matching_envs(host, rel, ("venv", "python"))
        if not _env_libs(host, p, "cudnn", cudnn.major)
    ]
    ptxas = [
        p for p in host.ptxas if (major_minor(p.version) or (0, 0))[0] == cuda.major and not p.env
    ]
    if not install and not found.fixes and not needs.fixes and not ptxas:
        needs += Needs(
            notes=(
                f"no ptxas of CUDA {cuda.major} outside environments: XLA (jit_compile) needs one",
            )
        )
    if install or not ready_env:
        python, with_python = _python_fix(host, rel)
        return needs + with_python + Needs(fixes=(_create(rel, "system", python),))
    return needs + Needs(notes=(f"ready in {ready_env[0]}",))


def _system_library(
    system: Sequence[Library], rel: Release, cuda: Cuda, kind: str, major: int, at_least: str
) -> tuple[Needs, bool]:
    """What the system path lacks of one library, and whether that takes a new install."""
    copies = [lib for lib in system if lib.kind == kind and lib.major == major]
    loaded = next((lib for lib in copies if lib.loader_rank == 0), None)
    name = f"lib{kind}.so.{major}"
    if loaded is None:
        off_path = [lib for lib in copies if lib.loader_rank is None]
        if off_path:
            folder = str(Path(off_path[0].path).parent)
            fix = (
                "sudo ldconfig"
                if any("not in the loader cache" in w for w in off_path[0].found_in)
                else f"export LD_LIBRARY_PATH={folder}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
            )
            missing = f"{name} is in {folder}, which is not on the loader's path"
            return Needs((missing,), (fix,)), False
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
        return Needs((f"no {name} on the loader's path{also}",)), True
    have, want = major_minor(loaded.version), major_minor(at_least)
    if have and want and have < want and loaded.version_from != "soname":
        return Needs(
            (
                f"the {KIND_TEXT[kind]} the loader takes is {loaded.version} ({loaded.path}); "
                f"TensorFlow {rel.tf} was built with {at_least} and needs that or newer within "
                f"{major}.x",
            )
        ), True
    if loaded.built_for and loaded.built_for != str(cuda.major):
        return Needs(
            (
                f"the {KIND_TEXT[kind]} the loader takes ({loaded.version}, {loaded.path}) is "
                f"built for CUDA {loaded.built_for}; TensorFlow {rel.tf} needs a build for "
                f"CUDA {cuda.major}",
            )
        ), True
    if have is None or loaded.version_from == "soname":
        return Needs(
            notes=(
                f"the version of {loaded.path} could not be read; TensorFlow {rel.tf} wants "
                f"{at_least or major}",
            )
        ), False
    return Needs(), False
