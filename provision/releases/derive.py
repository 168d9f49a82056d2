"""The facts of one TensorFlow release, read from its wheels on the package index, and the matrix
row they give. Every value here comes from the wheel file names, the wheels' METADATA,
build_info.py and cuda_config.h, or NVIDIA's wheel pages; what they cannot say is listed in the
row's `not_yet_cited`, never guessed.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from provision.errors import MatrixError
from provision.payload import cudalibs
from provision.releases import wheels as idx

BUILD_INFO = "tensorflow/python/platform/build_info.py"
CUDA_CONFIG = "tensorflow/include/third_party/gpus/cuda/cuda_config.h"
EXTRA = "and-cuda"
MEMBERS = "METADATA, build_info.py, cuda_config.h"
# What no wheel says; a new row lists these until a person cites them.
NEVER_IN_WHEELS = (
    "tf-tested-gpu: TensorFlow's tested build configurations table",
    "conda-forge: its own TensorFlow builds and its packages for this CUDA/cuDNN line",
)


@dataclass(frozen=True)
class ReleaseFacts:
    """One release as its Linux x86-64 wheels describe it."""

    version: Version
    wheel: idx.WheelFile  # the one whose members were read (newest Python)
    pythons: tuple[str, ...]
    glibc: str
    metadata: str
    build_info: Mapping[str, object]
    cuda_config: Mapping[str, str]
    windows_gpu: bool | None  # the win_amd64 wheel's build_info says CUDA; None: no such wheel
    retrieved: str  # the date the facts were read

    @property
    def requires(self) -> list[str]:
        return HeaderParser().parsestr(self.metadata).get_all("Requires-Dist") or []

    @property
    def and_cuda(self) -> tuple[str, ...]:
        """The extra's requirements exactly as published."""
        out = []
        for text in self.requires:
            req = _req(text, self.wheel.filename)
            if (
                req.marker is not None
                and req.marker.evaluate({"extra": EXTRA})
                and not req.marker.evaluate({"extra": ""})
            ):
                out.append(text)
        return tuple(out)

    @property
    def prerelease_candidates(self) -> tuple[Requirement, ...]:
        """Requirements (outside any extra) whose specifier names a pre-release or development
        version: those that may exist only as pre-releases (the index decides)."""
        out = []
        for text in self.requires:
            req = _req(text, self.wheel.filename)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if any(
                s.operator in (">=", ">", "==", "~=", "===") and _is_pre(s.version)
                for s in req.specifier
            ):
                out.append(req)
        return tuple(out)

    @property
    def cuda_version(self) -> str:
        """build_info's cuda_version, else cuda_config.h's TF_CUDA_VERSION; "" when neither."""
        return str(
            self.build_info.get("cuda_version") or self.cuda_config.get("TF_CUDA_VERSION", "")
        )

    @property
    def cudnn_major(self) -> str:
        text = str(
            self.build_info.get("cudnn_version") or self.cuda_config.get("TF_CUDNN_VERSION", "")
        )
        return text.split(".")[0]

    @property
    def targets(self) -> tuple[tuple[str, ...], bool]:
        """(compute targets, whether SASS/PTX is known): build_info's names (sm_80, compute_90),
        else cuda_config.h's capabilities ("60, 70, 90") which do not say which carry PTX."""
        named = self.build_info.get("cuda_compute_capabilities")
        if isinstance(named, list) and named:
            return tuple(str(t) for t in named), True
        caps = self.cuda_config.get("TF_CUDA_COMPUTE_CAPABILITIES", "")
        found = [c.strip().replace(".", "") for c in caps.split(",") if c.strip()]
        return tuple(f"sm_{c}" for c in found if c.isdigit()), False

    @property
    def dlopens(self) -> tuple[str, ...]:
        """The sonames TensorFlow's loader builds from cuda_config.h (as verify checks them)."""
        return tuple(sorted(cudalibs.sonames(self.cuda_config, self.build_info).values()))


def _is_pre(text: str) -> bool:
    try:
        return Version(text.rstrip(".*")).is_prerelease
    except ValueError:
        return False


def only_prereleases(page: idx.Project, req: Requirement) -> bool:
    """No final release on the index satisfies `req` (keras-nightly>=3.12.0.dev)."""
    return not any(
        not v.is_prerelease and req.specifier.contains(v, prereleases=False)
        for v in page.versions()
    )


def _req(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise MatrixError(f"{where}: malformed Requires-Dist {text!r}: {exc}") from exc


def parse_build_info(text: str, where: str) -> dict[str, object]:
    """The literal `build_info = collections.OrderedDict([...])` of build_info.py."""
    try:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "build_info" for t in node.targets)
                and isinstance(node.value, ast.Call)
                and node.value.args
            ):
                return dict(ast.literal_eval(node.value.args[0]))
    except (SyntaxError, ValueError, TypeError) as exc:
        raise MatrixError(f"{where}: malformed build_info.py: {exc}") from exc
    raise MatrixError(f"{where}: build_info.py holds no build_info literal")


def parse_cuda_config(text: str) -> dict[str, str]:
    """cuda_config.h's TF_* defines, read as the smoke test reads them."""
    return {k: v for k, v in cudalibs.header_defines(text).items() if k.startswith("TF_")}


def read_facts(
    project: idx.Project, version: Version, counter: idx.Counter, today: str
) -> ReleaseFacts:
    """Read one release's facts: names of all its Linux x86-64 wheels, members of the newest."""
    linux = [w for w in project.wheels(version) if idx.is_linux_x86_64(w)]
    if not linux:
        raise MatrixError(f"tensorflow {version}: no Linux x86-64 wheel on the index")
    pythons = sorted({p for w in linux for p in w.pythons}, key=Version)
    if not pythons:
        raise MatrixError(f"tensorflow {version}: no CPython-tagged Linux x86-64 wheel")
    glibcs = [idx.glibc_of(w.platforms) for w in linux]
    glibc = max(g for g in glibcs if g is not None)
    newest = max(
        linux,
        key=lambda w: (max((Version(p) for p in w.pythons), default=Version("0")), w.filename),
    )
    members = idx.read_members(newest, (BUILD_INFO, CUDA_CONFIG), counter)
    info_text, config_text = members[BUILD_INFO], members[CUDA_CONFIG]
    build_info = parse_build_info(info_text, newest.filename) if info_text is not None else {}
    cuda_config = parse_cuda_config(config_text) if config_text is not None else {}
    windows = [
        w for w in project.wheels(version) if any(p.startswith("win_amd64") for p in w.platforms)
    ]
    windows_gpu: bool | None = None
    if windows:
        win = max(windows, key=lambda w: w.filename)
        text = idx.read_members(win, (BUILD_INFO,), counter)[BUILD_INFO]
        windows_gpu = bool(text and parse_build_info(text, win.filename).get("is_cuda_build"))
    return ReleaseFacts(
        version=version,
        wheel=newest,
        pythons=tuple(pythons),
        glibc=str(glibc),
        metadata=str(members["METADATA"]),
        build_info=build_info,
        cuda_config=cuda_config,
        windows_gpu=windows_gpu,
        retrieved=today,
    )


def lowest_wheel(page: idx.Project, spec: SpecifierSet) -> str | None:
    """The lowest version with a Linux x86-64 wheel that `spec` accepts (pre-releases only when
    the specifier names one)."""
    ok = [
        v
        for v in page.versions()
        if spec.contains(v)
        and any(idx.is_linux_x86_64(w) or "none-any" in w.filename for w in page.wheels(v))
    ]
    return str(min(ok)) if ok else None


def minor(version: str) -> str:
    v = Version(version)
    return f"{v.major}.{v.minor}"
