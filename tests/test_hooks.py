"""The static hooks of provision/hooks/, as `provision install` puts them into a prefix, at work.

Shell: a prefix built here (etc/provision/runtime.env written by `environment.install_hooks` from
a really rendered environment directory, and the library folders that runtime.env names) is
activated and deactivated through a real venv's bin/activate (the block install_hooks appends)
or through conda's activate.d/deactivate.d wrappers, in each shell installed here. Every variable
the hooks touch must be set on activation and restored exactly (set, empty, or unset) on
deactivation; activating twice must not stack.

Python: provision_env_hook in a real venv of this host's Python, with no TensorFlow: two tiny
shared libraries built with gcc under CUDA's names, and a fake `tensorflow` package that reports
what is mapped into its process and what its environment says when it is imported.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from provision import environment
from provision import matrix as matrix_module
from provision import render as render_module
from provision.install import prefix_hooks
from provision.matrix.spec import EnvSpec, GpuPolicy, resolve

HOOKS = prefix_hooks.HOOKS_DIR
FIXTURE = matrix_module.load(Path(__file__).resolve().parent / "golden" / "matrix.toml")
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
SHELLS = ("sh", "dash", "bash", "zsh")
HOOKED = (
    "LD_LIBRARY_PATH",
    "XLA_FLAGS",
    "CUDA_VISIBLE_DEVICES",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "PROVISION_GPU_MEMORY_LIMIT_MIB",
)
REPORTED = (*HOOKED, "VIRTUAL_ENV", "PATH")
# What a shell must not keep once deactivated: the hooks' own variables and runtime.env's.
LEFTOVER = (
    r"^(_provision_[a-z_]*|_PROVISION_[A-Z_]*"
    r"|PROVISION_(ENV|LIBRARY_DIRS|XLA_DIR|GPUS|GPU_MEMORY|CUDA_HOME))="
)
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
State = dict[str, str | None]
Before = Mapping[str, str | None]


def _shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed here")
    return found


def render_env(root: Path, spec: EnvSpec) -> environment.EnvDir:
    """envs/<name>/ as `provision render` writes it, loaded as every command loads it."""
    folder = root / spec.name
    for rel, text in render_module.render(spec, FIXTURE).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return environment.load(folder)


def make_venv(prefix: Path) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=120
    )


# --- the shell hooks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An environment of one path and policy, and what its activation must set."""

    tf: str
    path: str
    python: str
    memory: str | None = None
    gpus: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # install_hooks' extra values
    libraries: tuple[str, ...] = ()  # relative to the prefix, in LD_LIBRARY_PATH's order
    xla: str | None = None  # the prefix's folder for XLA ("" for the prefix itself)

    @property
    def venv(self) -> bool:
        return self.path != "conda"

    def spec(self) -> EnvSpec:
        return resolve(
            FIXTURE, self.tf, self.path, self.python, None, GpuPolicy(self.memory, self.gpus)
        )

    def active(self, prefix: Path, before: Before) -> State:
        """The hooked variables once activated, from the values before activation."""
        libs = ":".join(lib if lib.startswith("/") else f"{prefix}/{lib}" for lib in self.libraries)
        old_libs, old_xla = before.get("LD_LIBRARY_PATH"), before.get("XLA_FLAGS")
        state: State = {"LD_LIBRARY_PATH": f"{libs}:{old_libs}" if old_libs else libs}
        if self.xla is not None:
            where = self.xla if self.xla.startswith("/") else f"{prefix}/{self.xla}".rstrip("/")
            flag = f"--xla_gpu_cuda_data_dir={where}"
            state["XLA_FLAGS"] = f"{old_xla} {flag}" if old_xla else flag
        else:
            state["XLA_FLAGS"] = old_xla
        state["CUDA_VISIBLE_DEVICES"] = self.gpus or before.get("CUDA_VISIBLE_DEVICES")
        growth = self.memory == "growth"
        limit = self.memory if self.memory and not growth else None
        state["TF_FORCE_GPU_ALLOW_GROWTH"] = (
            "true" if growth else before.get("TF_FORCE_GPU_ALLOW_GROWTH")
        )
        state["PROVISION_GPU_MEMORY_LIMIT_MIB"] = limit or before.get(
            "PROVISION_GPU_MEMORY_LIMIT_MIB"
        )
        return state


NV310 = "lib/python3.10/site-packages/nvidia"
NV311 = "lib/python3.11/site-packages/nvidia"
CUDA_HOME = "/usr/local/cuda-11.8"
CASES = {
    # NVIDIA's wheels: every nvidia/*/lib folder, sorted; ptxas in cuda_nvcc.
    "pip": Case(
        "2.16", "pip", "3.10", "growth", "0,1",
        libraries=(f"{NV310}/cublas/lib", f"{NV310}/cudnn/lib"), xla=f"{NV310}/cuda_nvcc",
    ),
    # CUDA 12 on conda-forge: the prefix's lib, and ptxas in the prefix's bin.
    "conda-cuda12": Case("2.16", "conda", "3.10", "4096", libraries=("lib",), xla=""),
    # CUDA 11 on conda-forge with cuDNN and ptxas from pip: lib first, then the wheels'.
    "conda-cuda11-pip-cudnn": Case(
        "2.13", "conda", "3.11", None, "1",
        libraries=("lib", f"{NV311}/cublas/lib", f"{NV311}/cudnn/lib"),
        xla=f"{NV311}/cuda_nvcc",
    ),
    # The system path: nothing in the prefix; the toolkit's home comes from the install.
    "system": Case(
        "2.13", "system", "3.11", "2048",
        extra={"PROVISION_CUDA_HOME": CUDA_HOME},
        libraries=(f"{CUDA_HOME}/lib64",), xla=CUDA_HOME,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One built prefix per case (a real venv, or a conda-like prefix), under a path with a space:
    hooks installed by install_hooks, and the library folders its runtime.env names."""
    root = tmp_path_factory.mktemp("hooks") / "my envs"
    built: dict[str, Path] = {}
    for key, case in CASES.items():
        env = render_env(root / "rendered", case.spec())
        prefix = root / "prefixes" / key
        if case.venv:
            make_venv(prefix)
        else:
            (prefix / "lib").mkdir(parents=True)
        prefix_hooks.install_hooks(env, prefix, case.extra)
        for lib in case.libraries:
            if not lib.startswith("/"):
                (prefix / lib).mkdir(parents=True, exist_ok=True)
        if case.libraries and "nvidia" in case.libraries[-1]:
            nvidia = (prefix / case.libraries[-1]).parents[1]
            (nvidia / "cudnn" / "include").mkdir()  # not a lib folder: never on the path
            (nvidia / "__init__.py").write_text("")
            (nvidia / "cuda_nvcc" / "bin").mkdir(parents=True)
        built[key] = prefix
    return built


def activate(case: Case, prefix: Path) -> str:
    if case.venv:
        return f". {shlex.quote(str(prefix))}/bin/activate"
    return (
        f"CONDA_PREFIX={shlex.quote(str(prefix))}; export CONDA_PREFIX; "
        '. "$CONDA_PREFIX/etc/conda/activate.d/provision.sh"'
    )


def deactivate(case: Case) -> str:
    if case.venv:
        return "deactivate"
    return '. "$CONDA_PREFIX/etc/conda/deactivate.d/provision.sh"; unset CONDA_PREFIX'


def run_steps(shell: str, before: Before, steps: list[str]) -> tuple[list[State], str]:
    """Run `steps` in one `shell -c` (nounset on), reporting REPORTED after the setup and each step.

    Returns the states and what is left over (variables of the hooks) at the end.
    """
    report = "; ".join(
        f'if [ -n "${{{v}+x}}" ]; then printf "%s=set:%s\\n" {v} "${v}"; '
        f'else printf "%s=unset\\n" {v}; fi'
        for v in REPORTED
    )
    setup = ["set -u", f"PATH={BASE_PATH}; export PATH", "unset VIRTUAL_ENV CONDA_PREFIX"]
    for var in HOOKED:
        value = before.get(var)
        setup.append(f"unset {var}" if value is None else f"export {var}={shlex.quote(value)}")
    lines = [*setup, report]
    for step in steps:
        lines += ["echo --", step, report]
    lines += ["echo ==", f"set | grep -E '{LEFTOVER}' | cut -d= -f1 | LC_ALL=C sort | tr '\\n' ' '"]
    proc = subprocess.run(
        [_shell(shell), "-c", "\n".join(lines)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": "/nonexistent", "LC_ALL": "C", "PATH": BASE_PATH},
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    body, _, leftover = proc.stdout.partition("==\n")
    states = []
    for block in body.split("--\n"):
        state: State = {}
        for line in block.splitlines():
            var, _, value = line.partition("=")
            state[var] = value[4:] if value.startswith("set:") else None
        states.append(state)
    return states, leftover.strip()


BEFORE: dict[str, Before] = {
    "unset": {},
    "empty": dict.fromkeys(HOOKED, ""),
    "set": {
        "LD_LIBRARY_PATH": "/opt/x/lib:/opt/y lib",
        "XLA_FLAGS": """--xla_dump_to=/d/it's "$HOME" \\n""",
        "CUDA_VISIBLE_DEVICES": "3",
        "TF_FORCE_GPU_ALLOW_GROWTH": "false",
        "PROVISION_GPU_MEMORY_LIMIT_MIB": "100",
    },
}


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("before", list(BEFORE), ids=list(BEFORE))
@pytest.mark.parametrize("key", list(CASES))
def test_hooks_set_and_restore_exactly(
    request: pytest.FixtureRequest, prefixes: dict[str, Path], key: str, before: str, shell: str
) -> None:
    case, prefix = CASES[key], prefixes[key]
    values = BEFORE[before]
    (start, active, again, after), leftover = run_steps(
        shell, values, [activate(case, prefix), activate(case, prefix), deactivate(case)]
    )
    assert start == {v: values.get(v) for v in HOOKED} | {"VIRTUAL_ENV": None, "PATH": BASE_PATH}
    assert {v: active[v] for v in HOOKED} == case.active(prefix, values)
    if case.venv:
        assert active["VIRTUAL_ENV"] == str(prefix)
        assert active["PATH"] == f"{prefix}/bin:{BASE_PATH}"
    assert again == active  # activating twice changes nothing more
    assert after == start  # exactly as before: set, empty or unset; the venv's own state too
    assert leftover == ""


@pytest.mark.parametrize("shell", SHELLS)
def test_a_second_venv_replaces_the_first(
    request: pytest.FixtureRequest, prefixes: dict[str, Path], shell: str
) -> None:
    """`. other/bin/activate` while one provision venv is active: only the second one's set-up."""
    first, second = CASES["pip"], CASES["system"]
    values = BEFORE["set"]
    (start, one, two, after), leftover = run_steps(
        shell,
        values,
        [activate(first, prefixes["pip"]), activate(second, prefixes["system"]), "deactivate"],
    )
    assert {v: one[v] for v in HOOKED} == first.active(prefixes["pip"], values)
    assert {v: two[v] for v in HOOKED} == second.active(prefixes["system"], values)
    assert two["VIRTUAL_ENV"] == str(prefixes["system"])
    assert after == start and leftover == ""


@pytest.mark.parametrize("shell", SHELLS)
def test_deactivate_without_activate_changes_nothing(shell: str) -> None:
    (start, after), leftover = run_steps(
        shell, BEFORE["set"], [f". {shlex.quote(str(HOOKS / 'deactivate.sh'))}"]
    )
    assert after == start and leftover == ""


@pytest.mark.parametrize("shell", SHELLS)
def test_activate_without_runtime_env_fails_and_changes_nothing(tmp_path: Path, shell: str) -> None:
    script = (
        "LD_LIBRARY_PATH=/keep; export LD_LIBRARY_PATH\n"
        f"_provision_root={shlex.quote(str(tmp_path))}\n"
        f". {shlex.quote(str(HOOKS / 'activate.sh'))} || echo returned $?\n"
        'echo "$LD_LIBRARY_PATH ${_provision_root-unset}"'
    )
    proc = subprocess.run(
        [_shell(shell), "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.stdout == "returned 1\n/keep unset\n"
    assert proc.stderr.count("\n") == 1 and "etc/provision/runtime.env" in proc.stderr


def test_install_hooks_writes_the_runtime_and_hooks_bin_activate_once(
    prefixes: dict[str, Path], tmp_path: Path
) -> None:
    case = CASES["system"]
    prefix = tmp_path / "venv"
    make_venv(prefix)
    env = render_env(tmp_path / "envs", case.spec())
    for _ in range(2):
        prefix_hooks.install_hooks(env, prefix, case.extra)
    activate_text = (prefix / "bin" / "activate").read_text()
    assert activate_text.count("# >>> provision hooks >>>") == 1
    assert activate_text.count("# <<< provision hooks <<<") == 1
    installed = prefix / environment.INSTALLED_RUNTIME
    values = environment.parse_runtime(installed.read_text())
    assert values == {**environment.runtime_values(case.spec()), **case.extra}
    for script in ("activate.sh", "deactivate.sh"):
        assert (installed.parent / script).read_bytes() == (HOOKS / script).read_bytes()
    conda = prefixes["conda-cuda12"] / "etc" / "conda"
    assert (conda / "activate.d" / "provision.sh").read_bytes() == (
        HOOKS / "conda-activate.sh"
    ).read_bytes()
    assert (conda / "deactivate.d" / "provision.sh").read_bytes() == (
        HOOKS / "conda-deactivate.sh"
    ).read_bytes()


@pytest.mark.parametrize(
    "script",
    [name for name in sorted(p.name for p in HOOKS.glob("*.sh"))],
)
def test_hook_scripts_pass_shellcheck(script: str) -> None:
    """As the shell each declares (`# shellcheck shell=`): they are sourced, never run."""
    if not SHELLCHECK.exists():
        pytest.skip(f"shellcheck is not installed next to {sys.executable}")
    proc = subprocess.run(
        [str(SHELLCHECK), str(HOOKS / script)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- provision_env_hook: no activation at all --------------------------------------------------

# Two libraries under CUDA's names; the first one sorted (cublas/ before cuda_runtime/) needs
# the second, so it loads only when the hook tries it again.
LIBRARIES = {
    "cuda_runtime/lib/libcudart.so.12": ("int cudart_version(void) { return 12000; }\n", None),
    "cublas/lib/libcublasLt.so.12": (
        "int cudart_version(void);\nint cublaslt_version(void) { return cudart_version(); }\n",
        "libcudart.so.12",
    ),
}
FAKE_TENSORFLOW = '''\
"""Not TensorFlow: reports what the process has when `import tensorflow` runs."""
import atexit
import json
import os
import sys

WATCH = ("libcudart.so.12", "libcublasLt.so.12")
VARIABLES = ("LD_LIBRARY_PATH", "XLA_FLAGS", "CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH",
             "PROVISION_GPU_MEMORY_LIMIT_MIB")
with open("/proc/self/maps") as fh:
    mapped = sorted({os.path.basename(ln.split()[-1]) for ln in fh if ln.rstrip().endswith(WATCH)})
hook = sys.modules.get("provision_env_hook")
print(json.dumps({
    "mapped": mapped,
    "environ": {k: os.environ.get(k) for k in VARIABLES},
    "loaded": [os.path.basename(p) for p in hook.state["loaded"]] if hook else None,
    "failed": sorted(os.path.basename(p) for p in hook.state["failed"]) if hook else None,
}))
limits = []
configured = {}


class Device:
    def __init__(self, name):
        self.name, self.device_type = name, "GPU"


GPUS = [Device("GPU:0"), Device("GPU:1")]


class config:
    @staticmethod
    def list_physical_devices(kind):
        return GPUS if kind == "GPU" else []

    @staticmethod
    def get_logical_device_configuration(device):
        return configured.get(device.name)

    @staticmethod
    def set_logical_device_configuration(device, configurations):
        configured[device.name] = configurations
        limits.append([device.name, [c.memory_limit for c in configurations]])

    class LogicalDeviceConfiguration:
        def __init__(self, memory_limit=None):
            self.memory_limit = memory_limit

    class experimental:
        @staticmethod
        def get_memory_growth(device):
            return False


atexit.register(lambda: print(json.dumps({"limits": limits})))
'''


@pytest.fixture(scope="module")
def cuda_libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two libraries, built once: a folder holding nvidia/<package>/lib/<library>."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the fake CUDA libraries are built with it")
    if not Path("/proc/self/maps").is_file():
        pytest.skip("no /proc/self/maps: the fake tensorflow reports mapped libraries from it")
    root = tmp_path_factory.mktemp("cuda-libraries")
    built = root / "nvidia"
    for rel, (source, needs) in LIBRARIES.items():
        target = built / rel
        target.parent.mkdir(parents=True)
        (root / "src.c").write_text(source)
        argv = [gcc, "-shared", "-fPIC", f"-Wl,-soname,{target.name}", "-o", str(target)]
        argv.append(str(root / "src.c"))
        if needs:
            dependency = next(built.rglob(needs))
            argv += [f"-L{dependency.parent}", f"-l:{needs}"]  # no rpath: found only if loaded
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
    # As built, the dependent library does not load on its own: the retry is really needed.
    alone = subprocess.run(
        [sys.executable, "-I", "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])",
         str(built / "cublas/lib/libcublasLt.so.12")],
        capture_output=True, text=True, timeout=60, env={"PATH": BASE_PATH}, check=False,
    )  # fmt: skip
    assert alone.returncode != 0 and "libcudart.so.12" in alone.stderr
    return built


@pytest.fixture(params=[("growth", "0,1"), ("4096", None)], ids=["growth-devices", "limit"])
def hooked_venv(
    request: pytest.FixtureRequest, cuda_libraries: Path, tmp_path: Path
) -> tuple[Path, Case]:
    """A venv of this host's Python, built and hooked as `provision install` does for the pip
    path, with the libraries and a fake tensorflow in its site-packages."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    memory, gpus = request.param
    release = next((r for r in FIXTURE.releases if r.pip_wheels and python in r.python), None)
    if release is None:
        pytest.skip(f"no pip release of the golden matrix supports Python {python}")
    case = Case(release.tf, "pip", python, memory, gpus)
    prefix = tmp_path / "a venv"
    make_venv(prefix)
    prefix_hooks.install_hooks(render_env(tmp_path / "envs", case.spec()), prefix)
    site = environment.site_packages(prefix, python)
    shutil.copytree(cuda_libraries, site / "nvidia")
    (site / "tensorflow").mkdir()
    (site / "tensorflow" / "__init__.py").write_text(FAKE_TENSORFLOW)
    return prefix, case


def python_in(prefix: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(environment.interpreter(prefix)), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": BASE_PATH, "HOME": "/nonexistent", **env},
            cwd="/",
            check=False,
        )

    return run


def _reports(proc: subprocess.CompletedProcess[str]) -> tuple[dict[str, object], object]:
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    return first, second["limits"]


@pytest.mark.parametrize("isolated", [False, True], ids=["plain", "isolated"])
def test_importing_tensorflow_loads_the_libraries_and_sets_the_policy(
    hooked_venv: tuple[Path, Case], isolated: bool
) -> None:
    prefix, case = hooked_venv
    run = python_in(prefix)
    proc = run(*(["-I"] if isolated else []), "-c", "import tensorflow")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    report, limits = _reports(proc)
    # Mapped before TensorFlow's own code runs; the dependent one once its dependency was loaded.
    assert report["mapped"] == ["libcublasLt.so.12", "libcudart.so.12"]
    assert report["loaded"] == ["libcudart.so.12", "libcublasLt.so.12"]
    assert report["failed"] == []
    site = environment.site_packages(prefix, case.python)
    assert report["environ"] == {
        "LD_LIBRARY_PATH": None,  # the loader's path cannot change in-process; nothing pretends
        "XLA_FLAGS": f"--xla_gpu_cuda_data_dir={site}/nvidia/cuda_nvcc",
        "CUDA_VISIBLE_DEVICES": case.gpus,
        "TF_FORCE_GPU_ALLOW_GROWTH": "true" if case.memory == "growth" else None,
        "PROVISION_GPU_MEMORY_LIMIT_MIB": None if case.memory == "growth" else case.memory,
    }
    want = [] if case.memory == "growth" else [[gpu, [4096]] for gpu in ("GPU:0", "GPU:1")]
    assert limits == want


def test_a_process_without_tensorflow_is_left_alone(hooked_venv: tuple[Path, Case]) -> None:
    prefix, _ = hooked_venv
    proc = python_in(prefix)(
        "-c",
        "import os, sys; print('tensorflow' in sys.modules); "
        "print(any('libcud' in line or 'libcublas' in line for line in open('/proc/self/maps'))); "
        "print(sorted(k for k in os.environ if 'CUDA' in k or 'XLA' in k or 'TF_' in k "
        "or 'PROVISION' in k))",
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "False\nFalse\n[]\n"


def test_a_process_keeps_what_it_set_itself(hooked_venv: tuple[Path, Case]) -> None:
    prefix, case = hooked_venv
    own = {
        "CUDA_VISIBLE_DEVICES": "3",
        "TF_FORCE_GPU_ALLOW_GROWTH": "false",
        "PROVISION_GPU_MEMORY_LIMIT_MIB": "100",
        "XLA_FLAGS": "--xla_dump_to=/tmp/dump",
    }
    proc = python_in(prefix)("-c", "import tensorflow", **own)
    assert proc.returncode == 0, proc.stderr
    report, limits = _reports(proc)
    site = environment.site_packages(prefix, case.python)
    assert report["environ"] == {
        **own,
        "LD_LIBRARY_PATH": None,
        # Other flags are kept and the data dir is added, unless the process named one itself.
        "XLA_FLAGS": f"--xla_dump_to=/tmp/dump --xla_gpu_cuda_data_dir={site}/nvidia/cuda_nvcc",
    }
    assert limits == [["GPU:0", [100]], ["GPU:1", [100]]]
    assert report["mapped"] == ["libcublasLt.so.12", "libcudart.so.12"]
    mine = python_in(prefix)("-c", "import tensorflow", XLA_FLAGS="--xla_gpu_cuda_data_dir=/mine")
    environ = _reports(mine)[0]["environ"]
    assert isinstance(environ, dict) and environ["XLA_FLAGS"] == "--xla_gpu_cuda_data_dir=/mine"
