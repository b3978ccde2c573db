"""A small certificate authority for the mesh: the CA that ``boxoffice up``
keeps under its data directory, and the tests' PKI.

Every certificate is ECDSA P-256, carries one SPIFFE URI SAN (the identity
the authorization table speaks of) and the loopback names (DNS
``localhost`` and the role's name, IP 127.0.0.1 and ::1) so that a client
dialling ``127.0.0.1:port`` verifies the server's certificate by its IP SAN,
and is good for both TLS server and client authentication: every process of
the mesh is both.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from boxoffice import access

# A leaf lives a month; `boxoffice up` renews one with less than a third of
# that left. The CA lives a year.
LEAF_VALIDITY = datetime.timedelta(days=30)
CA_VALIDITY = datetime.timedelta(days=365)
_RENEW_BEFORE = LEAF_VALIDITY / 3
# Clocks of two machines disagree a little.
_BACKDATE = datetime.timedelta(minutes=5)

LOOPBACK_IPS = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


@dataclass(frozen=True, slots=True)
class CertFiles:
    """Where one identity's PEM files are: the CA that verifies peers, the
    certificate chain presented, and its private key."""

    ca: Path
    cert: Path
    key: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Writes ``data`` to ``path`` atomically (a reader sees the old file or
    the new one, never half of one) with ``mode``."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class Authority:
    """A CA key and certificate that issue the mesh's identities."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert

    @classmethod
    def create(cls, name: str, *, valid_for: datetime.timedelta = CA_VALIDITY) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + valid_for)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> Authority:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key is not an ECDSA key")
        return cls(key, x509.load_pem_x509_certificate(cert_pem))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def issue(
        self,
        spiffe_id: str,
        *,
        dns_names: Iterable[str] = ("localhost",),
        not_before: datetime.datetime | None = None,
        valid_for: datetime.timedelta = LEAF_VALIDITY,
    ) -> tuple[bytes, bytes]:
        """A new key and a certificate for ``spiffe_id``, as PEM (cert, key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = (not_before or _now()) - _BACKDATE
        names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_id)]
        names.extend(x509.DNSName(name) for name in dict.fromkeys(dns_names))
        names.extend(x509.IPAddress(ip) for ip in LOOPBACK_IPS)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spiffe_id.rsplit("/", 1)[-1])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + _BACKDATE + valid_for)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(names), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def write_identity(directory: Path, name: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> CertFiles:
    """Writes ``ca.pem``, ``<name>.pem`` and ``<name>-key.pem`` (mode 0600)
    into ``directory``; the certificate and its key replace the old ones
    key first, so that a reader checking the pair sees a mismatch at worst,
    never a certificate whose key is not on disk."""
    directory.mkdir(parents=True, exist_ok=True)
    files = CertFiles(ca=directory / "ca.pem", cert=directory / f"{name}.pem", key=directory / f"{name}-key.pem")
    if not files.ca.exists() or files.ca.read_bytes() != ca_pem:
        _write(files.ca, ca_pem, 0o644)
    _write(files.key, key_pem, 0o600)
    _write(files.cert, cert_pem, 0o644)
    return files


def spiffe_ids_of(cert: x509.Certificate) -> list[str]:
    """The certificate's URI SANs."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(uri) for uri in san.get_values_for_type(x509.UniformResourceIdentifier)]


def namespaces_of(cert_files: Iterable[Path], trust_domain: str) -> frozenset[str]:
    """The namespaces of the mesh identities (of ``trust_domain``) in the
    certificates of ``cert_files``; a file that cannot be read names none."""
    found: set[str] = set()
    for path in cert_files:
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError):
            continue
        for uri in spiffe_ids_of(cert):
            namespace = access.namespace_of(uri, trust_domain)
            if namespace is not None:
                found.add(namespace)
    return frozenset(found)


def _still_good(files: CertFiles, ca: Authority, spiffe_id: str) -> bool:
    """Whether the identity on disk is the CA's, for ``spiffe_id``, with a
    third of its life left, and its key is its certificate's."""
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    except (OSError, ValueError):
        return False
    return (
        cert.issuer == ca.cert.subject
        and spiffe_ids_of(cert) == [spiffe_id]
        and cert.not_valid_after_utc - _now() > _RENEW_BEFORE
        and key.public_key() == cert.public_key()
    )


def local_pki(directory: Path, identities: Mapping[str, str]) -> dict[str, CertFiles]:
    """The CA in ``directory`` (``ca.pem``, ``ca-key.pem``; created when
    missing or within a month of expiry) and one identity per entry of
    ``identities`` (name -> SPIFFE ID), reusing those still good."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_cert, ca_key = directory / "ca.pem", directory / "ca-key.pem"
    ca: Authority | None = None
    try:
        ca = Authority.load(ca_cert.read_bytes(), ca_key.read_bytes())
        if ca.cert.not_valid_after_utc - _now() < LEAF_VALIDITY:
            ca = None
    except (OSError, ValueError):
        ca = None
    if ca is None:
        ca = Authority.create("boxoffice local CA")
        _write(ca_key, ca.key_pem, 0o600)
        _write(ca_cert, ca.cert_pem, 0o644)
    out: dict[str, CertFiles] = {}
    for name, spiffe_id in identities.items():
        files = CertFiles(ca=ca_cert, cert=directory / f"{name}.pem", key=directory / f"{name}-key.pem")
        if not _still_good(files, ca, spiffe_id):
            cert_pem, key_pem = ca.issue(spiffe_id, dns_names=("localhost", name))
            files = write_identity(directory, name, ca.cert_pem, cert_pem, key_pem)
        out[name] = files
    return out
