"""tests/tools/durations.py: a real pytest run's JUnit XML, as tables per marker and per file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "tools" / "durations.py"


def _pytest(args: list[str], cwd: Path, tmp_path: Path) -> None:
    # Its own basetemp and no cache folder: a second session must not touch this one's folders.
    # Not this session's PYTEST_ADDOPTS: test paths there would run this file again, and again.
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += [f"--basetemp={tmp_path / 'inner'}", *args]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _durations(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_run_of_this_suite_is_summed_per_marker_and_per_file(tmp_path: Path) -> None:
    xml = tmp_path / "run.xml"
    face = "tests/test_layers.py::test_the_face_imports_nothing_of_provision"
    _pytest(["tests/test_gpu.py", face, f"--junitxml={xml}"], ROOT, tmp_path)
    (run,) = json.loads(_durations(str(xml), "--json", "--slowest", "2"))
    gpu_tests = run["file"]["tests/test_gpu.py"]["tests"]
    assert gpu_tests >= 1 and run["marker"]["gpu"]["tests"] == gpu_tests
    assert run["file"]["tests/test_layers.py"]["tests"] == 1
    assert run["marker"]["unmarked"]["tests"] == 1
    assert run["all"]["tests"] == gpu_tests + 1 and run["all"]["failed"] == 0
    assert len(run["slowest"]) == 2

    table = _durations(str(xml))
    assert "per marker" in table and "per file" in table
    assert any(line.split()[:2] == ["tests/test_layers.py", "1"] for line in table.splitlines())


def test_another_projects_run_gives_files_outcomes_and_a_comparison(tmp_path: Path) -> None:
    """Without this suite's properties: files from class names, markers not recorded."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mini.py").write_text(
        "import pytest\n\n\nclass TestGroup:\n    def test_ok(self):\n        pass\n\n"
        "    def test_fails(self):\n        assert False\n\n\n"
        "def test_skip():\n    pytest.skip('why')\n"
    )
    xml = tmp_path / "mini.xml"
    _pytest([f"--junitxml={xml}"], project, tmp_path)
    (run,) = json.loads(_durations(str(xml), "--json", "--slowest", "3"))
    assert run["file"]["test_mini.py"] == run["all"]
    assert (run["all"]["tests"], run["all"]["failed"], run["all"]["skipped"]) == (3, 1, 1)
    assert run["marker"]["not recorded"]["tests"] == 3
    names = {case["name"]: case["outcome"] for case in run["slowest"]}
    assert names == {
        "test_mini.py::TestGroup::test_ok": "passed",
        "test_mini.py::TestGroup::test_fails": "failed",
        "test_mini.py::test_skip": "skipped",
    }
    assert _durations(str(xml), "--counts") == "1 passed, 1 failed, 1 skipped\n"
    both = _durations(str(xml), str(xml))
    assert "s before" in both and "change" in both
