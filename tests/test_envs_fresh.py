"""The committed envs/ is exactly what `provision render --all` produces from today's matrix and
templates. When this fails, regenerate with `provision render --all` and commit the result."""

from __future__ import annotations

import shutil
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


def _lines(paths: list[Path]) -> int:
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)


def test_envs_commits_inputs_hooks_manifest_and_locks_only() -> None:
    """What runs inside environments ships once, from the package: no generated copies in envs/,
    and the generated lines committed outside locks stay within 10 % of the product's own."""
    from provision import environment
    from provision.fleet import playbook as fleet
    from provision.matrix import kinds

    locks = {k.lock_file for k in kinds.KINDS.values()}
    allowed = {environment.MANIFEST, environment.RUNTIME, *locks}
    allowed.update(fleet.GENERATED)  # provision fleet's vars and playbook (test_fleet_role.py)
    for kind in kinds.KINDS.values():
        allowed.update(kind.input_files)
    if shutil.which("git") is None:  # a container or an sdist: nothing committed to judge
        return
    listed = subprocess.run(
        ["git", "ls-files", "envs"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    committed = listed.stdout.split() if listed.returncode == 0 else []
    if not committed:  # not a git checkout (an sdist, Dockerfile.test's copy): nothing to judge
        return
    unexpected = sorted(p for p in committed if p.split("/", 2)[2] not in allowed)
    assert not unexpected, f"envs/ commits more than inputs, hooks, manifest, locks: {unexpected}"
    generated = [ROOT / p for p in committed if Path(p).name not in locks]
    product = [
        p
        for p in (ROOT / "provision").rglob("*")
        if p.suffix in (".py", ".sh") and "__pycache__" not in p.parts
    ]
    share = _lines(generated) / _lines(product)
    assert share <= 0.10, f"envs/ commits {share:.1%} of the product's lines outside locks"
