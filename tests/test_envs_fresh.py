"""The committed envs/ is exactly what `provision render --all` produces from today's matrix and
templates. When this fails, regenerate with `provision render --all` and commit the result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_committed_envs_are_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "provision", "render", "--all", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    problems = [ln for ln in proc.stdout.splitlines() if not ln.startswith(("fresh ", "skipped "))]
    assert proc.returncode == 0 and proc.stderr == "", (
        "envs/ is not what `provision render --all` renders now; run it and commit envs/:\n"
        + "\n".join([*problems[:40], proc.stderr])
    )
    fresh = [ln for ln in proc.stdout.splitlines() if ln.startswith("fresh envs/")]
    assert fresh, "envs/ holds no environment at all"
