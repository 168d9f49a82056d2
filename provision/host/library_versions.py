"""Which version a CUDA library file is, and from what source: what the library itself says
(cudnnGetVersion, cudaRuntimeGetVersion, asked in a child interpreter), its file name,
cudnn_version.h, the wheel (dist-info) or conda package (conda-meta) that installed it, dpkg's
records, or, at worst, its SONAME.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from provision.errors import ProvisionError
from provision.host.root import Context, glob, read_text
from provision.payload import cudalibs, elf

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
class FoundLibrary:
    """One library file (symbolic links resolved) and what is known before asking its version."""

    kind: str  # cudart | cudnn | cublas
    real: Path
    names: frozenset[str]  # its own name and those of the links to it
    env: str  # prefix of the environment that holds it, "" for the system
    elf: elf.Elf | None  # None when it is not an ELF object

    @property
    def soname(self) -> str:
        return self.elf.soname if self.elf is not None else ""

    @property
    def named_version(self) -> bool:
        """Some name of it carries a full version (libcudart.so.12.5.82), not just the major."""
        return any((m := LIB_RE.match(n)) and m.group(2) and "." in m.group(2) for n in self.names)


@dataclass(frozen=True)
class Identified:
    version: str  # "" when nothing could say
    version_from: str  # the source of `version`
    built_for: str  # CUDA major its package was built for, "" when unknown


def identify(ctx: Context, files: Sequence[FoundLibrary]) -> dict[Path, Identified]:
    """Each file's version, from the best source available, naming the source."""
    reported = _ask_libraries(ctx, files)
    dpkg = _Dpkg(ctx)
    out: dict[Path, Identified] = {}
    for f in files:
        real = f.real
        from_name = max(
            (
                m.group(2)
                for n in f.names
                if (m := LIB_RE.match(n)) and m.group(2) and "." in m.group(2)
            ),
            key=lambda v: (v.count("."), v),
            default="",
        )
        soname = f.soname
        package, built_for = _package_version(f.kind, real, soname)
        if not package and not f.env:
            package, built_for = dpkg.owner(real, f.names)
        choices: list[tuple[str, str]] = []
        asked = reported.get(real)
        if f.kind == "cudnn":
            choices += [
                (cudalibs.cudnn_version(asked) if asked else "", "cudnnGetVersion"),
                (from_name, "file name"),
            ]
            choices.append((_cudnn_header(ctx, real, system=not f.env), "cudnn_version.h"))
        else:
            choices.append((from_name, "file name"))
            said = cudalibs.cudart_version(asked) if asked and f.kind == "cudart" else ""
            if said and package and package.startswith(said + "."):
                # The runtime reports major.minor only; its wheel or conda package has the patch.
                choices.append((package, "cudaRuntimeGetVersion + package metadata"))
            choices.append((said, "cudaRuntimeGetVersion"))
        choices.append((package, "package metadata"))
        major = soname.rsplit(".so.", 1)[-1] if ".so." in soname else ""
        choices.append((major if major.isdigit() else "", "soname"))
        version, source = next(((v, s) for v, s in choices if v), ("", ""))
        out[real] = Identified(version, source, built_for)
    return out


def _ask_libraries(ctx: Context, files: Sequence[FoundLibrary]) -> dict[Path, int]:
    """What cuDNN (cudnnGetVersion) and unnamed CUDA runtimes (cudaRuntimeGetVersion) say they are.

    Loaded only in a child interpreter, only when the file is an ELF object for this machine,
    and never when PROVISION_NO_DLOPEN is set.
    """
    if ctx.env.get("PROVISION_NO_DLOPEN") or sys.platform != "linux":
        return {}
    here = ELF_MACHINES.get(ctx.machine)
    wanted = []
    for f in files:
        info = f.elf
        if info is None or info.machine != here or info.bits != 64:
            continue
        if f.kind == "cudnn" or (f.kind == "cudart" and not f.named_version):
            wanted.append([f.kind, str(f.real)])
    if not wanted:
        return {}
    try:
        done = ctx.child(["versions"], stdin=json.dumps(wanted))
        answers = json.loads(done.stdout)
    except (ProvisionError, ValueError):
        return {}
    return {Path(p): int(a["value"]) for p, a in answers.items() if "value" in a}


def _cudnn_header(ctx: Context, lib: Path, *, system: bool) -> str:
    """The version in the cudnn_version.h beside `lib` (its ../include), or for a library of the
    system's, in /usr/include: an environment's cuDNN is not described by the system's header."""
    candidates = [lib.parent.parent / "include" / "cudnn_version.h"]
    if system:
        candidates += glob(ctx.at("/usr/include"), "cudnn_version*.h")
        candidates += glob(ctx.at("/usr/include"), "*/cudnn_version*.h")
    major = re.match(r"libcudnn\.so\.(\d+)", lib.name)
    for header in candidates:
        version = cudalibs.cudnn_header_version(cudalibs.header_defines(read_text(header)))
        if version and (major is None or version.split(".")[0] == major.group(1)):
            return version
    return ""


def _package_version(kind: str, lib: Path, soname: str) -> tuple[str, str]:
    """(version, CUDA major it was built for) of the wheel or conda package that installed `lib`."""
    want_major = soname.rsplit(".so.", 1)[-1].split(".")[0] if ".so." in soname else ""
    for up in lib.parents[:5]:
        dists = glob(up, f"{WHEEL_OF[kind]}*.dist-info") + glob(
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
                for j in glob(meta, f"{pkg}-[0-9]*.json"):
                    version = j.name[len(pkg) + 1 :].rsplit("-", 1)[0]
                    if not want_major or version.split(".")[0] == want_major:
                        return version, version.split(".")[0] if kind != "cudnn" else ""
            return "", ""
    return "", ""


class _Dpkg:
    """Which Debian/Ubuntu package installed a system library, read from dpkg's own records."""

    PATTERNS = ("libcudnn*.list", "cuda-cudart*.list", "libcublas*.list", "libcudart*.list")

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._owners: dict[str, str] | None = None

    def owner(self, real: Path, names: Iterable[str]) -> tuple[str, str]:
        if self._owners is None:
            self._owners = {}
            info = self.ctx.at("/var/lib/dpkg/info")
            for pattern in self.PATTERNS:
                for listing in glob(info, pattern):
                    package = listing.name[: -len(".list")].split(":")[0]
                    for line in read_text(listing, 1 << 20).splitlines():
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
        for line in read_text(self.ctx.at("/var/lib/dpkg/status"), 1 << 24).splitlines():
            if line.startswith("Package: "):
                stanza = line[len("Package: ") :].strip() == package
            elif stanza and line.startswith("Version: "):
                version = line[len("Version: ") :].strip()
                return version.split(":")[-1].rsplit("-", 1)[0]
        return ""
