"""The tests' shared helpers stay shared: the CLI is run through tests/clitools.py, local HTTP
servers start through tests/httpserve.py, and `wheelhouse` is tests/conftest.py's fixture. A
module that grows its own copy again fails here (an AST scan of tests/**/*.py); the last two
tests check that the shared helpers themselves work."""

from __future__ import annotations

import ast
import itertools
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import clitools
import httpserve

TESTS = Path(__file__).resolve().parent
SUBPROCESS = frozenset({"run", "Popen", "call", "check_call", "check_output"})
SERVERS = frozenset({"HTTPServer", "ThreadingHTTPServer"})


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        yield rel, ast.parse(path.read_text(), filename=rel)


def _names_provision(node: ast.AST) -> bool:
    """node spells out a provision command: `"-m", "provision"` next to each other in a list or
    tuple, or a path ending `/ "provision"` (the venv's console script)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.List | ast.Tuple):
            items = [e.value if isinstance(e, ast.Constant) else None for e in sub.elts]
            if any(a == "-m" and b == "provision" for a, b in itertools.pairwise(items)):
                return True
        if (
            isinstance(sub, ast.BinOp)
            and isinstance(sub.op, ast.Div)
            and isinstance(sub.right, ast.Constant)
            and sub.right.value == "provision"
        ):
            return True
    return False


def _is_subprocess_call(node: ast.AST, runners: set[str]) -> bool:
    """subprocess.run(...) and its kin, or a call of one of the module's own `runners`."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in runners
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "subprocess"
        and func.attr in SUBPROCESS
    )


def _runs_a_process(node: ast.AST, runners: set[str]) -> bool:
    return any(_is_subprocess_call(sub, runners) for sub in ast.walk(node))


def _hands_back_a_process(fn: ast.FunctionDef, runners: set[str]) -> bool:
    """A helper, not a test or a script's main: it returns the process (annotated so, or
    `return subprocess.run(...)`)."""
    returns = ast.unparse(fn.returns) if fn.returns is not None else ""
    if "CompletedProcess" in returns or "Popen" in returns:
        return True
    return any(
        isinstance(sub, ast.Return)
        and sub.value is not None
        and _is_subprocess_call(sub.value, runners)
        for sub in ast.walk(fn)
    )


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id in names for sub in ast.walk(node))


def cli_helpers(tree: ast.Module) -> list[str]:
    """Module-level functions, tests apart, that start a process running provision and hand it
    back: the command spelled out in them, or in a module-level name (PROVISION = [...],
    def provision_argv()); processes started through the module's own runners count (a
    `def offline(argv)` that runs argv under `unshare -n`)."""
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    runners = {fn.name for fn in functions if _runs_a_process(fn, set())}
    commands = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _names_provision(node.value):
                commands |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.FunctionDef) and _names_provision(node):
            commands.add(node.name)
    return [
        f"{fn.name} (line {fn.lineno})"
        for fn in functions
        if not fn.name.startswith("test_")
        and _runs_a_process(fn, runners - {fn.name})
        and _hands_back_a_process(fn, runners - {fn.name})
        and (_names_provision(fn) or _mentions(fn, commands - {fn.name}))
    ]


def servers(tree: ast.Module) -> list[str]:
    """http.server's servers constructed anywhere in the module, or a subclass of one of them
    defined there (class _RangeServer(http.server.ThreadingHTTPServer)) and constructed."""
    kinds = set(SERVERS)
    for sub in ast.walk(tree):
        if isinstance(sub, ast.ClassDef) and any(
            (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")) in SERVERS
            for b in sub.bases
        ):
            kinds.add(sub.name)
    found = []
    for sub in ast.walk(tree):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in kinds:
                found.append(f"{name}( (line {sub.lineno})")
    return found


def wheelhouses(tree: ast.Module) -> list[str]:
    return [
        f"def wheelhouse (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "wheelhouse"
    ]


def copies(scan: Callable[[ast.Module], list[str]], home: str) -> dict[str, list[str]]:
    """What `scan` finds in each test module but the shared helper's own (`home`) and this one."""
    return {
        rel: hits
        for rel, tree in modules()
        if rel not in (home, "test_test_helpers.py")
        for hits in [scan(tree)]
        if hits
    }


def test_the_cli_is_run_through_clitools_only() -> None:
    found = copies(cli_helpers, "clitools.py")
    assert not found, f"run provision with clitools.provision (tests/clitools.py): {found}"


def test_local_http_servers_start_through_httpserve_only() -> None:
    found = copies(servers, "httpserve.py")
    assert not found, f"serve with httpserve.Server (tests/httpserve.py): {found}"


def test_wheelhouse_is_conftest_s_fixture_only() -> None:
    found = copies(wheelhouses, "conftest.py")
    assert not found, f"use the `wheelhouse` fixture of tests/conftest.py: {found}"


def test_the_scan_sees_a_copy() -> None:
    """The scan itself: each kind of copy it exists to catch is caught."""
    copy = ast.parse(
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "PROVISION = [sys.executable, '-m', 'provision']\n"
        "def provision(*a):\n"
        "    return subprocess.run([*PROVISION, *a])\n"
        "def offline(argv):\n"
        "    return subprocess.run(['unshare', '-n', *argv])\n"
        "def lock(*a):\n"
        "    return offline([str(Path(sys.executable).parent / 'provision'), *a])\n"
        "def main() -> None:\n"
        "    subprocess.run([*PROVISION, 'list'], check=True)\n"
        "def test_it():\n"
        "    subprocess.run([*PROVISION, 'list'])\n"
        "import http.server\n"
        "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), None)\n"
        "class Mine(http.server.HTTPServer): pass\n"
        "t = Mine(('127.0.0.1', 0), None)\n"
        "def wheelhouse(): pass\n"
    )
    assert [h.split()[0] for h in cli_helpers(copy)] == ["provision", "lock"]
    assert len(servers(copy)) == 2 and len(wheelhouses(copy)) == 1


def test_httpserve_serves_a_folder_then_closes_its_socket(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello")
    with httpserve.Server(tmp_path) as served:
        assert served.url == f"http://127.0.0.1:{served.port}"
        with urllib.request.urlopen(f"{served.url}/hello.txt", timeout=30) as answer:
            assert answer.read() == b"hello"
    assert served.httpd.socket.fileno() == -1
    served.stop()  # again: nothing


def test_clitools_runs_the_cli_in_a_process_and_in_this_one() -> None:
    done = clitools.provision("--help", env={"COLUMNS": "200"}, timeout=120)
    assert done.returncode == 0 and "Usage:" in done.stdout, done.stderr
    code, out = clitools.run_cli("--help", quiet=False)
    assert code == 0 and "Usage:" in out
