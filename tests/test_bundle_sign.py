"""Signed bundles: `provision bundle --sign KEY`, checked by `install --from-bundle` and by the
bundle's bootstrap.py against an OpenSSH allowed_signers file, with no network.

Keys are made in the test by the system's ssh-keygen (ed25519 and RSA), and signatures made and
checked by it too. Every refusal is one line, exit 1, and leaves the whole test folder as it was
(a snapshot of every file before and after): nothing was unpacked, nothing was run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from bundletools import needs_unshare, offline, provision_offline
from clitools import run_cli
from tinyindex import Env, Index

from provision.bundlefile.bundle_format import ROOT, BundleManifest, Member, tar_info
from provision.bundlefile.bundle_sign import NAMESPACE, SIGNATURE

pytestmark = pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs ssh-keygen")

WHEEL = "wheels/provision_tiny-1.0-py3-none-any.whl"


@dataclasses.dataclass(frozen=True)
class Keys:
    folder: Path

    def key(self, name: str) -> Path:
        return self.folder / name

    def pub(self, name: str) -> str:
        return " ".join((self.folder / f"{name}.pub").read_text().split()[:2])

    def allowed(self, *lines: str) -> Path:
        """An allowed_signers file of `principal [options] name` lines (name: one of the keys)."""
        path = self.folder / f"allowed-{hashlib.sha256(repr(lines).encode()).hexdigest()[:8]}"
        text = []
        for line in lines:
            *head, name = line.split()
            text.append(" ".join([*head, self.pub(name)]))
        path.write_text("\n".join(text) + "\n")
        return path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("keys")
    for name, kind in (("alice", ["-t", "ed25519"]), ("bob", ["-t", "rsa", "-b", "3072"]),
                       ("mallory", ["-t", "ed25519"])):  # fmt: skip
        subprocess.run(["ssh-keygen", "-q", *kind, "-N", "", "-C", name, "-f", folder / name],
                       check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    return Keys(folder)


def make(env: Env, dest: Path, wheels: Path, *extra: str) -> Path:
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(dest), "-q",
                        "--cache-dir", str(dest.parent.parent / "cache"),
                        "--provision-wheels", str(wheels), *extra)  # fmt: skip
    assert code == 0, out
    return dest


@pytest.fixture
def bundles(index: Index, env: Env, wheelhouse: Path, keys: Keys, tmp_path: Path
            ) -> dict[str, Path]:  # fmt: skip
    """The same environment bundled unsigned, signed by alice (ed25519) and by bob (RSA)."""
    env.lock(index.add("1.0", payload=1 << 16))
    return {
        who: make(env, tmp_path / "bundles" / f"{who}.tar", wheelhouse,
                  *(["--sign", str(keys.key(who))] if who != "unsigned" else []))
        for who in ("unsigned", "alice", "bob")
    }  # fmt: skip


def snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        )
        for p in sorted(root.rglob("*"))
        if not p.is_symlink()
    }


def refused(argv: list[str], root: Path, home: Path, *reasons: str,
            env: dict[str, str] | None = None, staged: bool = False) -> str:  # fmt: skip
    """argv (offline) fails with one line naming every reason, and changes nothing under root.
    staged: refused while unpacking into the staging folder (a member changed after signing):
    only the staging folder's empty parent and its lock file are left."""
    before = snapshot(root)
    done = offline(argv, env={"PROVISION_HOME": str(home), **(env or {})})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    for reason in reasons:
        assert reason in lines[-1], lines[-1]
    assert "nothing was" in lines[-1], lines[-1]
    after = snapshot(root)
    if staged:
        rel = home.relative_to(root).as_posix()
        keep = {rel, f"{rel}/locks", f"{rel}/unpack"}
        for tree in (before, after):
            for k in [k for k in tree if k in keep or k.startswith(f"{rel}/locks/unpack-")]:
                del tree[k]
    assert after == before
    return lines[-1]


def install(bundle: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "provision", "install", "--from-bundle", str(bundle),
            "--no-verify", *extra]  # fmt: skip


def rewrite(bundle: Path, dest: Path,
            change: Callable[[str, bytes], list[tuple[str, bytes]]]) -> Path:  # fmt: skip
    """A copy of a one-file bundle with each member replaced by what `change` returns for it."""
    with tarfile.open(bundle) as src, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out:
        for info in src.getmembers():
            data = src.extractfile(info).read()  # type: ignore[union-attr]
            for name, new in change(info.name.removeprefix(ROOT + "/"), data):
                out.addfile(tar_info(name, len(new)), io.BytesIO(new))
    return dest


def flip(path: Path, at: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x01]))


def offset(bundle: Path, member: str) -> int:
    with tarfile.open(bundle) as tar:
        return tar.getmember(f"{ROOT}/{member}").offset_data


# -- signing -------------------------------------------------------------------------------------


def test_the_signature_follows_the_manifest_and_is_the_same_each_time(
    bundles: dict[str, Path], env: Env, wheelhouse: Path, keys: Keys, tmp_path: Path
) -> None:
    signed, unsigned = bundles["alice"], bundles["unsigned"]
    with tarfile.open(signed) as tar:
        names = tar.getnames()
        manifest = tar.extractfile(names[0]).read()  # type: ignore[union-attr]
        sig = tar.extractfile(names[1]).read()  # type: ignore[union-attr]
    with tarfile.open(unsigned) as tar:
        assert names[:1] + names[2:] == tar.getnames()  # the signature is the only addition
        assert manifest == tar.extractfile(names[0]).read()  # type: ignore[union-attr]
    assert names[:2] == [f"{ROOT}/manifest.json", f"{ROOT}/{SIGNATURE}"]
    assert sig.startswith(b"-----BEGIN SSH SIGNATURE-----")
    # The README's check by hand: ssh-keygen alone, nothing of provision's.
    (tmp_path / "m.sig").write_bytes(sig)
    allowed = keys.allowed("alice@lab alice")
    done = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "alice@lab", "-n",
                           NAMESPACE, "-s", tmp_path / "m.sig"], input=manifest,
                          capture_output=True, check=False)  # fmt: skip
    assert done.returncode == 0 and b"Good" in done.stdout, done.stderr
    # Same inputs, same key: the same bytes (ed25519 and RSA PKCS#1 signatures are deterministic).
    again = make(
        env, tmp_path / "again" / "alice.tar", wheelhouse, "--sign", str(keys.key("alice"))
    )
    assert again.read_bytes() == signed.read_bytes()


def test_a_missing_key_is_refused_before_any_download(
    env: Env, index: Index, tmp_path: Path
) -> None:
    env.lock(index.add("1.0"))
    index.mode = "fail"  # nothing may be fetched
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(tmp_path / "b.tar"),
                        "--cache-dir", str(tmp_path / "cache"),
                        "--sign", str(tmp_path / "no"))  # fmt: skip
    assert code == 2 and "does not exist" in out, out
    assert not (tmp_path / "cache").exists() and not list(tmp_path.glob("*b.tar*"))


def test_a_file_that_is_no_key_fails_with_ssh_keygens_reason(
    bundles: dict[str, Path], env: Env, wheelhouse: Path, tmp_path: Path
) -> None:
    not_a_key = tmp_path / "not-a-key"
    not_a_key.write_text("hello\n")
    code, out = run_cli("bundle", env.name, "--out", str(env.out), "-o", str(tmp_path / "b.tar"),
                        "--cache-dir", str(tmp_path / "cache"), "--provision-wheels",
                        str(wheelhouse), "--sign", str(not_a_key))  # fmt: skip
    assert code == 1 and f"ssh-keygen could not sign with {not_a_key}" in out, out
    assert not list(tmp_path.glob("b.tar*")) and not list(tmp_path.glob(".b.tar*"))


# -- installing: trusted, and without trust --------------------------------------------------------


@needs_unshare
@pytest.mark.parametrize("who", ["alice", "bob"])
def test_a_bundle_signed_by_a_trusted_key_installs(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path, who: str
) -> None:
    allowed = keys.allowed(f'{who}@lab namespaces="{NAMESPACE}" {who}', "mallory@lab mallory")
    home = tmp_path / "target"
    done = provision_offline("install", "--from-bundle", str(bundles[who]), "--no-verify",
                             "--json", "--trust", str(allowed),
                             env={"PROVISION_HOME": str(home)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    signature = json.loads(done.stdout)["signature"]
    kind = "ED25519" if who == "alice" else "RSA"
    assert signature["state"] == "verified" and signature["principal"] == f"{who}@lab"
    assert signature["key"].startswith(f"{kind} key SHA256:")
    assert f"signed by {who}@lab ({kind} key SHA256:" in done.stderr


@needs_unshare
def test_trust_from_provision_home_and_from_the_environment(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    home = tmp_path / "target"
    home.mkdir()
    shutil.copyfile(keys.allowed("mallory@lab mallory"), home / "allowed_signers")
    refused(install(bundles["alice"]), tmp_path, home, "which", "does not trust")
    trust = str(keys.allowed("alice@lab alice"))
    done = provision_offline("install", "--from-bundle", str(bundles["alice"]), "--no-verify",
                             env={"PROVISION_HOME": str(home),
                                  "PROVISION_TRUST": trust})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tiny: signed by alice@lab (ED25519 key SHA256:" in done.stdout


@needs_unshare
def test_without_trust_a_bundle_says_whether_it_is_signed(
    bundles: dict[str, Path], tmp_path: Path
) -> None:
    for who, said in (("unsigned", "the bundle is not signed"),
                      ("alice", "signed by ED25519 key SHA256:")):  # fmt: skip
        done = provision_offline("install", "--from-bundle", str(bundles[who]), "--no-verify",
                                 env={"PROVISION_HOME": str(tmp_path / f"home-{who}")})  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"tiny: {said}" in done.stdout, done.stdout
    assert "not checked: no trust file" in done.stdout


# -- refusals, with a trust file ----------------------------------------------------------------


@needs_unshare
def test_refusals_name_what_is_wrong_and_touch_nothing(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    allowed = str(keys.allowed("alice@lab alice", "bob@lab bob"))
    home = tmp_path / "target"
    trust = ["--trust", allowed]
    refused(install(bundles["unsigned"], *trust), tmp_path, home, "is not signed", allowed)
    other = make_signed_by(bundles["unsigned"], keys, "mallory", tmp_path / "m.tar")
    refused(install(other, *trust), tmp_path, home, "is signed by ED25519 key SHA256:",
            f"which {allowed} does not trust")  # fmt: skip
    # The manifest changed after signing: one byte of it.
    changed = tmp_path / "changed.tar"
    shutil.copyfile(bundles["alice"], changed)
    flip(changed, offset(changed, "manifest.json") + 40)
    refused(install(changed, *trust), tmp_path, home, "manifest was changed after it was signed")
    # A member changed after signing: caught as it is unpacked, before anything is built.
    member = tmp_path / "member.tar"
    shutil.copyfile(bundles["bob"], member)
    flip(member, offset(member, WHEEL) + 100)
    refused(install(member, *trust), tmp_path, home, f"{WHEEL} in {member} was changed after it "
            "was signed", "the signed manifest says", staged=True)  # fmt: skip
    # A member added after signing.
    added = tmp_path / "added.tar"
    shutil.copyfile(bundles["alice"], added)
    with tarfile.open(added, "a") as tar:
        tar.addfile(tar_info("wheels/evil-1.0-py3-none-any.whl", 5), io.BytesIO(b"evil\n"))
    refused(install(added, *trust), tmp_path, home,
            "evil-1.0-py3-none-any.whl, which its signed manifest does not list",
            staged=True)  # fmt: skip


@needs_unshare
def test_a_manifest_replaced_and_signed_again_by_another_key_is_refused(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """The attack a manifest alone cannot stop: a wheel swapped, the manifest made to match."""
    evil = b"print('owned')\n"

    def swap(name: str, data: bytes) -> list[tuple[str, bytes]]:
        if name == "manifest.json":
            old = BundleManifest.loads(data, "test")
            members = tuple(
                Member(m.name, m.group, len(evil), hashlib.sha256(evil).hexdigest())
                if m.name == WHEEL else m for m in old.members
            )  # fmt: skip
            new = dataclasses.replace(old, members=members).dumps()
            return [(name, new), (SIGNATURE, sign(new, keys.key("mallory")))]
        if name == SIGNATURE:
            return []
        return [(name, evil if name == WHEEL else data)]

    forged = rewrite(bundles["alice"], tmp_path / "forged.tar", swap)
    allowed = str(keys.allowed("alice@lab alice"))
    refused(install(forged, "--trust", allowed), tmp_path, tmp_path / "target",
            "is signed by ED25519 key", f"which {allowed} does not trust")  # fmt: skip


@needs_unshare
def test_an_expired_a_not_yet_valid_and_a_revoked_signer_are_refused(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    home = tmp_path / "target"
    expired = keys.allowed('alice@lab valid-before="20200101" alice')
    refused(install(bundles["alice"], "--trust", str(expired)), tmp_path, home,
            f"which {expired} lists, but key has expired")  # fmt: skip
    future = keys.allowed('alice@lab valid-after="20991231" alice')
    refused(install(bundles["alice"], "--trust", str(future)), tmp_path, home,
            "key is not yet valid")  # fmt: skip
    git_only = keys.allowed('alice@lab namespaces="git" alice')
    refused(install(bundles["alice"], "--trust", str(git_only)), tmp_path, home,
            'not permitted for use in signature namespace "provision-bundle"')  # fmt: skip
    allowed = keys.allowed("alice@lab alice")
    revoked = keys.folder / "alice.pub"
    refused(install(bundles["alice"], "--trust", str(allowed), "--revoked", str(revoked)),
            tmp_path, home, "is signed by alice@lab (ED25519 key SHA256:",
            f"the key is revoked in {revoked}")  # fmt: skip


@needs_unshare
def test_trust_without_ssh_keygen_is_refused(bundles: dict[str, Path], keys: Keys,
                                             tmp_path: Path) -> None:  # fmt: skip
    bare = tmp_path / "bin"
    bare.mkdir()
    allowed = str(keys.allowed("alice@lab alice"))
    refused(install(bundles["alice"], "--trust", allowed), tmp_path, tmp_path / "target",
            "ssh-keygen, which checks the signature, is not installed",
            env={"PATH": str(bare)})  # fmt: skip


# -- bootstrap.py, on a host without provision --------------------------------------------------


def bootstrap_of(bundle: Path, dest: Path) -> Path:
    with tarfile.open(bundle) as tar:
        dest.write_bytes(tar.extractfile(f"{ROOT}/bootstrap.py").read())  # type: ignore[union-attr]
    return dest


@needs_unshare
def test_bootstrap_refuses_before_it_installs_anything(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    script = bootstrap_of(bundles["alice"], tmp_path / "bootstrap.py")
    home = tmp_path / "target"
    allowed = str(keys.allowed("bob@lab bob"))

    def boot(bundle: Path, *extra: str) -> list[str]:
        return [sys.executable, "-I", str(script), str(bundle), "--provision-only", *extra]

    refused(boot(bundles["unsigned"], "--trust", allowed), tmp_path, home, "is not signed")
    refused(boot(bundles["alice"], "--trust", allowed), tmp_path, home,
            "is signed by ED25519 key SHA256:", f"which {allowed} does not trust")  # fmt: skip
    changed = tmp_path / "changed.tar"
    shutil.copyfile(bundles["bob"], changed)
    flip(changed, offset(changed, "manifest.json") + 40)
    refused(boot(changed, "--trust", allowed), tmp_path, home,
            "manifest was changed after it was signed")  # fmt: skip
    refused(boot(bundles["bob"]), tmp_path, home, "ssh-keygen", "is not installed",
            env={"PATH": str(tmp_path / "no-bin"), "PROVISION_TRUST": allowed})  # fmt: skip
    expired = str(keys.allowed('bob@lab valid-before="20200101" bob'))
    refused(boot(bundles["bob"], f"--trust={expired}"), tmp_path, home, "key has expired")
    done = offline(boot(bundles["bob"], "--trust"), env={"PROVISION_HOME": str(home)})
    assert done.returncode == 1 and "--trust needs a file" in done.stderr, done.stderr
    assert not home.exists()


# -- helpers that sign as an attacker would, with ssh-keygen ------------------------------------


def sign(data: bytes, key: Path) -> bytes:
    return subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", key, "-n", NAMESPACE],
                          input=data, capture_output=True, check=True).stdout  # fmt: skip


def make_signed_by(bundle: Path, keys: Keys, who: str, dest: Path) -> Path:
    """The unsigned bundle, signed by `who` as `provision bundle --sign` would."""

    def add(name: str, data: bytes) -> list[tuple[str, bytes]]:
        extra = [(SIGNATURE, sign(data, keys.key(who)))] if name == "manifest.json" else []
        return [(name, data), *extra]

    return rewrite(bundle, dest, add)


@pytest.mark.slow
@needs_unshare
def test_bootstrap_checks_the_signature_then_installs_provision_and_the_bundle(
    bundles: dict[str, Path], keys: Keys, tmp_path: Path
) -> None:
    """A host without provision: the bare Python runs bootstrap.py with the trust file, which both
    bootstrap.py and the provision it installs check the bundle against."""
    python = Path(sys.base_prefix) / "bin" / "python{}.{}".format(*sys.version_info[:2])
    probe = subprocess.run([python, "-I", "-c", "import provision"], capture_output=True,
                           check=False)  # fmt: skip
    if not python.is_file() or probe.returncode == 0:
        pytest.skip("no Python of this version without provision on this host")
    script = bootstrap_of(bundles["alice"], tmp_path / "bootstrap.py")
    allowed = str(keys.allowed("alice@lab alice"))
    home = tmp_path / "target"
    argv = [str(python), str(script), str(bundles["alice"]), "--trust", allowed, "--no-verify"]
    done = offline(argv, env={"PROVISION_HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bootstrap: signed by alice@lab (ED25519 key SHA256:" in done.stdout
    assert "tiny: signed by alice@lab (ED25519 key SHA256:" in done.stdout
    assert (home / "venv" / "bin" / "provision").is_file()


@needs_unshare
def test_a_signed_split_bundle_is_checked_from_its_first_part(
    env: Env, index: Index, wheelhouse: Path, keys: Keys, tmp_path: Path
) -> None:
    env.lock(index.add("1.0", payload=1 << 20))
    base = make(env, tmp_path / "parts" / "tiny.tar", wheelhouse, "--split", "4M",
                "--sign", str(keys.key("bob")))  # fmt: skip
    parts = sorted(base.parent.glob("tiny.tar.*"))
    assert len(parts) > 2
    allowed = str(keys.allowed("bob@lab bob"))
    # A copy whose manifest changed in part 1: refused before part 2 is read.
    copy = tmp_path / "copy"
    shutil.copytree(base.parent, copy)
    flip(copy / parts[0].name, 512 + 512 + 60)  # part header, the manifest's tar header
    refused(install(copy / parts[0].name, "--trust", allowed), tmp_path, tmp_path / "target",
            "manifest was changed after it was signed")  # fmt: skip
    done = provision_offline("install", "--from-bundle", str(parts[0]), "--no-verify",
                             "--trust", allowed,
                             env={"PROVISION_HOME": str(tmp_path / "t2")})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tiny: signed by bob@lab (RSA key SHA256:" in done.stdout
