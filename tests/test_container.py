"""Dockerfile.test and tests/container/build.sh: the test suite in a clean container.

The fast tests read the Dockerfile and run the build script's --dry-run; the slow one really
builds the image with podman (debootstrapped Debian base, tests as build steps) and needs root,
podman and debootstrap.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile.test"
BUILD_SH = ROOT / "tests" / "container" / "build.sh"

# The README's two set-up commands; README.md wins once it shows them in a fenced block.
QUICKSTART_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install . && "
    ".venv/bin/provision create --tf 2.13 --path pip"
)
TEST_COMMAND = ".venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"

# What the in-repo build runs inside, within CI's time budget (the plain build runs it all):
# the README's quick start, then the tests that need neither the package index nor minutes.
CONTAINER_PYTEST_ARGS = '-m "not slow"'
SUMMARY = re.compile(r"^=+ (?P<counts>.*\b\d+ passed\b.*) in [\d.]+s(?: \([^)]*\))? =+$", re.M)


def readme_command(must_contain: tuple[str, ...], fallback: str) -> str:
    """The first line inside a fenced block of README.md that contains all of must_contain."""
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
        for line in block.splitlines():
            if all(part in line for part in must_contain):
                return line.strip().removeprefix("$ ")
    return fallback


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        result.append((keyword.upper(), " ".join(args.split())))
    assert not pending, "Dockerfile ends inside a continued line"
    return result


def squash(command: str) -> str:
    return " ".join(command.split())


def test_dockerfile_base_is_a_build_argument() -> None:
    steps = instructions(DOCKERFILE)
    assert steps[0][0] == "ARG" and re.fullmatch(r"BASE=\S+", steps[0][1]), steps[0]
    froms = [args for keyword, args in steps if keyword == "FROM"]
    assert froms == ["${BASE}"]


def test_dockerfile_declares_its_build_arguments_after_from() -> None:
    steps = instructions(DOCKERFILE)
    after_from = steps[[k for k, _ in steps].index("FROM") + 1 :]
    declared = {args.split("=")[0] for keyword, args in after_from if keyword == "ARG"}
    assert {"PIP_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PYTEST_ARGS"} <= declared
    envs = " ".join(args for keyword, args in after_from if keyword == "ENV")
    assert "PIP_CERT=${PIP_CERT}" in envs


def test_dockerfile_runs_the_readme_commands_in_order() -> None:
    runs = [args for keyword, args in instructions(DOCKERFILE) if keyword == "RUN"]
    quickstart = squash(readme_command(("pip install", "provision create"), QUICKSTART_COMMAND))
    tests = squash(readme_command(("pip install", "pytest"), TEST_COMMAND))
    with_quickstart = [i for i, run in enumerate(runs) if quickstart in run]
    with_tests = [i for i, run in enumerate(runs) if tests in run]
    assert with_quickstart, f"no RUN step runs the README's quick start: {quickstart}"
    assert with_tests == [len(runs) - 1], f"the last RUN step must run the README's tests: {tests}"
    assert with_quickstart[0] < with_tests[0]


def test_context_leaves_out_local_environments_and_caches() -> None:
    patterns = (ROOT / ".dockerignore").read_text(encoding="utf-8").split("\n")
    patterns = [p.strip() for p in patterns if p.strip() and not p.startswith("#")]
    assert ".*" in patterns and "**/.venv" in patterns and "**/__pycache__" in patterns
    # Dot-files the build needs stay in: the ignore file itself (read by the tests above).
    assert "!.dockerignore" in patterns


def shellcheck() -> str | None:
    beside_python = Path(sys.executable).parent / "shellcheck"
    return str(beside_python) if beside_python.exists() else shutil.which("shellcheck")


def test_build_script_is_shellcheck_clean() -> None:
    tool = shellcheck()
    if tool is None:
        pytest.skip("shellcheck is not installed (pip install -e '.[test]' brings it)")
    done = subprocess.run([tool, str(BUILD_SH)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def dry_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # No PATH entry for podman: the dry run must show the base being made from nothing.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", "dirname", "sed", "tr", "head"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    full_env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PYTHON": sys.executable, **env}
    return subprocess.run(
        ["bash", str(BUILD_SH), "--dry-run"],
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_dry_run_passes_http_indexes_and_the_ca_bundle_only(tmp_path: Path) -> None:
    bundle = tmp_path / "corporate-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n", encoding="ascii")
    done = dry_run(
        tmp_path,
        PIP_CERT=str(bundle),
        PIP_INDEX_URL="file:///srv/wheels/simple",
        PIP_EXTRA_INDEX_URL="file:///opt/simple https://mirror.invalid/simple",
        DEBIAN_MIRROR="http://debian.invalid/debian",
        PYTEST_ARGS=CONTAINER_PYTEST_ARGS,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    debootstrap = next(line for line in lines if line.startswith("+ debootstrap "))
    assert "--variant=minbase" in debootstrap
    assert debootstrap.endswith("bookworm ROOTFS http://debian.invalid/debian")
    build = next(line for line in lines if line.startswith("+ podman build "))
    assert "--isolation chroot" in build
    assert f"--volume {bundle}:/etc/extra-ca.pem:ro --build-arg PIP_CERT=/etc/extra-ca.pem" in build
    assert "--build-arg PIP_EXTRA_INDEX_URL=https://mirror.invalid/simple " in build
    assert "PIP_INDEX_URL" not in build.replace("PIP_EXTRA_INDEX_URL", "")
    assert "file://" not in done.stdout
    assert build.endswith(f"-f {DOCKERFILE} -t localhost/provision-test {ROOT}")


def test_dry_run_takes_indexes_and_bundle_from_pip_configuration(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n", encoding="ascii")
    config = tmp_path / "pip.conf"
    config.write_text(
        f"[global]\nindex-url = https://global.invalid/simple\ncert = {bundle}\n"
        "extra-index-url = file:///opt/simple\n"
        "[install]\nindex-url = https://install.invalid/simple\n",
        encoding="utf-8",
    )
    done = dry_run(tmp_path, PIP_CONFIG_FILE=str(config), DEBIAN_MIRROR="http://x")
    assert done.returncode == 0, done.stderr
    build = next(line for line in done.stdout.splitlines() if line.startswith("+ podman build "))
    assert "--build-arg PIP_INDEX_URL=https://install.invalid/simple " in build
    assert f"--volume {bundle}:/etc/extra-ca.pem:ro" in build
    assert "PIP_EXTRA_INDEX_URL" not in build


def test_dry_run_refuses_an_unreadable_ca_bundle(tmp_path: Path) -> None:
    done = dry_run(tmp_path, PIP_CERT=str(tmp_path / "missing.pem"), DEBIAN_MIRROR="http://x")
    assert done.returncode == 1
    assert "missing.pem is not readable" in done.stderr
    assert "podman build" not in done.stdout


def why_no_container_build() -> str | None:
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root (debootstrap, podman build --isolation chroot)"
    for tool in ("podman", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install podman debootstrap)"
    return None


@pytest.mark.slow
@pytest.mark.container
def test_image_builds_and_the_suite_passes_inside() -> None:
    reason = why_no_container_build()
    if reason:
        pytest.skip(reason)
    tag = "localhost/provision-test:pytest"
    env = {**os.environ, "PYTEST_ARGS": CONTAINER_PYTEST_ARGS, "TAG": tag}
    try:
        done = subprocess.run(
            ["bash", str(BUILD_SH)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=3600,
        )
    finally:
        # The image holds the quick start's TensorFlow (gigabytes); the base stays as a cache.
        subprocess.run(["podman", "rmi", "--ignore", tag], capture_output=True, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, _inner_failures(output) + output[-3000:]
    summary = SUMMARY.search(output)
    assert summary, output[-6000:]
    assert "failed" not in summary["counts"] and "error" not in summary["counts"]


def _inner_failures(output: str) -> str:
    """The suite's own FAILURES section inside the build's output (the quick start's download
    lines come after it and would push it out of a plain tail)."""
    start = output.find("= FAILURES =")
    end = output.find("short test summary info", start)
    return output[start : start + 6000 if end < 0 else min(end, start + 6000)] if start >= 0 else ""
