"""provision install: builds from the lock, resumes after SIGKILL, never shows a half build as done.

The fast tests install a small real wheel from a package index served by the test itself (an HTTP
server that can also fail or stall a download on purpose), into real venvs made from this host's
Python, through the real CLI. The slow tests (tests/test_create.py) install TensorFlow itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import run_cli
from tinyindex import ROOT, Env, Index, bash, pip_release, site_packages

from provision import environment, matrix, tools
from provision.errors import InstallError
from provision.install import prefix_hooks
from provision.install.build import inputs_digest
from provision.install.owned import MARKER
from provision.install.place import state_of
from provision.matrix import kinds

# -- building --------------------------------------------------------------------------------


def test_install_builds_a_venv_from_the_lock_with_hooks(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    code, out = run_cli("install", env.name, "--out", str(env.out), "--json")
    assert code == 0, out
    report = json.loads(out)
    prefix = Path(report["prefix"])
    assert prefix == env.prefix and report["skipped"] is False and report["installer"] == "uv"
    python = prefix / "bin" / "python"
    got = subprocess.run(
        [python, "-c", "import sys, provision_tiny; print(provision_tiny.VERSION, sys.prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert got == ["1.0", str(prefix)]
    marker = json.loads((prefix / MARKER).read_text())
    lock_sha = hashlib.sha256((env.dir / "requirements.lock").read_bytes()).hexdigest()
    assert marker["state"] == "complete" and marker["lock_sha256"] == lock_sha

    # Activation runs the rendered hooks; deactivation puts everything back.
    nvidia_lib = site_packages(prefix) / "nvidia" / "provision_tiny" / "lib"
    shown = bash(
        f"export LD_LIBRARY_PATH=/opt/before; . {prefix}/bin/activate; "
        'echo "$LD_LIBRARY_PATH|$TF_FORCE_GPU_ALLOW_GROWTH|$CUDA_VISIBLE_DEVICES|'
        '$(command -v python)"; '
        f". {prefix}/bin/activate; "  # activating twice must not stack the library path
        'echo "$LD_LIBRARY_PATH"; deactivate; '
        'echo "$LD_LIBRARY_PATH|${TF_FORCE_GPU_ALLOW_GROWTH-unset}|${CUDA_VISIBLE_DEVICES-unset}"'
    ).splitlines()
    assert shown == [
        f"{nvidia_lib}:/opt/before|true|0|{python}",
        f"{nvidia_lib}:/opt/before",
        "/opt/before|unset|unset",
    ]


def test_a_gpu_memory_limit_is_installed_as_a_start_up_hook(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tf, python = pip_release()
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    out = tmp_path / "envs"
    code, text = run_cli(
        "render", "--tf", tf, "--path", "pip", "--python", python, "--name", "lim",
        "--out", str(out), "--gpu-memory", "1024",
    )  # fmt: skip
    assert code == 0, text
    limited = Env(out, "lim", tmp_path / "home")
    limited.lock(index.add("1.0"))
    code, text = run_cli("install", "lim", "--out", str(out), "--json")
    assert code == 0, text
    prefix = Path(json.loads(text)["prefix"])
    site = site_packages(prefix)
    assert (site / "provision_env_hook.pth").is_file()
    runtime = (prefix / "etc" / "provision" / "runtime.env").read_text()
    assert "PROVISION_GPU_MEMORY='1024'" in runtime
    # The interpreter imports the hook at start-up, without activation; it waits for TensorFlow.
    shown = subprocess.run(
        [prefix / "bin" / "python", "-c",
         "import sys; print('provision_env_hook' in sys.modules, 'tensorflow' in sys.modules)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert shown == ["True", "False"]


def test_activation_env_gives_a_direct_interpreter_what_activation_gives(
    index: Index, env: Env
) -> None:
    env.lock(index.add("1.0"))
    assert run_cli("install", env.name, "--out", str(env.out))[0] == 0
    extra = environment.activation_env(env.prefix, kinds.of("pip"))
    nvidia_lib = site_packages(env.prefix) / "nvidia" / "provision_tiny" / "lib"
    assert extra["VIRTUAL_ENV"] == str(env.prefix)
    assert extra["LD_LIBRARY_PATH"].split(":")[0] == str(nvidia_lib)
    assert extra["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    seen = subprocess.run(
        [env.prefix / "bin" / "python", "-c", "import os; print(os.environ['LD_LIBRARY_PATH'])"],
        env={**os.environ, **extra}, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert seen.split(":")[0] == str(nvidia_lib)


def test_second_install_changes_nothing_and_force_rebuilds(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    assert run_cli("install", env.name, "--out", str(env.out))[0] == 0
    marker = env.prefix / MARKER
    before = marker.stat().st_mtime_ns, (env.prefix / "bin" / "python").stat().st_ino
    index.mode = "fail"  # a second run must not even ask the index
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0 and "nothing to do" in out
    assert (marker.stat().st_mtime_ns, (env.prefix / "bin" / "python").stat().st_ino) == before
    index.mode = "ok"
    code, out = run_cli("install", env.name, "--out", str(env.out), "--force")
    assert code == 0 and out.startswith("built ")
    assert marker.stat().st_mtime_ns != before[0]


def test_pip_installer_is_the_fallback(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    code, out = run_cli("install", env.name, "--out", str(env.out), "--installer", "pip", "--json")
    assert code == 0, out
    assert json.loads(out)["installer"] == "pip"
    assert (env.prefix / "bin" / "pip").exists()  # a stdlib venv, not uv's
    assert list(site_packages(env.prefix).glob("provision_tiny-1.0.dist-info"))


def test_missing_lock_says_how_to_make_it(env: Env) -> None:
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1
    assert f"run `provision lock {env.name}` first" in out
    assert not env.prefix.exists()


def test_unrendered_environment_says_how_to_render(tmp_path: Path) -> None:
    code, out = run_cli("install", "nothing-here", "--out", str(tmp_path))
    assert code == 2 and "render it (provision render --tf X.Y --name nothing-here)" in out


def test_a_lock_edited_after_it_was_made_is_refused_before_anything_lands(
    index: Index, env: Env
) -> None:
    env.lock(index.add("1.0"))
    lock = env.dir / "requirements.lock"
    lock.write_text(lock.read_text().replace("--hash=sha256:", "--hash=sha256:0000"))
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1
    assert "refusing to install tiny" in out and "the lock was edited after it was made" in out
    assert not env.prefix.exists()
    assert not index.requested.is_set()  # nothing was even downloaded


def test_failing_download_leaves_nothing_presented_as_done(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    index.mode = "fail"
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1
    assert "uv pip install failed" in out and "500" in out
    assert "check the package index and network" in out
    assert not env.prefix.exists()


def test_failed_rebuild_puts_the_working_environment_back(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    assert run_cli("install", env.name, "--out", str(env.out))[0] == 0
    env.lock(index.add("2.0"))
    index.mode = "fail"
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1 and "nothing was installed" in out
    # The 1.0 environment is back, complete for its own (old) lock, and not taken for the new one.
    assert list(site_packages(env.prefix).glob("provision_tiny-1.0.dist-info"))
    assert state_of(env.prefix) == "complete"
    assert state_of(env.prefix, inputs_digest(environment.load(env.dir))) != "complete"
    index.mode = "ok"
    assert run_cli("install", env.name, "--out", str(env.out))[0] == 0
    assert list(site_packages(env.prefix).glob("provision_tiny-2.0.dist-info"))
    assert not list(env.prefix.parent.glob("*.provision-old"))


def test_a_sync_takes_uv_s_cache_first_and_the_index_for_what_it_lacks(
    index: Index, tmp_path: Path
) -> None:
    """add/drop install the difference offline_first: from uv's cache alone when it holds every
    file (no request to revalidate the pages the lock has just read), else from the index, the
    failed cache-only attempt unseen."""
    from provision.install import installers
    from provision.progress import Event

    part = tmp_path / "difference.lock"
    part.write_text(index.add("1.0"), encoding="utf-8")
    venv = tmp_path / "venv"
    subprocess.run([tools.uv(), "venv", "--python", sys.executable, str(venv)],
                   check=True, capture_output=True)  # fmt: skip
    python = venv / "bin" / "python"
    uninstall = [tools.uv(), "pip", "uninstall", "--python", str(python), "provision-tiny"]

    def install(events: list[Event]) -> None:
        argv = installers.uv_install_argv(tools.uv(), python, part)
        installers.run_step("uv pip install", argv, venv, report=events.append, offline_first=True)
        assert (site_packages(venv) / "provision_tiny" / "__init__.py").is_file()

    said: list[Event] = []
    install(said)  # not cached yet: from the index
    assert index.requested.is_set()
    assert not [e for e in said if "offline" in e.text.lower() or "error" in e.text.lower()], said
    subprocess.run(uninstall, check=True, capture_output=True)
    # Cached now: installed with the index down (an online run fails to revalidate its page).
    index.mode = "down"
    install([])
    subprocess.run(uninstall, check=True, capture_output=True)
    with pytest.raises(InstallError):
        installers.run_step(
            "uv pip install", installers.uv_install_argv(tools.uv(), python, part), venv
        )


def test_install_killed_midway_is_completed_by_running_it_again(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    index.mode = "stall"
    argv = [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out)]
    proc = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert index.requested.wait(60), "the install never reached the download"
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # provision and the installer it runs
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert state_of(env.prefix) == "building"  # there, and marked as not done
    index.release.set()
    index.mode = "ok"
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0 and out.startswith("built "), out
    assert state_of(env.prefix) == "complete"
    assert list(site_packages(env.prefix).glob("provision_tiny-1.0.dist-info"))


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if text in cmdline and str(os.getpid()) != entry.name:
                    found.append(int(entry.name))
    return found


def test_no_installer_outlives_provision_killed_alone(index: Index, env: Env) -> None:
    """SIGKILL to provision's PID only (not its group): the installer it started dies with it, so
    nothing writes into the prefix while a re-run rebuilds it."""
    env.lock(index.add("1.0"))
    index.mode = "stall"
    argv = [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert index.requested.wait(60), "the install never reached the download"
        assert _processes_mentioning(str(env.prefix)), "no installer child was running"
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(env.prefix)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning(str(env.prefix)) == []
    index.release.set()
    index.mode = "ok"
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0 and out.startswith("built "), out


def test_a_prefix_directory_made_beforehand_keeps_its_owner_and_mode(
    index: Index, env: Env
) -> None:
    env.lock(index.add("1.0"))
    env.prefix.mkdir(parents=True)
    env.prefix.chmod(0o2770)
    index.mode = "fail"
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1, out
    assert env.prefix.is_dir() and list(env.prefix.iterdir()) == []  # emptied, not deleted
    assert env.prefix.stat().st_mode & 0o7777 == 0o2770
    index.mode = "ok"
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 0, out
    assert env.prefix.stat().st_mode & 0o7777 == 0o2770
    assert state_of(env.prefix) == "complete"


def test_two_installs_of_one_prefix_do_not_race(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    index.mode = "stall"
    argv = [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out)]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert index.requested.wait(60), "the first install never reached the download"
        code, out = run_cli("install", env.name, "--out", str(env.out))
        assert code == 1 and "another provision command is building or changing" in out
        index.release.set()
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err
    assert state_of(env.prefix) == "complete"


def test_a_directory_not_built_by_provision_is_never_replaced(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    theirs = env.prefix / "precious.txt"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("keep me\n")
    for extra in ([], ["--force"]):
        code, out = run_cli("install", env.name, "--out", str(env.out), *extra)
        assert code == 1 and "was not built by provision" in out
    assert theirs.read_text() == "keep me\n"


def test_explicit_prefix(index: Index, env: Env, tmp_path: Path) -> None:
    env.lock(index.add("1.0"))
    target = tmp_path / "elsewhere" / "venv"
    code, out = run_cli(
        "install", env.name, "--out", str(env.out), "--prefix", str(target), "--json"
    )
    assert code == 0, out
    assert json.loads(out)["prefix"] == str(target)
    assert state_of(target) == "complete" and not env.prefix.exists()


def _can_mount_tmpfs() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True, check=False,
    )  # fmt: skip
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and unshare to mount a small tmpfs")
def test_full_disk_fails_with_a_clear_message(index: Index, env: Env, tmp_path: Path) -> None:
    env.lock(index.add("1.0", payload=8 << 20))  # 8 MiB into a 4 MiB file system
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f"mount -t tmpfs -o size=4m tmpfs {disk} && "
        f"{sys.executable} -m provision install {env.name} --out {env.out} --prefix {disk}/env; "
        f"rc=$?; ls -A {disk}; exit $rc"
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "No space left on device" in done.stderr
    assert "free disk space" in done.stderr
    assert done.stdout.strip() == ""  # the partial venv was removed, nothing claims to be done


def test_missing_python_names_the_version() -> None:
    with pytest.raises(InstallError, match=r"Python 2\.5 is not installed on this host"):
        tools.find_python("2.5")


def test_pyenv_shims_are_skipped_for_the_real_interpreters() -> None:
    version = "{}.{}".format(*sys.version_info[:2])
    found = tools.python_candidates(version)
    assert all(Path(p).parent.name != "shims" for p in found)
    assert tools.find_python(version).name == f"python{version}"


def test_extra_arguments_are_for_the_system_path_only(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    code, out = run_cli("install", env.name, "--out", str(env.out), "--", "--dry-run")
    assert code == 2 and "system path only" in out


# -- the conda path, for real, against a local channel -----------------------------------------

# Run by the environment's own interpreter: which libcudart / libcudnn the loader finds by SONAME
# (through the activation's library path) and the versions the libraries themselves report.
PROBE = r"""
import ctypes, json, sys
out = {"prefix": sys.prefix, "python": "%d.%d" % sys.version_info[:2]}
rt = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int()
out["cudart_rc"] = rt.cudaRuntimeGetVersion(ctypes.byref(v))
out["cudart"] = v.value
dnn = ctypes.CDLL(sys.argv[2])
dnn.cudnnGetVersion.restype = ctypes.c_size_t
out["cudnn"] = dnn.cudnnGetVersion()
print(json.dumps(out))
"""


def library_versions(
    python: Path, extra_env: dict[str, str], cuda_major: int, cudnn_major: int
) -> dict[str, object]:
    cudart = f"libcudart.so.{cuda_major}" if cuda_major >= 12 else f"libcudart.so.{cuda_major}.0"
    done = subprocess.run(
        [python, "-c", PROBE, cudart, f"libcudnn.so.{cudnn_major}"],
        env={**os.environ, **extra_env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def cudnn_version(number: int) -> str:
    """cudnnGetVersion's number as major.minor (cuDNN 9 counts major in 10000s, 8 in 1000s)."""
    major = number // 10000 if number >= 90000 else number // 1000
    minor = (number % 10000) // 100 if number >= 90000 else (number % 1000) // 100
    return f"{major}.{minor}"


@pytest.mark.slow
def test_conda_install_builds_a_working_prefix_from_a_local_channel(
    real_conda_channel: tuple, index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real conda-lock locks and installs through provision's built-in solver; the prefix holds
    a running Python, the pip part, the hooks, and NVIDIA's libcudart and libcudnn at the row's
    versions, found through the activation's library path."""
    import yaml

    spec, channel = real_conda_channel
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "envs"
    code, text = run_cli(
        "render", "--tf", spec.release.tf, "--path", "conda", "--python", spec.python,
        "--name", "conda-e2e", "--out", str(out),
    )  # fmt: skip
    assert code == 0, text
    # The pip part becomes the small wheel of the test's own index: TensorFlow itself is what
    # tests/test_create.py installs; here the conda side is under test, offline after the first run.
    env_file = out / "conda-e2e" / "environment.yml"
    data = yaml.safe_load(env_file.read_text())
    data["dependencies"] = [d for d in data["dependencies"] if not isinstance(d, dict)]
    data["dependencies"].append({"pip": [index.add("1.0").split(" ")[0]]})
    env_file.write_text(yaml.safe_dump(data, sort_keys=False))
    # In a process of its own, as users run it (conda-lock's imports warn, and tests turn
    # warnings into errors).
    locked = subprocess.run(
        [sys.executable, "-m", "provision", "lock", "conda-e2e", "--out", str(out),
         "--channel", channel.url, "--solver", "builtin"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert locked.returncode == 0, locked.stderr

    # The edit above is a hand edit of a rendered file: install refuses it unless --force.
    code, text = run_cli("install", "conda-e2e", "--out", str(out), "--solver", "builtin")
    assert code == 1 and "environment.yml changed since provision rendered it" in text
    code, text = run_cli(
        "install", "conda-e2e", "--out", str(out), "--solver", "builtin", "--json", "--force"
    )
    assert code == 0, text
    report = json.loads(text)
    prefix = Path(report["prefix"])
    assert report["installer"] == "conda-lock" and state_of(prefix) == "complete"
    assert (prefix / "conda-meta").is_dir()
    hooks = prefix_hooks.HOOKS_DIR
    assert (prefix / "etc/conda/activate.d/provision.sh").read_bytes() == (
        hooks / "conda-activate.sh"
    ).read_bytes()
    assert (prefix / "etc/conda/deactivate.d/provision.sh").read_bytes() == (
        hooks / "conda-deactivate.sh"
    ).read_bytes()
    python = prefix / "bin" / "python"
    shown = subprocess.run(
        [python, "-c", "import provision_tiny, sys; print(provision_tiny.VERSION, sys.prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert shown == ["1.0", str(prefix)]

    extra = environment.activation_env(prefix, kinds.of("conda"))
    assert extra["CONDA_PREFIX"] == str(prefix)
    assert extra["LD_LIBRARY_PATH"].split(":")[0] == str(prefix / "lib")
    found = library_versions(python, extra, spec.cuda.major, spec.cudnn.major)
    assert found["python"] == spec.python and found["prefix"] == str(prefix)
    assert found["cudart_rc"] == 0
    cudart = int(str(found["cudart"]))
    assert f"{cudart // 1000}.{cudart % 1000 // 10}" == spec.cuda.version
    assert cudnn_version(int(str(found["cudnn"]))) == spec.cudnn.version

    code, text = run_cli(
        "install", "conda-e2e", "--out", str(out), "--solver", "builtin", "--force"
    )
    assert code == 0 and "built" in text


def test_system_path_runs_the_rendered_script_with_prefix_and_python(tmp_path: Path) -> None:
    """provision install hands the script --prefix, the Python it found, and the options after --;
    the script itself is tested in tests/test_system_install.py."""
    rel = next(r for r in matrix.load().releases if tools.python_candidates(r.python[-1]))
    out = tmp_path / "envs"
    code, text = run_cli("render", "--tf", rel.tf, "--path", "system", "--out", str(out))
    assert code == 0, text
    (name,) = [p.name for p in out.iterdir()]
    code, text = run_cli("install", name, "--out", str(out))
    assert code == 1 and f"run `provision lock {name}` first" in text
    # The committed lock of the same release is fresh for these inputs (rendered the same way).
    shutil.copy(ROOT / "envs" / name / "requirements.lock", out / name / "requirements.lock")
    prefix = tmp_path / "root"
    code, text = run_cli(
        "install", name, "--out", str(out), "--prefix", str(prefix), "--",
        "--dry-run", "--skip-driver-check",
    )  # fmt: skip
    assert code == 0, text
    python = tools.find_python(rel.python[-1])
    assert f"would create {prefix}/venvs/{name} with {python}" in text
    assert "dry run: nothing was changed" in text
    assert f"(venv: {prefix}/venvs/{name})" in text
    assert not prefix.exists()


def _append_package(text: str) -> str:
    end = text.rindex("# provision-lock-end")
    extra = "colorama==0.4.6 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via provision-tiny\n"
    return text[:end] + extra + text[end:]


TAMPERINGS = {
    "appended package": (_append_package, "the lock was edited after it was made"),
    "truncated": (lambda t: t[: t.rindex("# provision-lock-end")], "the lock is truncated"),
    "empty": (lambda t: "", "the lock is empty"),
    "header removed": (
        lambda t: "".join(ln for ln in t.splitlines(True) if not ln.startswith("#")),
        "has no provision header",
    ),
}


@pytest.mark.parametrize("case", list(TAMPERINGS))
def test_a_tampered_lock_is_refused_before_anything_is_installed(
    index: Index, env: Env, case: str
) -> None:
    env.lock(index.add("1.0"))
    tamper, reason = TAMPERINGS[case]
    lock = env.dir / "requirements.lock"
    lock.write_text(tamper(lock.read_text()))
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1, out
    assert out.count("\n") == 1 and "refusing to install tiny" in out and reason in out
    assert "network" not in out
    assert not env.prefix.exists() and not index.requested.is_set()


def test_a_lock_older_than_its_inputs_is_refused(index: Index, env: Env) -> None:
    """The environment re-rendered for another release under the same name: the lock is stale."""
    env.lock(index.add("1.0"))
    other = next(r for r in matrix.load().releases if r.tf != environment.load(env.dir).request.tf
                 and r.pip_wheels and tools.has_python(r.python[-1]))  # fmt: skip
    code, out = run_cli(
        "render", "--tf", other.tf, "--path", "pip", "--python", other.python[-1],
        "--name", env.name, "--out", str(env.out), "--force",
    )  # fmt: skip
    assert code == 0, out
    code, out = run_cli("install", env.name, "--out", str(env.out))
    assert code == 1 and "is stale (requirements changed" in out, out
    assert not env.prefix.exists()


@pytest.mark.parametrize(
    "said",
    [
        # pip (install.sh's venv step): the disk error inside a "Connection broken" traceback
        'pip._vendor.urllib3.exceptions.ProtocolError: ("Connection broken: OSError(28, '
        "'No space left on device')\", OSError(28, 'No space left on device'))\n"
        "error: pip install into /x/venvs/tf failed (see above); run this script again to retry",
        # uv
        "error: Failed to install: tensorflow-2.13.1 (os error 28)",
    ],
)
def test_a_full_disk_is_not_blamed_on_the_network(said: str, tmp_path: Path) -> None:
    from provision import _proc
    from provision.install import installers

    done = _proc.Completed(("install.sh",), 1, "", said)
    message = str(installers.explain("install.sh", done, tmp_path / "venv"))
    assert "No space left on device" in message and "free disk space" in message
    assert "network" not in message and "index" not in message
