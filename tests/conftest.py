"""Shared fixtures. Helpers add fixtures here; nobody rewrites another's."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import localchannel
import pytest
from fakes.nvidia import Artifacts, build_artifacts, install_nvidia_smi

from provision.matrix import Cuda, Cudnn
from provision.matrix.spec import EnvSpec


@pytest.fixture(scope="session")
def nvidia_artifacts(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[Cuda, Cudnn], Artifacts]:
    """build(cuda, cudnn) -> a fake CUDA runfile and a cuDNN archive of NVIDIA's names and layout,
    holding NVIDIA's real libcudart and libcudnn from PyPI wheels (fetched once, cached under
    ~/.cache/provision-tests). Built once per session per (CUDA, cuDNN); treat them as read-only."""
    made: dict[tuple[str, str], Artifacts] = {}

    if shutil.which("xz") is None:
        pytest.skip("xz is not installed: install.sh unpacks the .tar.xz cuDNN archives with it")

    def build(cuda: Cuda, cudnn: Cudnn) -> Artifacts:
        key = (cuda.version, cudnn.version)
        if key not in made:
            folder = tmp_path_factory.mktemp(f"nvidia-cuda{cuda.version}-cudnn{cudnn.version}")
            made[key] = build_artifacts(folder, cuda, cudnn)
        return made[key]

    return build


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> Callable[..., Path]:
    """make(driver, gpus=2) -> a directory holding an nvidia-smi that reports `driver` for each GPU
    (driver None: it fails like nvidia-smi without a loaded kernel module). Put it first on PATH."""
    count = 0

    def make(driver: str | None, gpus: int = 2) -> Path:
        nonlocal count
        count += 1
        folder = tmp_path / f"fake-nvidia-smi-{count}"
        folder.mkdir()
        install_nvidia_smi(folder, driver, gpus=gpus)
        return folder

    return make


# -- lock: a local conda-forge-like channel and a local package index (tests/localchannel.py) ---


@pytest.fixture(scope="session")
def local_channel(tmp_path_factory: pytest.TempPathFactory) -> localchannel.Channel:
    """A conda channel (file://, read-only for tests) with conda-forge's names, versions and
    dependency metadata for every CUDA stack the matrix uses; `.url`, `.archive(name, version)`."""
    return localchannel.conda_forge_like(tmp_path_factory.mktemp("conda-forge-like"))


@pytest.fixture(scope="session")
def local_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a PEP 503 simple index on 127.0.0.1 holding tiny wheels for every exact pin of every
    spec's pip part (conda and pip paths), so pip parts lock offline. Use as PIP_INDEX_URL."""
    from provision import matrix
    from provision.matrix import spec

    pins = {req for s in spec.all_specs(matrix.load()) for req in s.pip_requirements if "==" in req}
    root = localchannel.simple_index(tmp_path_factory.mktemp("simple-index"), sorted(pins))
    server = localchannel.Server(root)
    yield f"{server.url}/simple"
    server.stop()


@pytest.fixture
def silent_server() -> Iterator[localchannel.SilentServer]:
    """A TCP server that accepts connections and never answers (`.url`)."""
    server = localchannel.SilentServer()
    yield server
    server.stop()


@pytest.fixture
def stalling_server() -> Iterator[localchannel.StallingServer]:
    """An HTTP server that answers HEAD and never answers GET (`.url`)."""
    server = localchannel.StallingServer()
    yield server
    server.stop()


# -- install/create: a channel whose environments really run (tests/realconda.py) ---------------


@pytest.fixture(scope="session")
def real_conda_channel(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[EnvSpec, localchannel.Channel]:
    """(spec, channel): the conda environment the end-to-end tests build, and a conda-forge-like
    channel holding this host's real CPython for it, real pip, and NVIDIA's real libcudart and
    libcudnn in its cuda-cudart / cudatoolkit / cudnn packages. Skips when no release fits."""
    import realconda

    from provision import matrix

    m = matrix.load()
    spec = realconda.e2e_spec(m)
    if spec is None:
        pytest.skip("no conda release with cuDNN from the channel at a Python this host has")
    return spec, realconda.build(tmp_path_factory.mktemp("real-conda-channel"), m, spec)


# A small real wheel served by a local index, and an environment sealed to it (tests/tinyindex.py).
from tinyindex import built, env, index  # noqa: E402, F401

# TensorFlow-shaped wheels served with Range requests, for `matrix update` (tests/wheelindex.py).
from wheelindex import wheel_index  # noqa: E402, F401

# -- where tests write: temporary directories, and one cache under pytest's own ----------------


def pytest_configure(config: pytest.Config) -> None:
    """Before any test runs or starts a process: nothing a test runs writes into the user's
    home folder (~/.cache, ~/.local/share, ~/.ansible, ~/.ipython, ~/.keras, ~/.config). Caches go
    under pytest's cache directory (.pytest_cache/d/, kept between runs so the slow tests'
    downloads are fetched once; -p no:cacheprovider: a temporary folder), or PROVISION_TEST_CACHE
    when set; PROVISION_HOME and the data and kernel folders go into a folder of this session,
    removed at its end."""
    import os
    import tempfile

    if os.environ.get("PROVISION_TEST_CACHE"):
        cache = Path(os.environ["PROVISION_TEST_CACHE"])
    else:
        store = getattr(config, "cache", None)
        if store is not None:
            cache = Path(store.mkdir("provision-tests"))
        else:
            # No cache folder to keep (-p no:cacheprovider): a temporary one, removed at the end
            # like the session's (gigabytes once a TensorFlow venv is cached in it).
            cache = Path(tempfile.mkdtemp(prefix="provision-test-cache-"))
            config.stash[_TEMP_CACHE] = cache
        os.environ["PROVISION_TEST_CACHE"] = str(cache)
    session = Path(tempfile.mkdtemp(prefix="provision-test-session-"))
    config.stash[_SESSION_DIR] = session
    os.environ.update(
        {
            "XDG_CACHE_HOME": str(cache / "xdg"),
            "UV_CACHE_DIR": str(cache / "uv"),
            "PIP_CACHE_DIR": str(cache / "pip"),
            "XDG_DATA_HOME": str(session / "data"),
            "JUPYTER_DATA_DIR": str(session / "jupyter"),
            "PROVISION_HOME": str(session / "provision-home"),
            # What the tools provision runs write into the home folder otherwise: Ansible makes
            # ~/.ansible at every start, a Jupyter kernel ~/.ipython, Keras writes
            # ~/.keras/keras.json on import (tests that import TensorFlow themselves), matplotlib
            # keeps its font cache and config.
            "ANSIBLE_HOME": str(session / "ansible"),
            "IPYTHONDIR": str(session / "ipython"),
            "KERAS_HOME": str(session / "keras"),
            "MPLCONFIGDIR": str(cache / "xdg" / "matplotlib"),
        }
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    for key in (_SESSION_DIR, _TEMP_CACHE):
        folder = config.stash.get(key, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


_SESSION_DIR = pytest.StashKey[Path]()
_TEMP_CACHE = pytest.StashKey[Path]()


# -- the `index` marker: tests that need the package index (pip's configured one) -------------

# Fixtures that download from the index (NVIDIA's runtime wheels, TensorFlow venvs, provision's
# own dependencies' wheels); every `slow` test needs the index too (its marker says so).
INDEX_FIXTURES = frozenset(
    {"nvidia_artifacts", "real_conda_channel", "tf_python", "tf_env", "wheelhouse", "tiny_bundle"}
)


# The markers a run's timings are summed by (tests/tools/durations.py); a test may carry several.
TIMED_MARKERS = frozenset({"slow", "index", "container", "gpu"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if uses & INDEX_FIXTURES or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.index)
        # Every test's file and markers go into --junitxml's report, for tests/tools/durations.py.
        marks = sorted({m.name for m in item.iter_markers()} & TIMED_MARKERS)
        item.user_properties += [("file", item.location[0]), ("markers", " ".join(marks))]


# -- bundles: provision's own wheels for this host's Python (tests/bundletools.py) --------------


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of provision's wheel and its dependencies' for this host's Python, as a bundle
    gathers them (`--provision-wheels` takes it); built once per session, read-only for tests."""
    from bundletools import provision_wheelhouse

    return provision_wheelhouse(tmp_path_factory.mktemp("provision-wheels"))
