"""Real TensorFlow venvs for slow tests and benchmarks, built once and cached.

Each lives in $PROVISION_TEST_CACHE/venvs/locked or ~/.cache/provision-tests/venvs/locked as
tf<pin>-py<X.Y>: `pip install tensorflow==<pin>` (the CUDA build; without a GPU it runs on the
CPU) into a venv of the newest Python the release supports that is at most 3.12, the GPU
machine's Python, with the versions of the committed pip-path lock
(envs/tf<X.Y>-pip/requirements.lock) as constraints: the Keras, numpy and protobuf a user of that
environment gets, not whatever the index serves today (Keras 3.15 arrived after 2.21's lock and
changed what its models do on the CPU). A venv is built under a temporary name and renamed into
place only when complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from provision import tools
from provision.errors import InstallError
from provision.matrix import Release

NEWEST_PYTHON = Version("3.12")


def cache_dir() -> Path:
    configured = os.environ.get("PROVISION_TEST_CACHE")
    base = Path(configured) if configured else Path.home() / ".cache" / "provision-tests"
    return base / "venvs"


def python_for(release: Release) -> str:
    usable = [v for v in release.python if Version(v) <= NEWEST_PYTHON]
    return sorted(usable or release.python, key=Version)[-1]


def venv_dir(release: Release) -> Path:
    # In a folder of their own: the venv's name is the environment's label in bench's reports.
    return cache_dir() / "locked" / f"tf{release.pin}-py{python_for(release)}"


def constraints(release: Release) -> list[str]:
    """name==version of every package of the release's committed pip-path lock (none without)."""
    from provision.lock.requirements import pins

    envs = Path(__file__).resolve().parents[1] / "envs"
    lock = envs / f"tf{release.tf}-pip" / "requirements.lock"
    if not lock.is_file():
        return []
    return [f"{name}=={version}" for name, version in sorted(pins(lock.read_text()).items())]


def ensure(release: Release) -> Path:
    """The venv's interpreter, building the venv first when it is missing (minutes, ~2 GB)."""
    final = venv_dir(release)
    python = final / "bin" / "python"
    if python.exists():
        return python
    try:
        base = tools.find_python(python_for(release))
    except InstallError as exc:
        pytest.skip(f"cannot build a TensorFlow {release.pin} venv here: {exc}")
    tmp = final.with_name(final.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(base), "-m", "venv", str(tmp)], check=True)
    pinned = tmp / "constraints.txt"
    pinned.write_text("".join(c + "\n" for c in constraints(release)))
    subprocess.run(
        [
            str(tmp / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            f"tensorflow=={release.pin}",
            "--constraint",
            str(pinned),
        ],
        check=True,
        timeout=3600,
    )
    tmp.rename(final)
    return python


# A user's ~/.keras/keras.json that would sway the smoke test and the benchmark: Keras 3 reads its
# backend from it (JAX, absent from these environments: the import fails), and its float type and
# image layout. provision's runs use TensorFlow and Keras's defaults, and leave the file alone.
USER_KERAS_JSON = (
    '{"backend": "jax", "floatx": "float16", "epsilon": 0.1, "image_data_format": "channels_first"}'
)


def user_keras_home(tmp_path: Path) -> Path:
    folder = tmp_path / "user-keras"
    folder.mkdir()
    (folder / "keras.json").write_text(USER_KERAS_JSON)
    return folder
