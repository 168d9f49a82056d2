"""Who made a bundle: its manifest signed with an SSH key, checked against trusted signers.

The manifest holds every member's sha256, so a signature of its exact bytes vouches for the whole
bundle. The signature is OpenSSH's SSHSIG (`ssh-keygen -Y sign`, namespace `provision-bundle`),
made and checked by the system's ssh-keygen, never by provision's own cryptography; it is the
tar's second member, `manifest.json.sig`, so that the start of the first part is enough to check
it before anything is unpacked. Trusted signers are an OpenSSH `allowed_signers` file (principal,
options such as namespaces= and valid-before=, public key); revoked keys a file `ssh-keygen -r`
reads (public keys, or a KRL). By hand, the same check is:

    tar -xOf B provision-bundle/manifest.json.sig > m.sig
    tar -xOf B provision-bundle/manifest.json | ssh-keygen -Y verify -f allowed_signers \\
        -I PRINCIPAL -n provision-bundle -s m.sig

Where the trust comes from, first found: --trust FILE, PROVISION_TRUST, PROVISION_HOME's
`allowed_signers`; revoked keys: --revoked FILE, PROVISION_REVOKED, PROVISION_HOME's
`revoked_signers`. bootstrap_bundle.py, which cannot import this, checks the same way.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from provision import _proc, diskread
from provision.bundlefile.bundle_format import BundleError
from provision.errors import ProvisionError

NAMESPACE = "provision-bundle"
SIGNATURE = "manifest.json.sig"
SIG_LIMIT = 64 << 10  # an SSHSIG of a 16 kbit RSA key is about 6 kB
TRUST_ENV = "PROVISION_TRUST"
REVOKED_ENV = "PROVISION_REVOKED"
TRUST_FILE = "allowed_signers"  # in PROVISION_HOME
REVOKED_FILE = "revoked_signers"
TIMEOUT = 60.0  # a passphrase typed at the terminal counts


class SignatureRefused(BundleError):
    """A bundle whose signature is missing, not trusted or does not match, with trust configured."""


@dataclass(frozen=True)
class Trust:
    allowed: Path  # allowed_signers
    revoked: Path | None


@dataclass(frozen=True)
class Signature:
    """What a bundle's signature says: unsigned, signed but not checked, or verified."""

    state: str  # unsigned | unverified | verified
    key: str = ""  # "ED25519 key SHA256:...", when ssh-keygen could read it
    principal: str = ""  # the trusted signer's name, when verified
    trust: str = ""  # the allowed_signers file it was checked against

    def line(self) -> str:
        if self.state == "unsigned":
            return "the bundle is not signed (nothing says who made it)"
        if self.state == "verified":
            return f"signed by {self.principal} ({self.key}), trusted in {self.trust}"
        who = self.key or "a key ssh-keygen could not read here"
        return (
            f"signed by {who}, not checked: no trust file (--trust FILE, {TRUST_ENV}, or "
            f"PROVISION_HOME/{TRUST_FILE})"
        )

    def as_json(self) -> dict[str, object]:
        return {"state": self.state, "key": self.key, "principal": self.principal,
                "trust": self.trust}  # fmt: skip


# -- where trust comes from --------------------------------------------------------------------


def _configured(option: Path | None, env: str, name: str, what: str) -> Path | None:
    from provision import registry

    if option is not None:
        path, origin = option, f"--{what}"
    elif os.environ.get(env):
        path, origin = Path(os.environ[env]).expanduser(), env
    else:
        default = registry.home() / name
        if not default.exists():
            return None
        path, origin = default, str(default)
    try:
        diskread.read_text(path)
    except FileNotFoundError:
        raise ProvisionError(f"{origin} names {path}, which does not exist") from None
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"{origin}: {path} cannot be read ({exc})") from None
    return path.absolute()


def trust_from(trust: Path | None = None, revoked: Path | None = None) -> Trust | None:
    """The trusted signers configured here, None when there are none (so nothing is checked)."""
    allowed = _configured(trust, TRUST_ENV, TRUST_FILE, "trust")
    revoked_path = _configured(revoked, REVOKED_ENV, REVOKED_FILE, "revoked")
    if allowed is None:
        if revoked is not None:
            raise ProvisionError("--revoked needs a trust file too (--trust FILE)")
        return None
    return Trust(allowed, revoked_path)


# -- signing -------------------------------------------------------------------------------------


def keygen() -> str:
    found = _proc.which("ssh-keygen")
    if found is None:
        raise ProvisionError(
            "ssh-keygen is not installed: it signs and checks bundles (Debian, Ubuntu: apt-get "
            "install openssh-client; RHEL: dnf install openssh)"
        )
    return found


def check_key(key: Path) -> None:
    """Before anything is downloaded: the key is a readable file and ssh-keygen is here."""
    keygen()
    try:
        diskread.read_bytes(key, 1 << 20)
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"--sign {key}: cannot read the key ({exc})") from None


def sign(manifest: bytes, key: Path) -> bytes:
    """The SSHSIG of the manifest's bytes by `key` (a private key file, or a public key whose
    private half ssh-agent holds); a passphrase is asked for at the terminal, as ssh-keygen asks."""
    done = _proc.run(
        [keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE],
        input=manifest, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    if not done or not done.stdout.startswith("-----BEGIN SSH SIGNATURE-----"):
        raise ProvisionError(f"ssh-keygen could not sign with {key}: {done.last_line()}")
    return done.stdout.encode()


# -- checking ------------------------------------------------------------------------------------


def check(manifest: bytes, sig: bytes | None, trust: Trust | None, source: str) -> Signature:
    """The manifest's signature against `trust`; SignatureRefused, naming why, when trust is
    configured and the bundle is unsigned, signed by a key it does not trust (or whose trust
    expired, or that is revoked), or changed after it was signed. Without trust: what it says."""
    if sig is None:
        if trust is not None:
            raise SignatureRefused(
                f"{source} is not signed, and {trust.allowed} says whose signatures to trust; "
                "nothing was unpacked"
            )
        return Signature("unsigned")
    if trust is None and _proc.which("ssh-keygen") is None:
        return Signature("unverified")
    if trust is not None and _proc.which("ssh-keygen") is None:
        raise SignatureRefused(
            f"{source} is signed and {trust.allowed} is configured, but ssh-keygen, which checks "
            "the signature, is not installed (apt-get install openssh-client); nothing was unpacked"
        )
    with tempfile.TemporaryDirectory(prefix="provision-sig-") as tmp:
        sig_file = Path(tmp) / SIGNATURE
        sig_file.write_bytes(sig)
        return _check(manifest, str(sig_file), trust, source)


def _keygen(argv: list[str], manifest: bytes | None = None) -> _proc.Completed:
    return _proc.run([keygen(), "-Y", *argv], input=manifest, timeout=TIMEOUT, check=False)


def _check(manifest: bytes, sig: str, trust: Trust | None, source: str) -> Signature:
    whole = _keygen(["check-novalidate", "-n", NAMESPACE, "-s", sig], manifest)
    if not whole:
        raise SignatureRefused(
            f"{source}: its manifest was changed after it was signed (or its signature is "
            f"damaged: {whole.last_line()}); nothing was unpacked"
        )
    found = re.search(r" with (\S+ key \S+)", whole.stdout)
    key = found.group(1) if found else "an unknown key"
    if trust is None:
        return Signature("unverified", key)
    allowed = str(trust.allowed)
    principals = _keygen(["find-principals", "-s", sig, "-f", allowed])
    names = principals.stdout.split()
    if not principals or not names:
        why = _reason(principals.stderr)
        raise SignatureRefused(
            f"{source} is signed by {key}, "
            + (f"which {allowed} lists, but {why}" if why else f"which {allowed} does not trust")
            + "; nothing was unpacked"
        )
    revoked = ["-r", str(trust.revoked)] if trust.revoked else []
    verify = ["verify", "-f", allowed, "-I", names[0], "-n", NAMESPACE, "-s", sig]
    done = _keygen([*verify, *revoked], manifest)
    if done:
        return Signature("verified", key, names[0], allowed)
    if revoked and _keygen(verify, manifest):
        why = f"the key is revoked in {trust.revoked}"
    else:
        why = _reason(done.stderr) or done.last_line()
    raise SignatureRefused(
        f"{source} is signed by {names[0]} ({key}), but {why}; nothing was unpacked"
    )


def _reason(stderr: str) -> str:
    """ssh-keygen's own reason from allowed_signers (expired, not yet valid, wrong namespace)."""
    for line in stderr.splitlines():
        m = re.match(r"^.*?:\d+: (key .*)$", line)
        if m:
            return m.group(1).replace(" verify time ", " at ")
    return ""
