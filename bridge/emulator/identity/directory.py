"""The identities the local issuer knows, from a small TOML file.

```toml
lifetime_seconds = 3600          # token lifetime (default 3600; tests use e.g. 120 or less)

[identities.bridge]              # one table per identity; the name is what logs and files use
roles = ["owner"]                # owner | sender | receiver, or the roles' full names
system_assigned = true           # what the managed-identity endpoint returns when no client id is asked
client_id = "..."                # optional: default a stable UUID derived from the name
secret = "..."                   # optional: lets ClientSecretCredential sign in as this identity
certificate = "client-cert.pem"  # optional: lets CertificateCredential sign in (public certificate PEM)
```

Every identity can also sign in with a federated token (``WorkloadIdentityCredential``): the issuer writes
one per identity into ``<identity dir>/federated/<name>.jwt``. Secrets are never printed; an error names the
identity and the field, never its value.
"""

from __future__ import annotations

import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa

from bridge.emulator.errors import ArgumentError
from bridge.emulator.identity.rights import canonical_role

DEFAULT_LIFETIME = 3600
_FIELDS = {"roles", "system_assigned", "client_id", "secret", "certificate"}


@dataclass(frozen=True)
class Identity:
    """One service principal or managed identity and the Service Bus data roles assigned to it."""

    name: str
    client_id: str
    roles: tuple[str, ...]
    system_assigned: bool = False
    secret: str | None = field(default=None, repr=False)
    certificate: rsa.RSAPublicKey | None = field(default=None, repr=False)

    @property
    def object_id(self) -> str:
        """The principal's object id (``oid``), stable per name."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"bridge-local-identity-oid:{self.name}"))

    @property
    def federated_subject(self) -> str:
        """The ``sub`` of this identity's federated token (a Kubernetes service account's shape)."""
        return f"system:serviceaccount:bridge:{self.name}"


@dataclass(frozen=True)
class Directory:
    """All identities and the token lifetime."""

    identities: tuple[Identity, ...]
    lifetime_seconds: int = DEFAULT_LIFETIME

    def by_client_id(self, client_id: str) -> Identity | None:
        """The identity with ``client_id`` (case-insensitive), if any."""
        wanted = client_id.strip().lower()
        return next((i for i in self.identities if i.client_id.lower() == wanted), None)

    def system_assigned(self) -> Identity | None:
        """The identity the managed-identity endpoint serves when the caller names none."""
        return next((i for i in self.identities if i.system_assigned), None)

    def by_subject(self, subject: str) -> Identity | None:
        """The identity whose federated token carries ``subject``."""
        return next((i for i in self.identities if i.federated_subject == subject), None)


def default_client_id(name: str) -> str:
    """A stable client id for an identity that declares none."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"bridge-local-identity:{name}"))


def load_directory(path: Path) -> Directory:
    """Read and check an identities file; a bad file is one ``ArgumentError`` naming the place."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ArgumentError(f"cannot read identities file {path}: {exc}") from None
    return parse_directory(data, base=path.parent)


def parse_directory(data: dict[str, Any], base: Path = Path()) -> Directory:
    """The directory described by ``data`` (the TOML document as a dict)."""
    lifetime = data.get("lifetime_seconds", DEFAULT_LIFETIME)
    if not isinstance(lifetime, int) or lifetime < 1:
        raise ArgumentError("lifetime_seconds must be a positive integer")
    tables = data.get("identities", {})
    if not isinstance(tables, dict) or not tables:
        raise ArgumentError("the identities file declares no [identities.<name>] table")
    identities = tuple(_identity(name, table, base) for name, table in tables.items())
    if sum(i.system_assigned for i in identities) > 1:
        raise ArgumentError("at most one identity can be system_assigned")
    client_ids = [i.client_id.lower() for i in identities]
    if len(set(client_ids)) != len(client_ids):
        raise ArgumentError("two identities share a client_id")
    return Directory(identities, lifetime)


def _identity(name: str, table: Any, base: Path) -> Identity:
    if not isinstance(table, dict):
        raise ArgumentError(f"identities.{name} must be a table")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ArgumentError(f"identities.{name}: unknown field(s) {', '.join(unknown)}")
    roles = table.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise ArgumentError(f"identities.{name}.roles must be a list of role names")
    secret = table.get("secret")
    if secret is not None and (not isinstance(secret, str) or not secret):
        raise ArgumentError(f"identities.{name}.secret must be a non-empty string")
    return Identity(
        name=name,
        client_id=str(table.get("client_id") or default_client_id(name)),
        roles=tuple(canonical_role(r) for r in roles),
        system_assigned=bool(table.get("system_assigned", False)),
        secret=secret,
        certificate=_certificate(name, table.get("certificate"), base),
    )


def _certificate(name: str, value: Any, base: Path) -> rsa.RSAPublicKey | None:
    if value is None:
        return None
    path = base / str(value)
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"identities.{name}.certificate: cannot read {path}: {exc}") from None
    key = cert.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise ArgumentError(f"identities.{name}.certificate: only RSA certificates are supported")
    return key
