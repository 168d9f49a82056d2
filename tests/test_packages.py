"""The user's packages (packages.in) through the CLI: declared with render/create, locked with
TensorFlow's pins (as of their declaration, the smallest change, identical re-locks), conflicts
explained, changed later with add/drop in a built venv, stale locks named, carried by the lock.

A local package index serves small real wheels with real dependency metadata: a TensorFlow-named
wheel that requires numpy<=1.24.3 and protobuf<5 as 2.13's does, and packages that fit it or
clash with it. The real uv resolves and installs; the venvs are real.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import localchannel
import pytest
from bundletools import needs_unshare, provision_offline, provision_wheelhouse
from clitools import build_lock_held
from clitools import run_cli as cli
from tinyindex import pip_release

from provision import matrix
from provision.lock.requirements import pins
from provision.matrix import spec

TF, PYTHON = pip_release()
SPEC = spec.resolve(matrix.load(), TF, "pip", PYTHON)
NAME = SPEC.name
MAJOR, MINOR = (int(x) for x in PYTHON.split("."))
EXTRA = [
    "numpy==1.22.0", "numpy==1.24.3", "numpy==2.0.0", "pandas==2.0.3", "pandas==2.2.0",
    "scipy==1.11.0", "scikit-learn==1.3.0", "newpy==1.0", "protobuf==4.24.0", "protobuf==5.0.0",
    "needsproto==1.0", "matplotlib==3.8.0", "pillow==10.0.0", "handmade==1.0", "corrupt==1.0",
]  # fmt: skip
REQUIRES = {
    f"tensorflow=={SPEC.release.pin}": ["numpy>=1.22,<=1.24.3", "protobuf>=3.20.3,<5"],
    "pandas==2.0.3": ["numpy>=1.21"],
    "pandas==2.2.0": ["numpy>=1.23.2"],
    "scikit-learn==1.3.0": ["numpy>=1.17.3", "scipy>=1.5"],
    "scipy==1.11.0": ["numpy>=1.21.6"],
    "scipy==1.12.0": ["numpy>=1.22.4"],
    "newpy==1.0": [f"python >={MAJOR}.{MINOR + 1}"],
    "needsproto==1.0": ["protobuf>=5"],
    "matplotlib==3.8.0": ["numpy>=1.21", "pillow>=8"],
}


def _all_pins() -> list[str]:
    return sorted(
        {r for s in spec.all_specs(matrix.load()) for r in s.pip_requirements if "==" in r}
    )


def publish(root: Path, *more: str) -> None:
    """The index's pages and wheels (again, with `more`). corrupt: the page names one sha256,
    the file served is another (a bad mirror)."""
    localchannel.simple_index(root, [*_all_pins(), *EXTRA, *more], REQUIRES)
    (wheel,) = (root / "packages").glob("corrupt-1.0-*.whl")
    wheel.write_bytes(wheel.read_bytes() + b"\0")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[localchannel.Server]:
    """The index (its `requests` say what was asked for)."""
    root = tmp_path_factory.mktemp("user-index")
    publish(root)
    server = localchannel.Server(root)
    yield server
    server.stop()


@pytest.fixture
def user_index(served: localchannel.Server) -> tuple[str, Path]:
    """(URL of the index, its folder): simple_index(folder, ...) again publishes more."""
    return f"{served.url}/simple", served.root


@pytest.fixture
def out(user_index: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PIP_INDEX_URL", user_index[0])
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))  # builds of this test only
    return tmp_path / "envs"


def render(out: Path, *with_: str) -> Path:
    flags = [f for w in with_ for f in ("--with", w)]
    code, text = cli("render", "--tf", TF, "--path", "pip", "--python", PYTHON, "--out", str(out),
                     *flags)  # fmt: skip
    assert code == 0, text
    return out / NAME


def lock(out: Path, *flags: str) -> tuple[int, str]:
    return cli("lock", NAME, "--out", str(out), *flags)


def user_lines(env_dir: Path) -> list[str]:
    text = (env_dir / "packages.in").read_text()
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


# -- declaring --------------------------------------------------------------------------------


def test_render_with_and_r_write_the_users_file_and_the_lock_holds_them(
    out: Path, tmp_path: Path
) -> None:
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("# the lab's\nscikit-learn>=1.2  # models\n\n")
    flags = ["--with", "pandas", "-r", str(reqs)]
    code, text = cli("render", "--tf", TF, "--path", "pip", "--python", PYTHON,
                     "--out", str(out), *flags)  # fmt: skip
    assert code == 0, text
    env_dir = out / NAME
    assert "packages.in (your packages)" in text
    assert user_lines(env_dir) == ["pandas", "scikit-learn>=1.2"]
    manifest = (env_dir / "provision.json").read_text()
    assert "packages.in" not in manifest  # the user's file is never sealed as rendered
    code, text = lock(out)
    assert code == 0, text
    body = (env_dir / "requirements.lock").read_text()
    got = pins(body)
    assert got["pandas"] == "2.2.0" and got["scikit-learn"] == "1.3.0"
    assert got["numpy"] == "1.24.3" and got["tensorflow"] == SPEC.release.pin
    assert "# via -r packages.in" in body
    assert re.search(r'^# provision-declared: \{"pandas":"20\d\d-', body, re.M)
    assert '"packages":["pandas","scikit-learn>=1.2"]' in body
    # A re-lock of unchanged inputs is byte-identical (the declaration time is kept).
    code, text = lock(out)
    assert code == 0, text
    assert (env_dir / "requirements.lock").read_text() == body
    assert lock(out, "--check")[0] == 0
    # Re-rendering keeps the user's file as it is.
    (env_dir / "packages.in").write_text((env_dir / "packages.in").read_text() + "# mine\n")
    before = (env_dir / "packages.in").read_text()
    code, text = cli("render", "--tf", TF, "--path", "pip", "--python", PYTHON, "--out", str(out))
    assert code == 0, text
    assert (env_dir / "packages.in").read_text() == before


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (["--with", "tensorflow==2.99"], "is the environment's own"),
        (["--with", "pandas @ https://example.invalid/p.whl"], "names a URL"),
        (["--with", "--index-url=x"], "pip options"),
        (["--with", "not a spec!"], "is not a package requirement"),
    ],
)
def test_a_bad_package_is_refused_before_anything_is_written(
    out: Path, given: list[str], why: str
) -> None:
    code, text = cli("create", "--tf", TF, "--path", "pip", "--python", PYTHON, "--out", str(out),
                     *given)  # fmt: skip
    assert code == 2, text
    assert why in text and "Traceback" not in text
    assert not out.exists()


def test_r_with_a_pip_option_is_refused(out: Path, tmp_path: Path) -> None:
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("pandas\n--extra-index-url http://x\n")
    code, text = cli("render", "--tf", TF, "--path", "pip", "--python", PYTHON, "--out", str(out),
                     "-r", str(reqs))  # fmt: skip
    assert code == 2 and "line 2: --extra-index-url is a pip option" in text
    assert not out.exists()


def test_a_hand_edit_makes_the_lock_stale_in_those_words_never_tampering(out: Path) -> None:
    env_dir = render(out, "pandas")
    assert lock(out)[0] == 0
    with (env_dir / "packages.in").open("a") as fh:
        fh.write("matplotlib  # for plots\n")
    code, text = lock(out, "--check")
    assert code == 1
    assert "is stale (your packages (packages.in) changed: added matplotlib)" in text
    code, text = cli("install", NAME, "--out", str(out))
    assert code == 1 and "stale (your packages (packages.in) changed" in text
    assert "changed since provision rendered it" not in text  # not called tampering
    code, text = cli("show", NAME, "--out", str(out))
    assert code == 0
    assert "is stale (your packages (packages.in) changed: added matplotlib)" in text
    assert "pandas, matplotlib (packages.in, yours)" in text


# -- conflicts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("package", "expected"),
    [
        ("numpy>=2", ["numpy>=1.22,<=1.24.3", "what fits: numpy 1.24.3", "'numpy==1.24.3'"]),
        ("newpy", [f"it needs Python >={MAJOR}.{MINOR + 1}; this environment has {PYTHON}"]),
        ("needsproto", ["protobuf>=5", "protobuf>=3.20.3,<5", "no version of needsproto fits"]),
    ],
)
def test_a_conflict_is_explained_in_a_few_lines(
    out: Path, package: str, expected: list[str]
) -> None:
    env_dir = render(out, "pandas")
    assert lock(out)[0] == 0
    lock_before = (env_dir / "requirements.lock").read_bytes()
    users_before = (env_dir / "packages.in").read_bytes()
    code, text = cli("add", NAME, package, "--out", str(out))
    assert code == 1, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[0].startswith(f"provision: error: {NAME}: {package} cannot be locked with "
                               f"TensorFlow {SPEC.release.pin} on Python {PYTHON}")  # fmt: skip
    assert len(lines) <= 8, text
    for piece in expected:
        assert piece in text
    assert "Traceback" not in text
    # Nothing changed: the user's file and the lock are as they were.
    assert (env_dir / "requirements.lock").read_bytes() == lock_before
    assert (env_dir / "packages.in").read_bytes() == users_before
    # The resolver's own words are behind -v.
    code, verbose = run_cli_verbose("add", NAME, package, "--out", str(out))
    assert code == 1 and "No solution found when resolving dependencies" in verbose


run_cli_verbose = functools.partial(cli, quiet=False, verbose=True, crash=False)


# -- the smallest change, as of when they were declared, upgrades -------------------------------


@pytest.fixture
def stale(served: localchannel.Server) -> Iterator[localchannel.Server]:
    """Every page the index serves is stale at once (max-age=0): uv asks again each time it
    reads one, as it does of a page older than a real index's max-age."""
    served.httpd.max_age = 0  # type: ignore[attr-defined]
    yield served
    served.httpd.max_age = None  # type: ignore[attr-defined]


def pages(server: localchannel.Server) -> set[str]:
    """The index pages asked for since the last call."""
    asked = {p.strip("/").split("/")[1] for p in server.requests if p.startswith("/simple/")}
    server.requests.clear()
    return asked


def test_a_new_package_moves_nothing_else_and_upgrade_moves_it_forward(
    out: Path, user_index: tuple[str, Path], stale: localchannel.Server
) -> None:
    env_dir = render(out, "scikit-learn")
    assert lock(out)[0] == 0
    first = pins((env_dir / "requirements.lock").read_text())
    assert first["scipy"] == "1.11.0"
    # The index publishes a newer scipy: a package added now leaves scipy where it was.
    publish(user_index[1], "scipy==1.12.0")
    pages(stale)
    code, text = cli("add", NAME, "matplotlib", "--out", str(out))
    assert code == 0, text
    # Only what the change reads: the new package's pages and those of what it needs, not the
    # other pins' (an online resolution asks for each page of the lock, every one stale).
    # (tensorflow's page gives its upload time; this index publishes none, so each lock asks.)
    asked = pages(stale)
    assert {"matplotlib", "pillow"} <= asked
    assert not asked & (set(first) - {"numpy", "tensorflow"}), asked
    before = (env_dir / "requirements.lock").read_bytes()
    again = lock(out)  # nothing changed: uv's cache alone, the same bytes
    assert again[0] == 0 and pages(stale) <= {"tensorflow"}, again[1]
    assert (env_dir / "requirements.lock").read_bytes() == before
    after = pins((env_dir / "requirements.lock").read_text())
    assert {k: v for k, v in after.items() if first.get(k) != v} == {
        "matplotlib": "3.8.0",
        "pillow": "10.0.0",
    }
    assert "+ matplotlib 3.8.0" in text and "+ pillow 10.0.0" in text
    assert "scipy" not in text
    assert f"{NAME} is not built here; provision install {NAME} builds it" in text
    # An explicit upgrade moves it (and what it needs) forward: scipy 1.12.0, whose metadata uv
    # has not cached yet, so that an offline resolution would pass over it (uv's log says so).
    code, text = lock(out, "--upgrade-package", "scikit-learn")
    assert code == 0, text
    assert pins((env_dir / "requirements.lock").read_text())["scipy"] == "1.12.0"
    asked = pages(stale)
    assert {"scikit-learn", "scipy"} <= asked
    assert not asked & (set(first) - {"scikit-learn", "scipy", "numpy", "tensorflow"}), asked
    code, text = lock(out, "--upgrade-package", "numpy")
    assert code == 2 and "not one of your packages" in text


# -- add and drop in a built environment --------------------------------------------------------


def site(prefix: Path) -> set[str]:
    sp = next((prefix / "lib").glob("python*/site-packages"))
    return {p.name.split("-")[0].lower() for p in sp.glob("*.dist-info")}


def test_add_and_drop_sync_the_built_venv_and_leave_a_users_own_package(out: Path) -> None:
    render(out, "pandas")
    assert lock(out)[0] == 0
    code, text = cli("install", NAME, "--out", str(out))
    assert code == 0, text
    code, text = cli("show", NAME, "--out", str(out))
    prefix = Path(re.search(r"prefix\s+(\S+)", text).group(1))  # type: ignore[union-attr]
    assert "pandas" in site(prefix)
    # The user installs a package of their own by hand: provision never removes it.
    uv = __import__("provision.tools", fromlist=["uv"]).uv()
    subprocess.run([uv, "pip", "install", "--python", str(prefix / "bin" / "python"),
                    "handmade==1.0", "--no-deps", "--no-config",
                    "--index-url", os.environ["PIP_INDEX_URL"]], check=True,
                   capture_output=True)  # fmt: skip
    code, text = cli("add", NAME, "matplotlib", "--out", str(out), "--no-verify")
    assert code == 0, text
    assert re.search(r"synced .* \(2 installed or changed, 0 removed\)", text), text
    assert {"matplotlib", "pillow", "pandas", "handmade"} <= site(prefix)
    code, text = cli("drop", NAME, "pandas", "--out", str(out), "--no-verify")
    assert code == 0, text
    assert "- pandas 2.2.0" in text
    assert "pandas" not in site(prefix) and "handmade" in site(prefix)
    assert "numpy" in site(prefix)  # TensorFlow needs it
    # provision's list of what it installed follows: only the hand-made package is the user's.
    from provision.install import owned

    theirs = owned.foreign(prefix)
    assert theirs and all("handmade" in path for path in theirs), theirs
    # The copy of its inputs the build keeps follows them.
    kept = prefix / "etc" / "provision" / "env" / NAME / "packages.in"
    assert [ln for ln in kept.read_text().splitlines() if not ln.startswith("#")] == ["matplotlib"]
    # TensorFlow's pins and what is not the user's cannot be dropped.
    code, text = cli("drop", NAME, "tensorflow", "--out", str(out))
    assert code == 2 and "TensorFlow's own pins" in text
    code, text = cli("drop", NAME, "numpy", "--out", str(out))
    assert code == 2 and "not in" in text and "(yours: matplotlib)" in text
    # A refused add leaves the prefix as it was.
    before = site(prefix)
    code, text = cli("add", NAME, "numpy>=2", "--out", str(out), "--no-verify")
    assert code == 1 and site(prefix) == before
    # So does one whose install fails (the file served is not the one locked): the user's file,
    # the lock, the prefix and provision's list of it are put back.
    files = {
        p: p.read_bytes() for p in (out / NAME / "packages.in", out / NAME / "requirements.lock")
    }
    theirs = owned.foreign(prefix)
    code, text = cli("add", NAME, "corrupt", "--out", str(out), "--no-verify")
    assert code == 1 and "uv pip install" in text, text
    assert {p: p.read_bytes() for p in files} == files
    assert site(prefix) == before and owned.foreign(prefix) == theirs
    # The drift check sees the prefix as the lock says (the hand-made package aside).
    code, text = cli("check", NAME)
    assert "matplotlib" not in text and "pandas" not in text, text
    # While an install holds the prefix, add waits, then refuses; nothing moves.
    with build_lock_held(prefix):
        code, text = cli("add", NAME, "pandas", "--out", str(out), "--no-verify")
        assert code == 1 and "another provision command is building or changing" in text, text
        assert {p: p.read_bytes() for p in files} == files and site(prefix) == before


# -- carried everywhere: bundle, install --from-bundle with no network, export ------------------


@needs_unshare
def test_a_bundle_and_an_export_carry_the_users_packages(
    out: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env_dir = render(out, "pandas")
    assert lock(out)[0] == 0
    wheels = provision_wheelhouse(tmp_path_factory.mktemp("provision-wheels"))
    bundle = tmp_path / "b" / "env.tar"
    code, text = cli(
        "bundle",
        NAME,
        "--out",
        str(out),
        "-o",
        str(bundle),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--provision-wheels",
        str(wheels),
    )
    assert code == 0, text
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any(n.endswith(f"env/{NAME}/packages.in") for n in names)
    assert any("/pandas-2.2.0-" in n for n in names)
    home = tmp_path / "target-home"
    done = provision_offline("install", "--from-bundle", str(bundle), "--no-verify", "--json",
                             env={"PROVISION_HOME": str(home)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    prefix = Path(json.loads(done.stdout)["install"]["prefix"])
    assert "pandas" in site(prefix)
    shown = provision_offline("show", NAME, env={"PROVISION_HOME": str(home)})
    assert "pandas (packages.in, yours)" in shown.stdout, shown.stdout + shown.stderr
    code, text = cli("export", NAME, str(tmp_path / "exported"), "--out", str(out))
    assert code == 0, text
    assert (tmp_path / "exported" / "packages.in").read_text() == (
        env_dir / "packages.in"
    ).read_text()
    standard = (tmp_path / "exported" / "pylock.toml").read_text()
    assert 'lock-version = "1.0"' in standard and 'name = "pandas"' in standard
    assert str(tmp_path) not in standard and "/work/" not in standard


def test_add_to_a_copy_from_another_folder_says_which_one_is_built(
    out: Path, tmp_path: Path
) -> None:
    render(out, "pandas")
    assert lock(out)[0] == 0
    assert cli("install", NAME, "--out", str(out))[0] == 0
    other = tmp_path / "project" / "envs"
    shutil.copytree(out / NAME, other / NAME)
    code, text = cli("add", NAME, "matplotlib", "--out", str(other), "--no-verify")
    assert code == 0, text
    assert text.strip().splitlines()[-1] == (
        f"{NAME} is built here from {out / NAME}, not from {other / NAME}: the built environment "
        f"did not change (provision install {NAME} --out {other} --replace rebuilds it from this "
        "one)"
    )


# -- independent of where it was made -------------------------------------------------------------


def test_the_directory_it_was_built_from_can_go(
    out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not where this repository's own envs/ are
    render(out, "pandas")
    assert lock(out)[0] == 0
    code, text = cli("install", NAME, "--out", str(out))
    assert code == 0, text
    moved = tmp_path / "elsewhere"
    out.rename(moved)  # the user moves (or deletes) the directory it was rendered in
    code, text = cli("show", NAME)
    assert code == 0, text
    assert "pandas (packages.in, yours)" in text and "up to date" in text
    ran = subprocess.run(  # `run` replaces its process: not in this one
        [sys.executable, "-m", "provision", "run", NAME, "--", "python", "-c",
         "import importlib.metadata as m; print(m.version('pandas'))"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    code, text = cli("check", NAME)
    assert code == 0, text
    # Changing it needs a directory of the user's: the kept copy is only read.
    for argv in (["add", NAME, "matplotlib"], ["lock", NAME], ["install", NAME]):
        code, text = cli(*argv)
        assert code == 2 and "which is gone; its build keeps a copy" in text, text
    code, text = cli("export", NAME, str(tmp_path / "again"))
    assert code == 0, text
    assert user_lines(tmp_path / "again") == ["pandas"]


# -- the conda path: a package from the index beside the conda ones ------------------------------


def test_conda_path_locks_a_pypi_package_in_its_pip_section(
    out: Path, local_channel: localchannel.Channel
) -> None:
    from test_lock import CUDA11_PIP_CUDNN

    s = spec.resolve(matrix.load(), CUDA11_PIP_CUDNN, "conda")
    code, text = cli("render", "--tf", CUDA11_PIP_CUDNN, "--out", str(out), "--with", "pypi:pandas")
    assert code == 0, text
    assert user_lines(out / s.name) == ["pypi: pandas"]
    code, text = cli("lock", s.name, "--out", str(out), "--channel", local_channel.url,
                     "--solver", "builtin")  # fmt: skip
    assert code == 0, text
    import yaml

    data = yaml.safe_load((out / s.name / "conda-lock.yml").read_text())
    locked = {p["name"]: p for p in data["package"] if p["platform"] == "linux-64"}
    assert locked["pandas"]["manager"] == "pip" and locked["pandas"]["version"] == "2.2.0"
    assert locked["tensorflow"]["version"] == s.release.pin
    code, text = cli("lock", s.name, "--out", str(out), "--check", "--channel", local_channel.url)
    assert code == 0, text
    # add and drop on the conda path, with a build to sync: tests/test_conda_sync.py.


# -- PyTorch beside TensorFlow: one CUDA line ------------------------------------------------------

NEWEST = matrix.load().newest
TORCHES = {
    # Fits the release's and-cuda ranges: cuDNN moves up within them, NCCL too.
    "torch==2.9.0": ["nvidia-cudnn-cu12==9.10.2.21", "nvidia-nccl-cu12==2.28.1"],
    # Pins an NCCL below the release's range.
    "torch==2.10.0": ["nvidia-cudnn-cu12==9.10.2.21", "nvidia-nccl-cu12==2.27.5"],
    # Another CUDA line: a second copy of cuDNN.
    "torch==2.11.0": ["nvidia-cudnn-cu13==9.13.0.50"],
}


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("torch-index")
    tf = next(r for r in _all_pins() if r.startswith("tensorflow[") and NEWEST.pin in r)
    extra = [*TORCHES, "nvidia-cudnn-cu12==9.10.2.21", "nvidia-nccl-cu12==2.28.1",
             "nvidia-nccl-cu12==2.27.5", "nvidia-cudnn-cu13==9.13.0.50"]  # fmt: skip
    requires = {f"tensorflow=={NEWEST.pin}": list(NEWEST.and_cuda), **TORCHES}
    localchannel.simple_index(root, [*_all_pins(), *extra], requires)
    assert tf  # the release's `tensorflow[and-cuda]` pin is served
    server = localchannel.Server(root)
    yield f"{server.url}/simple"
    server.stop()


def test_torch_beside_tensorflow_moves_cuda_libraries_within_the_ranges_in_one_line(
    torch_index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not NEWEST.and_cuda:
        pytest.skip(f"TensorFlow {NEWEST.pin}'s wheel has no and-cuda extra")
    monkeypatch.setenv("PIP_INDEX_URL", torch_index)
    out = tmp_path / "envs"
    s = spec.resolve(matrix.load(), NEWEST.tf, "pip")
    code, text = cli("render", "--tf", NEWEST.tf, "--path", "pip", "--out", str(out),
                     "--with", "torch")  # fmt: skip
    assert code == 0, text
    code, text = cli("lock", s.name, "--out", str(out))
    assert code == 0, text
    body = (out / s.name / "requirements.lock").read_text()
    got = pins(body)
    assert got["torch"] == "2.9.0"  # the newest whose NVIDIA wheels fit the ranges
    assert got["nvidia-cudnn-cu12"] == "9.10.2.21" and got["nvidia-nccl-cu12"] == "2.28.1"
    assert not any(n.endswith("-cu13") for n in got)  # one CUDA line
    assert f"# provision-cuda-libraries: TensorFlow {NEWEST.pin}'s NVIDIA libraries" in body
    assert "manylinux_2_28" in body  # the frameworks' glibc floor
    assert cli("lock", s.name, "--out", str(out), "--check")[0] == 0
    code, text = cli("matrix", "pairs", "torch", "--tf", NEWEST.tf)
    assert code == 0 and re.search(rf"{re.escape(NEWEST.pin)}\s.*\s2\.9\.0$", text, re.M), text
    # None is said with the resolver's reason, not bare (this index has no JAX at all).
    code, text = cli("matrix", "pairs", "jax", "--tf", NEWEST.tf)
    row = text.strip().splitlines()[-1]
    assert code == 0 and row.startswith(NEWEST.pin), text
    assert re.search(r"\snone \(Because there are no versions of jax\[cuda12\].*\)$", row), row
    # A torch that pins an NCCL below the range, or brings CUDA 13: refused, with where to look.
    code, text = cli("add", s.name, "torch>=2.10", "--out", str(out))
    assert code == 1, text
    assert "what fits: torch 2.9.0" in text and "Traceback" not in text
    assert pins((out / s.name / "requirements.lock").read_text())["torch"] == "2.9.0"


def test_a_broken_previous_lock_is_not_where_a_lock_starts(out: Path) -> None:
    env_dir = render(out, "pandas")
    (env_dir / "requirements.lock").write_text("pandas >= \\\n# cut here\n")
    code, text = lock(out)
    assert code == 0, text
    assert pins((env_dir / "requirements.lock").read_text())["pandas"] == "2.2.0"
    assert lock(out, "--check")[0] == 0
