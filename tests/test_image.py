"""provision image: an OCI image of an environment, built with no network from its bundle on a base
debootstrapped from Debian's packages (no registry image).

The base is made once per test cache (debootstrap --variant=minbase with python3 and python3-venv,
about two minutes) and reused; the images are built for real (root: unshare and chroot), then read
back as OCI archives, loaded into podman and run with crun on the root filesystem umoci unpacks
(`podman run` fails on these build machines with a setrlimit error; crun is the runtime podman
itself would start). The fast tests need none of that: the Apptainer definition (parsed by
spython), refusals that come before any base is opened.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import imagetools
import pytest
from bundletools import cache_root
from clitools import run_cli
from test_bundle import make_bundle
from tinyindex import Env, Index, reseal

from provision.image import assemble, oci

GOLDEN = Path(__file__).parent / "golden" / "image" / "tiny.def"
SUITE = "bookworm"
TAG = "localhost/provision-test-image:tiny"  # the name podman load gives the test's image


def why_no_image_build() -> str | None:
    if os.geteuid() != 0:
        return "needs root (unshare and chroot into the base's root filesystem)"
    for tool in ("unshare", "chroot", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install debootstrap util-linux)"
    return None


@pytest.fixture(scope="session")
def base_rootfs() -> Path:
    """A debootstrapped Debian with Python, made once and kept in the test cache."""
    reason = why_no_image_build()
    if reason:
        pytest.skip(reason)
    folder = cache_root().parent / "image-base" / SUITE
    if not (folder / "usr" / "bin" / "python3").exists():
        tmp = folder.with_name(f".{SUITE}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
             SUITE, str(tmp)],
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip(f"debootstrap failed (no Debian mirror?): {done.stderr[-500:]}")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    return folder


@pytest.fixture(scope="session")
def base_archive(base_rootfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base as an OCI archive (what `skopeo copy containers-storage:... oci-archive:` gives)."""
    work = tmp_path_factory.mktemp("base")
    (work / "blobs").mkdir()
    base = oci.read_base(base_rootfs, work, 1, None)
    config = oci.json_blob(
        {"architecture": "amd64", "os": "linux", "config": {"Env": ["LANG=C.UTF-8"]},
         "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in base.layers]}},
        work / "blobs", oci.CONFIG,
    )  # fmt: skip
    manifest = oci.json_blob(
        {"schemaVersion": 2, "mediaType": oci.MANIFEST, "config": config.descriptor(),
         "layers": [x.blob.descriptor() for x in base.layers]},
        work / "blobs", oci.MANIFEST,
    )  # fmt: skip
    dest = work / "bookworm.oci.tar"
    oci.write_archive(dest, manifest, [config, *(x.blob for x in base.layers)], "bookworm")
    return dest


def tiny_user_env(index: Index, env: Env, version: str = "1.0", user: bool = False) -> None:
    """tiny locked to provision-tiny VERSION; `user`: a package of the user's (packages.in)."""
    if user:
        from provision.userpackages import header

        (env.dir / "packages.in").write_text(header("tiny", False) + "provision-tiny\n")
        reseal(env.dir, "packages.in")
    env.lock(index.add(version, payload=1 << 16))


def layer_names(archive: Path, digest: str) -> list[str]:
    with tarfile.open(archive) as tar:
        blob = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
        with tarfile.open(fileobj=blob, mode="r:gz") as layer:
            return layer.getnames()


def build(bundle: Path, base: Path, dest: Path, cache: bool = False) -> dict[str, object]:
    code, out = run_cli(
        "image", "--from-bundle", str(bundle), "--base", str(base), "-o", str(dest), "--json",
        "-q", *([] if cache else ["--no-layer-cache"]),
    )  # fmt: skip
    assert code == 0, out
    return dict(json.loads(out))


def read_archive(path: Path) -> tuple[dict[str, object], dict[str, object], list[str]]:
    """(manifest, config, names of the archive's members) of an OCI archive."""
    with tarfile.open(path) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = json.loads(tar.extractfile(f"blobs/sha256/{digest}").read())  # type: ignore[union-attr]
        config_digest = manifest["config"]["digest"].removeprefix("sha256:")
        config = json.loads(tar.extractfile(f"blobs/sha256/{config_digest}").read())  # type: ignore[union-attr]
    return manifest, config, names


@pytest.mark.container
def test_image_of_a_bundle_twice_gives_one_digest_and_runs(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path, base_archive: Path
) -> None:
    tiny_user_env(index, env)
    bundle = make_bundle(env, tmp_path / "b" / "tiny.bundle.tar", wheels=wheelhouse)
    first = build(bundle, base_archive, tmp_path / "one.oci.tar")
    second = build(bundle, base_archive, tmp_path / "two.oci.tar")  # built again, not reused
    assert "build" in second["seconds"]  # type: ignore[operator]
    assert first["digest"] == second["digest"]
    assert (tmp_path / "one.oci.tar").read_bytes() == (tmp_path / "two.oci.tar").read_bytes()
    # Again with the cache those builds filled: nothing is built, the same image comes out
    third = build(bundle, base_archive, tmp_path / "three.oci.tar", cache=True)
    assert third["digest"] == first["digest"] and "build" not in third["seconds"]  # type: ignore[operator]
    (tmp_path / "two.oci.tar").unlink()
    (tmp_path / "three.oci.tar").unlink()
    manifest, config, names = read_archive(tmp_path / "one.oci.tar")
    assert names[-2:] == ["index.json", "oci-layout"]
    inner = config["config"]
    assert isinstance(inner, dict)
    assert inner["Healthcheck"]["Test"] == ["CMD", "provision", "verify", "tiny"]
    assert any(e.startswith("PATH=/opt/provision/envs/tiny/bin:") for e in inner["Env"])
    assert len(manifest["layers"]) == 4  # type: ignore[arg-type]
    assert not list(tmp_path.glob(".*image-*")), "the work folder stayed"
    reason = imagetools.why_no_crun()
    if reason:
        pytest.skip(reason)
    bundle_dir = imagetools.unpack(tmp_path / "one.oci.tar", tmp_path / "run")
    try:
        # No activation: `python` is the environment's, and provision knows it as built.
        done = imagetools.crun(bundle_dir, ["sh", "-c", "python -c 'import provision_tiny, sys; "
                               "print(provision_tiny.VERSION, sys.prefix)' && provision list "
                               "--json"], "provision-test-tiny")  # fmt: skip
        assert done.returncode == 0, done.stderr
        first_line, _, listed = done.stdout.partition("\n")
        assert first_line == "1.0 /opt/provision/envs/tiny"
        assert [e["name"] for e in json.loads(listed)] == ["tiny"]
    finally:
        shutil.rmtree(tmp_path / "run")


@pytest.mark.container
def test_the_users_packages_change_only_the_last_layer(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path, base_archive: Path
) -> None:
    tiny_user_env(index, env, "1.0", user=True)
    one = make_bundle(env, tmp_path / "b1" / "tiny.bundle.tar", wheels=wheelhouse)
    first = build(one, base_archive, tmp_path / "one.oci.tar")
    tiny_user_env(index, env, "2.0")  # packages.in as it was, another version locked
    two = make_bundle(env, tmp_path / "b2" / "tiny.bundle.tar", wheels=wheelhouse)
    second = build(two, base_archive, tmp_path / "two.oci.tar")
    layers = [[x["digest"] for x in r["layers"]] for r in (first, second)]  # type: ignore[attr-defined]
    assert layers[0][:-1] == layers[1][:-1]  # base, provision's venv, the locked packages
    assert layers[0][-1] != layers[1][-1]
    site = "opt/provision/envs/tiny/lib/python3.11/site-packages"
    users = layer_names(tmp_path / "one.oci.tar", layers[0][-1])
    locked = layer_names(tmp_path / "one.oci.tar", layers[0][-2])
    assert f"{site}/provision_tiny/__init__.py" in users
    assert f"{site}/provision_tiny-1.0.dist-info/RECORD" in users
    assert not [n for n in locked if "provision_tiny" in n and "nvidia" not in n]
    assert f"{site}/provision_env_hook.pth" in locked


@pytest.mark.container
def test_a_tampered_bundle_is_refused_before_anything_is_built(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path, base_archive: Path
) -> None:
    tiny_user_env(index, env)
    bundle = make_bundle(env, tmp_path / "b" / "tiny.bundle.tar", wheels=wheelhouse)
    data = bytearray(bundle.read_bytes())
    at = data.rfind(b"provision_tiny")  # inside the locked wheel, the last member but the SBOM's
    data[at] ^= 0x20
    bundle.write_bytes(bytes(data))
    code, out = run_cli("image", "--from-bundle", str(bundle), "--base", str(base_archive),
                        "-o", str(tmp_path / "t.oci.tar"))  # fmt: skip
    assert code == 1 and "nothing was built" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "envs", "home", "index"]


@pytest.mark.container
def test_an_image_of_an_environment_makes_its_bundle_on_the_way(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path, base_rootfs: Path
) -> None:
    tiny_user_env(index, env)
    dest = tmp_path / "out" / "tiny.oci.tar"
    dest.parent.mkdir()
    code, out = run_cli("image", "tiny", "--out", str(env.out), "--base", str(base_rootfs),
                        "-o", str(dest), "--provision-wheels", str(wheelhouse), "--format",
                        "apptainer", "-q", "--tag", TAG)  # fmt: skip
    assert code == 0, out
    assert "digest sha256:" in out and "apptainer build tiny.sif" in out
    assert sorted(p.name for p in dest.parent.iterdir()) == ["tiny.def", "tiny.oci.tar"]
    manifest, _, _ = read_archive(dest)
    assert len(manifest["layers"]) == 4  # type: ignore[arg-type]
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: the archive is not loaded")
    loaded = subprocess.run(["podman", "load", "-i", str(dest)], capture_output=True, text=True,
                            timeout=300, check=False)  # fmt: skip
    try:
        assert loaded.returncode == 0, loaded.stderr
        assert TAG in loaded.stdout, loaded.stdout
        shown = subprocess.run(
            ["podman", "image", "inspect", TAG, "--format", "{{.Id}}"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()  # fmt: skip
        assert shown[0] == manifest["config"]["digest"].removeprefix("sha256:")  # type: ignore[index]
    finally:
        subprocess.run(["podman", "rmi", "--ignore", TAG], capture_output=True, timeout=120,
                       check=False)  # fmt: skip


def test_a_bundle_of_another_environment_is_refused(
    index: Index, env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    tiny_user_env(index, env)
    bundle = make_bundle(env, tmp_path / "b" / "tiny.bundle.tar", wheels=wheelhouse)
    (tmp_path / "rootfs" / "usr").mkdir(parents=True)  # looks like a base; never opened
    code, out = run_cli("image", "other", "--from-bundle", str(bundle), "--base",
                        str(tmp_path / "rootfs"), "-o", str(tmp_path / "t.oci.tar"))  # fmt: skip
    assert code == 2 and "is a bundle of tiny, not of other" in out, out
    assert not (tmp_path / "t.oci.tar").exists() and not list(tmp_path.glob(".t.oci*"))


def test_a_missing_bundle_part_is_refused(tmp_path: Path) -> None:
    part = tmp_path / "tiny.bundle.tar.002"
    part.write_bytes(b"provision-bundle-part 1\n" + b"\0" * 600)
    code, out = run_cli("image", "--from-bundle", str(part), "--base", str(tmp_path),
                        "-o", str(tmp_path / "t.oci.tar"))  # fmt: skip
    assert code == 1, out
    assert not (tmp_path / "t.oci.tar").exists()


def test_an_existing_output_is_kept_without_force(tmp_path: Path) -> None:
    out = tmp_path / "t.oci.tar"
    out.write_text("mine")
    bundle = tmp_path / "x.bundle.tar"
    bundle.write_text("x")
    code, text = run_cli("image", "--from-bundle", str(bundle), "--base", str(tmp_path),
                         "-o", str(out))  # fmt: skip
    assert code == 2 and "--force" in text, text
    assert out.read_text() == "mine"


def test_apptainer_definition_is_stable_and_parses(tmp_path: Path) -> None:
    text = assemble.apptainer_definition("tiny", "tiny.oci.tar")
    if os.environ.get("PROVISION_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "regenerate with PROVISION_REGEN_GOLDEN=1"
    header = [line for line in text.splitlines() if line and not line.startswith("#")][:2]
    assert header == ["Bootstrap: oci-archive", "From: tiny.oci.tar"]
    parsers = pytest.importorskip("spython.main.parse.parsers")
    # spython reads only docker bootstraps (its parser raises NotImplementedError for any other):
    # the header is checked above, the rest is spython's to read.
    as_docker = tmp_path / "tiny.def"
    as_docker.write_text(text.replace("Bootstrap: oci-archive", "Bootstrap: docker"))
    (recipe,) = parsers.SingularityParser(str(as_docker)).recipe.values()
    assert recipe.fromHeader == "tiny.oci.tar"
    # spython turns %test into a script it writes (tests.sh) and runs
    assert recipe.test == "/bin/bash /tests.sh"
    assert recipe.install[-2:] == ['echo "exec provision verify tiny" >> /tests.sh',
                                   "chmod u+x /tests.sh"]  # fmt: skip
    assert recipe.labels == ["io.provision.environment tiny"]
    assert recipe.environ == [] and recipe.files == []  # nothing from this host's disk


@pytest.mark.slow
@pytest.mark.container
def test_tensorflow_221_image_is_reproducible_and_verifies_inside(
    wheelhouse: Path, tmp_path: Path, base_rootfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: TensorFlow 2.21 on the pip path (bookworm's Python 3.11), its 44 locked
    wheels (2.6 GB, cached after the first run), built twice (--no-layer-cache: two real builds)
    to one digest, and provision verify passing on the CPU inside, under crun."""
    reason = imagetools.why_no_crun()
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("PROVISION_HOME", str(tmp_path / "home"))
    out = tmp_path / "envs"
    for argv in (
        ["render", "--tf", "2.21", "--path", "pip", "--python", "3.11", "--name", "tf221",
         "--out", str(out)],
        ["lock", "tf221", "--out", str(out)],
        ["bundle", "tf221", "--out", str(out), "-o", str(tmp_path / "tf221.bundle.tar"), "-q",
         "--cache-dir", str(cache_root().with_name("bundle-cache-tf")),
         "--provision-wheels", str(wheelhouse)],
    ):  # fmt: skip
        code, text = run_cli(*argv)
        assert code == 0, text
    bundle = tmp_path / "tf221.bundle.tar"
    first = build(bundle, base_rootfs, tmp_path / "one.oci.tar")
    second = build(bundle, base_rootfs, tmp_path / "two.oci.tar")
    assert first["digest"] == second["digest"]
    (tmp_path / "two.oci.tar").unlink()
    size = first["size"]
    assert isinstance(size, int)
    assert size <= 1.05 * (bundle.stat().st_size + int(first["base_size"]))  # type: ignore[call-overload]
    run = imagetools.unpack(tmp_path / "one.oci.tar", tmp_path / "run")
    try:
        script = ("env -u LD_LIBRARY_PATH python -c 'import tensorflow as tf; "
                  "print(tf.__version__)' && provision verify tf221 --json")  # fmt: skip
        done = imagetools.crun(run, ["sh", "-c", script], "provision-test-tf221")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        version, _, report = done.stdout.partition("\n")
        assert version == "2.21.0"
        assert json.loads(report)["report"]["summary"]["status"] == "pass"
    finally:
        shutil.rmtree(tmp_path / "run")
