"""RS256 access tokens shaped like Entra ID's, minted by the local issuer and checked by the namespace.

An access token carries ``aud`` (``https://servicebus.azure.net``), ``iss``, ``tid``, ``iat``/``nbf``/
``exp``, the principal (``oid``, ``sub``, ``appid``) and ``roles`` (the Service Bus data roles assigned to
it). ``verify`` accepts only RS256 signed by the trusted key, for that audience and issuer, unexpired:
an unsigned token (``alg: none``), one signed by another key, one for another audience or issuer and an
expired one are all refused with a reason that never repeats the token.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import jwt

from bridge.emulator.errors import UnauthorizedError
from bridge.emulator.identity.directory import Identity
from bridge.emulator.identity.keys import AUDIENCE, IssuerKey

FEDERATED_AUDIENCE = "api://AzureADTokenExchange"
FEDERATED_LIFETIME = 24 * 3600


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for, and until when."""

    object_id: str
    app_id: str
    roles: tuple[str, ...]
    expires_at: float


def mint(
    key: IssuerKey, identity: Identity, now: float, lifetime: int, audience: str = AUDIENCE
) -> tuple[str, int]:
    """An access token for ``identity`` and its expiry (epoch seconds)."""
    issued = int(now)
    expires = issued + lifetime
    claims = {
        "aud": audience,
        "iss": key.issuer,
        "tid": key.tenant,
        "iat": issued,
        "nbf": issued,
        "exp": expires,
        "oid": identity.object_id,
        "sub": identity.object_id,
        "appid": identity.client_id,
        "idtyp": "app",
        "roles": list(identity.roles),
        "uti": uuid.uuid4().hex,
        "ver": "1.0",
    }
    return _sign(key, claims), expires


def mint_federated(key: IssuerKey, identity: Identity, now: float) -> str:
    """A federated token (``AZURE_FEDERATED_TOKEN_FILE``) that ``WorkloadIdentityCredential`` exchanges."""
    issued = int(now)
    claims = {
        "aud": FEDERATED_AUDIENCE,
        "iss": key.issuer,
        "sub": identity.federated_subject,
        "iat": issued,
        "nbf": issued,
        "exp": issued + FEDERATED_LIFETIME,
    }
    return _sign(key, claims)


def verify(token: str, key: IssuerKey, now: float, audience: str = AUDIENCE) -> Principal:
    """The principal of a valid access token; ``UnauthorizedError`` saying why otherwise."""
    claims = _decode(token, key, now, audience)
    roles = claims.get("roles", [])
    if not isinstance(roles, list):
        roles = []
    return Principal(
        object_id=str(claims.get("oid", "")),
        app_id=str(claims.get("appid", "")),
        roles=tuple(str(r) for r in roles),
        expires_at=float(claims["exp"]),
    )


def verify_federated(token: str, key: IssuerKey, now: float) -> str:
    """The ``sub`` of a valid federated token."""
    return str(_decode(token, key, now, FEDERATED_AUDIENCE).get("sub", ""))


def _decode(token: str, key: IssuerKey, now: float, audience: str) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise UnauthorizedError("InvalidToken: the token is not a JWT") from None
    if header.get("alg") != "RS256":
        raise UnauthorizedError(f"InvalidSignature: algorithm {str(header.get('alg'))[:10]!r} is not RS256")
    try:
        # PyJWT reads the clock itself; ``now`` is checked below so tests can move time.
        claims: dict[str, Any] = jwt.decode(
            token,
            key.public,
            algorithms=["RS256"],
            audience=[audience, audience + "/"],
            issuer=key.issuer,
            options={
                "require": ["exp", "iss", "aud"],
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
            },
        )
    except jwt.InvalidAudienceError:
        raise UnauthorizedError(f"InvalidAudience: the token is not for {audience}") from None
    except jwt.InvalidIssuerError:
        raise UnauthorizedError("InvalidIssuer: the token's issuer is not trusted") from None
    except jwt.InvalidSignatureError:
        raise UnauthorizedError("InvalidSignature: the token is not signed by the trusted issuer") from None
    except jwt.PyJWTError as exc:
        raise UnauthorizedError(f"InvalidToken: {exc.__class__.__name__}") from None
    if float(claims["exp"]) <= now:
        raise UnauthorizedError(f"ExpiredToken: the token expired at {int(claims['exp'])}")
    if float(claims.get("nbf", 0)) > now + 300:
        raise UnauthorizedError("InvalidToken: the token is not valid yet")
    return claims


def _sign(key: IssuerKey, claims: dict[str, Any]) -> str:
    return jwt.encode(claims, key.private, algorithm="RS256", headers={"kid": key.kid, "typ": "JWT"})
