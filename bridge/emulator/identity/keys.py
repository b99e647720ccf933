"""The local issuer's signing key, and what a namespace trusts: one directory shared by both.

``<dir>/signing-key.pem`` (RSA 2048, mode 0600) signs every token; ``<dir>/issuer.json`` names the issuer
(the ``iss`` claim), the tenant and the key id (``kid``). A namespace started with the same directory
trusts tokens signed by that key, which is how two namespaces of one local stack accept the tokens of one
issuer. The first process to need the directory creates it under an exclusive lock; later ones reuse it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

KEY_FILE = "signing-key.pem"
ISSUER_FILE = "issuer.json"
LOCK_FILE = ".lock"
AUDIENCE = "https://servicebus.azure.net"


@dataclass(frozen=True, slots=True)
class IssuerKey:
    """The signing key and the names tokens carry; ``public`` is what verifiers need."""

    private: rsa.RSAPrivateKey
    kid: str
    issuer: str
    tenant: str

    @property
    def public(self) -> rsa.RSAPublicKey:
        """The verification key."""
        return self.private.public_key()


def ensure_issuer_key(directory: Path) -> IssuerKey:
    """Load the issuer key from ``directory``, creating it (once, under a lock) when absent."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK_FILE).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (directory / KEY_FILE).exists() or not (directory / ISSUER_FILE).exists():
                _create(directory)
            return _load(directory)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _create(directory: Path) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    tenant = str(uuid.uuid4())
    meta = {
        "tenant": tenant,
        # Shaped like the issuer of Entra ID's v1 access tokens, which Service Bus receives.
        "issuer": f"https://sts.windows.net/{tenant}/",
        "kid": hashlib.sha256(der).hexdigest()[:32],
    }
    _write(directory / KEY_FILE, pem, 0o600)
    _write(directory / ISSUER_FILE, json.dumps(meta, indent=2).encode(), 0o644)


def _load(directory: Path) -> IssuerKey:
    private = serialization.load_pem_private_key((directory / KEY_FILE).read_bytes(), password=None)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise ValueError(f"{directory / KEY_FILE} is not an RSA key")
    meta = json.loads((directory / ISSUER_FILE).read_text())
    return IssuerKey(private, str(meta["kid"]), str(meta["issuer"]), str(meta["tenant"]))


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
