"""The network settings users already have reach uv: an index behind a lab's own certificate
authority, configured only in pip's configuration file, locks and builds through provision.

The index is tinyindex's, served over HTTPS on 127.0.0.1 with a certificate signed by a CA made
here (the `cryptography` package); pip.conf names the index and the CA (`cert`), nothing else
does: SSL_CERT_FILE, REQUESTS_CA_BUNDLE and the PIP_* variables are unset.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpserve
import pytest
from clitools import run_cli
from tinyindex import Env, Index, _handler

from provision import tools

crypto = pytest.importorskip("cryptography")


def _ca_and_leaf(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for 127.0.0.1, valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "provision test lab CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture
def lab_index(tmp_path: Path, index: Index, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tinyindex's wheels over HTTPS with the lab's CA; yields pip.conf's folder (ca.pem there).
    The plain-HTTP index of the `index` fixture keeps serving the lock's wheel for Env.lock."""
    certs = tmp_path / "lab"
    certs.mkdir()
    ca, cert, key = _ca_and_leaf(certs)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with httpserve.Server(_handler(index), tls=context) as server:
        conf = certs / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {server.url}/simple\ncert = {ca}\n")
        yield conf


def _only_pip_conf(monkeypatch: pytest.MonkeyPatch, conf: Path) -> None:
    """A user whose only network setting is pip's configuration file."""
    for var in ("PIP_INDEX_URL", "PIP_CERT", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                "CURL_CA_BUNDLE", "UV_NATIVE_TLS", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL",
                "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "UV_INSECURE_HOST"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))


def test_an_index_behind_a_lab_ca_in_pip_conf_locks_and_builds(
    index: Index, env: Env, lab_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.lock(index.add("1.0"))  # sealed through the plain index, before pip.conf is the only way
    _only_pip_conf(monkeypatch, lab_index)
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 0, out
    assert (env.prefix / "bin" / "python").exists()
    # The lock goes through uv to the same index: it resolves provision-tiny (and then says the
    # matrix's TensorFlow pins are missing, as they are from this one-wheel index), no TLS error.
    code, out = run_cli("lock", "tiny", "--out", str(env.out))
    assert "certificate" not in out.lower() and "UnknownIssuer" not in out, out
    assert "the resolved lock does not hold what the matrix pins" in out, out


def test_without_the_cert_in_pip_conf_uv_meets_the_unknown_issuer(
    index: Index, env: Env, lab_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same index, pip.conf without `cert`, fails on the certificate (so the
    test above passes because the setting reached uv, not because TLS was not checked)."""
    env.lock(index.add("1.0"))
    conf = lab_index.with_name("no-cert.conf")
    conf.write_text("\n".join(ln for ln in lab_index.read_text().splitlines() if "cert" not in ln))
    _only_pip_conf(monkeypatch, conf)
    code, out = run_cli("lock", "tiny", "--out", str(env.out))
    assert code == 1, out
    assert "certificate" in out.lower() or "UnknownIssuer" in out, out


def test_pip_settings_become_the_variables_uv_and_conda_lock_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\ncert = /lab/ca.pem\nproxy = http://proxy.lab:3128\n"
        "trusted-host = mirror.lab\n  other.lab\nclient-cert = /lab/me.pem\n"
        "[install]\nextra-index-url = https://mirror.lab/simple\n"
    )
    env = {"PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path)}
    got = tools.network_env(env, extra_index=True)
    assert got["SSL_CERT_FILE"] == got["REQUESTS_CA_BUNDLE"] == "/lab/ca.pem"
    assert got["SSL_CLIENT_CERT"] == "/lab/me.pem"
    assert got["HTTPS_PROXY"] == got["HTTP_PROXY"] == "http://proxy.lab:3128"
    assert got["UV_INSECURE_HOST"] == "mirror.lab other.lab"
    assert got["UV_EXTRA_INDEX_URL"] == "https://mirror.lab/simple"
    assert got["UV_INDEX_STRATEGY"] == "unsafe-best-match"  # every index, as pip looks
    # A lock does not depend on this machine's extra indexes (installs may use them as mirrors).
    assert "UV_EXTRA_INDEX_URL" not in tools.network_env(env)
    # What the user exported stays theirs (proxies, trusted hosts); PIP_CERT wins over pip.conf.
    env |= {"https_proxy": "http://mine:1", "PIP_CERT": "/mine.pem"}
    got = tools.network_env(env)
    assert "HTTPS_PROXY" not in got and got["SSL_CERT_FILE"] == "/mine.pem"
