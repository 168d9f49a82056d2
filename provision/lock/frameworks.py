"""PyTorch or JAX beside TensorFlow: one CUDA line, one copy of each NVIDIA library.

By default a pip-path lock pins TensorFlow's NVIDIA wheels exactly as the matrix row says. When the
user's packages name another framework, the bound becomes the release's own `and-cuda` ranges (its
wheel's METADATA, in the matrix as `and_cuda`): within them the libraries may move to what the
other framework needs. The other CUDA lines' wheels of the same libraries (`nvidia-cudnn-cu13`,
the unsuffixed CUDA 13 names, `-cu11`) are constrained away, so the resolver picks the newest
release of the framework built for TensorFlow's line, or says that none is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from provision.lock.requirements import norm, pins
from provision.matrix.spec import EnvSpec

# The user's package names that bring their own NVIDIA wheels.
FRAMEWORKS = {"torch": "PyTorch", "jax": "JAX", "jax-cuda12-plugin": "JAX", "jaxlib": "JAX"}
LINES = ("cu11", "cu12", "cu13")
# The glibc floor of the frameworks' CUDA wheels (torch >= 2.7, jaxlib: manylinux_2_28): a lock
# beside one targets it when the release's own floor is lower.
GLIBC = "2.28"
_NVIDIA = re.compile(r"^nvidia-(?P<stem>[a-z0-9-]+?)-(?P<line>cu1\d)$")


def named(packages: Sequence[str]) -> list[str]:
    """The frameworks among the user's package names (normalised), in the given order."""
    return [n for n in packages if n in FRAMEWORKS]


def ranges(spec: EnvSpec) -> dict[str, Requirement]:
    """name -> the release's and-cuda requirement (marker dropped); empty for a release whose
    wheel has no and-cuda extra (its NVIDIA pins stay exact)."""
    out = {}
    for text in spec.release.and_cuda:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        req.marker = None
        out[norm(req.name)] = req
    return out


def glibc(spec: EnvSpec) -> str:
    floor = spec.release.glibc_min
    as_tuple = tuple(int(x) for x in floor.split(".")[:2])
    return GLIBC if as_tuple < tuple(int(x) for x in GLIBC.split(".")) else floor


def requirements(spec: EnvSpec, lines: Sequence[str]) -> list[str]:
    """requirements.in's lines with the exact NVIDIA pins the and-cuda extra bounds replaced by
    its ranges (TensorFlow's own `[and-cuda]` line carries them). A pin the extra does not bound
    (nvrtc on some releases) may move within its major version, the release's CUDA line."""
    bounded = ranges(spec)
    out = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            out.append(line)
            continue
        name = norm(req.name)
        pinned = [s.version for s in req.specifier if s.operator == "=="]
        if name in bounded:
            out.append(str(bounded[name]))
        elif bounded and name.startswith("nvidia-") and pinned:
            major = int(pinned[0].split(".")[0])
            out.append(f"{req.name}>={pinned[0]},<{major + 1}")
        else:
            out.append(line)
    return out


def own(spec: EnvSpec) -> dict[str, Requirement]:
    """TensorFlow's NVIDIA libraries and their bounds: the and-cuda ranges, or the exact pins of
    a release whose wheel has no and-cuda extra."""
    return ranges(spec) or {
        norm(n): Requirement(f"{n}=={v}") for n, v in spec.release.pip_wheels.items()
    }


def forbidden(spec: EnvSpec) -> list[str]:
    """Constraints no version satisfies, for the other CUDA lines' wheels of TensorFlow's own
    NVIDIA libraries: one copy of each library in the prefix."""
    out = []
    for name in sorted(own(spec)):
        m = _NVIDIA.match(name)
        if m is None:
            continue
        stem, line = m.group("stem"), m.group("line")
        out.append(f"nvidia-{stem}<0")
        out += [f"nvidia-{stem}-{other}<0" for other in LINES if other != line]
    return out


def problems(spec: EnvSpec, body: str) -> list[str]:
    """What a lock with another framework gets wrong: TensorFlow's pin, an NVIDIA library of
    TensorFlow's outside its bounds (own), or one held twice (two CUDA lines)."""
    got = pins(body)
    out = []
    if got.get("tensorflow") != spec.release.pin:
        out.append(f"tensorflow=={spec.release.pin} (the lock has {got.get('tensorflow')})")
    for name, req in sorted(own(spec).items()):
        version = got.get(name)
        if version is None or not req.specifier.contains(version, prereleases=True):
            out.append(f"{req} (the lock has {version or 'nothing'})")
    stems: dict[str, list[str]] = {}
    for name in got:
        m = _NVIDIA.match(name)
        stem = m.group("stem") if m else name.removeprefix("nvidia-")
        if name.startswith("nvidia-"):
            stems.setdefault(stem, []).append(name)
    for stem, names in sorted(stems.items()):
        if len(names) > 1:
            out.append(f"two copies of {stem}: {', '.join(sorted(names))}")
    return out


@dataclass(frozen=True)
class Pairing:
    """What `matrix pairs` found for one release: the framework's version, or why there is none."""

    version: str | None
    why: str = ""  # when version is None: the resolver's reason, in one line

    def shown(self) -> str:
        return self.version or f"none ({self.why})"


WHY_LIMIT = 240  # uv explains every release it tried; the first clauses say the reason


def pair(spec: EnvSpec, framework: str, workdir: Path, cache_dir: Path | None = None) -> Pairing:
    """The newest release of `framework` that locks with the release on the pip path in one
    CUDA line (today's index, no cut-off), or why none does."""
    from provision import _proc, tools
    from provision.lock import pylock

    lines = requirement_lines_of(spec)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "requirements.in").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (workdir / "packages.in").write_text(framework + "\n", encoding="utf-8")
    (workdir / "constraints.txt").write_text(
        "".join(c + "\n" for c in forbidden(spec)), encoding="utf-8"
    )
    out = workdir / "requirements.lock"
    argv = pylock.uv_compile_argv(
        tools.uv(), spec, spec.platforms[0], out, pylock.pip_index_url(),
        ["--constraint", "constraints.txt"], sources=("packages.in",), glibc=glibc(spec),
    )  # fmt: skip
    argv = [a for a in argv if a != "--generate-hashes"]  # versions only: a quicker resolution
    done = _proc.run(argv, cwd=workdir, env=pylock.uv_env(cache_dir), timeout=600, check=False)
    if not done:
        if "No solution found" in done.stderr:
            return Pairing(None, _why(pylock.uv_reason(done.stderr)))
        from provision.errors import LockError

        raise LockError(f"uv could not resolve {framework} beside TensorFlow {spec.release.pin}: "
                        f"{pylock.uv_reason(done.stderr or done.stdout)}")  # fmt: skip
    got = pins(out.read_text(encoding="utf-8"))
    name = norm(framework.split("[")[0])
    if not gpu_build(framework, got):  # an old jax without the extra, say
        return Pairing(None, f"only a CPU build of {name} fits ({name} {got.get(name, '?')})")
    return Pairing(got.get(name), "" if name in got else f"{name} is not in the lock")


def _why(reason: str) -> str:
    """uv's explanation without its heading, cut to its first clauses."""
    text = reason.split("No solution found when resolving dependencies", 1)[-1]
    text = text[text.find("Because") :] if "Because" in text else text.lstrip(": ")
    return text if len(text) <= WHY_LIMIT else text[: WHY_LIMIT - 3].rstrip() + "..."


def gpu_build(framework: str, got: dict[str, str]) -> bool:
    """Whether the resolved framework is its CUDA build: JAX needs its CUDA plugin (an old jax
    without the extra resolves to the CPU build, with only a warning); torch's Linux wheels on the
    package index are CUDA builds."""
    name = norm(framework.split("[")[0])
    if name in ("jax", "jaxlib", "jax-cuda12-plugin"):
        return any(re.fullmatch(r"jax-cuda\d+-plugin", n) for n in got)
    return True


def requirement_lines_of(spec: EnvSpec) -> list[str]:
    """What the pip path's requirements.in asks for, widened to the and-cuda ranges."""
    return requirements(spec, list(spec.pip_requirements))
