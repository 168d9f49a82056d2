"""Bundles of the conda and system paths, a host without provision, and a real TensorFlow.

- conda: the suite's real local channel (tests/realconda.py: this host's CPython, real pip, NVIDIA's
  real libcudart and libcudnn), locked by the real conda-lock through provision-conda; installed
  with no network from a lock whose URLs name the bundle's files.
- system: --with-toolkit carries the fake runfile and cuDNN archive of tests/fakes/nvidia.py (the
  test writes their checksums and a local URL into system.env and reseals it, as a matrix with
  those checksums would render it); install-system.sh runs them under --prefix, no network.
- bootstrap: bootstrap.py, taken out of a split bundle with tail and tar as the README says, run by
  a bare CPython installs provision into PROVISION_HOME/venv and builds the environment.
- TensorFlow: the committed envs/tf2.13-pip (2.2 GB of wheels, downloaded once into the test
  cache), bundled, installed with no network and verified on the CPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from bundletools import (
    PYTHON,
    cache_root,
    leftovers,
    needs_unshare,
    offline,
    provision_offline,
)
from clitools import run_cli
from tinyindex import Env, Index, reseal, system_release

from provision import environment, matrix, tools
from provision.install.place import state_of
from provision.matrix.spec import all_specs

ROOT = Path(__file__).resolve().parent.parent


def bundle(name: str, out: Path, dest: Path, *extra: str) -> Path:
    code, text = run_cli("bundle", name, "--out", str(out), "-o", str(dest), "-q", *extra)
    assert code == 0, text
    return dest


# -- conda ------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_unshare
def test_conda_bundle_installs_with_no_network(
    real_conda_channel: tuple, index: Index, wheelhouse: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import yaml

    spec, channel = real_conda_channel
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "envs"
    code, text = run_cli("render", "--tf", spec.release.tf, "--path", "conda", "--python",
                         spec.python, "--name", "cb", "--out", str(out))  # fmt: skip
    assert code == 0, text
    env_file = out / "cb" / "environment.yml"
    data = yaml.safe_load(env_file.read_text())
    data["dependencies"] = [d for d in data["dependencies"] if not isinstance(d, dict)]
    data["dependencies"].append({"pip": [index.add("1.0").split(" ")[0]]})
    env_file.write_text(yaml.safe_dump(data, sort_keys=False))
    reseal(out / "cb", "environment.yml")
    locked = subprocess.run(
        [sys.executable, "-m", "provision", "lock", "cb", "--out", str(out),
         "--channel", channel.url, "--solver", "builtin"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert locked.returncode == 0, locked.stderr
    made = bundle("cb", out, tmp_path / "cb.tar", "--provision-wheels", str(wheelhouse),
                  "--cache-dir", str(tmp_path / "bundle-cache"))  # fmt: skip

    home = tmp_path / "home"
    done = provision_offline(
        "install", "--from-bundle", str(made), "--solver", "builtin", "--no-verify", "--json",
        env={"PROVISION_HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    prefix = Path(json.loads(done.stdout)["install"]["prefix"])
    assert state_of(prefix) == "complete" and (prefix / "conda-meta").is_dir()
    shown = subprocess.run(
        [prefix / "bin" / "python", "-c",
         "import provision_tiny, sys; print(provision_tiny.VERSION, sys.prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert shown == ["1.0", str(prefix)]
    assert list((prefix / "lib").glob(f"libcudart.so.{spec.cuda.major}*"))
    # conda-meta says where each package came from: the channel it was locked against.
    meta = json.loads(next((prefix / "conda-meta").glob("python-3*.json")).read_text())
    assert meta["url"].startswith(channel.url)
    assert leftovers(home / "unpack") == []


# -- system, with the toolkit -------------------------------------------------------------------


@pytest.fixture(scope="module")
def fakes(nvidia_artifacts: Callable[..., object]) -> object:
    """The fake runfile and cuDNN archive, built before the test points pip at its own index."""
    tf, _ = system_release()
    spec = next(s for s in all_specs(matrix.load()) if s.path == "system" and s.release.tf == tf)
    return nvidia_artifacts(spec.cuda, spec.cudnn)


@needs_unshare
def test_system_bundle_carries_the_toolkit(
    fakes: object, index: Index, wheelhouse: Path, tmp_path: Path
) -> None:
    tf, python = system_release()
    out = tmp_path / "envs"
    code, text = run_cli("render", "--tf", tf, "--path", "system", "--python", python,
                         "--name", "sys", "--out", str(out))  # fmt: skip
    assert code == 0, text
    env = environment.load(out / "sys")
    art = fakes
    for path in (art.runfile, art.cudnn_archive):  # type: ignore[attr-defined]
        shutil.copyfile(path, index.root / path.name)
    files = index.url.removesuffix("/simple") + "/files"
    values = {
        "RUNFILE_URL": f"{files}/{art.runfile.name}",  # type: ignore[attr-defined]
        "RUNFILE_SHA256": art.runfile_sha256,  # type: ignore[attr-defined]
        "RUNFILE_MD5": "",
        "CUDNN_URL": f"{files}/{art.cudnn_archive.name}",  # type: ignore[attr-defined]
        "CUDNN_SHA256": art.cudnn_sha256,  # type: ignore[attr-defined]
    }
    system_env = out / "sys" / "system.env"
    text = system_env.read_text()
    for key, value in values.items():
        text = re.sub(rf"(?m)^{key}=.*$", f"{key}={value}" if value else f"{key}=''", text)
    system_env.write_text(text)
    reseal(out / "sys", "system.env")
    Env(out, "sys", tmp_path / "home").lock(index.add("1.0"))
    made = bundle("sys", out, tmp_path / "sys.tar", "--with-toolkit", "--provision-wheels",
                  str(wheelhouse), "--cache-dir", str(tmp_path / "bundle-cache"))  # fmt: skip
    listed = subprocess.run(["tar", "-tf", made], capture_output=True, text=True, check=True)
    assert f"provision-bundle/toolkit/{art.runfile.name}" in listed.stdout  # type: ignore[attr-defined]

    home, prefix = tmp_path / "home", tmp_path / "root"
    done = provision_offline(
        "install", "--from-bundle", str(made), "--prefix", str(prefix), "--no-verify", "--",
        "--skip-driver-check",
        env={"PROVISION_HOME": str(home), "TMPDIR": str(tmp_path),
             "PROVISION_VENV_PACKAGE": "provision-tiny==1.0"},  # what the script checks for
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cuda = prefix / f"cuda-{env.spec.cuda.version}"
    assert (cuda / "bin" / "ptxas").is_file()
    assert list((cuda / "lib64").glob(f"libcudnn.so.{env.spec.cudnn.major}*"))
    venv_python = prefix / "venvs" / "sys" / "bin" / "python"
    shown = subprocess.run([venv_python, "-c", "import provision_tiny; print('ok')"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert shown.stdout.strip() == "ok"


def test_with_toolkit_is_for_the_system_path(index: Index, env: Env, tmp_path: Path) -> None:
    env.lock(index.add("1.0"))
    code, text = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(tmp_path / "b"),
                         "--with-toolkit")  # fmt: skip
    assert code == 2 and "--with-toolkit is for the system path" in text


# -- a warm cache --------------------------------------------------------------------------------


@needs_unshare
def test_a_warm_cache_builds_the_same_bundle_with_no_network(
    wheelhouse: Path, index: Index, env: Env, tmp_path: Path
) -> None:
    """The default way (provision's own wheel from the running package, its dependencies through
    pip from the cache): once with the index, once more in a namespace with no network at all."""
    env.lock(index.add("1.0"))
    cache = tmp_path / "cache"
    shutil.copytree(cache_root() / "wheels", cache / "wheels", copy_function=os.link)
    first = bundle(env.name, env.out, tmp_path / "a.tar", "--cache-dir", str(cache))
    again = provision_offline("bundle", env.name, "--out", str(env.out), "-o",
                              str(tmp_path / "b.tar"), "--cache-dir", str(cache))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "downloading" not in again.stderr
    assert (tmp_path / "b.tar").read_bytes() == first.read_bytes()


# -- a host without provision ---------------------------------------------------------------------


def _bare_python() -> Path:
    """This host's CPython X.Y itself, with no provision installed into it."""
    base = Path(sys.base_prefix) / "bin" / f"python{PYTHON}"
    probe = subprocess.run([base, "-I", "-c", "import provision"], capture_output=True, check=False)
    if not base.is_file() or probe.returncode == 0:
        pytest.skip(f"no Python {PYTHON} without provision on this host")
    return base


@pytest.mark.slow
@needs_unshare
def test_bootstrap_installs_provision_then_the_bundle(
    wheelhouse: Path, index: Index, env: Env, tmp_path: Path
) -> None:
    """No --provision-wheels: provision's wheels as `provision bundle` gathers them by default
    (its own wheel from the running package, its dependencies from the cache), in parts."""
    python = _bare_python()
    env.lock(index.add("1.0"))
    cache = tmp_path / "cache"
    # Warm (the wheelhouse fixture filled it): no index is asked for provision's dependencies.
    shutil.copytree(cache_root() / "wheels", cache / "wheels", copy_function=os.link)
    first = bundle(env.name, env.out, tmp_path / "b" / "tiny.tar", "--split", "30M",
                   "--cache-dir", str(cache)).with_name("tiny.tar.001")  # fmt: skip
    script = tmp_path / "bootstrap.py"
    extract = f"tail -c +513 {first} | tar -xO --occurrence=1 provision-bundle/bootstrap.py"
    script.write_bytes(
        subprocess.run(["sh", "-c", extract], capture_output=True, check=True).stdout
    )
    home = tmp_path / "home"
    done = offline([str(python), str(script), str(first), "--no-verify"],
                   env={"PROVISION_HOME": str(home), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"installing provision {_version()} into {home / 'venv'}" in done.stdout
    provision = home / "venv" / "bin" / "provision"
    listed = offline([str(provision), "list", "--json"], env={"PROVISION_HOME": str(home)})
    assert listed.returncode == 0 and '"tiny"' in listed.stdout, listed.stderr
    assert state_of(home / "envs" / "tiny") == "complete"


def _version() -> str:
    from provision import __version__

    return __version__


# -- a real TensorFlow ---------------------------------------------------------------------------


@pytest.mark.slow
@needs_unshare
def test_tensorflow_bundle_installs_and_verifies_with_no_network(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """envs/tf2.13-pip as committed: its 49 locked wheels (2.2 GB, cached after the first run)."""
    name = "tf2.13-pip"
    env = environment.load(ROOT / "envs" / name)
    if not tools.has_python(env.python):
        pytest.skip(f"needs Python {env.python}")
    made = bundle(name, ROOT / "envs", tmp_path / f"{name}.tar", "--cache-dir",
                  str(cache_root().with_name("bundle-cache-tf")),
                  "--provision-wheels", str(wheelhouse))  # fmt: skip
    home = tmp_path / "home"
    done = provision_offline("install", "--from-bundle", str(made), "--json",
                             env={"PROVISION_HOME": str(home)})  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["verify"]["ok"] is True
    assert report["verify"]["report"]["environment"]["tensorflow"] == "2.13.1"
    assert report["install"]["installer"] == "uv"
    made.unlink()
    shutil.rmtree(home, ignore_errors=True)
    os.sync()
