"""A tiny PKI for the local federation: one CA, serving and client certificates, kubeconfigs.

All keys are EC P-256; files are PEM. Validity periods are in days.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY_DAYS = 3650
LEAF_VALIDITY_DAYS = 3650
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """Write a private key as unencrypted SEC1 ("EC PRIVATE KEY") PEM, readable only by the
    owner. Not PKCS#8: kube-apiserver's --service-account-key-file rejects PKCS#8 private keys."""
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    os.chmod(path, 0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_service_account_key(path: Path) -> Path:
    """Write an EC private key usable as both --service-account-key-file and
    --service-account-signing-key-file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_key(path, _new_key())
    return path


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA whose certificate and key live in ``dir/ca.crt`` and ``dir/ca.key``."""

    dir: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def key_file(self) -> Path:
        return self.dir / "ca.key"

    @classmethod
    def create(cls, dir: Path, common_name: str) -> CertificateAuthority:
        """Create a self-signed CA valid for CA_VALIDITY_DAYS and write it into ``dir``."""
        dir = dir.resolve()
        dir.mkdir(parents=True, exist_ok=True)
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=CA_VALIDITY_DAYS))
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
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        ca = cls(dir, cert, key)
        _write_cert(ca.cert_file, cert)
        _write_key(ca.key_file, key)
        return ca

    @classmethod
    def load(cls, dir: Path) -> CertificateAuthority:
        """Load a CA previously written by :meth:`create`."""
        dir = dir.resolve()
        cert = x509.load_pem_x509_certificate((dir / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((dir / "ca.key").read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{dir / 'ca.key'}: expected an EC private key")
        return cls(dir, cert, key)

    def _issue(
        self, dir: Path, name: str, subject: x509.Name, eku: x509.ObjectIdentifier,
        sans: list[x509.GeneralName] | None = None,
    ) -> tuple[Path, Path]:
        dir = dir.resolve()
        dir.mkdir(parents=True, exist_ok=True)
        key = _new_key()
        now = dt.datetime.now(dt.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=LEAF_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_encipherment=False, key_cert_sign=False,
                    crl_sign=False, content_commitment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        crt_path, key_path = dir / f"{name}.crt", dir / f"{name}.key"
        _write_cert(crt_path, builder.sign(self.key, hashes.SHA256()))
        _write_key(key_path, key)
        return crt_path, key_path

    def issue_serving(
        self, dir: Path, name: str, hosts: list[str] | tuple[str, ...] = DEFAULT_HOSTS
    ) -> tuple[Path, Path]:
        """Issue a serverAuth certificate for ``hosts`` (IPs become IP SANs, the rest DNS SANs).

        Writes ``dir/<name>.crt`` and ``dir/<name>.key``; returns their absolute paths."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else name)])
        return self._issue(dir, name, subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def issue_client(
        self, dir: Path, name: str, user: str, groups: list[str] | tuple[str, ...] = ()
    ) -> tuple[Path, Path]:
        """Issue a clientAuth certificate for Kubernetes user ``user`` (CN) in ``groups`` (one O
        each). Writes ``dir/<name>.crt`` and ``dir/<name>.key``; returns their absolute paths."""
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(dir, name, x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)


def write_kubeconfig(
    path: Path, *, server: str, ca_file: Path, cert_file: Path, key_file: Path, name: str
) -> Path:
    """Write a kubeconfig whose cluster, user and context are all called ``name`` (and current),
    referring to the certificate files by absolute path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority": str(Path(ca_file).resolve())}}],
        "users": [{"name": name, "user": {
            "client-certificate": str(Path(cert_file).resolve()),
            "client-key": str(Path(key_file).resolve())}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    os.chmod(path, 0o600)
    return path
