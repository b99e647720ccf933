"""Who may send through the HTTP ingress: API keys (stored as SHA-256 digests) and Service Bus SAS tokens.

API keys arrive as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``; the bridge keeps only the
SHA-256 hex digest of each key (``docs/doors/http.md``, "Auth"), so a leaked settings file does not leak a
key. A key may be limited to some entities. The Service Bus REST door also accepts the header a REST client
already sends, ``Authorization: SharedAccessSignature sr=...&sig=...&se=...&skn=...``, checked like Service
Bus checks it: HMAC-SHA256 of ``<url-encoded resource>\\n<expiry>`` with the configured key, not expired,
and scoped: the path of the token's resource (``sr``) must be the requested path or one of its parent
paths, so a token signed for ``/orders`` does not open ``/payments``.

Pure: no I/O, ``now`` passed in. Errors never echo what the caller presented.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, quote_plus

from bridge.errors import AuthenticationError, EntityNotAllowedError


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: a name for logs and the entities it may use (``None``: all)."""

    name: str
    entities: frozenset[str] | None = None

    def check_entity(self, entity: str) -> None:
        """Raise ``EntityNotAllowedError`` unless this caller may use ``entity``."""
        if self.entities is not None and entity not in self.entities:
            raise EntityNotAllowedError(f"this API key may not use entity {entity!r}")


@dataclass(frozen=True)
class ApiKey:
    """One configured key: its SHA-256 hex digest and allow-list."""

    name: str
    sha256: str
    entities: frozenset[str] | None = None


def hash_api_key(key: str) -> str:
    """The SHA-256 hex digest stored in settings for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


def authenticate_key(presented: str, keys: Sequence[ApiKey]) -> Caller:
    """The caller owning ``presented``; compares digests in constant time and checks every key."""
    digest = hash_api_key(presented)
    found: ApiKey | None = None
    for key in keys:
        if hmac.compare_digest(digest, key.sha256):
            found = key
    if found is None:
        raise AuthenticationError("invalid API key")
    return Caller(name=found.name, entities=found.entities)


def sas_signature(resource: str, expiry: int, key: str) -> str:
    """The ``sig`` of a SAS token for ``resource`` (a URL, signed URL-encoded as Azure does)."""
    to_sign = f"{quote_plus(resource)}\n{expiry}".encode()
    return base64.b64encode(hmac.new(key.encode(), to_sign, hashlib.sha256).digest()).decode()


def resource_path(resource: str) -> str:
    """The path of a SAS resource URI, lower-cased, without slashes at either end (``""``: the namespace).

    ``sr`` is usually ``https://<host>/<entity>`` but may omit the scheme (``<host>/<entity>``).
    """
    rest = resource.split("://", 1)[1] if "://" in resource else resource
    return rest.partition("/")[2].strip("/").lower()


def within_scope(scope: str, path: str) -> bool:
    """Whether the request ``path`` lies under the token's resource path ``scope`` (Service Bus's rule)."""
    target = path.strip("/").lower()
    return not scope or target == scope or target.startswith(scope + "/")


def authenticate_sas(token: str, *, key_name: str, key: str, now: float, path: str | None = None) -> Caller:
    """Check a ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` token against the configured key.

    With ``path`` (the request's URL path), the token must also be scoped to it (``within_scope``).
    """
    scheme, _, params = token.partition(" ")
    if scheme != "SharedAccessSignature" or not params:
        raise AuthenticationError("malformed SharedAccessSignature")
    fields = {name: values[0] for name, values in parse_qs(params.strip(), keep_blank_values=True).items()}
    try:
        resource, signature, expiry_text, name = fields["sr"], fields["sig"], fields["se"], fields["skn"]
        expiry = int(expiry_text)
    except (KeyError, ValueError):
        raise AuthenticationError("SharedAccessSignature lacks sr, sig, se or skn") from None
    if name != key_name:
        raise AuthenticationError("SharedAccessSignature names an unknown key")
    if expiry < now:
        raise AuthenticationError("SharedAccessSignature has expired")
    expected = sas_signature(resource, expiry, key)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise AuthenticationError("SharedAccessSignature signature does not match")
    if path is not None and not within_scope(resource_path(resource), path):
        raise AuthenticationError("SharedAccessSignature is for another resource")
    return Caller(name=f"sas:{name}")
