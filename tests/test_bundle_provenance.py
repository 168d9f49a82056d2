"""Where a bundle came from: its manifest names provision's version, the lock's sha256, the matrix
row and the sources it cites, and the target; an environment built from it says so in `provision
show` and `verify --json`. Bundles are built as in tests/test_bundle.py (a small real wheel, the
test's index, provision's own wheels) and installed with no network.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

from bundletools import needs_unshare, provision_offline
from clitools import run_cli
from tinyindex import Env, Index

from provision import __version__, environment, matrix
from provision.bundlefile.bundle_format import ROOT, BundleManifest
from provision.fileio import sha256_text


def _bundle(env: Env, wheels: Path, dest: Path) -> Path:
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(dest), "-q",
                        "--cache-dir", str(dest.parent / "cache"),
                        "--provision-wheels", str(wheels))  # fmt: skip
    assert code == 0, out
    return dest


def _manifest(bundle: Path) -> tuple[bytes, BundleManifest]:
    with tarfile.open(bundle) as tar:
        data = tar.extractfile(f"{ROOT}/manifest.json").read()  # type: ignore[union-attr]
    return data, BundleManifest.loads(data, str(bundle))


def test_the_manifest_says_what_made_the_bundle(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    data, manifest = _manifest(_bundle(env, wheelhouse, tmp_path / "b" / "tiny.tar"))
    spec = environment.load(env.dir).spec
    assert manifest.provision_version == __version__
    assert manifest.lock_sha256 == hashlib.sha256((env.dir / "requirements.lock").read_bytes()
                                                  ).hexdigest()  # fmt: skip
    assert manifest.matrix_row == (
        f"TensorFlow {spec.release.pin}, CUDA {spec.cuda.full}, cuDNN {spec.cudnn.full}"
    )
    cited = dict.fromkeys((*spec.release.sources, *spec.cuda.sources, *spec.cudnn.sources))
    assert [c.id for c in manifest.citations] == list(cited)
    assert manifest.citations == tuple(matrix.load().sources[i] for i in cited)
    assert manifest.platform == "linux-64" and manifest.requires.machine == "x86_64"
    # Nothing of when or where: no path of this host, no clock time.
    text = data.decode()
    assert str(tmp_path) not in text and str(Path.home()) not in text
    assert '"built' not in text and "time" not in json.loads(text)


def test_a_manifest_of_format_1_is_still_read() -> None:
    body = {
        "format": 1, "name": "old", "path": "pip", "tf": "2.13.1", "python": "3.11",
        "platform": "linux-64", "lock": "requirements.lock", "lock_sha256": "0" * 64,
        "provision_version": "0.1.0", "provision_python": "3.11",
        "requires": {"machine": "x86_64", "glibc": "2.17", "python": "3.11", "driver": "450.80",
                     "driver_full": "520.61"},
        "members": [],
    }  # fmt: skip
    digest = sha256_text(json.dumps(body, sort_keys=True, separators=(",", ":")))
    old = BundleManifest.loads(json.dumps({**body, "digest": digest}).encode(), "old.tar")
    assert old.matrix_row == "" and old.citations == ()


@needs_unshare
def test_show_and_verify_say_which_bundle_built_the_environment(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    bundle = _bundle(env, wheelhouse, tmp_path / "b" / "tiny.tar")
    data, manifest = _manifest(bundle)
    home = {"PROVISION_HOME": str(tmp_path / "target")}
    done = provision_offline("install", "--from-bundle", str(bundle), "--no-verify", env=home)
    assert done.returncode == 0, done.stderr
    shown = provision_offline("show", "tiny", "--json", env=home)
    assert shown.returncode == 0, shown.stderr
    origin = json.loads(shown.stdout)["built"]["bundle"]
    assert origin["manifest_sha256"] == hashlib.sha256(data).hexdigest()
    assert origin["provision_version"] == __version__
    assert origin["lock_sha256"] == manifest.lock_sha256
    assert origin["matrix_row"] == manifest.matrix_row
    assert origin["citations"][0].startswith(
        f"{manifest.citations[0].id} {manifest.citations[0].url}"
    )
    assert (origin["platform"], origin["machine"]) == ("linux-64", "x86_64")
    assert origin["signature"] == "unsigned"
    text = provision_offline("show", "tiny", env=home).stdout
    assert f"bundle       manifest sha256 {origin['manifest_sha256']}" in text, text
    assert "signed       not signed" in text and f"from         {manifest.matrix_row}" in text
    verified = provision_offline("verify", "tiny", "--json", env=home)  # no TensorFlow: it fails
    assert json.loads(verified.stdout)["bundle"] == origin, verified.stderr
