"""provision render: the files are right (not only well formed), deterministic, and written safely.

What render writes is what a user reviews: the lock inputs, hooks/runtime.env and provision.json;
`render_export` adds the README of an exported copy. The static hooks that read runtime.env are
tested in tests/test_hooks.py.

Golden files: tests/golden/<case>/ hold every file `render` gives for a few representative
environments (provision.json included), rendered from the frozen matrix tests/golden/matrix.toml.
After an intended template change, regenerate them with

    UPDATE_GOLDEN=1 /tmp/hostvenv/bin/python -m pytest tests/test_render.py -k golden

(any virtual environment with the dev dependencies will do) and review the diff.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import clitools
import pytest
import yaml
from click.testing import CliRunner
from packaging.requirements import Requirement
from rattler import MatchSpec, Version, VersionSpec

from provision import environment, paths
from provision import matrix as matrix_module
from provision import render as render_module
from provision.cli.commands import cli
from provision.errors import ProvisionError
from provision.matrix import Matrix, kinds
from provision.matrix.spec import EnvSpec, GpuPolicy, all_specs, expected, resolve

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
FIXTURE = matrix_module.load(GOLDEN / "matrix.toml")
try:
    REAL: Matrix | None = matrix_module.load()
    REAL_ERROR = ""
except ProvisionError as exc:  # reported by test_real_matrix_loads, not as a collection error
    REAL, REAL_ERROR = None, str(exc)

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
    "from provision.cli.commands import main; main()",
    str(GOLDEN / "matrix.toml"),
]


provision = functools.partial(clitools.provision, cwd=ROOT, timeout=120)


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


def test_envs_hold_only_what_a_user_reviews(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    """The lock inputs, hooks/runtime.env and the manifest: nothing that runs, nothing generated
    again from the package (smoke test, README, shell hooks live in provision, not in envs/)."""
    _, spec, files = rendered
    reviewed = {*spec.kind.input_files, environment.RUNTIME, render_module.META}
    assert set(files) == reviewed
    assert not any(text.startswith("#!") for text in files.values())


def test_runtime_env_holds_the_runtime_values(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    _, spec, files = rendered
    values = environment.parse_runtime(files[environment.RUNTIME])
    assert values == environment.runtime_values(spec)
    assert values["PROVISION_ENV"] == spec.name
    for folder in filter(None, values["PROVISION_LIBRARY_DIRS"].split(":")):
        assert not folder.startswith("/") and ".." not in folder.split("/"), folder


def test_runtime_env_reads_the_same_in_sh(tmp_path: Path) -> None:
    """The hooks source runtime.env in sh: every environment's file gives there what
    parse_runtime reads (one sh process for all of them)."""
    names = (
        "PROVISION_ENV",
        "PROVISION_LIBRARY_DIRS",
        "PROVISION_XLA_DIR",
        "PROVISION_GPUS",
        "PROVISION_GPU_MEMORY",
    )
    script = []
    wanted: list[dict[str, str]] = []
    for index, (_, m, spec) in enumerate(SPECS):
        path = tmp_path / f"{index}.env"
        path.write_text(render_module.render(spec, m)[environment.RUNTIME])
        report = " ".join(f'"${{{n}-<unset>}}"' for n in names)
        script.append(f"( . '{path}' && printf '%s\\0' {report} )")
        wanted.append(environment.runtime_values(spec))
    proc = subprocess.run(
        ["sh", "-c", "set -eu\n" + "\n".join(script)], capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    fields = proc.stdout.split("\0")[:-1]
    size = len(names)
    got = [dict(zip(names, fields[i : i + size], strict=True)) for i in range(0, len(fields), size)]
    assert got == [{n: values.get(n, "<unset>") for n in names} for values in wanted]


def test_every_file_has_the_header_and_nothing_of_this_machine(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, files = rendered
    regen = render_module.regen_command(spec)
    readme = render_module.render_export(spec, m)
    for rel, text in {**files, **readme}.items():
        for local in (str(ROOT), str(Path.home()) + "/", sys.prefix):
            assert local not in text, f"{rel} mentions {local}"
        assert not re.search(r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d", text), f"{rel} has a timestamp"
        if rel == render_module.META:
            continue  # provision's own record (it cannot hold a comment)
        assert _has_header(text, regen), rel


def _has_header(text: str, regen: str) -> bool:
    """ "Generated by provision" first, and the exact command that renders it again."""
    head = text.splitlines()[:2]
    again = re.compile(rf"regenerate with: {re.escape(regen)}( |$)", re.M)
    return (
        bool(head) and "Generated by provision" in head[0] and bool(again.search("\n".join(head)))
    )


def test_provision_json_records_the_request_and_every_hash(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, files = rendered
    text = files[render_module.META]
    assert len(text.splitlines()) == 3  # schema and name, request, files: a diff shows which
    meta = json.loads(text)
    assert list(meta) == ["schema", "name", "request", "files"]
    assert (meta["schema"], meta["name"]) == (environment.SCHEMA, spec.name)
    assert meta["request"] == {
        "tf": spec.release.tf,
        "path": spec.path,
        "python": spec.python,
        "gpu_memory": spec.gpu.memory,
        "gpus": spec.gpu.devices,
        "jupyter": spec.jupyter,
    }
    others = {rel: text for rel, text in files.items() if rel != render_module.META}
    assert meta["files"] == {
        rel: hashlib.sha256(text.encode()).hexdigest() for rel, text in others.items()
    }
    # The recorded request renders the same directory again.
    req = environment.Manifest.loads(text).request
    again = resolve(m, req.tf, req.path, req.python, meta["name"], req.gpu, jupyter=req.jupyter)
    assert again == spec


def test_rendering_is_deterministic(rendered: tuple[Matrix, EnvSpec, dict[str, str]]) -> None:
    m, spec, files = rendered
    assert render_module.render(spec, m) == files
    assert render_module.render_export(spec, m) == render_module.render_export(spec, m)


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
    files = render_module.render(spec, FIXTURE)
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
    runtime = render_module.render(specs[-1], FIXTURE)[environment.RUNTIME]
    assert "PROVISION_GPUS='0,1'\n" in runtime and "PROVISION_GPU_MEMORY='4096'\n" in runtime


# --- hooks/runtime.env: where each path's libraries and ptxas are ---

SITE_310 = "lib/python3.10/site-packages"
SITE_311 = "lib/python3.11/site-packages"


@pytest.mark.parametrize(
    ("tf", "path", "python", "libraries", "xla"),
    [
        # NVIDIA's wheels hold every library, and ptxas in cuda_nvcc.
        ("2.16", "pip", "3.10", f"{SITE_310}/nvidia/*/lib", f"{SITE_310}/nvidia/cuda_nvcc"),
        ("2.13", "pip", "3.11", f"{SITE_311}/nvidia/*/lib", f"{SITE_311}/nvidia/cuda_nvcc"),
        # CUDA 11 conda, cuDNN (and ptxas) from pip wheels: the prefix's lib and the wheels'.
        ("2.13", "conda", "3.11", f"lib:{SITE_311}/nvidia/*/lib", f"{SITE_311}/nvidia/cuda_nvcc"),
        # CUDA 11 conda, cuDNN from conda-forge: everything in lib, and no ptxas anywhere.
        ("2.11", "conda", "3.10", "lib", ""),
        # CUDA 12 conda: cuda-nvcc puts ptxas in the prefix's bin/, so XLA looks in the prefix.
        ("2.16", "conda", "3.10", "lib", "."),
        # System: the toolkit is outside the prefix; its install records PROVISION_CUDA_HOME.
        ("2.13", "system", "3.11", "", ""),
        ("2.16", "system", "3.10", "", ""),
    ],
    ids=[
        "pip-cu12",
        "pip-cu11",
        "conda-cuda11-pip-cudnn",
        "conda-cuda11",
        "conda-cuda12",
        "system-cuda11",
        "system-cuda12",
    ],
)
def test_runtime_env_names_each_paths_libraries(
    tf: str, path: str, python: str, libraries: str, xla: str
) -> None:
    spec = resolve(FIXTURE, tf, path, python)
    values = environment.parse_runtime(render_module.render(spec, FIXTURE)[environment.RUNTIME])
    assert values == {
        "PROVISION_ENV": spec.name,
        "PROVISION_LIBRARY_DIRS": libraries,
        "PROVISION_XLA_DIR": xla,
    }


@pytest.mark.parametrize(
    ("memory", "gpus", "policy"),
    [
        (None, None, {}),
        ("growth", None, {"PROVISION_GPU_MEMORY": "growth"}),
        ("4096", "0,1", {"PROVISION_GPU_MEMORY": "4096", "PROVISION_GPUS": "0,1"}),
        (None, "2", {"PROVISION_GPUS": "2"}),
    ],
    ids=["none", "growth", "limit-and-devices", "devices"],
)
@pytest.mark.parametrize("path", ["pip", "conda", "system"])
def test_runtime_env_carries_the_gpu_policy(
    fixture_matrix: Matrix,
    tmp_path: Path,
    path: str,
    memory: str | None,
    gpus: str | None,
    policy: dict[str, str],
) -> None:
    args = ["render", "--tf", "2.16", "--path", path, "--out", str(tmp_path)]
    args += ["--gpu-memory", memory] if memory else []
    args += ["--gpus", gpus] if gpus else []
    code, _, err = invoke(*args)
    assert (code, err) == (0, ""), err
    (env,) = tmp_path.iterdir()
    values = environment.parse_runtime((env / environment.RUNTIME).read_text())
    assert {k: v for k, v in values.items() if k in ("PROVISION_GPUS", "PROVISION_GPU_MEMORY")} == (
        policy
    )
    request = json.loads((env / render_module.META).read_text())["request"]
    assert (request["gpu_memory"], request["gpus"]) == (memory, gpus)


# --- --jupyter ---


@pytest.mark.parametrize("path", ["pip", "conda", "system"])
def test_jupyter_adds_ipykernel_and_is_in_the_regen_command(
    fixture_matrix: Matrix, tmp_path: Path, path: str
) -> None:
    plain, jupyter = tmp_path / "plain", tmp_path / "jupyter"
    assert invoke("render", "--tf", "2.16", "--path", path, "--out", str(plain))[0] == 0
    code, _, err = invoke(
        "render", "--tf", "2.16", "--path", path, "--jupyter", "--out", str(jupyter)
    )
    assert (code, err) == (0, "")
    name = f"tf2.16-{path}"
    regen = f"provision render --tf 2.16 --path {path} --jupyter"
    for rel in kinds.of(path).input_files:
        text = (jupyter / name / rel).read_text()
        assert f"regenerate with: {regen}\n" in text, rel
        assert "--jupyter" not in (plain / name / rel).read_text(), rel
    if path == "conda":
        env = yaml.safe_load((jupyter / name / "environment.yml").read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        plain_env = yaml.safe_load((plain / name / "environment.yml").read_text())
        assert pip == [
            *next(d["pip"] for d in plain_env["dependencies"] if isinstance(d, dict)),
            "ipykernel",
        ]
        assert "ipykernel" not in [d for d in env["dependencies"] if isinstance(d, str)]
    else:
        lines = (jupyter / name / "requirements.in").read_text().splitlines()
        plain_lines = (plain / name / "requirements.in").read_text().splitlines()
        assert [ln for ln in lines if not ln.startswith("#")] == [
            *(ln for ln in plain_lines if not ln.startswith("#")),
            "ipykernel",
        ]
    meta = environment.Manifest.loads((jupyter / name / render_module.META).read_text())
    assert meta.request.jupyter is True
    assert environment.load(jupyter / name).spec.jupyter is True
    # The same request again is fresh; without --jupyter it is not.
    code, _, _ = invoke(
        "render", "--tf", "2.16", "--path", path, "--jupyter", "--check", "--out", str(jupyter)
    )
    assert code == 0
    code, out, _ = invoke(
        "render", "--tf", "2.16", "--path", path, "--check", "--out", str(jupyter)
    )
    assert code == 1 and f"stale: {jupyter}/{name}/{kinds.of(path).input_files[0]}" in out


def test_jupyter_with_all_is_refused(fixture_matrix: Matrix, tmp_path: Path) -> None:
    code, _, err = invoke("render", "--all", "--jupyter", "--out", str(tmp_path / "envs"))
    assert code == 2 and "--jupyter" in err and not (tmp_path / "envs").exists()


# --- the README of an exported copy (provision export) ---

# What `provision export` writes besides the environment's reviewed files and its lock.
EXPORT_EXTRAS = (
    "README.md",
    "smoke-test.pyz",
    "hooks/activate.sh",
    "hooks/deactivate.sh",
    "hooks/provision_env_hook.py",
    "hooks/provision_gpu_policy.py",
)
# A relative file name in prose or code: not part of a longer path ($VAR/x.sh, a/b/x.py, URLs).
FILE_MENTION = re.compile(
    r"(?<![\w/.$-])((?:hooks/)?[A-Za-z0-9_][\w.-]*\.(?:sh|py|pyz|yml|yaml|in|lock|env|json|md|pth|txt))\b"
)
CREATED = re.compile(r">\s*([\w.-]+\.\w+)")  # files the README's own commands write
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)


def _export_files(spec: EnvSpec, files: dict[str, str]) -> set[str]:
    names = {*files, spec.kind.lock_file, *EXPORT_EXTRAS}
    return names | ({"install-system.sh"} if spec.path == "system" else set())


def test_export_readme_mentions_only_files_the_export_has(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, files = rendered
    export = render_module.render_export(spec, m)
    assert list(export) == ["README.md"]
    readme = export["README.md"]
    mentioned = set(FILE_MENTION.findall(readme)) - set(CREATED.findall(readme))
    assert mentioned - _export_files(spec, files) == set()
    # The by-hand part uses what the export carries: the lock, the hooks, the smoke test.
    assert {spec.kind.lock_file, "smoke-test.pyz", environment.RUNTIME} <= mentioned
    assert {"hooks/activate.sh", "hooks/deactivate.sh", "hooks/provision_env_hook.py"} <= mentioned


def test_export_readme_says_how_to_use_each_path_by_hand(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, _ = rendered
    readme = render_module.render_export(spec, m)["README.md"]
    if spec.path == "conda":
        assert "conda-lock install --name " in readme
        assert "$CONDA_PREFIX/etc/conda/activate.d/provision.sh" in readme
    elif spec.path == "pip":
        assert f"python{spec.python} -m venv .venv\n" in readme
        assert "pip install --require-hashes --no-deps -r requirements.lock\n" in readme
    else:
        assert "sudo bash install-system.sh --vars system.env " in readme
        assert f"PROVISION_CUDA_HOME='/usr/local/cuda-{spec.cuda.version}'" in readme
    # The hooks go where install_hooks puts them: etc/provision/ and a .pth in site-packages.
    assert "cp hooks/runtime.env hooks/activate.sh hooks/deactivate.sh " in readme
    assert '/etc/provision/"\n' in readme or "/etc/provision/\n" in readme
    assert """echo 'import provision_env_hook'""" in readme
    assert "-I smoke-test.pyz smoke  " in readme
    assert "-I smoke-test.pyz smoke --expected expected.json --json\n" in readme


def test_export_readme_expected_versions_are_the_specs(
    rendered: tuple[Matrix, EnvSpec, dict[str, str]],
) -> None:
    m, spec, _ = rendered
    readme = render_module.render_export(spec, m)["README.md"]
    found = re.search(r"cat >expected\.json <<'EOF'\n(.*?)\nEOF\n", readme, re.S)
    assert found is not None
    assert json.loads(found.group(1)) == expected(spec)


def test_export_readme_commands_are_valid_sh(tmp_path: Path) -> None:
    blocks: dict[str, None] = {}
    for _, m, spec in SPECS:
        readme = render_module.render_export(spec, m)["README.md"]
        found = SH_BLOCK.findall(readme)
        assert len(found) >= 3, spec.name
        blocks.update(dict.fromkeys(found))
    for index, block in enumerate(blocks):
        (tmp_path / f"{index}.sh").write_text(block)
        proc = subprocess.run(
            ["sh", "-n", str(tmp_path / f"{index}.sh")], capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{block}\n{proc.stderr}"


@pytest.mark.parametrize("path", ["pip", "conda", "system"])
def test_exported_copy_has_every_file_its_readme_names(
    fixture_matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))  # no registry of this machine
    envs = tmp_path / "envs"
    assert (
        invoke(
            "render", "--tf", "2.16", "--path", path, "--gpu-memory", "4096", "--out", str(envs)
        )[0]
        == 0
    )
    name = f"tf2.16-{path}"
    (envs / name / kinds.of(path).lock_file).write_text("# a lock\n")
    dest = tmp_path / "copy"
    code, _, err = invoke("export", name, str(dest), "--out", str(envs))
    assert (code, err) == (0, ""), err
    on_disk = set(tree(dest))
    spec = environment.load(envs / name).spec
    assert on_disk == _export_files(spec, render_module.render(spec, FIXTURE))
    readme = (dest / "README.md").read_text()
    assert readme == render_module.render_export(spec, FIXTURE)["README.md"]
    mentioned = set(FILE_MENTION.findall(readme)) - set(CREATED.findall(readme))
    assert mentioned - on_disk == set()


# --- the command: writing, checking, refusing ---


def test_render_writes_then_reports_unchanged(fixture_matrix: Matrix, tmp_path: Path) -> None:
    code, out, err = invoke("render", "--tf", "2.16", "--path", "conda", "--out", str(tmp_path))
    assert (code, err) == (0, "")
    assert out == f"rendered {tmp_path}/tf2.16-conda (4 files)\n"
    env = tmp_path / "tf2.16-conda"
    assert sorted(tree(env)) == [
        "environment.yml",
        "hooks/runtime.env",
        "provision.json",
        "virtual-packages.yml",
    ]
    # An ordinary directory of ordinary files (the temporary directory it was written in is not).
    umask = os.umask(0o022)
    os.umask(umask)
    assert env.stat().st_mode & 0o777 == 0o777 & ~umask
    assert {p.stat().st_mode & 0o777 for p in env.rglob("*")} == {0o666 & ~umask, 0o777 & ~umask}
    mtime = (env / "environment.yml").stat().st_mtime_ns
    code, out, _ = invoke("render", "--tf", "2.16", "--out", str(tmp_path))
    assert (code, out) == (0, f"unchanged {tmp_path}/tf2.16-conda (4 files)\n")
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
    assert code == 0 and f"fresh {tmp_path}/tf2.16-pip (3 files)" in out
    snapshot = tree(tmp_path)

    (tmp_path / "tf2.16-pip" / "hooks" / "runtime.env").unlink()
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
    assert f"missing: {tmp_path}/tf2.16-pip/hooks/runtime.env" in lines
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


@pytest.mark.parametrize(
    ("event", "match", "nth"),
    [
        ("os.mkdir", ".render-", 1),  # before the first new directory exists
        ("os.mkdir", ".render-", 10),
        ("open", ".render-", 1),  # a new directory half written
        ("open", ".render-", 30),
        ("os.rename", ".render-", 1),  # between a swap's two renames: the old one is aside
        ("os.rename", ".render-", 10),
        ("shutil.rmtree", ".old-", 5),  # the new one in place, the old one not yet removed
    ],
)
def test_killed_render_never_leaves_half_a_directory(
    tmp_path: Path, event: str, match: str, nth: int
) -> None:
    """SIGKILL mid-render: each env dir is then the old or the new one, the user's lock in it,
    and the next render finishes what the killed one left (nothing of it stays beside them)."""
    out = tmp_path / "envs"
    command = [*WITH_FIXTURE, "render", "--all", "--out", str(out)]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    names = sorted(p.name for p in out.iterdir())
    assert len(names) >= 10
    for name in names:
        # As if rendered by older templates, so the next render rewrites every directory.
        (out / name / "hooks" / "runtime.env").write_text("old\n")
        meta = json.loads((out / name / "provision.json").read_text())
        meta["files"]["hooks/runtime.env"] = hashlib.sha256(b"old\n").hexdigest()
        (out / name / "provision.json").write_text(json.dumps(meta))
        (out / name / "requirements.lock").write_text(f"# the user's lock of {name}\n")
    hook = clitools.KILL_AT.format(event=event, match=match, nth=nth)
    killed = subprocess.run(
        [command[0], command[1], hook + command[2], *command[3:]],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    aside = 0
    for name in names:
        env = out / name
        if not env.exists():
            # Only between the two renames of a swap: the old directory is kept aside, whole.
            kept = list(out.glob(f".{name}.old-*"))
            assert len(kept) == 1 and _complete(kept[0]), name
            aside += 1
        else:
            assert _complete(env), name
    assert aside == (event == "os.rename")
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.iterdir()) == names  # no .render-* or .old-* left
    for name in names:
        assert _complete(out / name), name
        assert (out / name / "hooks" / "runtime.env").read_text() != "old\n"
        assert (out / name / "requirements.lock").read_text() == f"# the user's lock of {name}\n"


def test_a_render_leaves_alone_what_only_looks_like_its_leftovers(tmp_path: Path) -> None:
    """The next render of a name, even one that finds it unchanged, removes only what its own kind
    of name holds: a directory with mkdtemp's suffix; a symlink or another suffix stays."""
    out = tmp_path / "envs"
    command = [*WITH_FIXTURE, "render", "--tf", "2.13", "--path", "pip", "--out", str(out)]
    assert subprocess.run(command, cwd=ROOT, capture_output=True, check=False).returncode == 0
    name = next(p.name for p in out.iterdir())
    (out / f".{name}.render-abcd1234").mkdir()  # provision's own, left by a kill
    theirs = [out / f".{name}.render-notes", out / f".{name}.old-mine"]
    for path in theirs:
        path.mkdir()
        (path / "notes.txt").write_text("mine\n")
    (out / f".{name}.old-zz99zz99").symlink_to(out / f".{name}.old-mine")
    assert subprocess.run(command, cwd=ROOT, capture_output=True, check=False).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [name, f".{name}.render-notes", f".{name}.old-mine", f".{name}.old-zz99zz99"]
    )
    for path in theirs:
        assert (path / "notes.txt").read_text() == "mine\n"


# --- where templates come from ---


def test_templates_dir_is_the_checkouts_and_partials_are_not_outputs() -> None:
    assert paths.templates_dir() == ROOT / "templates"
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
        # render writes environment.yml with yaml.safe_dump (PyYAML's C loader: ~10 ms)
        (["render", "--all", "--check"], tuple(m for m in HEAVY if m != "yaml")),
        (["render", "--tf", "2.13", "--path", "pip", "--check"], HEAVY),
    ],
    ids=["help", "matrix", "render", "render-pip"],
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


@pytest.mark.parametrize("name", ["1.10", "yes", "null", "0x1f"])
def test_names_yaml_would_retype_stay_strings_in_environment_yml(name: str) -> None:
    m = matrix_module.load()
    spec = resolve(m, "2.13", "conda", None, name, GpuPolicy(None, None))
    data = yaml.safe_load(render_module.render(spec, m)["environment.yml"])
    assert data["name"] == name
    assert data["dependencies"][-1] == {"pip": list(spec.pip_requirements)}


def test_a_cache_folder_that_went_away_between_two_renders_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled templates go to the cache folder the environment names at each render: one that
    was removed since (a test's, a caller's) is never written into again."""
    release = matrix_module.load().newest.tf
    first = tmp_path / "first-cache"
    monkeypatch.delenv("PROVISION_HOME", raising=False)  # provision's cache folder: XDG's
    monkeypatch.setenv("XDG_CACHE_HOME", str(first))
    result = CliRunner().invoke(
        cli, ["render", "--tf", release, "--path", "pip", "--out", str(tmp_path / "a")]
    )
    assert result.exit_code == 0, result.output
    assert list((first / "provision" / "jinja").iterdir())
    shutil.rmtree(first)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "second-cache"))
    result = CliRunner().invoke(
        cli, ["render", "--tf", release, "--path", "pip", "--out", str(tmp_path / "b")]
    )
    assert result.exit_code == 0, result.output
    assert not first.exists() and list(
        (tmp_path / "second-cache" / "provision" / "jinja").iterdir()
    )
