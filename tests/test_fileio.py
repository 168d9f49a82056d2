"""provision/fileio: the one home of sha256 digests, atomic writes and YAML in provision/; and a
guard that no other module grows its own copy again."""

from __future__ import annotations

import ast
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision import fileio

PACKAGE = Path(__file__).resolve().parent.parent / "provision"
# Ship into environments or run as programs of their own: they import nothing of provision's and
# keep their own helpers (as tests/test_layers.py's WALLED).
WALLS = ("payload", "scripts", "hooks", "ansible")

# (file relative to provision/, enclosing function) -> why it computes sha256 itself.
ALLOWED_SHA256: dict[tuple[str, str], str] = {
    ("bundle/make.py", "_Checked.__init__"): (
        "a member's digest computed while its bytes stream into the tar"
    ),
    ("bundlefile/bundle_io.py", "Sink.__init__"): "the tar's and each part's digest, while written",
    ("bundlefile/bundle_io.py", "Sink._open_next"): "the next part's digest, while written",
    ("bundlefile/bundle_io.py", "Reader.__init__"): "each part's digest, checked while read",
    ("bundlefile/bundle_io.py", "Reader._next"): "the next part's digest, checked while read",
    ("bundle/unbundle.py", "_extract"): "a member's digest while it is unpacked to disk",
    ("bundle/bundle_fetch.py", "digests"): (
        "sha256 and md5 in one pass over a download (CUDA runfiles are gigabytes)"
    ),
    ("solver/install.py", "_digests"): "sha256 and md5 of a package in one pass over its bytes",
    ("image/staging.py", "check_bundle"): "each member's digest while the bundle is read through",
    ("image/oci.py", "_Hashing.__init__"): "a layer's diff_id and digest while it is written",
}


def test_sha256_of_known_vectors() -> None:
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert fileio.sha256_bytes(b"") == empty
    assert fileio.sha256_text("") == empty
    assert fileio.sha256_bytes(b"abc") == abc
    assert fileio.sha256_text("abc") == abc
    assert fileio.sha256_text("é") == hashlib.sha256("é".encode()).hexdigest()  # UTF-8


def test_sha256_file_streams_a_multi_mib_file(tmp_path: Path) -> None:
    data = os.urandom(fileio.CHUNK) * 3 + b"tail"  # over three chunks, the last one short
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert fileio.sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert fileio.sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert fileio.sha256_file(tmp_path / "empty") == fileio.sha256_bytes(b"")


def _leftovers(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != name)


def test_write_atomic_writes_text_and_bytes_and_leaves_nothing_beside(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    fileio.write_atomic(target, "one\ntwo\r\nthree é\n")
    assert target.read_bytes() == "one\ntwo\r\nthree é\n".encode()  # newlines untouched, UTF-8
    fileio.write_atomic(target, b"\x00\xffbytes")
    assert target.read_bytes() == b"\x00\xffbytes"
    fileio.write_atomic(str(target), "")
    assert target.read_bytes() == b""
    assert _leftovers(tmp_path, "out.txt") == []


def test_write_atomic_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    old = os.umask(0o027)
    try:
        # The umask is read, never set and set back: another thread's files keep the real one.
        with monkeypatch.context() as m:
            m.setattr(os, "umask", lambda mask: pytest.fail(f"os.umask({mask:#o}) was called"))
            fileio.write_atomic(target, "x")
        assert stat.S_IMODE(target.stat().st_mode) == 0o640  # 0o666 less the umask
    finally:
        os.umask(old)
    fileio.write_atomic(target, "x", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    fileio.write_atomic(target, "x", mode=0o755)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_write_atomic_replaces_a_symlink_not_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(real)
    fileio.write_atomic(link, "new")
    assert not link.is_symlink() and link.read_text() == "new" and real.read_text() == "keep"


def test_write_atomic_that_fails_midway_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        fileio.write_atomic(target, "bad \udcff surrogate")  # fails to encode
    with pytest.raises(TypeError):
        fileio.write_atomic(target, 12)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert _leftovers(tmp_path, "out.txt") == []


def test_write_atomic_removes_its_temporary_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        fileio.write_atomic(target, "new")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path, "out.txt") == []


def test_write_atomic_onto_a_folder_fails_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        fileio.write_atomic(tmp_path / "dir", "x")
    assert _leftovers(tmp_path, "dir") == []


def test_write_atomic_creates_no_parent_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fileio.write_atomic(tmp_path / "missing" / "out.txt", "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_write_atomic_into_a_read_only_folder_keeps_the_old_file(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    target = folder / "out.txt"
    target.write_text("old")
    folder.chmod(0o555)
    try:
        with pytest.raises(PermissionError):
            fileio.write_atomic(target, "new")
        assert target.read_text() == "old"
        assert _leftovers(folder, "out.txt") == []
    finally:
        folder.chmod(0o755)


def test_yaml_round_trips_keeping_key_order(tmp_path: Path) -> None:
    data = {"zeta": 1, "alpha": [3, 1, 2], "mid": {"b": "1.10", "a": None}, "yes": "no"}
    text = fileio.dump_yaml(data)
    assert text.index("zeta") < text.index("alpha") < text.index("mid")  # not sorted
    assert fileio.load_yaml(text) == data
    loaded = fileio.load_yaml(text)
    assert isinstance(loaded, dict) and list(loaded) == ["zeta", "alpha", "mid", "yes"]
    path = tmp_path / "doc.yml"
    path.write_text(text, encoding="utf-8")
    assert fileio.load_yaml(path) == data  # a Path is read, a str is the document


def test_yaml_for_people_indents_lists_and_quotes_what_yaml_would_retype() -> None:
    text = fileio.dump_yaml_for_people({"name": "1.10", "dependencies": ["python", "yes"]})
    assert text == "name: '1.10'\ndependencies:\n  - python\n  - 'yes'\n"
    assert fileio.load_yaml(text) == {"name": "1.10", "dependencies": ["python", "yes"]}


# -- a directory replaced whole ----------------------------------------------------------------


def _tree(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


def test_swap_dir_replaces_a_directory_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "env"
    target.mkdir()
    (target / "a").write_text("old\n")
    with fileio.swap_dir(target, "render") as new:
        assert new.parent == tmp_path and new.name.startswith(".env.render-")
        assert stat.S_IMODE(new.stat().st_mode) == 0o777 & ~fileio.umask()  # not mkdtemp's 0700
        (new / "b").write_text("new\n")
    assert _tree(target) == {"b": "new\n"} and os.listdir(tmp_path) == ["env"]
    with pytest.raises(RuntimeError), fileio.swap_dir(target, "render") as new:
        (new / "c").write_text("half\n")
        raise RuntimeError("failed midway")
    assert _tree(target) == {"b": "new\n"} and os.listdir(tmp_path) == ["env"]
    with pytest.raises(FileExistsError), fileio.swap_dir(target, "export", replace=False) as new:
        (new / "d").write_text("never\n")
    assert _tree(target) == {"b": "new\n"} and os.listdir(tmp_path) == ["env"]


def test_finish_swap_puts_back_the_old_directory_and_touches_only_its_own(tmp_path: Path) -> None:
    """As a kill between the two renames leaves it: the old one aside, the new one half written;
    and beside them what only looks like a leftover (another suffix, a symlink)."""
    (tmp_path / ".env.old-ab12cd34").mkdir()
    (tmp_path / ".env.old-ab12cd34" / "a").write_text("old\n")
    (tmp_path / ".env.render-ab12cd34").mkdir()
    (tmp_path / ".env.render-notes").mkdir()
    (tmp_path / ".env.render-zz99zz99").symlink_to(tmp_path / ".env.render-notes")
    fileio.finish_swap(tmp_path / "env", "render")
    assert _tree(tmp_path / "env") == {"a": "old\n"}
    assert sorted(os.listdir(tmp_path)) == [".env.render-notes", ".env.render-zz99zz99", "env"]
    # The new one got there: what is aside is the old one, and goes.
    (tmp_path / ".env.old-ef56gh78").mkdir()
    fileio.finish_swap(tmp_path / "env", "render")
    assert _tree(tmp_path / "env") == {"a": "old\n"}
    assert sorted(os.listdir(tmp_path)) == [".env.render-notes", ".env.render-zz99zz99", "env"]


# -- the guard ---------------------------------------------------------------------------------


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every node with the qualified name of the function or class it is inside ("" at top)."""
    todo: list[tuple[ast.AST, str]] = [(tree, "")]
    while todo:
        node, where = todo.pop()
        yield node, where
        inner = f"{where}.{node.name}".lstrip(".") if isinstance(node, _SCOPES) else where
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))


def _is_sha256_call(node: ast.AST, bare: bool) -> bool:
    """hashlib.sha256(...), or sha256(...) where the module did `from hashlib import sha256`."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr == "sha256" and isinstance(f.value, ast.Name) and f.value.id == "hashlib"
    return bare and isinstance(f, ast.Name) and f.id == "sha256"


def _modules(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel != "fileio.py" and rel.split("/", 1)[0] not in WALLS:
            yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def copies(root: Path) -> list[str]:
    """Every helper of fileio's written again in `root` (a provision/ tree): a function whose name
    says sha256 or write_atomic, or a hashlib.sha256 call not in ALLOWED_SHA256."""
    found: list[str] = []
    for rel, tree in _modules(root):
        bare = any(
            isinstance(n, ast.ImportFrom)
            and n.module == "hashlib"
            and any(a.name == "sha256" for a in n.names)
            for n in ast.walk(tree)
        )
        for node, where in _walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if "sha256" in node.name.lower() or "write_atomic" in node.name.lower():
                    found.append(f"{rel}:{node.lineno}: defines {node.name}")
            elif _is_sha256_call(node, bare) and (rel, where) not in ALLOWED_SHA256:
                found.append(f"{rel}:{getattr(node, 'lineno', 0)}: hashlib.sha256 in {where}")
    return sorted(found, key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


def test_no_module_writes_its_own_sha256_or_atomic_write() -> None:
    assert copies(PACKAGE) == []


def test_every_allowed_sha256_is_still_there() -> None:
    """An exception that no longer matches anything is removed from the list, not kept."""
    seen = {
        (rel, where)
        for rel, tree in _modules(PACKAGE)
        for node, where in _walk(tree)
        if _is_sha256_call(node, bare=False)
    }
    assert set(ALLOWED_SHA256) - seen == set()


def test_the_guard_catches_a_copy(tmp_path: Path) -> None:
    root = tmp_path / "provision"
    root.mkdir()
    (root / "fileio.py").write_text("import hashlib\ndef sha256_file(p): return hashlib.sha256()\n")
    (root / "a.py").write_text("import hashlib\ndef digest(b):\n    return hashlib.sha256(b)\n")
    (root / "b.py").write_text("def write_atomic(p, t):\n    pass\n")
    (root / "c.py").write_text("from hashlib import sha256\nx = sha256(b'')\n")
    (root / "payload").mkdir()
    (root / "payload" / "d.py").write_text("def _sha256(b): pass\n")  # a wall keeps its own
    found = "\n".join(copies(root))
    assert "a.py:3: hashlib.sha256 in digest" in found
    assert "b.py:1: defines write_atomic" in found
    assert "c.py:2: hashlib.sha256 in " in found
    assert "fileio.py" not in found and "payload" not in found


# (file relative to provision/, enclosing function) -> why it renames a file into place itself
# rather than through write_atomic (which holds the bytes) or swap_dir (a directory).
ALLOWED_REPLACE: dict[tuple[str, str], str] = {
    ("bundle/bundle_fetch.py", "store"): "a download moved into the cache: on disk already",
    ("bundlefile/bundle_io.py", "Sink.commit"): "a bundle's parts, streamed as made (gigabytes)",
    ("cli/bench_report.py", "write_png"): "matplotlib writes the plot to a path of its own",
    ("image/assemble.py", "build_image"): "the image archive, streamed as made (gigabytes)",
    ("image/oci.py", "write_layer"): "a layer, gzipped as it is streamed",
    ("image/oci.py", "_copy"): "a layer into the cache by hard link",
    ("install/build.py", "_build"): "the prefix, swapped under install's markers and lock",
    ("install/place.py", "finish_leftovers"): "a prefix swap a kill left, put back",
    ("solver/install.py", "_fetch.one"): "a package downloaded as it arrives",
}


def renames(root: Path) -> list[str]:
    """Every file or directory renamed into place outside fileio and not in ALLOWED_REPLACE:
    os.replace, os.rename, or a Path's replace/rename (one argument: str.replace takes two), and
    every os.umask (fileio.umask reads it without setting it and back)."""
    found: list[str] = []
    for rel, tree in _modules(root):
        for node, where in _walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            f = node.func
            on_os = isinstance(f.value, ast.Name) and f.value.id == "os"
            path_call = not on_os and len(node.args) == 1 and not node.keywords
            moves = f.attr in ("replace", "rename") and (on_os or path_call)
            if (moves and (rel, where) not in ALLOWED_REPLACE) or (on_os and f.attr == "umask"):
                found.append(f"{rel}:{node.lineno}: {f.attr} in {where}")
    return sorted(found, key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


def test_every_replace_goes_through_write_atomic_or_swap_dir() -> None:
    assert renames(PACKAGE) == []


def test_the_replace_guard_catches_a_rename_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "import os\n"
        "def save(tmp, path):\n    os.replace(tmp, path)\n"
        "def swap(new, target):\n    new.rename(target)\n"
        "def mask():\n    return os.umask(0)\n"
        "def fine(text):\n    return text.replace('a', 'b')\n"
    )
    assert renames(tmp_path) == [
        "mine.py:3: replace in save",
        "mine.py:5: rename in swap",
        "mine.py:7: umask in mask",
    ]
