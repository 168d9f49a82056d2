"""The bill of materials: `provision export NAME DIR --sbom` and every bundle's sbom.cdx.json, a
CycloneDX document made with cyclonedx-python-lib and validated here with that library's own JSON
schema validator. Its components are compared with the lock: the committed TensorFlow 2.21 pip
environment, a conda environment locked by the real conda-lock from the suite's local channel,
and the system path's NVIDIA files with the matrix's checksums.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import localchannel
import pytest
import yaml
from clitools import run_cli
from tinyindex import Env, Index

from provision import __version__, environment, matrix
from provision.bundlefile.bundle_format import ROOT, BundleManifest
from provision.lock.requirements import parse_lock
from provision.matrix import kinds, spec

ROOT_DIR = Path(__file__).resolve().parent.parent
M = matrix.load()


def export(name: str, out: Path, dest: Path) -> dict[str, Any]:
    code, text = run_cli("export", name, str(dest), "--out", str(out), "--sbom")
    assert code == 0, text
    document = (dest / "sbom.cdx.json").read_text()
    assert_valid(document)
    return json.loads(document)  # type: ignore[no-any-return]


def assert_valid(document: str) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(document, all_errors=True)
    assert errors is None, list(errors) if errors is not None else None  # type: ignore[arg-type]


def by_purl(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {c["purl"]: c for c in doc["components"] if c.get("purl", "").startswith(f"pkg:{kind}/")}


def hashes(component: dict[str, Any], alg: str = "SHA-256") -> set[str]:
    return {h["content"] for h in component.get("hashes", []) if h["alg"] == alg}


def props(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def test_the_sbom_of_tensorflow_2_21_on_pip_lists_the_lock(tmp_path: Path) -> None:
    name = "tf2.21-pip"
    env = environment.load(ROOT_DIR / "envs" / name)
    doc = export(name, ROOT_DIR / "envs", tmp_path / "a")
    pins = parse_lock(env.lock.read_text())
    listed = by_purl(doc, "pypi")
    assert set(listed) == {f"pkg:pypi/{p.name}@{p.version}" for p in pins}
    for p in pins:
        component = listed[f"pkg:pypi/{p.name}@{p.version}"]
        assert (component["name"], component["version"]) == (p.name, p.version)
        assert hashes(component) == {h.removeprefix("sha256:") for h in p.hashes}
    assert f"pkg:pypi/tensorflow@{env.spec.release.pin}" in listed
    # The NVIDIA libraries TensorFlow loads, at the row's versions.
    nvidia = {c["name"]: c for c in doc["components"] if c.get("group") == "nvidia"}
    s = env.spec
    assert nvidia[f"libcudnn.so.{s.cudnn.major}"]["version"] == s.cudnn.full
    assert nvidia[f"libcudart.so.{s.cuda.major}"]["version"] == s.cuda.full
    # The matrix row and its sources, on the document's own component; no clock time.
    root = doc["metadata"]["component"]
    assert props(root)["provision:matrix-row"] == (
        f"TensorFlow {s.release.pin}, CUDA {s.cuda.full}, cuDNN {s.cudnn.full}"
    )
    assert props(root)["provision:lock-sha256"] == hashlib.sha256(env.lock.read_bytes()).hexdigest()
    cited = dict.fromkeys((*s.release.sources, *s.cuda.sources, *s.cudnn.sources))
    urls = {
        unquote(r["url"]) for r in root["externalReferences"]
    }  # the schema's IRIs escape spaces
    assert urls == {M.sources[i].url for i in cited}
    assert doc["metadata"]["tools"]["components"][0]["version"] == __version__
    assert "timestamp" not in doc["metadata"] and doc["serialNumber"].startswith("urn:uuid:")
    again = export(name, ROOT_DIR / "envs", tmp_path / "b")
    assert (tmp_path / "a" / "sbom.cdx.json").read_bytes() == (
        tmp_path / "b" / "sbom.cdx.json"
    ).read_bytes()
    assert again == doc


def test_the_system_path_lists_nvidias_files_with_the_matrix_checksums(tmp_path: Path) -> None:
    env = environment.load(ROOT_DIR / "envs" / "tf2.13-system")
    doc = export("tf2.13-system", ROOT_DIR / "envs", tmp_path / "x")
    files = {c["name"]: c for c in doc["components"] if c["type"] == "file"}
    s = env.spec
    assert hashes(files[s.cuda.runfile]) == {s.cuda.runfile_sha256}
    assert hashes(files[s.cudnn.archive]) == {s.cudnn.sha256}


CUDA12 = next(
    (r.tf for r in reversed(M.finals)
     if kinds.of("conda").refusal(M, r) is None and M.cuda_of(r).major == 12),
    None,
)  # fmt: skip


@pytest.mark.skipif(CUDA12 is None, reason="the matrix has no CUDA 12 row on the conda path")
def test_the_sbom_of_a_conda_environment_lists_the_lock(
    tmp_path: Path, local_channel: localchannel.Channel, local_index: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("PIP_INDEX_URL", local_index)
    out = tmp_path / "envs"
    assert CUDA12 is not None
    code, text = run_cli("render", "--tf", CUDA12, "--path", "conda", "--out", str(out))
    assert code == 0, text
    name = spec.resolve(M, CUDA12, "conda").name
    code, text = run_cli("lock", name, "--out", str(out), "--channel", local_channel.url,
                         "--solver", "builtin", "--cache-dir", str(tmp_path / "cache"))  # fmt: skip
    assert code == 0, text
    doc = export(name, out, tmp_path / "exported")
    locked = [p for p in yaml.safe_load((out / name / "conda-lock.yml").read_text())["package"]
              if p["platform"] == "linux-64"]  # fmt: skip
    conda = by_purl(doc, "conda")
    assert len(conda) == len([p for p in locked if p["manager"] == "conda"]) > 0
    for p in locked:
        if p["manager"] != "conda":
            continue
        [component] = [c for purl, c in conda.items()
                       if purl.startswith(f"pkg:conda/{p['name']}@{p['version']}?")]  # fmt: skip
        assert hashes(component) == {p["hash"]["sha256"]}
        assert hashes(component, "MD5") == {p["hash"]["md5"]}
        assert "subdir=linux-64" in component["purl"] and "channel=" in component["purl"]
    pip = by_purl(doc, "pypi")
    assert {f"pkg:pypi/{p['name'].lower()}@{p['version']}" for p in locked
            if p["manager"] == "pip"} == set(pip)  # fmt: skip


def test_every_bundle_carries_the_sbom_of_its_lock(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    code, text = run_cli("export", env.name, str(tmp_path / "early"), "--out", str(env.out),
                         "--sbom")  # fmt: skip
    assert code == 1 and "has no lock yet: provision lock tiny" in text, text
    assert not (tmp_path / "early").exists()
    env.lock(index.add("1.0"))
    bundle = tmp_path / "tiny.tar"
    code, text = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(bundle), "-q",
                         "--cache-dir", str(tmp_path / "cache"), "--provision-wheels",
                         str(wheelhouse))  # fmt: skip
    assert code == 0, text
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = BundleManifest.loads(
            tar.extractfile(f"{ROOT}/manifest.json").read(),
            "t",  # type: ignore[union-attr]
        )
        carried = tar.extractfile(f"{ROOT}/sbom.cdx.json").read()  # type: ignore[union-attr]
    assert names[:3] == [f"{ROOT}/manifest.json", f"{ROOT}/bootstrap.py", f"{ROOT}/sbom.cdx.json"]
    assert [m.name for m in manifest.group("sbom")] == ["sbom.cdx.json"]  # its sha256 is listed
    assert_valid(carried.decode())
    doc = json.loads(carried)
    assert set(by_purl(doc, "pypi")) == {"pkg:pypi/provision-tiny@1.0"}
    exported = export(env.name, env.out, tmp_path / "exported")  # the same lock, the same bytes
    assert (tmp_path / "exported" / "sbom.cdx.json").read_bytes() == carried
    assert exported == doc


def test_help_does_not_import_the_sbom_library() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "provision", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "export" in done.stdout and "cyclonedx" not in done.stderr
