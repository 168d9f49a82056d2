"""A user's package that cannot live with the release, explained in a few lines, not dumped.

The lines name the user's requirement, what it clashes with (TensorFlow's pin, the environment's
Python), and what would work: the newest version of the package that fits (uv asked again with the
package's name alone), or the TensorFlow releases of the matrix for the Python it needs. uv's full
output is kept for `-v`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from provision.errors import LockError
from provision.lock.lockinputs import LockTarget

Relax = Callable[[str, Sequence[str]], "str | None"]
_BOX = " \u2570\u2500\u25b6\u2502\u00d7"
_PYTHON = r"(?:requires|does not satisfy) Python\s*([<>=!~][^ ,]*(?:,\s*[<>=!~][^ ,]*)*)"


class ConflictError(LockError):
    """The user's packages and the release cannot be locked together; `details`: uv's words."""

    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.details = details


def derivation(text: str) -> list[str]:
    """uv's sentences of why ("Because …", "And because …"), each on one line, in order."""
    lines = [ln.strip(_BOX).strip() for ln in text.splitlines()]
    lines = [re.sub(r"^(?:error|cause|hint):\s*", "", ln) for ln in lines]
    joined = " ".join(ln for ln in lines if ln and not ln.startswith("No solution found"))
    sentences = re.split(r"(?<=\.)\s+(?=(?:And because|Because))", joined)
    out = []
    for sentence in sentences:
        if not sentence.lstrip().startswith(("Because", "And ")):
            continue
        text = " ".join(re.sub(r"\{[^}]*\}", "", sentence).split())  # markers: noise here
        out.append(text if len(text) <= 300 else text[:297] + "...")
    return out


def _mentions(text: str, name: str) -> bool:
    pattern = re.escape(name).replace(r"\-", "[-_.]")
    return re.search(rf"(?<![\w.-]){pattern}(?![\w-])", text, re.IGNORECASE) is not None


def _python_needed(text: str) -> str | None:
    m = re.search(
        r"(?:requires|does not satisfy) Python\s*([<>=!~][^ ,]*(?:,\s*[<>=!~][^ ,]*)*)", text
    )
    return m.group(1).rstrip(".") if m else None


def _releases_for(needed: str) -> list[tuple[str, str]]:
    """(release, the lowest of its Pythons that satisfies `needed`) for each final release."""
    from provision import matrix

    try:
        wanted = SpecifierSet(needed)
    except InvalidSpecifier:
        return []
    out = []
    for release in matrix.load().finals:
        fitting = [p for p in release.python if p in wanted]
        if fitting:
            out.append((release.tf, fitting[0]))
    return out


def explain(
    target: LockTarget, text: str, relax: Relax, others: Sequence[str] = ()
) -> ConflictError:
    """others: the frameworks beside TensorFlow among the user's packages (userlock.beside)."""
    spec = target.spec
    pin = spec.release.pin
    culprits = [p for p in target.packages if _mentions(text, p.name)] or list(target.packages)
    asked = ", ".join(p.spec for p in culprits)
    lines = [
        f"{target.name}: {asked} cannot be locked with TensorFlow {pin} on Python {spec.python}:"
    ]
    lines += [f"  {s}" for s in derivation(text)[:2]] or [f"  {' '.join(text.split())[:300]}"]
    needed = _python_needed(text)
    for package in culprits[:3]:
        others = [p.spec for p in target.packages if p.name != package.name]
        version = relax(package.name, [*others, package.name])
        if version is not None:
            lines.append(
                f"  what fits: {package.name} {version}, its newest that fits TensorFlow {pin} "
                f"(provision add {target.name} '{package.name}=={version}')"
            )
        elif package.name in others:
            lines.append(
                f"  no {package.name} release built for TensorFlow {pin}'s CUDA line fits its "
                f"and-cuda ranges on Python {spec.python}; which TensorFlow release pairs with "
                f"which {package.name}: provision matrix pairs {package.name}"
            )
        elif needed is None:
            lines.append(
                f"  no version of {package.name} fits TensorFlow {pin} on Python {spec.python}"
            )
    if needed is not None:
        fits = _releases_for(needed)
        lines.append(f"  it needs Python {needed}; this environment has {spec.python}")
        if fits:
            tf, python = fits[-1]
            lines.append(
                f"  TensorFlow releases for such a Python: {', '.join(t for t, _ in fits)} "
                f"(e.g. provision render --tf {tf} --python {python} --path {spec.path} ...)"
            )
    lines.append("  (the resolver's full output: provision -v ...)")
    return ConflictError("\n".join(lines), text)
