"""The floors of provision/, stated as a contract and checked from the code's own imports.

Each unit (a top-level module, or a package with everything in it) stands on one floor. A unit may
import the package's face (`provision/__init__.py`, which imports nothing) and units on lower
floors; units on the same floor are independent of each other. Walls: what ships into
environments or runs as its own program imports nothing of provision's. Lazy imports inside
functions count as imports: they are arrows of the structure all the same.

A new module must be placed on a floor here before it can land; that is the point."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "provision"

# Top floor first. Units on one floor may not import each other.
FLOORS: list[list[str]] = [
    ["__main__"],
    ["cli"],
    ["create", "bundle", "built", "change", "drift", "image"],
    ["fleet", "install", "verify", "bench_search", "sbom"],
    ["lock", "releases", "doctor", "bench", "render", "facts"],
    ["tools", "host", "environment", "caches", "bundlefile", "modulefile"],
    ["matrix", "registry", "payload_app", "_proc", "paths", "toolout", "userpackages"],
    [
        "records",
        "fileio",
        "payload",
        "solver",
        "steps",
        "jsontypes",
        "errors",
        "diskread",
        "_children",
        "progress",
        "data",
    ],
]
# Run inside environments, on other hosts or as programs of their own: stdlib and their own
# package only (payload: Python 3.8+, shipped as a zipapp; hooks: installed into prefixes).
WALLED = {"payload", "hooks", "_hostprobe", "scripts", "ansible"}
FACE = ""  # provision/__init__.py
MAX_LINES = 500


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _unit(module: str) -> str:
    return module.split(".", 1)[0]


def _imports(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """provision modules imported by one file (relative to the package), with their line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "provision" or alias.name.startswith("provision."):
                    yield alias.name.removeprefix("provision").lstrip("."), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                yield ".".join([*base, *([node.module] if node.module else [])]), node.lineno
            elif node.module and (node.module + ".").startswith("provision."):
                target = node.module.removeprefix("provision").lstrip(".")
                if target:
                    yield target, node.lineno
                else:  # from provision import x: x is a unit, or a name of the face
                    for alias in node.names:
                        yield alias.name, node.lineno


def violations(root: Path) -> list[str]:
    """Every arrow that breaks the contract, as 'file:line: why'."""
    floor_of = {unit: i for i, units in enumerate(FLOORS) for unit in units}
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        if not module:
            continue
        unit = _unit(module)
        where = f"{path.relative_to(root.parent)}"
        if unit not in floor_of and unit not in WALLED:
            found.append(f"{where}: {unit} stands on no floor; place it in tests/test_layers.py")
            continue
        for target, line in _imports(path, module):
            to = _unit(target) if target else FACE
            if to in (unit, FACE):
                continue
            if to not in floor_of and not (root / f"{to}.py").exists() and to not in WALLED:
                to = FACE  # a name defined by the face, such as __version__
                continue
            if unit in WALLED:
                found.append(f"{where}:{line}: {unit} is walled off and imports provision.{to}")
            elif to in WALLED and to != "payload":
                found.append(f"{where}:{line}: imports walled {to}")
            elif to not in floor_of:
                continue
            elif floor_of[to] < floor_of[unit]:
                found.append(f"{where}:{line}: {unit} imports {to}, which stands above it")
            elif floor_of[to] == floor_of[unit]:
                found.append(f"{where}:{line}: {unit} imports {to}, on its own floor")
    return found


def test_every_import_follows_the_floors() -> None:
    assert violations(PACKAGE) == []


def test_the_house_has_at_most_eight_floors() -> None:
    """A short house is one a reader can hold in mind: each floor added is a level of indirection
    every command pays for. The longest chain of imports, not the list above, is what counts."""
    assert len(FLOORS) <= 8
    floor_of = {unit: i for i, units in enumerate(FLOORS) for unit in units}
    arrows: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path, PACKAGE)
        if module and _unit(module) in floor_of:
            for target, _ in _imports(path, module):
                to = _unit(target) if target else FACE
                if to in floor_of and to != _unit(module):
                    arrows.setdefault(_unit(module), set()).add(to)

    def height(unit: str, seen: tuple[str, ...] = ()) -> int:
        return 1 + max((height(u, (*seen, unit)) for u in arrows.get(unit, ())), default=0)

    assert max(height(u) for u in floor_of) <= 8


def test_the_face_imports_nothing_of_provision() -> None:
    init = PACKAGE / "__init__.py"
    assert list(_imports(init, "")) == []


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_an_import_across_a_floor_is_caught(tmp_path: Path) -> None:
    """The contract fails when an arrow runs back up, sideways, or through a wall."""
    copy = tmp_path / "provision"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(copy) == []
    (copy / "records.py").write_text(
        (copy / "records.py").read_text() + "\n\ndef _late():\n    from provision.cli import main\n"
    )
    (copy / "host" / "extra.py").write_text("from ..environment import Spec\n")
    (copy / "payload" / "leak.py").write_text("from provision import errors\n")
    (copy / "newthing.py").write_text("x = 1\n")
    found = "\n".join(violations(copy))
    assert "provision/records.py:" in found and "records imports cli, which stands above" in found
    assert "host imports environment, on its own floor" in found
    assert "payload is walled off and imports provision.errors" in found
    assert "newthing stands on no floor" in found
