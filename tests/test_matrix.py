"""The compatibility matrix: invariants of provision/data/matrix.toml, the loader's error messages
for bad data, and (marked slow) the pins against the live package index.

The slow test reads only the index's simple JSON pages (file names), never a wheel; the deeper
re-check of the wheels themselves is `tests/tools/wheel_facts.py --check`.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from tools import wheel_facts

from provision import matrix as matrix_mod
from provision.errors import MatrixError, UnknownRelease, UsageError
from provision.matrix import Matrix, kinds, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

FIRST = Version("2.4")


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """The data file as TOML gives it, to break copies of."""
    data: dict[str, Any] = tomllib.loads(matrix_mod.DATA_FILE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return matrix_mod.load()


def _versions(m: Matrix) -> list[str]:
    """Every version-like value of every row, for the parse test."""
    out = []
    for r in m.releases:
        out += [r.tf, r.latest, r.pin, *r.python, r.compute_min, r.glibc_min]
        out += list(r.pip_wheels.values())
    for c in m.cuda.values():
        out += [c.version, c.full, c.driver_min, c.driver_compat_min, *c.conda.values()]
    for d in m.cudnn.values():
        out += [d.version, d.full] + ([d.conda_forge] if d.conda_forge else [])
    f = m.conda_forge
    out += [*f.cudatoolkit, *f.cuda_version, *(row.version for row in f.cudnn)]
    return out


# ---------------------------------------------------------------- invariants of the data


def test_every_minor_release_from_2_4_on_has_exactly_one_row(matrix: Matrix) -> None:
    keys = [r.key for r in matrix.releases]
    assert keys[0] == FIRST
    assert keys == [Version(f"2.{m}") for m in range(4, 4 + len(keys))]
    assert len({r.tf for r in matrix.releases}) == len(keys)
    assert matrix.newest.key >= Version("2.21")


def test_every_version_in_the_data_parses(matrix: Matrix) -> None:
    values = _versions(matrix)
    assert len(values) > 200
    for value in values:
        Version(value)  # raises InvalidVersion on a typo


def test_python_lists_ascend_and_pin_is_a_patch_of_the_row(matrix: Matrix) -> None:
    for r in matrix.releases:
        pys = [Version(p) for p in r.python]
        assert pys == sorted(set(pys)), r.tf
        assert Version(r.pin).release[:2] == r.key.release[:2] <= Version(r.latest).release[:2]
        assert Version(r.pin) <= Version(r.latest)


def test_every_referenced_cuda_and_cudnn_row_exists_and_every_row_is_used(matrix: Matrix) -> None:
    used_cuda = {r.cuda for r in matrix.releases}
    used_cudnn = {r.cudnn for r in matrix.releases}
    assert used_cuda == set(matrix.cuda)
    assert used_cudnn == set(matrix.cudnn)
    for r in matrix.releases:
        assert matrix.cudnn_of(r).cuda_major == matrix.cuda_of(r).major, r.tf


def test_every_cited_source_exists_and_every_source_is_cited(matrix: Matrix) -> None:
    cited: set[str] = set()
    for r in matrix.releases:
        cited.update(r.sources)
    for c in matrix.cuda.values():
        cited.update(c.sources)
    for d in matrix.cudnn.values():
        cited.update(d.sources)
    cited.update(matrix.conda_forge.sources)
    for row in matrix.conda_forge.cudnn:
        cited.update(row.sources)
    assert cited <= set(matrix.sources), cited - set(matrix.sources)
    assert set(matrix.sources) <= cited, set(matrix.sources) - cited
    for src in matrix.sources.values():
        assert src.url and src.retrieved and src.what, src.id


def test_the_data_names_no_package_registry_host(raw: dict[str, Any]) -> None:
    import rattler
    from pip._internal.models.index import PyPI

    text = matrix_mod.DATA_FILE.read_text(encoding="utf-8")
    # The registries' hosts as pip and rattler know them (none is written in this repository).
    conda_host = urlsplit(str(rattler.Channel("conda-forge").base_url)).hostname or ""
    for host in (PyPI.netloc, PyPI.file_storage_domain, conda_host.split(".", 1)[-1]):
        assert host and host not in text, host
    assert all(s["url"].startswith(("https://", "pip-index:")) for s in raw["source"])


def test_conda_forge_has_no_cudatoolkit_for_cuda_12(matrix: Matrix) -> None:
    forge = matrix.conda_forge
    assert forge.cudatoolkit, "cudatoolkit list is empty"
    assert all(Version(v) < Version("12") for v in forge.cudatoolkit)
    assert max(forge.cudatoolkit, key=Version) == "11.8.0"
    for cu in matrix.cuda.values():
        if cu.major >= 12:
            assert "cudatoolkit" not in cu.conda and cu.conda["cuda_version"] == cu.version
        else:
            assert cu.conda["cudatoolkit"] in forge.cudatoolkit
            assert Version(cu.conda["cudatoolkit"]).release[:2] == Version(cu.version).release


def test_conda_forge_has_no_cudnn_8_5_to_8_7(matrix: Matrix) -> None:
    forge = matrix.conda_forge
    minors = {Version(row.version).release[:2] for row in forge.cudnn}
    assert not minors & {(8, 5), (8, 6), (8, 7)}
    for d in matrix.cudnn.values():
        if d.version in ("8.5", "8.6", "8.7"):
            # conda has none, so the conda path needs the NVIDIA wheel from pip.
            assert d.conda_forge == "" and d.pip == f"nvidia-cudnn-cu{d.cuda_major}=={d.full}"
        elif "not yet cited" in d.note:
            # added by `matrix update` from a wheel: the conda path takes the NVIDIA wheel
            assert d.conda_forge == "" and d.pip == f"nvidia-cudnn-cu{d.cuda_major}=={d.full}"
        else:
            assert d.conda_forge, d.version
            assert Version(d.conda_forge).release[:2] == Version(d.version).release


def test_every_toolkit_and_cudnn_archive_has_a_published_checksum(matrix: Matrix) -> None:
    for cu in matrix.cuda.values():
        assert re.fullmatch(r"[0-9a-f]{64}", cu.runfile_sha256) or cu.runfile_md5, cu.version
        assert cu.runfile == f"cuda_{cu.full}_{cu.driver_min}_linux.run"
        assert cu.runfile_url.endswith(f"/{cu.full}/local_installers/{cu.runfile}")
    for d in matrix.cudnn.values():
        if not d.url and "not yet cited" in d.note:
            # a row `matrix update` added from a wheel: the system path refuses it until cited
            users = [r for r in matrix.releases if r.cudnn == d.version]
            assert users and all(kinds.of("system").refusal(matrix, r) for r in users), d.version
            continue
        assert re.fullmatch(r"[0-9a-f]{64}", d.sha256), d.version
        assert d.full in d.archive and d.url.endswith("/" + d.archive)


def test_driver_floors(matrix: Matrix) -> None:
    for cu in matrix.cuda.values():
        assert Version(cu.driver_compat_min) <= Version(cu.driver_min)
        if cu.major == 12:
            assert cu.driver_compat_min == "525.60.13"
        elif cu.version != "11.0":
            assert cu.driver_compat_min == "450.80.02"


def test_pip_wheels_follow_the_and_cuda_extra(matrix: Matrix) -> None:
    """Every NVIDIA wheel of the extra is pinned: at its exact pin, or its range's lower bound."""
    for r in matrix.releases:
        for text in r.and_cuda:
            req = Requirement(text)
            if not req.name.startswith("nvidia-"):
                continue
            lower = [s.version for s in req.specifier if s.operator in ("==", ">=")]
            assert r.pip_wheels[req.name] == lower[0], (r.tf, req.name)
        assert all(name.endswith(matrix.cuda_of(r).pip_suffix) for name in r.pip_wheels)


def test_the_pip_path_serves_exactly_the_releases_with_nvidia_wheels(matrix: Matrix) -> None:
    for r in matrix.releases:
        no_wheels = matrix.cuda_of(r).version in ("11.0", "11.2")
        assert (r.pip_wheels == {}) is no_wheels, r.tf
        assert (kinds.of("pip").refusal(matrix, r) is not None) is no_wheels, r.tf


def test_known_facts_of_particular_releases(matrix: Matrix) -> None:
    # 2.15.0's extra needs tensorrt-libs 8.6.1, which the index does not have.
    assert matrix.release("2.15").pin != "2.15.0"
    assert "2.15.0" in matrix.release("2.15").pin_note
    # 2.11 is CUDA 11.2 / cuDNN 8.1 (tables copied around the web say 11.8 / 8.6).
    r211 = matrix.release("2.11")
    assert (r211.cuda, r211.cudnn) == ("11.2", "8.1")
    assert any("11.8" in d for d in r211.disagreements)
    # TF's 2.12/2.13 guide: nvidia-cudnn-cu11==8.6.0.163 from pip next to conda's cudatoolkit.
    assert matrix.release("2.13").pip_wheels["nvidia-cudnn-cu11"] == "8.6.0.163"
    assert matrix.release("2.21").glibc_min == "2.27"


def test_windows_native_gpu_ends_at_2_10(matrix: Matrix) -> None:
    for r in matrix.releases:
        assert r.windows_native_gpu is (r.key <= Version("2.10")), r.tf


def test_glibc_follows_the_manylinux_tag(matrix: Matrix) -> None:
    assert wheel_facts.glibc_of("manylinux2010_x86_64") == "2.12"
    assert wheel_facts.glibc_of("manylinux_2_17_x86_64.manylinux2014_x86_64") == "2.17"
    assert wheel_facts.glibc_of("manylinux_2_27_x86_64") == "2.27"
    assert {r.glibc_min for r in matrix.releases} == {"2.12", "2.17", "2.27"}


def test_compute_min_is_the_lowest_target(matrix: Matrix) -> None:
    for r in matrix.releases:
        lowest = min(int(t.split("_")[1]) for t in r.compute_targets)
        assert Version(r.compute_min) == Version(f"{lowest // 10}.{lowest % 10}"), r.tf


def test_release_lookup_accepts_patch_versions_and_names_close_rows(matrix: Matrix) -> None:
    assert matrix.release("2.13.1").tf == "2.13"
    for typed in ("v2.21", "02.021", "2.021", " 2.21", "2." + "1" * 5000):
        with pytest.raises(UsageError, match="is not a release number"):
            matrix.release(typed)
    with pytest.raises(UnknownRelease, match=r"TensorFlow 2\.3 is not in the matrix"):
        matrix.release("2.3")


# ---------------------------------------------------------------- errors name the row and field


def _release(raw: dict[str, Any], tf: str) -> dict[str, Any]:
    return next(r for r in raw["release"] if r["tf"] == tf)


def _cuda(raw: dict[str, Any], version: str) -> dict[str, Any]:
    return next(r for r in raw["cuda"] if r["version"] == version)


def _cudnn(raw: dict[str, Any], version: str) -> dict[str, Any]:
    return next(r for r in raw["cudnn"] if r["version"] == version)


def _set(
    getter: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any
) -> Callable[..., None]:
    def mutate(raw: dict[str, Any]) -> None:
        getter(raw)[key] = value

    return mutate


def _drop(getter: Callable[[dict[str, Any]], dict[str, Any]], key: str) -> Callable[..., None]:
    def mutate(raw: dict[str, Any]) -> None:
        del getter(raw)[key]

    return mutate


def _duplicate_release(raw: dict[str, Any]) -> None:
    raw["release"].insert(10, copy.deepcopy(_release(raw, "2.13")))


def _remove_release(raw: dict[str, Any]) -> None:
    raw["release"].remove(_release(raw, "2.14"))


def _duplicate_source(raw: dict[str, Any]) -> None:
    raw["source"].append(copy.deepcopy(raw["source"][0]))


def _duplicate_cuda(raw: dict[str, Any]) -> None:
    raw["cuda"].append(copy.deepcopy(_cuda(raw, "11.8")))


def _cu12_wheel_in_cu11_row(raw: dict[str, Any]) -> None:
    _release(raw, "2.13")["pip_wheels"]["nvidia-cublas-cu12"] = "12.2.5.6"


def _unpin_nccl(raw: dict[str, Any]) -> None:
    del _release(raw, "2.21")["pip_wheels"]["nvidia-nccl-cu12"]


def _nccl_out_of_range(raw: dict[str, Any]) -> None:
    _release(raw, "2.21")["pip_wheels"]["nvidia-nccl-cu12"] = "3.0.0"


def _no_checksum(raw: dict[str, Any]) -> None:
    row = _cuda(raw, "11.8")
    row["runfile_sha256"] = row["runfile_md5"] = row["note"] = ""


def _forge_cudnn_unknown_field(raw: dict[str, Any]) -> None:
    raw["conda_forge"]["cudnn"][0]["channel"] = "nvidia"


R = _release
BROKEN: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("schema", lambda raw: raw.update(schema=2), r"^matrix: schema 2 is not 1$"),
    ("unknown top-level", lambda raw: raw.update(extra=1), r"^matrix: unknown field\(s\) extra$"),
    ("duplicate release", _duplicate_release, r"^release 2\.13: (duplicate row|releases must be)"),
    ("gap", _remove_release, r"^release 2\.15: gap after 2\.13"),
    (
        "missing field",
        _drop(lambda raw: R(raw, "2.13"), "pin"),
        r"^release 2\.13: missing field 'pin'$",
    ),
    (
        "wrong type",
        _set(lambda raw: R(raw, "2.13"), "python", "3.11"),
        r"^release 2\.13: field 'python' must be list, got '3\.11'$",
    ),
    (
        "not a version",
        _set(lambda raw: R(raw, "2.13"), "latest", "2.13.x"),
        r"^release 2\.13: field 'latest': '2\.13\.x' is not a version$",
    ),
    (
        "unknown field",
        _set(lambda raw: R(raw, "2.13"), "colour", "blue"),
        r"^release 2\.13: unknown field\(s\) colour$",
    ),
    (
        "pin of another minor",
        _set(lambda raw: R(raw, "2.13"), "pin", "2.12.1"),
        r"^release 2\.13: latest/pin 2\.13\.1/2\.12\.1 are not 2\.13\.x$",
    ),
    (
        "pin newer than latest",
        _set(lambda raw: R(raw, "2.13"), "pin", "2.13.2"),
        r"^release 2\.13: field 'pin' 2\.13\.2 is newer than latest 2\.13\.1$",
    ),
    (
        "python descending",
        _set(lambda raw: R(raw, "2.13"), "python", ["3.11", "3.10"]),
        r"^release 2\.13: python must be a non-empty ascending list",
    ),
    (
        "unknown cuda row",
        _set(lambda raw: R(raw, "2.13"), "cuda", "11.7"),
        r"^release 2\.13: cuda 11\.7 has no \[\[cuda\]\] row$",
    ),
    (
        "cudnn of another CUDA major",
        _set(lambda raw: R(raw, "2.15"), "cudnn", "8.6"),
        r"^release 2\.15: cudnn 8\.6 is not built for CUDA 12\.2$",
    ),
    (
        "unknown source",
        _set(lambda raw: R(raw, "2.13"), "sources", ["nowhere"]),
        r"^release 2\.13: cites unknown source 'nowhere'$",
    ),
    (
        "no source",
        _set(lambda raw: _cuda(raw, "11.8"), "sources", []),
        r"^cuda 11\.8: cites no source$",
    ),
    ("duplicate source id", _duplicate_source, r"^source 'tf-tested-gpu': duplicate id$"),
    ("duplicate cuda row", _duplicate_cuda, r"^cuda 11\.8: duplicate row$"),
    (
        "compute_min",
        _set(lambda raw: R(raw, "2.17"), "compute_min", "5.0"),
        r"^release 2\.17: field 'compute_min' 5\.0 is not the lowest of compute_targets \(6\.0\)$",
    ),
    (
        "compute target name",
        _set(lambda raw: R(raw, "2.17"), "compute_targets", ["hopper"]),
        r"^release 2\.17: field 'compute_targets' must be sm_XY/compute_XY names",
    ),
    (
        "pip wheel version",
        _set(lambda raw: R(raw, "2.13")["pip_wheels"], "nvidia-cudnn-cu11", "latest"),
        r"^release 2\.13: pip_wheels nvidia-cudnn-cu11: 'latest' is not a version$",
    ),
    (
        "pip wheel of the other CUDA major",
        _cu12_wheel_in_cu11_row,
        r"^release 2\.13: pip_wheels nvidia-cublas-cu12 is not a CUDA 11 wheel$",
    ),
    (
        "pip cudnn of another line",
        _set(lambda raw: R(raw, "2.13")["pip_wheels"], "nvidia-cudnn-cu11", "8.7.0.84"),
        r"^release 2\.13: pip_wheels nvidia-cudnn-cu11==8\.7\.0\.84 is not cuDNN 8\.6$",
    ),
    (
        "extra wheel not pinned",
        _unpin_nccl,
        r"^release 2\.21: pip_wheels does not pin nvidia-nccl-cu12 \(and_cuda requires it\)$",
    ),
    (
        "pin outside the extra",
        _nccl_out_of_range,
        r"^release 2\.21: pip_wheels nvidia-nccl-cu12==3\.0\.0 is outside and_cuda "
        r"<3\.0,>=2\.27\.7$",
    ),
    (
        "and_cuda not a requirement",
        _set(lambda raw: R(raw, "2.21"), "and_cuda", ["nvidia cublas!!"]),
        r"^release 2\.21: and_cuda 'nvidia cublas!!' is not a requirement",
    ),
    (
        "and_cuda without the extra",
        _set(lambda raw: R(raw, "2.21"), "and_cuda", ["nvidia-nccl-cu12==2.27.7"]),
        r"^release 2\.21: and_cuda 'nvidia-nccl-cu12==2\.27\.7' is not part of the and-cuda extra$",
    ),
    (
        "cudatoolkit for CUDA 12",
        _set(lambda raw: _cuda(raw, "12.5"), "conda", {"cudatoolkit": "12.5.1"}),
        r"^cuda 12\.5: conda-forge has no cudatoolkit for CUDA 12$",
    ),
    (
        "cudatoolkit conda-forge lacks",
        _set(lambda raw: _cuda(raw, "11.8"), "conda", {"cudatoolkit": "11.8.1"}),
        r"^cuda 11\.8: conda-forge has no cudatoolkit '11\.8\.1'$",
    ),
    (
        "cuda-version conda-forge lacks",
        _set(lambda raw: _cuda(raw, "12.5"), "conda", {"cuda_version": "12.7"}),
        r"^cuda 12\.5: conda-forge has no cuda-version '12\.7'$",
    ),
    (
        "full of another line",
        _set(lambda raw: _cuda(raw, "11.8"), "full", "11.7.1"),
        r"^cuda 11\.8: full 11\.7\.1 is not 11\.8\.x$",
    ),
    (
        "bad sha256",
        _set(lambda raw: _cuda(raw, "11.8"), "runfile_sha256", "abc"),
        r"^cuda 11\.8: field 'runfile_sha256': 'abc' is not a hex digest$",
    ),
    (
        "no checksum, no reason",
        _no_checksum,
        r"^cuda 11\.8: no runfile_sha256 or runfile_md5, and no note saying why$",
    ),
    (
        "runfile url",
        _set(lambda raw: _cuda(raw, "11.8"), "runfile_url", "https://example.invalid/x.run"),
        r"^cuda 11\.8: field 'runfile_url' does not end in 'cuda_11\.8\.0_520\.61\.05_linux\.run'$",
    ),
    (
        "driver floors",
        _set(lambda raw: _cuda(raw, "12.5"), "driver_compat_min", "560.0"),
        r"^cuda 12\.5: field 'driver_compat_min' 560\.0 is above driver_min 555\.42\.06$",
    ),
    (
        "cudnn conda-forge lacks",
        _set(lambda raw: _cudnn(raw, "8.6"), "conda_forge", "8.6.0.163"),
        r"^cudnn 8\.6: conda-forge has no cudnn 8\.6\.0\.163 for CUDA 11$",
    ),
    (
        "cudnn pip requirement",
        _set(lambda raw: _cudnn(raw, "8.6"), "pip", "nvidia-cudnn-cu12==8.6.0.163"),
        r"^cudnn 8\.6: field 'pip' must be 'nvidia-cudnn-cu11==8\.6\.0\.163' or empty",
    ),
    (
        "cudnn url",
        _set(lambda raw: _cudnn(raw, "9.3"), "url", "https://example.invalid/cudnn.tar.xz"),
        r"^cudnn 9\.3: field 'url' does not end in ",
    ),
    (
        "cudnn type",
        _set(lambda raw: _cudnn(raw, "9.3"), "cuda_major", "12"),
        r"^cudnn 9\.3: field 'cuda_major' must be int, got '12'$",
    ),
    (
        "conda_forge field",
        _set(lambda raw: raw["conda_forge"], "channels", ["nvidia"]),
        r"^conda_forge: unknown field\(s\) channels$",
    ),
    (
        "conda_forge cudnn field",
        _forge_cudnn_unknown_field,
        r"^conda_forge\.cudnn\[0\]: unknown field\(s\) channel$",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "message"), [(m, msg) for _, m, msg in BROKEN], ids=[name for name, _, _ in BROKEN]
)
def test_bad_data_is_refused_with_row_and_field(
    raw: dict[str, Any], mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    broken = copy.deepcopy(raw)
    mutate(broken)
    with pytest.raises(MatrixError) as caught:
        parse(broken)
    assert re.search(message, str(caught.value)), str(caught.value)


def test_the_unbroken_copy_parses(raw: dict[str, Any]) -> None:
    """The broken copies above start from data that is fine."""
    assert len(parse(copy.deepcopy(raw)).releases) == len(raw["release"])


@pytest.mark.parametrize(
    ("targets", "compute_min"),
    [
        (["sm_90a", "sm_100", "sm_120", "compute_120"], "9.0"),  # arch-specific Hopper, Blackwell
        (["sm_100", "sm_120", "compute_90"], "9.0"),  # PTX for 9.0 is the lowest
        (["sm_100", "compute_120"], "10.0"),  # sm_100 is compute capability 10.0, not 1.0
    ],
)
def test_blackwell_and_arch_specific_targets_are_read_as_their_compute_capability(
    raw: dict[str, Any], targets: list[str], compute_min: str
) -> None:
    data = copy.deepcopy(raw)
    R(data, "2.21").update(compute_targets=targets, compute_min=compute_min)
    assert parse(data).release("2.21").compute_targets == tuple(targets)
    R(data, "2.21")["compute_min"] = "1.0"
    with pytest.raises(
        MatrixError, match=rf"is not the lowest of compute_targets \({compute_min}\)"
    ):
        parse(data)


def test_an_unreadable_data_file_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.toml"
    bad.write_text('schema = 1\n[[release]\ntf = "2.13"\n', encoding="utf-8")
    with pytest.raises(MatrixError, match=rf"^cannot read the matrix {re.escape(str(bad))}: "):
        matrix_mod.load(bad)
    with pytest.raises(MatrixError, match=r"^cannot read the matrix .*missing\.toml"):
        matrix_mod.load(tmp_path / "missing.toml")


# ---------------------------------------------------------------- against the live index


@pytest.mark.slow
def test_pins_and_wheels_exist_on_the_index(matrix: Matrix) -> None:
    """Every release's pin has Linux x86-64 wheels for exactly its listed Pythons and glibc, the
    newest minor on the index has a row, and every pip_wheels pin has a Linux x86-64 wheel that
    installs on each of the release's Pythons. Simple JSON pages only: no downloads."""
    names = sorted({n for r in matrix.releases for n in r.pip_wheels})
    with ThreadPoolExecutor(max_workers=8) as pool:
        pages = dict(
            zip(
                ["tensorflow", *names],
                pool.map(wheel_facts.simple, ["tensorflow", *names]),
                strict=True,
            )
        )
    tf_wheels = wheel_facts.linux_x86_64(pages["tensorflow"]["files"])
    minors = wheel_facts.releases(pages["tensorflow"])
    newest = max(minors, key=Version)
    assert matrix.newest.tf == newest, f"the index has TensorFlow {newest}; add its row"
    problems = []
    for r in matrix.releases:
        if not r.prerelease and minors[r.tf][-1] != r.latest:
            problems.append(f"{r.tf}: latest {r.latest}, the index has {minors[r.tf][-1]}")
        wheels = tf_wheels.get(r.pin, [])
        if wheel_facts.pythons_of(wheels) != list(r.python):
            problems.append(
                f"{r.tf}: python {list(r.python)}, wheels {wheel_facts.pythons_of(wheels)}"
            )
        glibcs = {wheel_facts.glibc_of(w["platform"]) for w in wheels}
        if glibcs != {r.glibc_min}:
            problems.append(f"{r.tf}: glibc_min {r.glibc_min}, wheels need {sorted(glibcs)}")
        for name, version in sorted(r.pip_wheels.items()):
            tags = set(wheel_facts.wheel_exists(pages, name, version))
            for python in r.python:
                if not tags & {"py3", "py2.py3", f"cp{python.replace('.', '')}"}:
                    problems.append(
                        f"{r.tf}: {name}=={version} has no Linux x86-64 wheel for {python}"
                    )
    assert not problems, "\n".join(problems)
