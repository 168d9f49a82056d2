"""Install provision from a provision bundle on a host that has none, then install the bundle.

Get this script out of the bundle with tar, and run it with the host's python3:

    tar -xOf BUNDLE provision-bundle/bootstrap.py > bootstrap.py                      # one file
    tail -c +513 BUNDLE.001 | tar -xO --occurrence=1 provision-bundle/bootstrap.py > bootstrap.py
    python3 bootstrap.py BUNDLE|BUNDLE.001 [options of provision install, e.g. --prefix DIR]
    python3 bootstrap.py BUNDLE|BUNDLE.001 --provision-only   # provision, not the environment

It reads only the start of the bundle (the manifest and provision's wheels) and checks each of
those members against the manifest, makes a venv at $PROVISION_HOME/venv (by default
~/.local/share/provision/venv), installs provision there with pip and no index (once per wheel of
provision: a second run with the same bundle installs nothing), then runs
`VENV/bin/provision install --from-bundle BUNDLE ...`, which checks the whole bundle first. With
--provision-only it stops before that, so that something can run first (provision fleet runs the
doctor). Standard library only; it runs with any Python 3.8 or newer and says what is missing.

Signed bundles (provision bundle --sign KEY): with a file of trusted signers (--trust FILE, which
provision install takes too; else PROVISION_TRUST; else PROVISION_HOME/allowed_signers), the
manifest's signature is checked with ssh-keygen before anything is unpacked or installed, and a
bundle that is unsigned, signed by another key, or changed after it was signed is refused. Without
one, provision install says whether the bundle is signed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

ROOT = "provision-bundle/"
NAMESPACE = "provision-bundle"  # as provision.bundlefile.bundle_sign, which this cannot import
PART_MAGIC = b"provision-bundle-part 1\n"
PART_HEADER = 512


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"bootstrap: error: {message}\n")
    sys.exit(1)


class Parts:
    """The tar's bytes across NAME.001, NAME.002, ... (each after its 512-byte header)."""

    def __init__(self, first: Path) -> None:
        m = re.fullmatch(r"(.+)\.(\d{3,})", first.name)
        if not m:
            fail(f"{first}: a part's name ends in .001")
        self.base = first.with_name(m.group(1))
        self.number = 0
        self.fh: BinaryIO | None = None
        self._next()

    def _next(self) -> None:
        if self.fh is not None:
            self.fh.close()
        self.number += 1
        path = self.base.with_name(f"{self.base.name}.{self.number:03d}")
        self.fh = open(path, "rb") if path.is_file() else None  # noqa: SIM115
        if self.fh is not None:
            self.fh.seek(PART_HEADER)

    def read(self, size: int = -1) -> bytes:
        while self.fh is not None:
            data = self.fh.read(size)
            if data:
                return data
            self._next()
        return b""


def open_stream(path: Path) -> Parts | BinaryIO:
    with open(path, "rb") as fh:
        split = fh.read(len(PART_MAGIC)) == PART_MAGIC
    return Parts(path) if split else open(path, "rb")


def read_manifest(
    tar: tarfile.TarFile, source: Path, trust: TrustedSigners | None
) -> dict[str, Any]:
    info = tar.next()
    if info is None or info.name != ROOT + "manifest.json":
        fail(f"{source} is not a provision bundle (its first member is not the manifest)")
    data = tar.extractfile(info).read()  # type: ignore[union-attr]
    if trust is not None:
        after = tar.next()
        sig = None
        if after is not None and after.name == ROOT + "manifest.json.sig" and after.isreg():
            sig = tar.extractfile(after).read(1 << 16)  # type: ignore[union-attr]
        trust.check(data, sig, source)
    raw = json.loads(data.decode("utf-8"))
    digest = raw.pop("digest", None)
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    if digest != hashlib.sha256(text.encode()).hexdigest():
        fail(f"{source}: the bundle's manifest is damaged (its digest does not match)")
    return raw  # type: ignore[no-any-return]


class TrustedSigners:
    """Trusted signers (an OpenSSH allowed_signers file) and revoked keys, checked by ssh-keygen
    as provision's bundle_sign checks them."""

    def __init__(self, allowed: Path, revoked: Path | None) -> None:
        self.allowed = allowed
        self.revoked = revoked

    @classmethod
    def configured(cls, options: list[str]) -> TrustedSigners | None:
        def pick(flag: str, env: str, name: str) -> Path | None:
            if options and options[-1] == flag:
                fail(f"{flag} needs a file")
            given = [options[i + 1] for i, a in enumerate(options[:-1]) if a == flag]
            given += [a.split("=", 1)[1] for a in options if a.startswith(flag + "=")]
            if given:
                path = Path(given[-1]).expanduser()
            elif os.environ.get(env):
                path = Path(os.environ[env]).expanduser()
            elif (home() / name).exists():
                path = home() / name
            else:
                return None
            if not path.is_file():
                fail(f"{path} (the {flag[2:]} file) does not exist or is not a file")
            return path.absolute()

        allowed = pick("--trust", "PROVISION_TRUST", "allowed_signers")
        revoked = pick("--revoked", "PROVISION_REVOKED", "revoked_signers")
        return cls(allowed, revoked) if allowed is not None else None

    def check(self, manifest: bytes, sig: bytes | None, source: Path) -> None:
        if sig is None:
            fail(f"{source} is not signed, and {self.allowed} says whose signatures to trust; "
                 "nothing was unpacked")  # fmt: skip
        from shutil import which

        keygen = which("ssh-keygen")
        if keygen is None:
            fail(f"{source} is signed and {self.allowed} is configured, but ssh-keygen, which "
                 "checks the signature, is not installed (apt-get install openssh-client); "
                 "nothing was unpacked")  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="provision-sig-") as tmp:
            sig_file = str(Path(tmp) / "manifest.json.sig")
            Path(sig_file).write_bytes(sig)

            def run(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
                return subprocess.run([keygen, "-Y", *args], input=data, capture_output=True,
                                      timeout=60, check=False)  # fmt: skip

            whole = run("check-novalidate", "-n", NAMESPACE, "-s", sig_file, data=manifest)
            if whole.returncode != 0:
                fail(f"{source}: its manifest was changed after it was signed (or its signature "
                     "is damaged); nothing was unpacked")  # fmt: skip
            found = re.search(r" with (\S+ key \S+)", whole.stdout.decode(errors="replace"))
            key = found.group(1) if found else "an unknown key"
            names = run("find-principals", "-s", sig_file, "-f", str(self.allowed))
            principal = names.stdout.decode(errors="replace").split()
            if names.returncode != 0 or not principal:
                why = re.search(r":\d+: (key [^\r\n]*)", names.stderr.decode(errors="replace"))
                fail(f"{source} is signed by {key}, "
                     + (f"which {self.allowed} lists, but {why.group(1)}" if why
                        else f"which {self.allowed} does not trust")
                     + "; nothing was unpacked")  # fmt: skip
            verify = ["verify", "-f", str(self.allowed), "-I", principal[0], "-n", NAMESPACE,
                      "-s", sig_file]  # fmt: skip
            revoked = ["-r", str(self.revoked)] if self.revoked else []
            if run(*verify, *revoked, data=manifest).returncode != 0:
                revoked_only = revoked and run(*verify, data=manifest).returncode == 0
                reason = "the key is revoked in " + str(self.revoked) if revoked_only else ""
                fail(f"{source} is signed by {principal[0]} ({key}), but "
                     f"{reason or 'ssh-keygen refuses it'}; nothing was unpacked")  # fmt: skip
        print(f"bootstrap: signed by {principal[0]} ({key}), trusted in {self.allowed}",
              flush=True)  # fmt: skip


def extract_provision(tar: tarfile.TarFile, manifest: dict[str, Any], into: Path) -> None:
    wanted = {m["name"]: m for m in manifest["members"] if m["group"] == "provision"}
    while wanted:
        info = tar.next()
        if info is None:
            fail("the bundle ended before provision's wheels: it is truncated")
        name = info.name[len(ROOT) :]
        member = wanted.pop(name, None)
        if member is None:
            continue
        data = tar.extractfile(info).read()  # type: ignore[union-attr]
        if hashlib.sha256(data).hexdigest() != member["sha256"]:
            fail(f"{name} in the bundle is corrupt (its sha256 is not the manifest's)")
        (into / Path(name).name).write_bytes(data)


def home() -> Path:
    explicit = os.environ.get("PROVISION_HOME")
    if explicit:
        try:
            return Path(explicit).expanduser().absolute()
        except RuntimeError:  # ~user of a user this machine does not have
            fail(f"PROVISION_HOME {explicit}: no such user on this machine; set it to a folder")
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "provision"


def python_for(version: str) -> str:
    """This interpreter when it is Python X.Y, else pythonX.Y on PATH (re-run with it)."""
    this = "{}.{}".format(*sys.version_info[:2])
    if this == version:
        return sys.executable
    from shutil import which

    found = which(f"python{version}")
    if found is None:
        fail(
            f"provision's wheels in this bundle are for Python {version}, and this host has no "
            f"python{version} (this is Python {this}); install it, or build the bundle with "
            f"--provision-python {this}"
        )
    return found


def installed_version(python: Path) -> str:
    if not python.exists():
        return ""
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('provision'))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else ""


def own_wheel_sha256(manifest: dict[str, Any], version: str) -> str:
    """The sha256 of provision's own wheel in the bundle: two builds of one version differ."""
    for m in manifest["members"]:
        if m["group"] == "provision" and Path(m["name"]).name.startswith(f"provision-{version}-"):
            return str(m["sha256"])
    return ""


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__ or "")
        return 0 if argv else 2
    bundle = Path(argv[0]).absolute()
    if not bundle.is_file():
        fail(f"{bundle}: no such file")
    provision_only = "--provision-only" in argv[1:]
    options = [a for a in argv[1:] if a != "--provision-only"]
    trust = TrustedSigners.configured(options)
    with tarfile.open(fileobj=open_stream(bundle), mode="r|") as tar:  # type: ignore[call-overload]
        manifest = read_manifest(tar, bundle, trust)
        version, wanted = manifest["provision_version"], manifest["provision_python"]
        python = python_for(wanted)
        if python != sys.executable:
            os.execv(python, [python, __file__, *argv])
        venv = home() / "venv"
        exe = venv / "bin" / "python"
        marker = venv / ".provision-bundle-wheel"
        wheel_sha = own_wheel_sha256(manifest, version)
        held = marker.read_text().strip() if marker.is_file() else ""
        if installed_version(exe) != version or held != wheel_sha:
            with tempfile.TemporaryDirectory(prefix="provision-bootstrap-") as tmp:
                extract_provision(tar, manifest, Path(tmp))
                print(f"bootstrap: installing provision {version} into {venv}", flush=True)
                made = subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)])
                if made.returncode != 0:
                    fail(
                        f"python{wanted} -m venv {venv} failed; install the venv module "
                        f"(Debian, Ubuntu: apt-get install python{wanted}-venv)"
                    )
                pip = [str(exe), "-m", "pip", "install", "--no-index", "--find-links", tmp,
                       "--disable-pip-version-check", "--quiet",
                       f"provision=={version}"]  # fmt: skip
                if subprocess.run(pip).returncode != 0:
                    fail(f"pip could not install provision {version} into {venv} (see above)")
                marker.write_text(wheel_sha + "\n")
    provision = venv / "bin" / "provision"
    if provision_only:
        print(f"bootstrap: provision {version} is at {provision}", flush=True)
        return 0
    print(f"bootstrap: provision {version} is at {provision}; running it", flush=True)
    os.execv(str(provision), [str(provision), "install", "--from-bundle", str(bundle), *options])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
