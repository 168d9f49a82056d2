"""One name, one thing: no two public classes (or type aliases), and no two modules, of provision/
share a name.

A reader who meets `Target` or `Manifest` should not have to find out which of several it is. A
type alias counts when it is named like a class (`Progress = Callable[[str], None]`): a second
module wanting the same one imports it."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "provision"
CLASS_LIKE = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*")


def public_names(source: str) -> list[str]:
    """The top-level classes and class-like aliases a module defines."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            names = []
        out += [n for n in names if CLASS_LIKE.fullmatch(n)]
    return out


def test_no_two_public_classes_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in public_names(path.read_text(encoding="utf-8")):
            where[name].append(str(path.relative_to(PACKAGE.parent)))
    assert {n: files for n, files in where.items() if len(files) > 1} == {}
    assert len(where) > 100  # the scan sees the package


def test_the_scan_sees_classes_and_aliases_but_not_constants() -> None:
    source = (
        "from typing import Callable, Literal\n"
        "class Target: ...\n"
        "Progress = Callable[[str], None]\n"
        "State: object = Literal['ok']\n"
        "LIMIT = 3\n"
        "class _Private: ...\n"
    )
    assert public_names(source) == ["Target", "Progress", "State"]


def test_no_two_modules_share_a_name() -> None:
    """`judge`, `model` or `store` in two packages made a reader ask which one; a module's file
    name says what it holds, once in the package (a package's __init__ and __main__ aside)."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            where[path.stem].append(str(path.relative_to(PACKAGE.parent)))
    assert {n: files for n, files in where.items() if len(files) > 1} == {}
