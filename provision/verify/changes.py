"""What changed under an environment since its facts were recorded, and what each change does to it.

Effects come from data, never from a list of releases: the driver and GPUs are judged by the
doctor's own rules against the environment's matrix row, packages by the lock's pins and by every
installed package's Requires-Dist (or conda `depends`), files by what their installers recorded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from provision.facts import prefix as files
from provision.facts.collect import EnvFacts, Facts, GpuFact, HostFacts, PackageFact
from provision.matrix import Cuda, Release

if TYPE_CHECKING:
    from provision.host.model import HostReport

Severity = Literal["breaks", "changed"]
HOOK_MODULE_FILES = ("provision_env_hook.pth", "provision_env_hook.py")


@dataclass(frozen=True)
class Change:
    subject: str  # driver | gpu | package | file | library | hooks | policy | interpreter
    what: str  # "driver 550.54 → 535.104"
    effect: str  # what it does to the environment
    severity: Severity  # breaks: known to stop it; changed: it may, verify again
    fix: str = ""

    def line(self) -> str:
        text = f"{self.what}: {self.effect}"
        return f"{text}; fix: {self.fix}" if self.fix else text

    def as_json(self) -> dict[str, str]:
        return {
            "subject": self.subject, "what": self.what, "effect": self.effect,
            "severity": self.severity, "fix": self.fix, "line": self.line(),
        }  # fmt: skip


@dataclass(frozen=True)
class DriftSubject:
    """What the judgement needs to know about the environment besides its facts."""

    name: str
    tf: str  # the TensorFlow pin
    release: Release | None
    cuda: Cuda | None
    lock_pins: Mapping[str, str] = field(default_factory=dict)  # normalised name -> version
    interpreter: str = ""

    @property
    def reinstall(self) -> str:
        return f"`provision install {self.name} --force`"


def compare(old: Facts, host: HostFacts, now: EnvFacts, target: DriftSubject) -> list[Change]:
    changes = _driver(old.host, host, target)
    changes += _gpus(old, host, target)
    changes += _interpreter(old.env, now, target)
    gone_libs, lib_changes = _libraries(old.env, now, target)
    changes += _packages(old.env, now, target, gone_libs)
    changes += lib_changes
    changes += _hooks(old.env, now, target)
    return changes


# -- the driver and the GPUs -------------------------------------------------------------------


def _older(a: str, b: str) -> bool | None:
    try:
        return Version(a) < Version(b)
    except InvalidVersion:
        return None


def _driver(old: HostFacts, new: HostFacts, t: DriftSubject) -> list[Change]:
    if old.driver == new.driver and old.cuda == new.cuda:
        return []
    if not new.driver:
        said = f" ({new.error})" if new.error else ""
        return [Change(
            "driver", f"driver {old.driver or 'none'} → none",
            f"no NVIDIA driver answers{said}: TensorFlow {t.tf} runs on the CPU only",
            "breaks", "install the NVIDIA driver again (or reboot after a driver upgrade)",
        )]  # fmt: skip
    what = f"driver {old.driver or 'none'} → {new.driver}"
    if old.cuda != new.cuda and old.cuda and new.cuda:
        what += f" (CUDA {old.cuda} → {new.cuda})"
    if t.release is None or t.cuda is None:
        return [Change("driver", what, "verify again: its TensorFlow is not in the matrix",
                       "changed")]  # fmt: skip
    from provision.doctor.hardware import driver_fit

    fit = driver_fit(_host_report(new), t.release, t.cuda)
    hold = "hold the driver packages (apt-mark hold / dnf versionlock) once a working one is back"
    if fit.reasons:
        need = t.cuda.driver_min
        head = (
            f"older than TensorFlow {t.tf} needs ({need})"
            if _older(new.driver, need)
            else f"TensorFlow {t.tf} cannot use it"
        )
        return [Change(
            "driver", what, f"{head}: {fit.reasons[0]}: GPU unusable", "breaks",
            f"install NVIDIA driver >= {need}, then {hold}",
        )]  # fmt: skip
    if fit.notes:
        return [Change("driver", what, f"{fit.notes[0]}; verify again", "changed",
                       f"driver >= {t.cuda.driver_min}")]  # fmt: skip
    way = "upgraded" if _older(old.driver, new.driver) else "changed"
    return [Change(
        "driver", what,
        f"{way}; still at least what TensorFlow {t.tf} needs ({t.cuda.driver_min}): verify again "
        "to be sure", "changed",
    )]  # fmt: skip


def _host_report(h: HostFacts) -> HostReport:
    from provision.host.model import Driver, HostReport

    return HostReport(
        os="linux", machine="", distro="", kernel="", wsl=False, wsl_lib="", stand_in=False,
        driver=Driver(version=h.driver, cuda=h.cuda), gpus=(), ld_library_path=(),
        loader_dirs=(), libraries=(), ptxas=(), pythons=(), environments=(), probes=(),
    )  # fmt: skip


def _gpu_note(g: GpuFact, t: DriftSubject) -> tuple[bool, str]:
    """(usable, why) of one GPU for the environment's build."""
    if t.release is None:
        return True, ""
    from provision.doctor.hardware import gpu_fit
    from provision.host.model import Gpu

    fit, text = gpu_fit(t.release, Gpu(g.index, g.name, "", g.cc, g.memory_mib, "", ""))
    return fit in ("native", "ptx", "unknown"), text


def _gpus(old: Facts, host: HostFacts, t: DriftSubject) -> list[Change]:
    before = {g.index: g for g in old.host.gpus}
    after = {g.index: g for g in host.gpus}
    out = []
    for i in sorted(before.keys() - after.keys()):
        g = before[i]
        left = len(after)
        if left == 0:
            effect, sev = f"no GPU left: TensorFlow {t.tf} runs on the CPU only", "breaks"
        else:
            effect = f"{left} of {len(before)} GPU(s) left"
            if old.gpus_used:
                effect += f"; the last passing verify used {old.gpus_used}"
            sev = "breaks" if old.gpus_used > left else "changed"
        out.append(Change("gpu", f"GPU {i} ({g.name}) is gone", effect, sev,  # type: ignore[arg-type]
                          "check the card and its power, then `nvidia-smi`"))  # fmt: skip
    for i in sorted(after.keys() - before.keys()):
        g = after[i]
        usable, why = _gpu_note(g, t)
        effect = "verify again to use it" if usable else f"{why}: TensorFlow cannot use it"
        out.append(Change("gpu", f"GPU {i} ({g.name}, compute capability {g.cc}) is new", effect,
                          "changed"))  # fmt: skip
    for i in sorted(before.keys() & after.keys()):
        a, b = before[i], after[i]
        if (a.name, a.cc) != (b.name, b.cc):
            usable, why = _gpu_note(b, t)
            effect = "verify again" if usable else f"{why}: GPU unusable"
            out.append(Change(
                "gpu", f"GPU {i}: {a.name} (compute capability {a.cc}) → {b.name} ({b.cc})",
                effect, "changed" if usable else "breaks",
            ))  # fmt: skip
        elif a.memory_mib != b.memory_mib:
            out.append(Change(
                "gpu", f"GPU {i} memory {a.memory_mib} → {b.memory_mib} MiB",
                "another card or a MIG layout: memory limits and batch sizes may no longer fit",
                "changed",
            ))  # fmt: skip
    return out


# -- the interpreter, the packages, their files ------------------------------------------------


def _interpreter(old: EnvFacts, new: EnvFacts, t: DriftSubject) -> list[Change]:
    if old.python != new.python:
        xy = [".".join(v.split(".")[:2]) for v in (old.python, new.python)]
        breaks = xy[0] != xy[1]
        effect = (
            f"another Python: the packages were installed for {xy[0]}, TensorFlow {t.tf} will "
            "not import"
            if breaks
            else "same minor version: compiled packages should still load; verify again"
        )
        return [Change("interpreter", f"Python {old.python} → {new.python}", effect,
                       "breaks" if breaks else "changed", t.reinstall)]  # fmt: skip
    if old.interpreter != new.interpreter:
        return [Change("interpreter", f"interpreter {old.interpreter} → {new.interpreter}",
                       "verify again", "changed", t.reinstall)]  # fmt: skip
    if old.interpreter_sha256 != new.interpreter_sha256:
        return [Change("interpreter", f"interpreter {new.interpreter} was replaced "
                       f"(Python {new.python} still)", "verify again", "changed")]  # fmt: skip
    return []


def _marker_env(python: str) -> dict[str, str]:
    from provision.lock.requirements import marker_environment

    return marker_environment(python or "3", "linux-64")


def _applies(req: Requirement, env: Mapping[str, str]) -> bool:
    if req.marker is None:
        return True
    extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", str(req.marker))
    try:
        return bool(req.marker.evaluate({**env, "extra": extra.group(1) if extra else ""}))
    except Exception:  # an unknown marker variable: the requirement counts
        return True


def _conflicts(pkg: PackageFact, now: Sequence[PackageFact], python: str) -> list[str]:
    """Requirements between `pkg` and the other installed pip packages that do not hold."""
    if not pkg.pip:
        return []
    env = _marker_env(python)
    installed = {p.name: p for p in now if p.pip}
    out = []
    for other in now:
        if not other.pip:
            continue
        for text in other.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            name = files.norm(req.name)
            if not _applies(req, env):
                continue
            if other.name == pkg.name and name in installed:
                have = installed[name].version
                if not req.specifier.contains(have, prereleases=True):
                    out.append(f"it needs {name}{req.specifier}, {have} is installed")
            elif name == pkg.name and not req.specifier.contains(pkg.version, prereleases=True):
                out.append(f"{other.name} {other.version} needs {name}{req.specifier}")
    return out


def _packages(old: EnvFacts, new: EnvFacts, t: DriftSubject, gone_libs: set[str]) -> list[Change]:
    before = {p.key: p for p in old.packages}
    after = {p.key: p for p in new.packages}
    out: list[Change] = []
    python = t.interpreter or "python"
    # The environment's own pip where it has one; uv's (which built it) where it has none.
    has_pip = any(p.pip and p.name == "pip" for p in new.packages)
    pip_fix = f"{python} -m pip install" if has_pip else f"uv pip install --python {python}"
    pip_undo = pip_fix.replace(" install", " uninstall", 1)
    for key in sorted(before.keys() - after.keys()):
        p = before[key]
        needed = [
            f"{o.name} needs it" for o in new.packages if p.pip and any(
                _req_name(r) == p.name for r in o.requires
            )
        ]  # fmt: skip
        is_tf = p.name == "tensorflow"
        effect = (
            f"TensorFlow {t.tf} is gone" if is_tf
            else "; ".join(needed) + ": imports fail" if needed else "not in use by the others; "
            "verify again"
        )  # fmt: skip
        out.append(Change("package", f"{p.name} {p.version} was removed by hand", effect,
                          "breaks" if is_tf or needed else "changed", t.reinstall))  # fmt: skip
    for key in sorted(after.keys() - before.keys()):
        p = after[key]
        locked = t.lock_pins.get(p.name)
        lock_note = "not in the lock" if locked is None else f"the lock pins {locked}"
        conflicts = _conflicts(p, new.packages, new.python)
        effect = "; ".join(conflicts) if conflicts else "nothing declares a conflict; verify again"
        # One the lock names is put back by a rebuild; one it does not is the user's, which a
        # rebuild would not delete (it refuses): locked by add, or removed by hand.
        keep = t.reinstall if locked is not None else f"`provision add {t.name} {p.name}` locks it"
        out.append(Change(
            "package", f"{p.name} {p.version} installed by hand ({p.installer or 'unknown'}), "
            f"{lock_note}", effect, "breaks" if conflicts else "changed",
            keep + (f" or {pip_undo} {p.name}" if p.pip else ""),
        ))  # fmt: skip
    for key in sorted(before.keys() & after.keys()):
        a, b = before[key], after[key]
        if a.version != b.version:
            locked = t.lock_pins.get(b.name)
            note = (
                "not in the lock" if locked is None else
                f"the lock pins {locked}" if locked != b.version else "as the lock pins"
            )  # fmt: skip
            conflicts = _conflicts(b, new.packages, new.python)
            effect = "; ".join(conflicts) if conflicts else "no declared conflict; verify again"
            restore = f"{pip_fix} '{b.name}=={locked or a.version}'" if b.pip else ""
            out.append(Change(
                "package", f"{b.name} {a.version} → {b.version} installed by hand, {note}", effect,
                "breaks" if conflicts else "changed",
                f"{t.reinstall}" + (f" or {restore}" if restore else ""),
            ))  # fmt: skip
        elif a.files_digest != b.files_digest:
            out += _altered(b, new.prefix, t, gone_libs)
    return out


def _req_name(text: str) -> str:
    try:
        return files.norm(Requirement(text).name)
    except InvalidRequirement:
        return ""


def _altered(p: PackageFact, prefix: str, t: DriftSubject, gone_libs: set[str]) -> list[Change]:
    from pathlib import Path

    from provision.facts.collect import package_files

    altered = [
        (os.path.relpath(path, prefix), how)
        for path, how in files.altered_files(package_files(Path(prefix), p.key))
    ]
    altered = [(rel, how) for rel, how in altered if rel not in gone_libs]
    if not altered:
        return []  # touched, not changed
    shown = ", ".join(f"{rel} ({how})" for rel, how in altered[:5])
    more = f" and {len(altered) - 5} more" if len(altered) > 5 else ""
    return [Change(
        "file", f"{len(altered)} file(s) of {p.name} {p.version} no longer match what its "
        f"installer recorded: {shown}{more}",
        "edited by hand: what runs is not what was verified", "changed", t.reinstall,
    )]  # fmt: skip


# -- libraries and hooks -----------------------------------------------------------------------


def _libraries(old: EnvFacts, new: EnvFacts, t: DriftSubject) -> tuple[set[str], list[Change]]:
    before = {lib.path: lib for lib in old.libraries}
    after = {lib.path: lib for lib in new.libraries}
    gone = set(before.keys() - after.keys())  # and, below, those replaced: reported here only
    out = []
    for path in sorted(gone):
        lib = before[path]  # gone
        left = [x for x in after.values() if x.soname and x.soname == lib.soname]
        src = f", from {lib.package}" if lib.package else ""
        if left:
            effect, sev = f"another copy is still there ({left[0].path}); verify again", "changed"
        else:
            effect = f"TensorFlow {t.tf} cannot load {lib.soname or path}: GPU unusable"
            sev = "breaks"
        out.append(Change("library", f"library {path} ({lib.soname or '?'}{src}) is gone",
                          effect, sev, t.reinstall))  # type: ignore[arg-type]  # fmt: skip
    for path in sorted(after.keys() - before.keys()):
        lib = after[path]
        out.append(Change("library", f"library {path} ({lib.soname or '?'}) is new",
                          "it may be loaded instead of the verified one; verify again",
                          "changed"))  # fmt: skip
    for path in sorted(before.keys() & after.keys()):
        a, b = before[path], after[path]
        if (a.soname, a.size) != (b.soname, b.size):
            sonames = f"{a.soname or '?'} → {b.soname or '?'}, " if a.soname != b.soname else ""
            out.append(Change(
                "library", f"library {path} was replaced ({sonames}{a.size} → {b.size} bytes)",
                "TensorFlow loads another file than the verified one; verify again", "changed",
                t.reinstall,
            ))  # fmt: skip
            gone.add(path)
    return gone, out


def _hooks(old: EnvFacts, new: EnvFacts, t: DriftSubject) -> list[Change]:
    out = []
    for rel in sorted(old.hooks.keys() | new.hooks.keys()):
        a, b = old.hooks.get(rel), new.hooks.get(rel)
        if a == b:
            continue
        start_up = rel.endswith(HOOK_MODULE_FILES)
        if b is None:
            effect = (
                "the interpreter no longer finds its CUDA libraries or applies the GPU policy by "
                "itself (Jupyter, IDEs, cron): GPU unusable there"
                if start_up else "activation no longer sets the environment up"
            )  # fmt: skip
            out.append(Change("hooks", f"hook {rel} is gone", effect,
                              "breaks" if start_up else "changed", t.reinstall))  # fmt: skip
        elif a is None:
            out.append(Change("hooks", f"hook {rel} is new", "verify again", "changed"))
        else:
            out.append(Change("hooks", f"hook {rel} was edited",
                              "the set-up that runs is not the verified one; verify again",
                              "changed", t.reinstall))  # fmt: skip
    for key in sorted(old.policy.keys() | new.policy.keys()):
        a, b = old.policy.get(key), new.policy.get(key)
        if a != b:
            out.append(Change(
                "policy", f"GPU policy {key} {a if a is not None else '(unset)'} → "
                f"{b if b is not None else '(unset)'}",
                "the environment no longer runs with the GPU policy it was verified with",
                "changed", t.reinstall,
            ))  # fmt: skip
    return out
