"""`provision matrix update` against a local index (tests/wheelindex.py): new releases, pre-releases
and their pre-release dependencies, a final replacing its pre-release, fields the wheels cannot
give, `--check`, and broken wheels that must leave the matrix as it was."""

from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from wheelindex import AND_CUDA, CUDA_CONFIG_12, WheelIndex

from provision import matrix as matrix_mod
from provision.cli.commands import cli
from provision.errors import UnsupportedCombination
from provision.matrix import DATA_FILE, Matrix, Release, kinds, parse
from provision.matrix.spec import check_pre, resolve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    shutil.copyfile(DATA_FILE, path)
    return path


def update(path: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["-q", "matrix", "update", "--matrix", str(path), *args])
    crash = (
        ""
        if res.exception is None or isinstance(res.exception, SystemExit)
        else repr(res.exception)
    )
    return res.exit_code, res.output + crash


def read(path: Path) -> Matrix:
    return parse(tomllib.loads(path.read_text(encoding="utf-8")))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_release_enters_with_cited_facts(wheel_index: WheelIndex, data: Path) -> None:
    wheel_index.tensorflow("2.23.0", ("3.11", "3.12", "3.13"), padding=8 << 20)
    wheel_index.nvidia()
    before = read(data)
    code, out = update(data)
    assert code == 0, out
    assert "+[[release]]" in out and '+tf = "2.23"' in out  # the diff
    assert "added 2.23.0" in out
    m = read(data)
    assert [r.tf for r in m.releases] == [r.tf for r in before.releases] + ["2.23"]
    row = m.release("2.23")
    assert (row.pin, row.latest, row.prerelease) == ("2.23.0", "2.23.0", False)
    assert row.python == ("3.11", "3.12", "3.13")
    assert row.glibc_min == "2.27"
    assert (row.cuda, row.cudnn, row.compute_min) == ("12.5", "9.3", "6.0")
    assert row.compute_targets == ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")
    assert row.and_cuda == tuple(f'{r}; extra == "and-cuda"' for r in AND_CUDA)
    assert row.pip_wheels["nvidia-cudnn-cu12"] == "9.3.0.75"  # the lowest the extra allows
    assert "libcudnn.so.9" in row.dlopens and "libcudart.so.12" in row.dlopens
    assert not row.windows_native_gpu
    # every fact is cited: the wheel (its sha256, upload date, the retrieval date), the index
    wheel = m.sources["wheel-2.23.0"]
    served = (
        wheel_index.root / "tensorflow" / "tensorflow-2.23.0-cp313-cp313-manylinux_2_27_x86_64.whl"
    )
    assert wheel.url == f"pip-index:tensorflow/{served.name}"
    assert hashlib.sha256(served.read_bytes()).hexdigest() in wheel.retrieved
    assert "uploaded 2026-11-20" in wheel.retrieved
    assert set(row.sources) == {"wheel-2.23.0", "index-2.23.0"}
    assert any(n.startswith("tf-tested-gpu") for n in row.not_yet_cited)
    # only the members were read, not the 8 MB of each wheel
    assert wheel_index.sent < 2 << 20, wheel_index.sent
    # a second run has nothing to do
    code, out = update(data)
    assert (code, out.strip()) == (0, "the matrix is up to date")


def test_the_rest_of_the_file_is_kept(wheel_index: WheelIndex, data: Path) -> None:
    wheel_index.tensorflow("2.23.0")
    wheel_index.nvidia()
    old = data.read_text().splitlines()
    assert update(data)[0] == 0
    new = data.read_text().splitlines()
    # only lines were added: every comment and hand-formatted row is still there, in order
    it = iter(new)
    assert all(line in it for line in old)


def test_check_exit_codes_and_writes_nothing(wheel_index: WheelIndex, data: Path) -> None:
    wheel_index.nvidia()
    wheel_index.tensorflow("2.21.0")  # a release the matrix has
    before = digest(data)
    assert update(data, "--check") == (0, "the matrix has every release on the index\n")
    wheel_index.tensorflow("2.23.0rc1")
    assert update(data, "--check")[0] == 0  # a pre-release counts only with --pre
    code, out = update(data, "--check", "--pre")
    assert (code, out) == (1, "the matrix lacks: 2.23.0rc1 (run `provision matrix update --pre`)\n")
    wheel_index.tensorflow("2.23.0")
    code, out = update(data, "--check")
    assert (code, out) == (1, "the matrix lacks: 2.23.0 (run `provision matrix update`)\n")
    assert digest(data) == before


def test_prerelease_with_its_prerelease_dependency_then_the_final(
    wheel_index: WheelIndex, data: Path
) -> None:
    wheel_index.nvidia()
    wheel_index.listing("fake-nightly", "1.1.0.dev20261101", "1.1.0.dev20261102")
    wheel_index.listing("keras", "3.0.0", "3.1.0rc0")
    requires = ("numpy>=1.26.0", "fake-nightly>=1.1.0.dev0", "keras>=3.0.0rc0")
    wheel_index.tensorflow("2.23.0rc1", requires=requires)
    code, out = update(data)
    assert (code, out.strip()) == (0, "the matrix is up to date")  # not without --pre
    code, out = update(data, "--pre")
    assert code == 0, out
    m = read(data)
    row = m.release("2.23")
    assert (row.pin, row.prerelease) == ("2.23.0rc1", True)
    # keras has a final that satisfies >=3.0.0rc0; fake-nightly has only pre-releases
    assert row.prerelease_deps == ("fake-nightly>=1.1.0.dev0",)
    assert m.newest.tf != "2.23" and "2.23" not in {r.tf for r in m.finals}
    with pytest.raises(UnsupportedCombination, match="add --pre"):
        check_pre(row, pre=False)
    spec = resolve(m, "2.23", "pip")
    assert spec.pip_requirements[:2] == (
        "tensorflow[and-cuda]==2.23.0rc1",
        "fake-nightly>=1.1.0.dev0",
    )
    # the final release replaces the pre-release row and its sources
    wheel_index.tensorflow("2.23.0", requires=("numpy>=1.26.0",))
    code, out = update(data)
    assert code == 0, out
    assert "replaced 2.23.0rc1 -> 2.23.0" in out
    m = read(data)
    row = m.release("2.23")
    assert (row.pin, row.prerelease, row.prerelease_deps) == ("2.23.0", False, ())
    assert "wheel-2.23.0rc1" not in m.sources and "wheel-2.23.0" in m.sources
    assert [r.tf for r in m.releases].count("2.23") == 1
    assert m.newest.tf == "2.23"


def test_a_final_keeps_the_sources_its_prerelease_gave_other_rows(
    wheel_index: WheelIndex, data: Path
) -> None:
    """The cuDNN row a pre-release brought in cites the pre-release's wheel: replacing the
    release keeps that source (dropping it would leave the cuDNN row citing nothing)."""
    and_cuda = [r.replace(">=9.3.0.75", ">=9.11.0.1") for r in AND_CUDA]
    wheel_index.nvidia(and_cuda)
    wheel_index.tensorflow("2.23.0rc0", and_cuda=and_cuda)
    assert update(data, "--pre")[0] == 0
    assert read(data).cudnn["9.11"].sources == ("wheel-2.23.0rc0",)
    wheel_index.tensorflow("2.23.0", and_cuda=and_cuda)
    code, out = update(data)
    assert code == 0, out
    m = read(data)
    assert m.release("2.23").pin == "2.23.0" and m.cudnn["9.11"].sources == ("wheel-2.23.0rc0",)
    assert "wheel-2.23.0rc0" in m.sources and "index-2.23.0rc0" not in m.sources


def test_fields_the_wheels_cannot_give_are_marked_not_cited(
    wheel_index: WheelIndex, data: Path
) -> None:
    # build_info without CUDA fields (as 2.22.0rc0's), a cuDNN minor the matrix has no row for
    and_cuda = [r.replace(">=9.3.0.75", ">=9.11.0.1") for r in AND_CUDA]
    wheel_index.nvidia(and_cuda)
    wheel_index.tensorflow(
        "2.23.0", and_cuda=and_cuda,
        build_info={"is_cuda_build": True, "is_rocm_build": False, "is_tensorrt_build": False},
    )  # fmt: skip
    code, out = update(data)
    assert code == 0, out
    m = read(data)
    row = m.release("2.23")
    assert row.cuda == "12.5" and row.cudnn == "9.11"
    # cuda_config.h gives the capabilities, not which carry PTX: written as SASS, said so
    assert row.compute_targets == ("sm_60", "sm_70", "sm_80", "sm_89", "sm_90")
    assert any(n.startswith("compute_targets:") for n in row.not_yet_cited)
    assert any(n.startswith("cudnn 9.11:") for n in row.not_yet_cited)
    cudnn = m.cudnn["9.11"]
    assert (cudnn.full, cudnn.url, cudnn.sha256, cudnn.conda_forge) == ("9.11.0.1", "", "", "")
    assert cudnn.pip == "nvidia-cudnn-cu12==9.11.0.1"
    assert "not yet cited" in cudnn.note
    assert "not yet cited" in str(kinds.of("system").refusal(m, row))
    assert kinds.of("pip").refusal(m, row) is None and kinds.of("conda").refusal(m, row) is None


def test_a_cuda_without_a_cited_driver_row_is_refused(wheel_index: WheelIndex, data: Path) -> None:
    wheel_index.nvidia()
    config = dict(CUDA_CONFIG_12, TF_CUDA_VERSION="12.9.1")
    wheel_index.tensorflow(
        "2.23.0", cuda_config=config,
        build_info={"is_cuda_build": True, "is_rocm_build": False, "is_tensorrt_build": False},
    )  # fmt: skip
    before = digest(data)
    code, out = update(data)
    assert code == 1
    assert out.count("\n") == 1 and "CUDA 12.9.1, which has no [[cuda]] row" in out
    assert digest(data) == before


@pytest.mark.parametrize("damage", ["truncated", "no-metadata", "not-a-zip"])
def test_a_broken_wheel_leaves_the_matrix_untouched(
    wheel_index: WheelIndex, data: Path, damage: str
) -> None:
    wheel_index.nvidia()
    wheel_index.tensorflow("2.23.0", ("3.12",), padding=1 << 20)
    wheel = next((wheel_index.root / "tensorflow").glob("*.whl"))
    raw = wheel.read_bytes()
    if damage == "truncated":
        wheel.write_bytes(raw[: len(raw) * 2 // 3])  # the central directory is gone
    elif damage == "not-a-zip":
        wheel.write_bytes(b"<html>an error page, not a wheel</html>\n" * 100)
    else:
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr("tensorflow/__init__.py", "")
    before = digest(data)
    code, out = update(data)
    assert code == 1, out
    assert out.startswith("provision: error: ") and out.count("\n") == 1, out
    assert "malformed wheel" in out and wheel.name in out
    assert digest(data) == before
    assert not list(data.parent.glob(".matrix.toml.*"))


def test_html_index_pages_work_too(wheel_index: WheelIndex, data: Path) -> None:
    """PEP 503 pages give no sizes: the wheel's size comes from a HEAD request."""
    wheel_index.html = True
    wheel_index.nvidia()
    wheel_index.tensorflow("2.23.0")
    code, out = update(data)
    assert code == 0, out
    m = read(data)
    assert "uploaded 2026-11-20" in m.sources["wheel-2.23.0"].retrieved


def test_rederive_reports_a_difference(wheel_index: WheelIndex, data: Path) -> None:
    and_cuda = [r.replace(">=2.27.7", ">=2.28.3") for r in AND_CUDA]
    wheel_index.nvidia(and_cuda)
    wheel_index.tensorflow("2.21.0", ("3.10", "3.11", "3.12", "3.13"), and_cuda=and_cuda)
    code, out = update(data, "--rederive", "--tf", "2.21")
    # the served wheel says glibc 2.27 like the real one, but its extra's NCCL floor differs
    assert code == 1, out
    assert "release 2.21: and_cuda" in out
    assert "glibc_min" not in out and "python" not in out


def test_usage_errors(data: Path) -> None:
    code, out = update(data, "--rederive", "--check")
    assert code == 2 and "--rederive" in out


# ---------------------------------------------------------------- against the real index


@pytest.mark.slow
def test_real_update_pre_gives_the_committed_2_22_row(data: Path) -> None:
    """Without its 2.22 rows, the committed matrix gets them back from the index as committed
    (only the retrieval dates may differ)."""
    from provision.matrix import toml_writer

    committed = read(DATA_FILE)
    if "2.22" not in {r.tf for r in committed.releases}:
        pytest.skip("the committed matrix has no 2.22 row")
    rel = committed.release("2.22")
    draft = toml_writer.Draft(data.read_text())
    draft.drop("release", "tf", "2.22")
    for sid in rel.sources:
        draft.drop("source", "id", sid)
    if all(r.cudnn != rel.cudnn for r in committed.releases if r.tf != "2.22"):
        draft.drop("cudnn", "version", rel.cudnn)
    data.write_text(draft.result()[0])
    code, out = update(data, "--pre", "--tf", "2.22")
    assert code == 0, out
    assert f"added {rel.pin}" in out
    again = read(data)
    new = again.release("2.22")
    fields = "pin python cuda cudnn and_cuda pip_wheels compute_targets glibc_min prerelease"
    for name in (fields + " prerelease_deps dlopens not_yet_cited").split():
        assert getattr(new, name) == getattr(rel, name), name
    for sid in rel.sources:
        ours, theirs = again.sources[sid], committed.sources[sid]
        assert (ours.url, ours.what) == (theirs.url, theirs.what)
        assert ours.retrieved.split(" ", 1)[1:] == theirs.retrieved.split(" ", 1)[1:]


@pytest.mark.slow
def test_real_rederive_reports_no_difference() -> None:
    """Every derivable field of every committed row (2.4 .. newest) is what the wheels say."""
    res = CliRunner().invoke(cli, ["-q", "matrix", "update", "--rederive"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("no difference")


@pytest.mark.slow
def test_real_check_knows_every_release() -> None:
    res = CliRunner().invoke(cli, ["-q", "matrix", "update", "--check", "--pre"])
    assert (res.exit_code, res.output) == (0, "the matrix has every release on the index\n")


# ---------------------------------------------------------------- a pre-release row, locked


def _prerelease_row() -> Release:
    rows = [r for r in matrix_mod.load().releases if r.prerelease]
    if not rows:
        pytest.skip("the committed matrix has no pre-release row")
    return rows[-1]


def test_a_prerelease_lock_allows_only_its_own_prereleases() -> None:
    from provision.errors import LockError
    from provision.lock.lockfile import check_prereleases

    rel = _prerelease_row()
    spec = resolve(matrix_mod.load(), rel.tf, "pip", rel.python[0])
    sha = "0" * 64

    def body(*pins: str) -> str:
        return "".join(f"{p} \\\n    --hash=sha256:{sha}\n" for p in pins)

    deps = [f"{Requirement(d).name}==99.0.dev1" for d in rel.prerelease_deps]
    check_prereleases(spec, body(f"tensorflow=={rel.pin}", *deps, "numpy==2.3.0"))
    with pytest.raises(LockError, match=r"pre-releases the matrix does not allow: numpy==2.4.0rc1"):
        check_prereleases(spec, body(f"tensorflow=={rel.pin}", *deps, "numpy==2.4.0rc1"))


@pytest.mark.slow
def test_real_prerelease_row_renders_and_locks(tmp_path: Path) -> None:
    """`render --tf X.Y --pre --path pip` and `lock` against the index: the lock names the
    pre-releases it allows, and holds them pinned."""
    rel = _prerelease_row()
    out = tmp_path / "envs"
    run = CliRunner().invoke
    res = run(cli, ["-q", "render", "--tf", rel.tf, "--path", "pip", "--out", str(out)])
    assert res.exit_code == 1 and "add --pre" in res.output
    args = ["--tf", rel.tf, "--pre", "--path", "pip", "--python", rel.python[0]]
    res = run(cli, ["-q", "render", *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    name = f"tf{rel.tf}-pip-py{rel.python[0]}"
    assert "--pre" in (out / name / "requirements.in").read_text().splitlines()[0]
    res = run(cli, ["-q", "lock", name, "--out", str(out)])
    assert res.exit_code == 0, res.output
    lock = (out / name / "requirements.lock").read_text()
    allowed = ", ".join([f"tensorflow=={rel.pin}", *rel.prerelease_deps])
    assert f"# Pre-releases allowed for these only (a pre-release row, --pre): {allowed}\n" in lock
    assert f"tensorflow=={rel.pin} " in lock
    for dep in rel.prerelease_deps:
        assert f"\n{Requirement(dep).name}==" in lock
