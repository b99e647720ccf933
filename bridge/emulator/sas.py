"""Shared Access Signature tokens: check them the way Service Bus does (the SDK creates them).

A token reads ``SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>`` with every
value URL-encoded. The signature is ``base64(HMAC-SHA256(key, "<url-encoded resource>\\n<expiry>"))``.
``azure-servicebus`` 7.15 builds it in ``_pyamqp/utils.py:generate_sas_token``:

- the resource is signed as ``quote_plus(audience)``, which is also how ``urlencode`` writes ``sr``, so the
  raw ``sr`` text of the token is exactly the signed string;
- ``skn`` is ``quote_plus``-ed twice (once by hand, once by ``urlencode``), so a key name with reserved
  characters arrives still encoded once; the key name is looked up as sent, then once more decoded;
- the AMQP client asks for ``sb://<host:port>/<entity>`` (CBS ``put-token``); the administration client
  signs ``https://<host:port>`` (``management/_shared_key_policy.py``), one token for the whole namespace.

Audience rule (``covers``): a token whose ``sr`` is R grants access to resource X when, after dropping
the scheme (``sb``, ``amqps``, ``amqp``, ``https``, ``http``) and any query, lower-casing and trimming
trailing slashes, X equals R or X starts with R followed by ``/``. So ``sb://h/q1`` covers
``amqps://h/Q1/$management`` but not ``sb://h/q10``, and a namespace token ``https://h`` covers every entity
of ``h``. Host and port take part in the comparison, as on Azure. The query goes because the JavaScript
administration client (``@azure/service-bus`` 7.x, ``sasServiceClientCredentials.js``) signs each request's
full lower-cased URL, ``https://h/q1?api-version=2021-05``, and Azure accepts that token for ``q1``.

Errors never contain a key or a signature: only the key *name*, the audience and the expiry, which the
caller sent in clear anyway.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import quote_plus, unquote_plus

from bridge.emulator.errors import UnauthorizedError

PREFIX = "SharedAccessSignature "
_SCHEMES = ("sb://", "amqps://", "amqp://", "https://", "http://")
_FIELDS = frozenset({"sr", "sig", "se", "skn"})


def covers(audience: str, resource: str) -> bool:
    """True when a token for ``audience`` grants access to ``resource`` (see the module docstring)."""
    granted = _normalize(audience)
    wanted = _normalize(resource)
    return wanted == granted or wanted.startswith(granted + "/")


def validate(token: str, keys: Mapping[str, str], resource: str, now: float) -> None:
    """Accept ``token`` for ``resource`` at time ``now`` or raise ``UnauthorizedError`` saying why."""
    raw = _parse(token)
    audience = unquote_plus(raw["sr"])
    key_name = unquote_plus(raw["skn"])
    key = keys.get(key_name)
    if key is None:
        key_name = unquote_plus(key_name)
        key = keys.get(key_name)
    if key is None:
        raise UnauthorizedError(f"unknown shared access key name {key_name!r}")
    try:
        expiry = int(unquote_plus(raw["se"]))
    except ValueError:
        raise UnauthorizedError("malformed token: se is not an integer") from None
    presented = unquote_plus(raw["sig"]).encode("ascii", "replace")
    candidates = {raw["sr"], quote_plus(audience)}
    if not any(hmac.compare_digest(presented, _sign(key, signed, expiry).encode()) for signed in candidates):
        raise UnauthorizedError(f"signature does not match key {key_name!r}")
    if expiry < now:
        raise UnauthorizedError(f"token expired at {expiry}")
    if not covers(audience, resource):
        raise UnauthorizedError(f"token audience {audience!r} does not cover {resource!r}")


def _parse(token: str) -> dict[str, str]:
    """The four fields of a token, still URL-encoded (the signature is computed over encoded text)."""
    if not token.startswith(PREFIX):
        raise UnauthorizedError("not a SharedAccessSignature token")
    fields: dict[str, str] = {}
    for part in token[len(PREFIX) :].strip().split("&"):
        name, sep, value = part.partition("=")
        if not sep or name not in _FIELDS or name in fields:
            raise UnauthorizedError(f"malformed token: unexpected or repeated field {name[:20]!r}")
        fields[name] = value
    missing = sorted(_FIELDS - fields.keys())
    if missing:
        raise UnauthorizedError(f"malformed token: missing {', '.join(missing)}")
    return fields


def _sign(key: str, encoded_resource: str, expiry: int) -> str:
    digest = hmac.new(key.encode(), f"{encoded_resource}\n{expiry}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def _normalize(uri: str) -> str:
    lowered = uri.strip().lower().split("?", 1)[0].split("#", 1)[0]
    for scheme in _SCHEMES:
        if lowered.startswith(scheme):
            lowered = lowered[len(scheme) :]
            break
    return lowered.rstrip("/")
