"""The user's packages: envs/NAME/packages.in, the one input of an environment that is the user's.

One package a line, comments and blank lines kept. On the pip and system paths a line is a PEP 508
requirement (`pandas`, `scikit-learn>=1.3`). On the conda path a plain line is a conda-forge
package (a match spec, `pandas >=2`), and `pypi: SPEC` a package from the package index (pip-only),
as pixi's `add --pypi` and conda's `pip:` section mean it. provision writes this file only when
asked to (`render --with`, `-r`, `add`, `drop`), never calls an edit of it tampering, and never
lets it remove or replace TensorFlow's own pins: it adds to them.

This module is the only reader and writer of the file's lines; `packages()` gives what the lock
and its freshness check use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from provision.errors import UsageError

FILE = "packages.in"
PYPI = "pypi:"
MAX_LINES = 2000
MAX_NAME = 100  # the longest name on the package index is about 80
# What TensorFlow's own requirements decide; a user's line for these names would replace a pin.
OWN = frozenset({"tensorflow", "tensorflow-cpu", "tf-nightly", "python", "pip"})
_CONDA_SPEC = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9._-]*)(?:::)?(\s*[=<>!~*\d.,| a-zA-Z_+-]*)$")
_NAME_END = re.compile(r"[\s\[=<>!~;@(,]")


def canonical(name: str) -> str:
    """PEP 503's normal form: `Scikit_Learn` and `scikit-learn` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Package:
    """One line of packages.in, by meaning: `spec` normalised, `pypi` for a package-index one."""

    spec: str
    pypi: bool  # conda path: `pypi: SPEC`, from the package index (pip and system paths: False)

    @property
    def name(self) -> str:
        return canonical(_NAME_END.split(self.spec.strip(), maxsplit=1)[0].split("::")[-1])

    @property
    def line(self) -> str:
        """As the lock's inputs record it, and as written back to the file."""
        return f"{PYPI} {self.spec}" if self.pypi else self.spec


def _pep508(text: str, where: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        why = (str(exc).splitlines() or ["invalid"])[0]
        raise UsageError(f"{where}: {text!r} is not a package requirement ({why})") from None
    if req.url:
        raise UsageError(
            f"{where}: {text!r} names a URL; a lock needs a package from the index (name a version)"
        )
    return str(req)


def _match_spec(text: str, where: str) -> str:
    spec = re.sub(r"\s*([=<>!~,|]+)\s*", r"\1", " ".join(text.split()))
    if not _CONDA_SPEC.match(spec):
        raise UsageError(
            f"{where}: {text!r} is not a conda package spec (e.g. `pandas`, `pandas >=2`); "
            f"a package from the index is written `{PYPI} {text}`"
        )
    return spec


def parse_spec(text: str, conda: bool, where: str) -> Package:
    """One package as a user types it (`--with`, `add`, a line of the file)."""
    raw = text.strip()
    pypi = raw.lower().startswith(PYPI)
    if pypi:
        raw = raw[len(PYPI) :].strip()
    if not raw:
        raise UsageError(f"{where}: an empty package spec")
    if raw.startswith("-"):
        raise UsageError(
            f"{where}: {raw!r}: packages.in holds packages only, one a line (no pip options; "
            "the index is pip's own configuration)"
        )
    spec = _match_spec(raw, where) if conda and not pypi else _pep508(raw, where)
    package = Package(spec, pypi and conda)
    if len(package.name) > MAX_NAME:
        raise UsageError(f"{where}: a package name of {len(package.name)} characters (at most "
                         f"{MAX_NAME})")  # fmt: skip
    if package.name in OWN:
        raise UsageError(
            f"{where}: {package.name} is the environment's own (its TensorFlow release and "
            "Python come from --tf and --python); packages.in adds packages beside it"
        )
    return package


def parse(text: str, conda: bool, where: str = FILE) -> list[Package]:
    """Every package of the file, in its order; UsageError naming the line otherwise."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise UsageError(f"{where}: {len(lines)} lines; at most {MAX_LINES}")
    found: dict[str, Package] = {}
    for number, line in enumerate(lines, 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        package = parse_spec(body, conda, f"{where} line {number}")
        if package.name in found:
            raise UsageError(
                f"{where} line {number}: {package.name} is already on an earlier line; "
                "give each package once"
            )
        found[package.name] = package
    return list(found.values())


def requirements_file(text: str, where: str) -> list[str]:
    """The requirement lines of a pip requirements file given with -r (comments, blank lines and
    `\\` continuations handled; options refused): each one a package from the index."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for number, line in enumerate(joined.splitlines(), 1):
        body = re.split(r"(^|\s)#", line, maxsplit=1)[0].strip()
        if not body:
            continue
        if body.startswith("-"):
            raise UsageError(
                f"{where} line {number}: {body.split()[0]} is a pip option; -r takes a file of "
                "package requirements only"
            )
        out.append(f"{PYPI} {body}")
    return out


def header(env_name: str, conda: bool) -> str:
    kind = (
        "a conda-forge package (match spec), or `pypi: SPEC` for one from the package index"
        if conda
        else "a requirement (PEP 508), as in a requirements file"
    )
    return (
        f"# Your packages for {env_name}, locked with TensorFlow: yours to edit and commit.\n"
        f"# One a line: {kind}.\n"
        f"# After an edit: provision lock {env_name}  (or: provision add/drop {env_name} ...)\n"
    )


def added(text: str | None, new: Sequence[Package], env_name: str, conda: bool) -> str:
    """The file with `new` in it: a package already there has its line replaced where it stands
    (its comment kept), others are appended; every other line stays as it was."""
    out = (text if text is not None else header(env_name, conda)).splitlines()
    wanted = {p.name: p for p in new}
    for i, line in enumerate(out):
        body, hash_, comment = line.partition("#")
        if not body.strip():
            continue
        name = parse_spec(body, conda, FILE).name
        if name in wanted:
            tail = f"  #{comment}" if hash_ else ""
            out[i] = wanted.pop(name).line + tail
    out += [p.line for p in new if p.name in wanted]
    return "\n".join(out) + "\n"


def dropped(text: str, names: Iterable[str], conda: bool) -> str:
    """The file without the lines of `names` (canonical names)."""
    gone = set(names)
    keep = []
    for line in text.splitlines():
        body = line.split("#", 1)[0]
        if body.strip() and parse_spec(body, conda, FILE).name in gone:
            continue
        keep.append(line)
    return "\n".join(keep) + "\n"
