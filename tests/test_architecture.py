"""ARCHITECTURE.md stays true: its code map names every folder and top-level module of provision/
on the floor tests/test_layers.py puts it (one section a floor, top floor first; the walled ones
as walled), and every file or folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from test_layers import FLOORS, PACKAGE, WALLED

ROOT = PACKAGE.parent
MAP = ROOT / "ARCHITECTURE.md"
# A bullet of the code map: "- `name/`: ..." or "- `name.py`: ...".
BULLET = re.compile(r"^- `([\w.]+?)(/|\.py)`")
# A file or folder named in backquotes: `install/owned.py`, `tests/test_kinds.py`, `kinds/`.
NAMED = re.compile(r"`([\w./-]+?(?:\.py|\.sh|\.toml|/))`")


def units_on_disk(package: Path) -> set[str]:
    """The units of tests/test_layers.py: top-level modules and packages (and data folders)."""
    found = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    found |= {p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    return found


# The sections of the code map that are not floors; every other one is, top floor first.
NOT_FLOORS = ("Walled", "Outside the package")


def code_map(text: str) -> dict[str, set[str]]:
    """The units each section of the code map names, by heading, in the map's order."""
    body = text.split("\n## Code map\n", 1)[1].split("\n## ", 1)[0]
    sections: dict[str, set[str]] = {}
    heading = ""
    for line in body.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
            sections[heading] = set()
        elif heading and (bullet := BULLET.match(line)):
            sections[heading].add(bullet.group(1))
    return sections


def test_every_unit_of_provision_is_on_the_map_on_its_floor() -> None:
    sections = code_map(MAP.read_text(encoding="utf-8"))
    mapped = [units for name, units in sections.items() if name not in NOT_FLOORS]
    assert mapped == [set(units) for units in FLOORS]
    assert sections["Walled"] == WALLED
    named = set().union(*sections.values())
    assert units_on_disk(PACKAGE) - named == set()


def test_every_file_and_folder_the_map_names_exists() -> None:
    files = [
        p.relative_to(ROOT).as_posix()
        for top in ("provision", "tests", "templates", ".ci")
        for p in (ROOT / top).rglob("*")
        if "__pycache__" not in p.parts
    ]
    files += [p.name for p in ROOT.iterdir()]
    paths = set(files) | {f"{f}/" for f in files if (ROOT / f).is_dir()}
    missing = [
        name
        for name in set(NAMED.findall(MAP.read_text(encoding="utf-8")))
        if not re.search(r"[A-Z]{3,}", name)  # envs/NAME/, PROVISION_HOME/registry/: placeholders
        and not any(p == name or p.endswith("/" + name) for p in paths)
        and not (name.endswith("/") and name.rstrip("/") in paths)
    ]
    assert sorted(missing) == []


def test_a_unit_missing_from_the_map_is_caught(tmp_path: Path) -> None:
    text = MAP.read_text(encoding="utf-8")
    assert "- `sbom.py`" in text
    sections = code_map(text.replace("- `sbom.py`", "- sbom.py"))
    assert "sbom" not in set().union(*sections.values())
    (tmp_path / "newthing").mkdir()
    (tmp_path / "older.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    assert units_on_disk(tmp_path) == {"newthing", "older"}
