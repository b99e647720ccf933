"""Who may send through the HTTP ingress: API keys (stored as SHA-256 digests) and Service Bus SAS tokens.

API keys arrive as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``; the bridge keeps only the
SHA-256 hex digest of each key (``docs/doors/http.md``, "Auth"), so a leaked settings file does not leak a
key. A key may be limited to some entities. The Service Bus REST door also accepts the header a REST client
already sends, ``Authorization: SharedAccessSignature sr=...&sig=...&se=...&skn=...``, checked like Service
Bus checks it: HMAC-SHA256 of ``<url-encoded resource>\\n<expiry>`` with the configured key, not expired,
and scoped: the path of the token's resource (``sr``) must be the requested path or one of its parent
paths, so a token signed for ``/orders`` does not open ``/payments``.

Clients encode ``sr`` differently, and each signs the text it puts in the token: Node's ``azure-sb`` and
Python's ``azure-servicebus`` 0.x lower-case the whole URI and its ``%xx`` escapes, .NET's
``HttpUtility.UrlEncode`` (PowerShell's examples) writes lower-case escapes, ``WebUtility.UrlEncode`` and
Python's ``quote_plus`` upper-case ones, some tokens carry ``sr`` unencoded. So the signature is checked
over ``sr`` exactly as it appears in the token and over its canonical encodings (``sas_candidates``); the
HMAC still needs the key, and every candidate names the same decoded resource, on which scope is checked
(scheme, host, port and query string are not part of the scope).

Pure: no I/O, ``now`` passed in. Errors never echo what the caller presented.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, quote_plus, unquote

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
    return _sign(quote_plus(resource), expiry, key).decode()


_LOWER_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def decoded_resource(resource: str) -> str:
    """``sr`` with its ``%xx`` escapes undone until none is left (a token may encode it more than once)."""
    for _ in range(4):
        decoded = unquote(resource)
        if decoded == resource:
            break
        resource = decoded
    return resource


def resource_path(resource: str) -> str:
    """The path of a SAS resource URI, lower-cased, without slashes at either end (``""``: the namespace).

    ``sr`` is usually ``https://<host>/<entity>`` but may omit the scheme (``<host>/<entity>``), carry a
    port (Python's 0.x SDK writes ``https://<host>:<port>:443/...``) or a query string (Node's ``azure-sb``
    signs ``...?api-version=2016-07``); it may arrive encoded or not. None of these is part of the scope.
    """
    text = decoded_resource(resource)
    text = text.split("?", 1)[0].split("#", 1)[0]
    rest = text.split("://", 1)[1] if "://" in text else text
    return rest.partition("/")[2].strip("/").lower()


def sas_candidates(raw_resource: str) -> list[str]:
    """The texts a client may have signed for a token whose ``sr`` reads ``raw_resource`` (see above)."""
    plain = decoded_resource(raw_resource)
    upper = [quote_plus(plain), quote(plain, safe="")]
    lower = [_LOWER_ESCAPE.sub(lambda m: m.group(0).lower(), text) for text in upper]
    out: list[str] = []
    for text in (raw_resource, *upper, *lower):
        if text not in out:
            out.append(text)
    return out


def _sign(text: str, expiry: int, key: str) -> bytes:
    return base64.b64encode(hmac.new(key.encode(), f"{text}\n{expiry}".encode(), hashlib.sha256).digest())


def within_scope(scope: str, path: str) -> bool:
    """Whether the request ``path`` lies under the token's resource path ``scope`` (Service Bus's rule)."""
    target = path.strip("/").lower()
    return not scope or target == scope or target.startswith(scope + "/")


def _token_fields(params: str) -> dict[str, str]:
    """``sr=..&sig=..`` split on ``&`` and the first ``=``, values as written (``sr`` is signed so)."""
    fields: dict[str, str] = {}
    for part in params.strip().split("&"):
        name, sep, value = part.partition("=")
        if sep and name not in fields:
            fields[name.strip()] = value
    return fields


def authenticate_sas(token: str, *, key_name: str, key: str, now: float, path: str | None = None) -> Caller:
    """Check a ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` token against the configured key.

    With ``path`` (the request's URL path), the token must also be scoped to it (``within_scope``).
    """
    scheme, _, params = token.partition(" ")
    if scheme != "SharedAccessSignature" or not params:
        raise AuthenticationError("malformed SharedAccessSignature")
    fields = _token_fields(params)
    try:
        resource, signature = fields["sr"], unquote(fields["sig"])
        expiry_text, name = unquote(fields["se"]), unquote(fields["skn"])
        expiry = int(expiry_text)
    except (KeyError, ValueError):
        raise AuthenticationError("SharedAccessSignature lacks sr, sig, se or skn") from None
    if name != key_name:
        raise AuthenticationError("SharedAccessSignature names an unknown key")
    if expiry < now:
        raise AuthenticationError("SharedAccessSignature has expired")
    presented = signature.encode()
    matched = False
    for text in sas_candidates(resource):  # every candidate is compared: no early exit to time
        matched |= hmac.compare_digest(_sign(text, expiry, key), presented)
    if not matched:
        raise AuthenticationError("SharedAccessSignature signature does not match")
    if path is not None and not within_scope(resource_path(resource), path):
        raise AuthenticationError("SharedAccessSignature is for another resource")
    return Caller(name=f"sas:{name}")
