"""The path kinds (provision/matrix/kinds): one module per kind behind one interface, chosen once.

No module outside the kinds' own compares a path's name to "conda", "pip" or "system": it holds
the kind and asks it. The scan below is what keeps it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from provision import matrix
from provision.errors import UsageError
from provision.matrix import kinds, spec

PACKAGE = Path(__file__).resolve().parent.parent / "provision"
KINDS_DIR = PACKAGE / "matrix" / "kinds"
NAMES = {"conda", "pip", "system"}
# Names that hold a path kind's name where it is compared (env.path, spec.path, rec.path, ...).
HOLDERS = {"path"}


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _names_in(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)} & NAMES
    return set()


def comparisons(source: str) -> list[int]:
    """Lines comparing a path's name (a variable or attribute called `path`) to a kind's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_names_in(s) for s in sides) and any(_last_name(s) in HOLDERS for s in sides):
            found.append(node.lineno)
    return found


def test_no_module_outside_the_kinds_compares_a_path_name() -> None:
    found = {
        str(p.relative_to(PACKAGE.parent)): lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if KINDS_DIR not in p.parents and (lines := comparisons(p.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_catches_each_form_of_comparison() -> None:
    source = (
        "if env.path == 'conda': pass\n"
        "if 'system' != spec.path: pass\n"
        "if path in ('pip', 'system'): pass\n"
        "if manager == 'pip': pass\n"  # conda-lock's package manager: not a path kind
        "if env.kind.conda_env: pass\n"
    )
    assert comparisons(source) == [1, 2, 3]


def test_the_ansible_role_gets_capabilities_not_a_name_to_compare() -> None:
    role = PACKAGE / "ansible" / "roles" / "provision_env" / "tasks" / "main.yml"
    text = role.read_text(encoding="utf-8")
    for name in NAMES:
        assert f"provision_env_path == '{name}'" not in text


@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_kind_is_chosen_by_its_name_and_is_one_object(name: str) -> None:
    kind = kinds.of(name)
    assert kind.name == name and kinds.of(name) is kind
    assert name in kinds.NAMES
    # the environment directory's files come from the kind: inputs rendered, the lock not
    assert kind.lock_file not in kind.input_files


def test_an_unknown_kind_is_a_usage_error_naming_the_kinds() -> None:
    want = r"unknown path 'docker'; choose one of conda, system, pip"
    with pytest.raises(UsageError, match=want):
        kinds.of("docker")


def test_a_spec_holds_the_kind_it_was_resolved_for() -> None:
    m = matrix.load()
    for kind in kinds.KINDS.values():
        rel = next(r for r in reversed(m.finals) if kind.refusal(m, r) is None)
        s = spec.resolve(m, rel.tf, kind.name)
        assert s.kind is kind and s.path == kind.name
        conda, pip = kind.requirements(m, rel, s.python)
        assert (s.conda_dependencies, s.pip_requirements) == (conda, pip)
        assert bool(conda) == kind.conda_env  # only a conda environment has conda packages


def test_capabilities_tell_the_three_kinds_apart() -> None:
    """Each capability names what it means; together they tell every kind from the others."""
    rows = {
        n: (k.conda_env, k.owns_prefix, k.host_toolkit, k.pins_nvidia_wheels)
        for n, k in kinds.KINDS.items()
    }
    assert rows == {
        "conda": (True, True, False, False),
        "system": (False, False, True, False),
        "pip": (False, True, False, True),
    }
    assert len(set(rows.values())) == len(rows)
