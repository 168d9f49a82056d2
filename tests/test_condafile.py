"""conda-lock.yml's one reader (provision/lock/condafile.py): typed packages per platform, glibc
floors, file names and hashes; errors that name the package and the field; rewrites that keep
conda-lock's bytes; and no other module of provision reading the file's entries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from provision.errors import InstallError, LockError
from provision.fileio import dump_yaml
from provision.lock import condafile

PACKAGE = Path(__file__).resolve().parent.parent / "provision"


def entry(
    name: str, version: str, platform: str = "linux-64", **extra: object
) -> dict[str, object]:
    """An entry in conda-lock's own key order."""
    return {
        "name": name, "version": version, "manager": "conda", "platform": platform,
        "dependencies": extra.pop("dependencies", {}),
        "url": f"https://conda.example/{platform}/{name}-{version}-0.conda",
        "hash": {"md5": "0" * 32, "sha256": "1" * 64}, "category": "main", "optional": False,
        **extra,
    }  # fmt: skip


def lock_text(*entries: dict[str, object]) -> str:
    return dump_yaml({
        "version": 1,
        "metadata": {"platforms": ["linux-64", "linux-aarch64"], "sources": ["environment.yml"]},
        "package": list(entries),
    })  # fmt: skip


# Sorted as conda-lock writes them: manager, name, platform.
ENTRIES = [
    entry("libzlib", "1.3.1", dependencies={"__glibc": ">=2.17,<3.0.a0"}),
    entry("numpy", "1.26.4", dependencies={"python": ">=3.11,<3.12.0a0"}),
    entry("python", "3.11.9", dependencies={"__glibc": ">=2.28,<3.0.a0", "libzlib": ">=1.3"}),
    entry("python", "3.11.9", "linux-aarch64"),
]
TEXT = lock_text(*ENTRIES)


def test_packages_per_platform_with_their_floors_names_and_versions() -> None:
    lock = condafile.parse(TEXT, "conda-lock.yml")
    assert lock.platforms == ["linux-64", "linux-aarch64"]
    assert [p.name for p in lock.on("linux-64")] == ["libzlib", "numpy", "python"]
    assert [p.glibc_floor for p in lock.on("linux-64")] == [(2, 17), None, (2, 28)]
    assert lock.on("linux-64")[0].file_name == "libzlib-1.3.1-0.conda"
    assert lock.on("linux-64")[0].hash.md5 == "0" * 32
    assert lock.versions() == {
        "linux-64": {"libzlib": "1.3.1", "python": "3.11.9", "numpy": "1.26.4"},
        "linux-aarch64": {"python": "3.11.9"},
    }


def test_adding_the_pip_section_keeps_conda_locks_bytes_and_order() -> None:
    lock = condafile.parse(TEXT, "conda-lock.yml")
    assert lock.with_pip([]) == TEXT
    wheel = condafile.pip_package(
        "absl-py", "2.1.0", "linux-64", "https://files.example/absl_py-2.1.0-py3-none-any.whl",
        "2" * 64, ["six"],
    )  # fmt: skip
    text = lock.with_pip([wheel])
    # conda-lock's own entry for a pip package, after the conda ones.
    assert text == lock_text(*ENTRIES, {
        "name": "absl-py", "version": "2.1.0", "manager": "pip", "platform": "linux-64",
        "dependencies": {"six": ""}, "url": wheel.url, "hash": {"sha256": "2" * 64},
        "category": "main", "optional": False,
    })  # fmt: skip
    again = condafile.parse(text, "conda-lock.yml")
    assert again.on("linux-64")[-1] == wheel and wheel.pip
    assert wheel.file_name == "absl_py-2.1.0-py3-none-any.whl"
    assert lock == condafile.parse(TEXT, "another name")  # packages compare, not the document


def test_urls_replaced_by_key_and_nothing_else_changes() -> None:
    lock = condafile.parse(TEXT, "conda-lock.yml")
    numpy = lock.on("linux-64")[1]
    text = lock.with_urls({numpy.key: "file:///staged/conda/numpy-1.26.4-0.conda"})
    assert text == TEXT.replace(numpy.url, "file:///staged/conda/numpy-1.26.4-0.conda")
    assert lock.with_urls({}) == TEXT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("package: [\n  - {name: x\n", r"conda-lock.yml is not valid YAML \(.* at line \d+\)"),
        ("- a\n- b\n", r"conda-lock.yml is not a conda-lock file \(no list of packages\)"),
        ("package: [1, 2]\n", r"is not a conda-lock file \(no list of packages\)"),
        (
            lock_text(entry("numpy", "1.26.4", manager="brew")),
            r"conda-lock.yml: package numpy: field 'manager' must be one of .*'brew'",
        ),
        (
            lock_text({**entry("numpy", "1.26.4"), "version": 1.1}),
            r"conda-lock.yml: package numpy: field 'version' must be str, got 1.1",
        ),
        (
            lock_text({**entry("numpy", "1.26.4"), "colour": "red"}),
            r"conda-lock.yml: package numpy: unknown field\(s\) colour",
        ),
        (
            lock_text({k: v for k, v in entry("numpy", "1.26.4").items() if k != "platform"}),
            r"conda-lock.yml: package numpy: missing field 'platform'",
        ),
    ],
    ids=[
        "bad-yaml",
        "a-list",
        "entries-not-mappings",
        "manager",
        "float-version",
        "extra",
        "no-platform",
    ],
)
def test_what_is_not_a_conda_lock_is_named_in_the_callers_error(text: str, message: str) -> None:
    with pytest.raises(LockError, match=message):
        condafile.parse(text, "conda-lock.yml")
    with pytest.raises(InstallError, match=message):
        condafile.parse(text, "conda-lock.yml", InstallError)


def test_an_unreadable_file_is_the_callers_error(tmp_path: Path) -> None:
    path = tmp_path / "conda-lock.yml"
    path.write_bytes(b"package:\n  - name: \xff\n")
    with pytest.raises(InstallError, match=r"conda-lock.yml cannot be read"):
        condafile.read(path, InstallError)
    with pytest.raises(LockError, match=r"absent.yml cannot be read"):
        condafile.read(tmp_path / "absent.yml")


# -- one reader ---------------------------------------------------------------------------------

# conda-lock's entry keys that only a reader of its packages looks up.
ENTRY_KEYS = {"package", "manager"}


def entry_reads(source: str) -> list[tuple[int, str]]:
    """(line, key) of each `x["package"]` / `x.get("package")` (and "manager") in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)
        ):  # fmt: skip
            key = node.args[0].value
        if key in ENTRY_KEYS:
            found.append((node.lineno, str(key)))
    return sorted(found)


def test_no_other_module_reads_conda_locks_entries() -> None:
    """Every module but condafile.py asks it for typed packages."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line} reads {key!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "condafile.py"
        for line, key in entry_reads(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert entry_reads((PACKAGE / "lock" / "condafile.py").read_text(encoding="utf-8"))


def test_the_guard_sees_the_readers_it_replaced() -> None:
    source = 'data = {}\nfor p in data.get("package") or []:\n    if p["manager"] == "pip": pass\n'
    assert entry_reads(source) == [(2, "package"), (3, "manager")]
