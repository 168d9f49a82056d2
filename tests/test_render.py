"""provision render: the files are right (not only well formed), deterministic, and written safely.

Golden files: tests/golden/<case>/ hold the rendered files of a few representative environments,
rendered from the frozen matrix tests/golden/matrix.toml (smoke_test.py and provision.json are left
out: the smoke test's body has its own owner). After an intended template change, regenerate them
with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_render.py -k golden

and review the diff.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from packaging.requirements import Requirement
from rattler import MatchSpec, Version, VersionSpec

from provision import matrix as matrix_module
from provision import render as render_module
from provision.cli import cli
from provision.errors import ProvisionError
from provision.matrix import Matrix
from provision.spec import EnvSpec, GpuPolicy, all_specs, expected, resolve

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
FIXTURE = matrix_module.load(GOLDEN / "matrix.toml")
try:
    REAL: Matrix | None = matrix_module.load()
    REAL_ERROR = ""
except ProvisionError as exc:  # reported by test_real_matrix_loads, not as a collection error
    REAL, REAL_ERROR = None, str(exc)
SHELLCHECK = Path(sys.executable).parent / "shellcheck"

# (case name, tf, path, python, gpu memory, gpus): the cases with golden files.
GOLDEN_CASES = [
    (
        "tf2.11-conda",
        "2.11",
        "conda",
        None,
        None,
        None,
    ),  # CUDA 11, cuDNN from conda-forge, no ptxas
    ("tf2.13-conda", "2.13", "conda", None, None, None),  # CUDA 11, cuDNN + nvcc from pip wheels
    ("tf2.16-conda", "2.16", "conda", None, None, None),  # CUDA 12 split packages
    ("tf2.13-pip", "2.13", "pip", None, "growth", None),  # explicit cu11 wheels, memory growth
    ("tf2.16-pip-py3.10", "2.16", "pip", "3.10", "4096", "0,1"),  # and-cuda, limit, devices
]
GOLDEN_SKIP = ("smoke_test.py", render_module.META)


def _specs() -> list[tuple[str, Matrix, EnvSpec]]:
    cases = [("fixture", FIXTURE, s) for s in all_specs(FIXTURE)]
    if REAL is not None:
        cases += [("real", REAL, s) for s in all_specs(REAL)]
    return cases


def test_real_matrix_loads() -> None:
    assert REAL_ERROR == ""


SPECS = _specs()
SPEC_IDS = [f"{origin}-{spec.name}" for origin, _, spec in SPECS]


@pytest.fixture(params=SPECS, ids=SPEC_IDS)
def rendered(request: pytest.FixtureRequest) -> tuple[Matrix, EnvSpec, dict[str, str]]:
    _, m, spec = request.param
    return m, spec, render_module.render(spec, m)


@pytest.fixture
def fixture_matrix(monkeypatch: pytest.MonkeyPatch) -> Matrix:
    """Make the CLI see the frozen fixture matrix (release 2.11 has no pip wheels, for refusals)."""
    monkeypatch.setattr(matrix_module, "load", lambda *a, **k: FIXTURE)
    return FIXTURE


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


# `provision` in a process of its own, reading the fixture matrix instead of the package's data.
WITH_FIXTURE = [
    sys.executable,
    "-c",
    "import sys; from pathlib import Path; import provision.matrix as m; "
    "fixed = m.load(Path(sys.argv.pop(1))); m.load = lambda *a, **k: fixed; "
    "from provision.cli import main; main()",
    str(GOLDEN / "matrix.toml"),
]


def provision(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", *args],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --- the content is right ---


def _conda_forge_ok(m: Matrix, spec: EnvSpec, dep: str) -> str | None:
    """Why `dep` asks for something conda-forge does not ship for this spec (None when it does)."""
    ms = MatchSpec(dep)
    name = ms.name.normalized
    version = VersionSpec(ms.version) if ms.version else None
    forge = m.conda_forge

    def ships(versions: list[str]) -> bool:
        return version is not None and any(version.matches(Version(v)) for v in versions)

    if name == "python":
        return None if ships([spec.python]) else f"{dep}: not Python {spec.python}"
    if name == "pip":
        return None
    if name == "cudatoolkit":
        if spec.cuda.major != 11:
            return f"{dep}: conda-forge has no cudatoolkit for CUDA {spec.cuda.major}"
        return None if ships(list(forge.cudatoolkit)) else f"{dep}: not in {forge.cudatoolkit}"
    if name == "cuda-version":
        if spec.cuda.major < 12:
            return f"{dep}: cuda-version is the CUDA 12 way"
        return None if ships(list(forge.cuda_version)) else f"{dep}: not in {forge.cuda_version}"
    if name == "cudnn":
        builds = [c.version for c in forge.cudnn if c.cuda_major == spec.cuda.major]
        if version is None or any(version.matches(Version(f"8.{n}.0")) for n in (5, 6, 7)):
            return f"{dep}: conda-forge has no cudnn 8.5-8.7"
        return None if ships(builds) else f"{dep}: no conda-forge build for CUDA {spec.cuda.major}"
    if name in forge.cuda12_packages:
        if spec.cuda.major < 12:
            return f"{dep}: split CUDA packages exist from CUDA 12"
        return None if version is None else f"{dep}: cuda-version pins the line, not each package"
    return f"{dep}: not a package the matrix says conda-forge ships"


def test_conda_specs_ask_for_what_conda_forge_ships(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, files = rendered
    if spec.path != "conda":
        assert "environment.yml" not in files
        return
    env = yaml.safe_load(files["environment.yml"])
    assert env["name"] == spec.name
    assert env["channels"] == ["conda-forge", "nodefaults"]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert conda == list(spec.conda_dependencies)
    assert pip == [list(spec.pip_requirements)]
    problems = [why for dep in conda if (why := _conda_forge_ok(m, spec, dep))]
    assert problems == []
    names = {MatchSpec(d).name.normalized for d in conda}
    if spec.cuda.major == 11:
        assert "cudatoolkit" in names and "cuda-version" not in names
    else:
        assert {"cuda-version", "cuda-nvcc", "cuda-cudart"} <= names and "cudatoolkit" not in names
    # cuDNN comes from exactly one place.
    from_pip = [r for r in spec.pip_requirements if Requirement(r).name.startswith("nvidia-cudnn")]
    assert ("cudnn" in names) != bool(from_pip)
    for req in pip[0]:
        Requirement(req)


def test_virtual_packages_pin_the_rows_cuda_and_glibc(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    _, spec, files = rendered
    if spec.path != "conda":
        assert "virtual-packages.yml" not in files
        return
    data = yaml.safe_load(files["virtual-packages.yml"])
    assert list(data) == ["subdirs"]
    packages = data["subdirs"]["linux-64"]["packages"]
    assert packages["__cuda"] == spec.cuda.version
    assert packages["__glibc"] == spec.release.glibc_min
    assert {"__unix", "__linux"} <= set(packages)
    assert all(isinstance(v, str) for v in packages.values())


def test_requirements_in_are_the_specs_pip_inputs(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    _, spec, files = rendered
    if spec.path == "conda":
        assert "requirements.in" not in files
        return
    lines = [
        ln for ln in files["requirements.in"].splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert lines == list(spec.pip_requirements)
    pins = {Requirement(r).name: r for r in lines}
    assert f"=={spec.release.pin}" in pins["tensorflow"]


def test_pip_path_brings_the_cuda_libraries(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    """A venv has no CUDA but what pip installs: the runtime libraries must be among the inputs."""
    _, spec, _ = rendered
    if spec.path != "pip":
        return
    reqs = [Requirement(r) for r in spec.pip_requirements]
    if any("and-cuda" in r.extras for r in reqs):
        return
    names = {r.name for r in reqs}
    suffix = spec.cuda.pip_suffix
    needed = {
        f"nvidia-{lib}-{suffix}"
        for lib in ("cuda-runtime", "cublas", "cudnn", "cufft", "curand", "cusolver", "cusparse")
    }
    assert needed - names == set(), f"{spec.name} installs no CUDA for TensorFlow to load"


def test_shell_files_pass_bash_n_and_shellcheck(tmp_path: Path) -> None:
    """Every rendered shell file of every environment; shellcheck once per distinct shape.

    Renders of one template that differ only in digits (versions, checksums) lint the same, and
    shellcheck takes seconds per install script, so one file per shape is linted.
    """
    shapes: dict[str, Path] = {}
    scripts: list[Path] = []
    for _, m, spec in SPECS:
        files = render_module.render(spec, m)
        names = [rel for rel in files if rel.endswith(".sh")]
        if spec.path != "system":  # the system path's files have their own owner and tests
            assert {"hooks/activate.sh", "hooks/deactivate.sh"} <= set(names), spec.name
        for rel in names:
            path = tmp_path / f"{m is FIXTURE}-{spec.name}" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[rel])
            scripts.append(path)
            shape = re.sub(r"[0-9]+", "0", re.sub(r"\b[0-9a-f]{32,}\b", "H", files[rel]))
            shapes.setdefault(shape, path)
    for path in scripts:
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert syntax.returncode == 0, f"{path}: {syntax.stderr}"

    def lint(path: Path) -> str:
        proc = subprocess.run([str(SHELLCHECK), str(path)], capture_output=True, text=True)
        return "" if proc.returncode == 0 else proc.stdout + proc.stderr

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        findings = [f for f in pool.map(lint, shapes.values()) if f]
    assert findings == []
    assert len(shapes) >= 3


def test_every_file_has_the_header_and_nothing_of_this_machine(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    _, spec, files = rendered
    regen = render_module.regen_command(spec)
    for rel, text in files.items():
        if rel == render_module.META:
            assert json.loads(text)["regen"] == regen
            continue
        lines = text.splitlines()
        if lines[0].startswith("#!"):
            lines = lines[1:]
        assert "Generated by provision" in lines[0], rel
        assert lines[1].endswith(f"regenerate with: {regen}") or regen + " " in lines[1], rel
        for local in (str(ROOT), str(Path.home()) + "/", sys.prefix):
            assert local not in text, f"{rel} mentions {local}"
        # The smoke test's body is copied verbatim (its own owner, its own example log lines).
        ours = text.replace(render_module._smoke_source(), "")
        assert not re.search(r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d", ours), f"{rel} has a timestamp"


def test_smoke_test_bakes_in_the_expected_versions(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    _, spec, files = rendered
    text = files["smoke_test.py"]
    tree_ = ast.parse(text)
    first = next(n for n in tree_.body if isinstance(n, ast.Assign))
    assert isinstance(first.targets[0], ast.Name) and first.targets[0].id == "EXPECTED"
    assert ast.literal_eval(first.value) == expected(spec)
    body = (ROOT / "provision" / "smoke_test.py").read_text()
    assert text.endswith(body)
    assert text.startswith("#!/usr/bin/env python3\n")


def test_provision_json_records_the_request_and_every_hash(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, files = rendered
    meta = json.loads(files[render_module.META])
    assert meta["request"] == {
        "tf": spec.release.tf,
        "path": spec.path,
        "python": spec.python,
        "name": spec.name,
        "gpu_memory": spec.gpu.memory,
        "gpus": spec.gpu.devices,
    }
    others = {rel: text for rel, text in files.items() if rel != render_module.META}
    assert meta["files"] == {
        rel: hashlib.sha256(text.encode()).hexdigest() for rel, text in others.items()
    }
    # The recorded request renders the same directory again.
    req = meta["request"]
    again = resolve(
        m,
        req["tf"],
        req["path"],
        req["python"],
        req["name"],
        GpuPolicy(req["gpu_memory"], req["gpus"]),
    )
    assert again == spec


def test_rendering_is_deterministic(rendered: tuple[Matrix, EnvSpec, dict[str, str]]) -> None:
    m, spec, files = rendered
    assert render_module.render(spec, m) == files


# --- golden files ---


def _golden_spec(
    tf: str, path: str, python: str | None, memory: str | None, gpus: str | None
) -> EnvSpec:
    return resolve(FIXTURE, tf, path, python, None, GpuPolicy(memory, gpus))


@pytest.mark.parametrize(("case", "tf", "path", "python", "memory", "gpus"), GOLDEN_CASES)
def test_golden(
    case: str, tf: str, path: str, python: str | None, memory: str | None, gpus: str | None
) -> None:
    spec = _golden_spec(tf, path, python, memory, gpus)
    assert spec.name == case
    files = {
        rel: text
        for rel, text in render_module.render(spec, FIXTURE).items()
        if rel not in GOLDEN_SKIP
    }
    folder = GOLDEN / case
    if os.environ.get("UPDATE_GOLDEN"):
        shutil.rmtree(folder, ignore_errors=True)
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    assert folder.is_dir(), f"no golden files for {case}; run UPDATE_GOLDEN=1 pytest {__file__}"
    on_disk = {rel: data.decode() for rel, data in tree(folder).items()}
    assert sorted(on_disk) == sorted(files)
    for rel, text in files.items():
        assert text == on_disk[rel], f"{case}/{rel} differs; if intended: UPDATE_GOLDEN=1"


def test_golden_cases_cover_both_cuda_families_and_the_gpu_policy() -> None:
    specs = [_golden_spec(*case[1:]) for case in GOLDEN_CASES]
    assert {render_module.family(s) for s in specs} >= {"conda-cuda11", "conda-cuda12", "pip"}
    files = render_module.render(specs[-1], FIXTURE)["hooks/activate.sh"]
    assert "CUDA_VISIBLE_DEVICES=0,1\nexport CUDA_VISIBLE_DEVICES" in files
    assert "PROVISION_GPU_MEMORY_LIMIT_MIB=4096" in files


# --- the hooks work ---

REPORT_VARS = ("LD_LIBRARY_PATH", "XLA_FLAGS", "CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH")


def _shells() -> list[str]:
    return [sh for sh in ("bash", "dash", "zsh") if shutil.which(sh)]


def _run_hooks(
    shell: str, hooks: Path, prefix_var: str, prefix: Path, before: dict[str, str | None]
) -> list[dict[str, str | None]]:
    """Source activate twice and deactivate once in `shell`; the variables after each step."""
    report = "; ".join(
        f'if [ -n "${{{v}+x}}" ]; then printf "%s=set:%s\\n" {v} "${v}"; '
        f'else printf "%s=unset\\n" {v}; fi'
        for v in REPORT_VARS
    )
    setup = []
    for var in REPORT_VARS:
        value = before.get(var)
        setup.append(f"unset {var}" if value is None else f"export {var}='{value}'")
    script = "\n".join(
        [
            "set -u",
            *setup,
            f"export {prefix_var}='{prefix}'",
            report,
            "echo --",
            f". '{hooks}/activate.sh'",
            report,
            "echo --",
            f". '{hooks}/activate.sh'",
            report,
            "echo --",
            f". '{hooks}/deactivate.sh'",
            report,
        ]
    )
    proc = subprocess.run([shell, "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    states = []
    for block in proc.stdout.split("--\n"):
        state: dict[str, str | None] = {}
        for line in block.splitlines():
            var, _, value = line.partition("=")
            state[var] = value[4:] if value.startswith("set:") else None
        states.append(state)
    return states


@pytest.mark.parametrize("shell", _shells())
@pytest.mark.parametrize(
    "before",
    [
        {},
        {"LD_LIBRARY_PATH": "", "XLA_FLAGS": ""},
        {
            "LD_LIBRARY_PATH": "/opt/x/lib:/opt/y lib",
            "XLA_FLAGS": "--xla_dump_to=/d",
            "CUDA_VISIBLE_DEVICES": "3",
            "TF_FORCE_GPU_ALLOW_GROWTH": "false",
        },
    ],
    ids=["unset", "empty", "set"],
)
def test_hooks_set_and_restore_exactly(
    shell: str, before: dict[str, str | None], tmp_path: Path
) -> None:
    spec = _golden_spec("2.16", "pip", "3.10", "growth", "0,1")
    files = render_module.render(spec, FIXTURE)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for rel in ("activate.sh", "deactivate.sh"):
        (hooks / rel).write_text(files[f"hooks/{rel}"])
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.10" / "site-packages"
    for lib in ("cudnn", "cublas", "cuda_nvcc"):
        (site / "nvidia" / lib / "lib").mkdir(parents=True)

    start, active, again, after = _run_hooks(shell, hooks, "VIRTUAL_ENV", venv, before)
    assert start == {v: before.get(v) for v in REPORT_VARS}
    libs = ":".join(str(site / "nvidia" / lib / "lib") for lib in ("cublas", "cuda_nvcc", "cudnn"))
    old = before.get("LD_LIBRARY_PATH")
    assert active["LD_LIBRARY_PATH"] == (f"{libs}:{old}" if old else libs)
    xla = f"--xla_gpu_cuda_data_dir={site}/nvidia/cuda_nvcc"
    old_xla = before.get("XLA_FLAGS")
    assert active["XLA_FLAGS"] == (f"{old_xla} {xla}" if old_xla else xla)
    assert active["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert active["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert again == active  # activating twice changes nothing more
    assert after == start  # exactly as before, "unset" included


@pytest.mark.parametrize("shell", _shells())
def test_conda_hook_puts_the_prefix_lib_first(shell: str, tmp_path: Path) -> None:
    spec = _golden_spec("2.16", "conda", None, None, None)
    files = render_module.render(spec, FIXTURE)
    (tmp_path / "hooks").mkdir()
    for rel in ("activate.sh", "deactivate.sh"):
        (tmp_path / "hooks" / rel).write_text(files[f"hooks/{rel}"])
    prefix = tmp_path / "env"
    _, active, _, after = _run_hooks(
        shell, tmp_path / "hooks", "CONDA_PREFIX", prefix, {"LD_LIBRARY_PATH": "/usr/lib/x"}
    )
    assert active["LD_LIBRARY_PATH"] == f"{prefix}/lib:/usr/lib/x"
    assert active["XLA_FLAGS"] == f"--xla_gpu_cuda_data_dir={prefix}"
    assert active["CUDA_VISIBLE_DEVICES"] is None
    assert after["LD_LIBRARY_PATH"] == "/usr/lib/x" and after["XLA_FLAGS"] is None


def test_deactivate_without_activate_changes_nothing(tmp_path: Path) -> None:
    files = render_module.render(_golden_spec("2.13", "conda", None, None, None), FIXTURE)
    (tmp_path / "d.sh").write_text(files["hooks/deactivate.sh"])
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f"export LD_LIBRARY_PATH=/keep; . '{tmp_path}/d.sh'; echo \"$LD_LIBRARY_PATH\"",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout == "/keep\n"


# --- the command: writing, checking, refusing ---


def test_render_writes_then_reports_unchanged(fixture_matrix: Matrix, tmp_path: Path) -> None:
    code, out, err = invoke("render", "--tf", "2.16", "--path", "conda", "--out", str(tmp_path))
    assert (code, err) == (0, "")
    assert out == f"rendered {tmp_path}/tf2.16-conda (7 files)\n"
    env = tmp_path / "tf2.16-conda"
    assert sorted(tree(env)) == [
        "README.md",
        "environment.yml",
        "hooks/activate.sh",
        "hooks/deactivate.sh",
        "provision.json",
        "smoke_test.py",
        "virtual-packages.yml",
    ]
    assert os.access(env / "smoke_test.py", os.X_OK)
    mtime = (env / "environment.yml").stat().st_mtime_ns
    code, out, _ = invoke("render", "--tf", "2.16", "--out", str(tmp_path))
    assert (code, out) == (0, f"unchanged {tmp_path}/tf2.16-conda (7 files)\n")
    assert (env / "environment.yml").stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == ["tf2.16-conda"]  # no temp dirs left


def test_all_renders_every_serving_path_and_says_what_it_skips(
    fixture_matrix: Matrix, tmp_path: Path
) -> None:
    code, out, _ = invoke("render", "--all", "--out", str(tmp_path))
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(s.name for s in all_specs(FIXTURE))
    assert "skipped tf2.11-pip: the pip path cannot serve TensorFlow 2.11" in out


def test_rerender_keeps_lock_files(fixture_matrix: Matrix, tmp_path: Path) -> None:
    assert invoke("render", "--tf", "2.13", "--out", str(tmp_path))[0] == 0
    env = tmp_path / "tf2.13-conda"
    (env / "conda-lock.yml").write_text("lock\n")
    # A new request for the same name replaces every rendered file; the lock stays.
    code, out, err = invoke(
        "render",
        "--tf",
        "2.13",
        "--python",
        "3.10",
        "--name",
        "tf2.13-conda",
        "--out",
        str(tmp_path),
    )
    assert (code, err) == (0, ""), err
    assert "rendered" in out
    assert (env / "conda-lock.yml").read_text() == "lock\n"
    assert "python=3.10" in (env / "environment.yml").read_text()


def test_hand_edits_are_refused_then_forced(fixture_matrix: Matrix, tmp_path: Path) -> None:
    invoke("render", "--tf", "2.16", "--path", "pip", "--out", str(tmp_path))
    env = tmp_path / "tf2.16-pip"
    (env / "requirements.in").write_text("tensorflow\n")
    (env / "notes.txt").write_text("mine\n")
    before = tree(env)
    code, out, err = invoke("render", "--tf", "2.16", "--path", "pip", "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert f"{env}/notes.txt" in err and f"{env}/requirements.in" in err and "--force" in err
    assert tree(env) == before
    code, out, err = invoke(
        "render", "--tf", "2.16", "--path", "pip", "--force", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert "tensorflow[and-cuda]==2.16.2" in (env / "requirements.in").read_text()
    assert not (env / "notes.txt").exists()


def test_check_reports_stale_missing_extra_and_edited(
    fixture_matrix: Matrix, tmp_path: Path
) -> None:
    code, out, _ = invoke("render", "--all", "--check", "--out", str(tmp_path))
    assert code == 1 and f"missing: {tmp_path}/tf2.16-pip (not rendered)" in out
    invoke("render", "--all", "--out", str(tmp_path))
    code, out, _ = invoke("render", "--all", "--check", "--out", str(tmp_path))
    assert code == 0 and f"fresh {tmp_path}/tf2.16-pip (6 files)" in out
    snapshot = tree(tmp_path)

    (tmp_path / "tf2.16-pip" / "README.md").unlink()
    (tmp_path / "tf2.16-pip" / "extra.txt").write_text("x\n")
    (tmp_path / "tf2.13-conda" / "environment.yml").write_text("edited\n")
    (tmp_path / "tf9.9-conda").mkdir()
    meta = tmp_path / "tf2.16-conda" / "provision.json"
    data = json.loads(meta.read_text())
    # As if rendered by older templates: on disk and recorded agree, but differ from today's.
    (tmp_path / "tf2.16-conda" / "environment.yml").write_text("older\n")
    data["files"]["environment.yml"] = hashlib.sha256(b"older\n").hexdigest()
    meta.write_text(json.dumps(data))
    on_disk = tree(tmp_path)

    code, out, _ = invoke("render", "--all", "--check", "--out", str(tmp_path))
    assert code == 1
    lines = out.splitlines()
    assert f"missing: {tmp_path}/tf2.16-pip/README.md" in lines
    assert f"extra: {tmp_path}/tf2.16-pip/extra.txt" in lines
    assert (
        f"edited: {tmp_path}/tf2.13-conda/environment.yml (changed by hand since rendering)"
        in lines
    )
    assert f"stale: {tmp_path}/tf2.16-conda/environment.yml" in lines
    assert f"extra: {tmp_path}/tf9.9-conda (not produced by --all)" in lines
    assert lines[-1].startswith("4 environment(s) not as rendered")
    assert tree(tmp_path) == on_disk  # --check writes nothing
    assert snapshot != on_disk


def test_a_file_where_the_env_dir_goes_is_left_alone(
    fixture_matrix: Matrix, tmp_path: Path
) -> None:
    (tmp_path / "tf2.16-conda").write_text("mine\n")
    code, _, err = invoke("render", "--tf", "2.16", "--out", str(tmp_path))
    assert code == 1 and "tf2.16-conda is a file, not an environment directory" in err
    assert (tmp_path / "tf2.16-conda").read_text() == "mine\n"
    assert [p.name for p in tmp_path.iterdir()] == ["tf2.16-conda"]


def test_out_dir_without_provision_json_is_not_overwritten(
    fixture_matrix: Matrix, tmp_path: Path
) -> None:
    env = tmp_path / "tf2.16-conda"
    env.mkdir()
    (env / "environment.yml").write_text("someone else's\n")
    code, _, err = invoke("render", "--tf", "2.16", "--out", str(tmp_path))
    assert code == 1 and "environment.yml" in err
    assert (env / "environment.yml").read_text() == "someone else's\n"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--tf", "2.99"], 1, "TensorFlow 2.99 is not in the matrix; closest known: "),
        (["--tf", "2.16", "--python", "3.6"], 1, "supports Python 3.9, 3.10, 3.11, 3.12, not 3.6"),
        (["--tf", "2.11", "--path", "pip"], 1, "the pip path cannot serve TensorFlow 2.11: "),
        (["--tf", "2.16", "--path", "docker"], 2, "Invalid value for '--path'"),
        (["--tf", "2.16", "--name", "my env"], 2, "is not usable as a conda environment"),
        (["--tf", "2.16", "--name", "x;rm -rf ~"], 2, "is not usable as a conda environment"),
        (["--tf", "2.16", "--gpu-memory", "lots"], 2, "--gpu-memory takes"),
        (["--all", "--python", "3.10"], 2, "--all renders every release at its defaults"),
        ([], 2, "give either --tf X.Y or --all"),
    ],
)
def test_bad_input_one_line_no_traceback_nothing_written(
    fixture_matrix: Matrix, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    out = tmp_path / "envs"
    result = CliRunner().invoke(cli, ["render", *args, "--out", str(out)])
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert message in result.stderr
    assert result.stderr.startswith(("provision: error: ", "Usage:"))
    if code == 1:
        assert result.stderr.count("\n") == 1
    assert not out.exists()


def test_unknown_release_names_the_closest_from_the_real_matrix(tmp_path: Path) -> None:
    proc = provision("render", "--tf", "2.1", "--out", str(tmp_path / "envs"))
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        "provision: error: TensorFlow 2.1 is not in the matrix; closest known:"
    )
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == "" and not (tmp_path / "envs").exists()


def test_out_that_is_a_file_or_not_writable(fixture_matrix: Matrix, tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    for out in (afile, afile / "sub"):
        code, _, err = invoke("render", "--tf", "2.16", "--out", str(out))
        assert code == 1 and "is a file, not a directory" in err
    if os.geteuid() == 0:
        locked = Path("/proc/self")  # root may write anywhere else
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
    code, _, err = invoke("render", "--tf", "2.16", "--out", str(locked))
    assert code == 1 and "not writable" in err and err.count("\n") == 1
    assert afile.read_text() == "x"


# --- interrupted renders leave the previous files ---


def _render_old(tmp_path: Path) -> dict[str, bytes]:
    assert invoke("render", "--tf", "2.16", "--out", str(tmp_path))[0] == 0
    (tmp_path / "tf2.16-conda" / "conda-lock.yml").write_text("lock\n")
    return tree(tmp_path / "tf2.16-conda")


def test_failed_swap_leaves_the_old_directory(
    fixture_matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _render_old(tmp_path)
    real_rename = os.rename
    calls: list[str] = []

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(os.fspath(src))
        if ".render-" in os.fspath(src):  # the new directory moving into place
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    code, _, err = invoke(
        "render",
        "--tf",
        "2.16",
        "--python",
        "3.11",
        "--name",
        "tf2.16-conda",
        "--out",
        str(tmp_path),
    )
    assert code == 1 and "No space left on device" in err
    assert any(".render-" in c for c in calls)
    assert tree(tmp_path / "tf2.16-conda") == old
    assert [p.name for p in tmp_path.iterdir()] == ["tf2.16-conda"]


def test_interrupt_while_writing_leaves_the_old_directory(
    fixture_matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _render_old(tmp_path)
    real = os.open
    written: list[str] = []

    def open_(path: str | os.PathLike[str], flags: int, mode: int = 0o777, **kw: object) -> int:
        if ".render-" in os.fspath(path) and flags & os.O_CREAT:  # a file being written
            if len(written) == 3:
                written.append("interrupted")
                raise KeyboardInterrupt
            written.append(os.fspath(path))
        return real(path, flags, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_)
    result = CliRunner().invoke(
        cli,
        [
            "render",
            "--tf",
            "2.16",
            "--python",
            "3.11",
            "--name",
            "tf2.16-conda",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 130 and "interrupted" in result.stderr
    assert len(written) == 4
    assert tree(tmp_path / "tf2.16-conda") == old
    assert [p.name for p in tmp_path.iterdir()] == ["tf2.16-conda"]


def _complete(env: Path) -> bool:
    """Every file provision.json lists is there with its recorded hash."""
    meta = json.loads((env / "provision.json").read_text())
    return all(
        hashlib.sha256((env / rel).read_bytes()).hexdigest() == digest
        for rel, digest in meta["files"].items()
    )


@pytest.mark.parametrize("after", [0, 4, 9])
def test_killed_render_never_leaves_half_a_directory(tmp_path: Path, after: int) -> None:
    """SIGKILL (no cleanup at all) mid-render: each env dir is then the old or the new one.

    The kill comes as soon as `after` environments are rewritten and the next one is being
    written (a temporary directory exists), so it lands inside a render, not before or after it.
    """
    out = tmp_path / "envs"
    command = [*WITH_FIXTURE, "render", "--all", "--out", str(out)]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    names = sorted(p.name for p in out.iterdir())

    def make_old() -> None:
        for name in names:
            # As if rendered by older templates, so the next render rewrites every directory.
            (out / name / "README.md").write_text("old\n")
            meta = json.loads((out / name / "provision.json").read_text())
            meta["files"]["README.md"] = hashlib.sha256(b"old\n").hexdigest()
            (out / name / "provision.json").write_text(json.dumps(meta))

    def rewritten() -> int:
        count = 0
        for name in names:
            with contextlib.suppress(OSError):  # being swapped right now
                count += (out / name / "README.md").read_text() != "old\n"
        return count

    interrupted = 0
    for _ in range(5):
        make_old()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if rewritten() >= after and any(out.glob(".*.render-*")):
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait()
        interrupted += proc.returncode == -signal.SIGKILL and rewritten() < len(names)
        for name in names:
            env = out / name
            if env.exists():
                assert _complete(env), name
            else:
                # Only between the two renames of a swap; the old directory is then kept aside.
                aside = list(out.glob(f".{name}.old-*"))
                assert len(aside) == 1 and _complete(aside[0]), name
                aside[0].rename(env)
        for leftover in out.glob(".*"):
            shutil.rmtree(leftover)
        if interrupted:
            break
    assert interrupted, "the render always finished before the kill; nothing was tested"


# --- where templates come from ---


def test_templates_dir_is_the_checkouts_and_partials_are_not_outputs() -> None:
    assert render_module.templates_dir() == ROOT / "templates"
    spec = _golden_spec("2.16", "conda", None, None, None)
    files = render_module.render(spec, FIXTURE)
    assert not any(Path(rel).name.startswith("_") or rel.endswith(".j2") for rel in files)
    assert "header" not in files and "requirements.in" not in files  # empty output: not written


# --- speed: nothing heavy on the fast paths (timings: tests/bench/bench_cli.py) ---

HEAVY = ("tensorflow", "conda_lock", "rattler", "yaml", "uv", "pydantic", "ruamel")


@pytest.mark.parametrize(
    ("args", "banned"),
    [
        (["--help"], (*HEAVY, "jinja2")),
        (["matrix", "--json"], (*HEAVY, "jinja2")),
        (["render", "--all", "--check"], HEAVY),
    ],
    ids=["help", "matrix", "render"],
)
def test_fast_commands_import_nothing_heavy(args: list[str], banned: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "provision", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "click" in imported  # the measurement works
    assert imported.isdisjoint(banned), sorted(imported & set(banned))
