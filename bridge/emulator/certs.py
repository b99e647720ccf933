"""The self-signed certificate of a local namespace's HTTPS management endpoint.

``ServiceBusAdministrationClient`` always speaks HTTPS (``management/_management_client.py`` hard-codes
``https://``), so the emulator needs a certificate that clients can trust with
``connection_verify=<cert.pem>``. The certificate is its own trust anchor: CN ``localhost``, SAN
``DNS:localhost``, ``IP:127.0.0.1`` and the bind host, valid one year, EC P-256. It carries the extensions
that strict verifiers insist on (basic constraints CA, key usage, subject and authority key identifiers),
so Python's ``VERIFY_X509_STRICT`` and ``requests`` both accept it.

Files: ``<dir>/cert.pem`` and ``<dir>/key.pem`` (mode 0600). They are reused while they stay valid for at
least another day and name the bind host, so a restarted emulator keeps the certificate clients were given.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bridge.errors import EmulatorError

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    """Where the PEM files are; ``cert`` is what clients pass as ``connection_verify``."""

    cert: Path
    key: Path


def ensure_certificate(
    directory: Path, host: str = "127.0.0.1", now: dt.datetime | None = None
) -> CertificateFiles:
    """Reuse the certificate in ``directory`` if still good for ``host``, otherwise write a new one."""
    now = now or dt.datetime.now(dt.UTC)
    directory.mkdir(parents=True, exist_ok=True)
    files = CertificateFiles(directory / CERT_FILE, directory / KEY_FILE)
    if _reusable(files, host, now):
        return files
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _self_signed(key, host, now)
    _write(
        files.key,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        mode=0o600,
    )
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return files


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context for the management endpoint (TLS 1.2+, HTTP/1.1 only)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.__class__.__name__
        raise EmulatorError(f"cannot load the management certificate {cert}: {reason}") from None
    context.set_alpn_protocols(["http/1.1"])
    return context


def subject_names(host: str) -> list[x509.GeneralName]:
    """The SAN entries: ``localhost``, ``127.0.0.1`` and ``host`` (as an IP when it is one)."""
    loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), loopback]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        extra: x509.GeneralName = x509.DNSName(host)
    else:
        extra = x509.IPAddress(address)
    if host and not address_is_wildcard(host) and extra not in names:
        names.append(extra)
    return names


def address_is_wildcard(host: str) -> bool:
    """``0.0.0.0`` and ``::`` bind every interface but name none; they do not belong in a SAN."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _self_signed(key: ec.EllipticCurvePrivateKey, host: str, now: dt.datetime) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(subject_names(host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _reusable(files: CertificateFiles, host: str, now: dt.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound):
        return False
    der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    same_key = key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)
    fresh = cert.not_valid_before_utc <= now and cert.not_valid_after_utc - RENEW_BEFORE > now
    return same_key and fresh and all(name in san for name in subject_names(host))


def _write(path: Path, data: bytes, mode: int) -> None:
    # Write next to the target and rename, so a reader never sees half a key; the mode is set at creation
    # so the private key is never readable by others, not even for a moment.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
