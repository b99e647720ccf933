"""The local token issuer's HTTP endpoints, as azure-identity and msal call them.

Two doors, one issuer (``keys``) and one directory of identities (``directory``):

- **Managed identity** (plain HTTP on loopback, like App Service's local endpoint):
  ``ManagedIdentityCredential`` with ``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` set sends
  ``GET <IDENTITY_ENDPOINT>?api-version=2019-08-01&resource=<resource>[&client_id=|&object_id=]`` with header
  ``X-IDENTITY-HEADER: <IDENTITY_HEADER>`` (msal's ``managed_identity.py``); we answer
  ``{"access_token", "expires_on", "resource", "token_type", "client_id"}``. No ``client_id`` means the
  system-assigned identity.
- **OAuth2 client credentials** (HTTPS with the namespace's certificate): an authority
  ``https://<host:port>/<tenant>`` with instance discovery off makes msal fetch
  ``/<tenant>/v2.0/.well-known/openid-configuration`` and post to its ``token_endpoint``
  (``/<tenant>/oauth2/v2.0/token``) either ``client_secret`` (``ClientSecretCredential``) or a
  ``client_assertion`` JWT: signed by the client's certificate key (``CertificateCredential``, checked against
  the identity's certificate) or a federated token (``WorkloadIdentityCredential``, checked against this
  issuer's key). The token's audience is the requested scope without ``/.default``.
- The same door as an AD FS authority (tenant ``adfs``): msal treats ``https://<host:port>/adfs`` as
  AD FS, skips instance discovery (which asks Entra ID itself) and fetches
  ``/adfs/.well-known/openid-configuration``. That is how a credential that cannot be told to skip
  discovery (the JavaScript SDK's ``EnvironmentCredential`` and ``DefaultAzureCredential``) signs in, with
  ``AZURE_TENANT_ID=adfs``.

Refusals follow OAuth2's JSON error shape (``{"error": ..., "error_description": ...}``) and never repeat a
secret or an assertion.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import jwt

from bridge.emulator.errors import UnauthorizedError
from bridge.emulator.http.server import HttpApp, HttpRequest, HttpResponse
from bridge.emulator.identity import tokens
from bridge.emulator.identity.directory import Directory, Identity
from bridge.emulator.identity.keys import IssuerKey

log = logging.getLogger(__name__)

MSI_PATH = "/msi/token"
ADFS = "adfs"
"""The tenant under which msal skips instance discovery without being told (module docstring)."""
_JSON = {"Content-Type": "application/json", "Cache-Control": "no-store"}
_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class _OAuthError(Exception):
    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status, self.error, self.description = status, error, description


@dataclass
class Issuer:
    """Mints tokens for the directory's identities; ``identity_header`` guards the managed-identity door."""

    key: IssuerKey
    directory: Directory
    identity_header: str = field(repr=False)
    clock: Callable[[], float]
    issued: int = 0

    def app(self) -> HttpApp:
        """The HTTP app serving both doors (each door is bound on its own port by the server)."""

        async def app(request: HttpRequest) -> HttpResponse:
            try:
                return self._route(request)
            except _OAuthError as exc:
                log.info("token request refused: %s", exc.description)
                body = {"error": exc.error, "error_description": exc.description}
                return HttpResponse(exc.status, _JSON, json.dumps(body).encode())

        return app

    def _route(self, request: HttpRequest) -> HttpResponse:
        path = request.path.split("?", 1)[0].rstrip("/")
        if request.method == "GET" and path == MSI_PATH:
            return self._managed_identity(request)
        parts = path.strip("/").split("/")
        base = f"https://{request.headers.get('host', 'localhost')}"
        if request.method == "GET" and parts[1:] == ["v2.0", ".well-known", "openid-configuration"]:
            return _json(self._openid_configuration(base, parts[0]))
        if request.method == "GET" and parts == [ADFS, ".well-known", "openid-configuration"]:
            return _json(self._openid_configuration(base, ADFS))
        if request.method == "GET" and parts[1:] == ["discovery", "v2.0", "keys"]:
            return _json(self._keys())
        if request.method == "POST" and parts[1:] == ["oauth2", "v2.0", "token"]:
            return self._client_credentials(request, f"{base}/{parts[0]}/oauth2/v2.0/token")
        raise _OAuthError(404, "not_found", f"no such endpoint: {request.method} {path[:80]}")

    # ---- managed identity ----------------------------------------------------------------------------
    def _managed_identity(self, request: HttpRequest) -> HttpResponse:
        presented = request.headers.get("x-identity-header", "")
        if not hmac.compare_digest(presented.encode(), self.identity_header.encode()):
            raise _OAuthError(401, "unauthorized_client", "missing or wrong X-IDENTITY-HEADER")
        resource = request.query.get("resource", "")
        if not resource:
            raise _OAuthError(400, "invalid_request", "resource is required")
        client_id = request.query.get("client_id")
        object_id = request.query.get("object_id")
        if client_id:
            identity = self.directory.by_client_id(client_id)
        elif object_id:
            identity = next((i for i in self.directory.identities if i.object_id == object_id), None)
        else:
            identity = self.directory.system_assigned()
        if identity is None:
            raise _OAuthError(400, "invalid_request", "no managed identity matches the request")
        token, expires = self._mint(identity, resource)
        body = {
            "access_token": token,
            "expires_on": str(expires),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": identity.client_id,
        }
        return _json(body)

    # ---- OAuth2 --------------------------------------------------------------------------------------
    def _openid_configuration(self, base: str, tenant: str) -> dict[str, Any]:
        return {
            "issuer": f"{base}/{tenant}/v2.0",
            "authorization_endpoint": f"{base}/{tenant}/oauth2/v2.0/authorize",
            "token_endpoint": f"{base}/{tenant}/oauth2/v2.0/token",
            "jwks_uri": f"{base}/{tenant}/discovery/v2.0/keys",
            "response_types_supported": ["code", "id_token", "token"],
            "subject_types_supported": ["pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt"],
            "tenant_region_scope": None,
        }

    def _keys(self) -> dict[str, Any]:
        numbers = self.key.public.public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": self.key.kid,
                    "n": _b64(numbers.n),
                    "e": _b64(numbers.e),
                }
            ]
        }

    def _client_credentials(self, request: HttpRequest, endpoint: str) -> HttpResponse:
        form = dict(parse_qsl(request.body.decode("utf-8", "replace"), keep_blank_values=True))
        if form.get("grant_type") != "client_credentials":
            raise _OAuthError(400, "unsupported_grant_type", "only client_credentials is served")
        scope = form.get("scope", "").split()
        resource = next((s.removesuffix("/.default") for s in scope if s.endswith("/.default")), "")
        if not resource:
            raise _OAuthError(400, "invalid_scope", "scope must be '<resource>/.default'")
        identity = self._client(form, endpoint)
        token, expires = self._mint(identity, resource)
        lifetime = max(0, expires - int(self.clock()))
        body = {
            "token_type": "Bearer",
            "expires_in": lifetime,
            "ext_expires_in": lifetime,
            "access_token": token,
        }
        return _json(body)

    def _client(self, form: dict[str, str], endpoint: str) -> Identity:
        identity = self.directory.by_client_id(form.get("client_id", ""))
        if identity is None:
            raise _OAuthError(400, "unauthorized_client", "AADSTS700016: unknown client_id")
        secret = form.get("client_secret")
        assertion = form.get("client_assertion")
        if secret is not None:
            if identity.secret is None or not hmac.compare_digest(secret.encode(), identity.secret.encode()):
                raise _OAuthError(401, "invalid_client", "AADSTS7000215: invalid client secret")
            return identity
        if assertion is None or form.get("client_assertion_type") != _ASSERTION_TYPE:
            raise _OAuthError(401, "invalid_client", "a client_secret or client_assertion is required")
        if self._is_federated(assertion):
            return self._federated(identity, assertion)
        return self._certificate(identity, assertion, endpoint)

    def _is_federated(self, assertion: str) -> bool:
        try:
            return bool(jwt.get_unverified_header(assertion).get("kid") == self.key.kid)
        except jwt.PyJWTError:
            raise _OAuthError(401, "invalid_client", "client_assertion is not a JWT") from None

    def _federated(self, identity: Identity, assertion: str) -> Identity:
        try:
            subject = tokens.verify_federated(assertion, self.key, self.clock())
        except UnauthorizedError as exc:
            raise _OAuthError(
                401, "invalid_client", f"AADSTS700024: federated token refused: {exc}"
            ) from None
        if subject != identity.federated_subject:
            raise _OAuthError(401, "invalid_client", "AADSTS70021: no federated credential matches")
        return identity

    def _certificate(self, identity: Identity, assertion: str, endpoint: str) -> Identity:
        if identity.certificate is None:
            raise _OAuthError(401, "invalid_client", "AADSTS700027: the client has no certificate")
        try:
            claims = jwt.decode(
                assertion,
                identity.certificate,
                algorithms=["RS256", "PS256"],
                audience=endpoint,
                options={"require": ["exp", "aud", "iss"]},
            )
        except jwt.PyJWTError as exc:
            description = f"AADSTS700027: client assertion refused ({exc.__class__.__name__})"
            raise _OAuthError(401, "invalid_client", description) from None
        if claims.get("iss") != identity.client_id:
            raise _OAuthError(401, "invalid_client", "AADSTS700027: assertion issuer is not the client")
        return identity

    def _mint(self, identity: Identity, resource: str) -> tuple[str, int]:
        self.issued += 1
        log.info("token issued to %s for %s", identity.name, resource)
        return tokens.mint(self.key, identity, self.clock(), self.directory.lifetime_seconds, resource)


def _json(body: dict[str, Any]) -> HttpResponse:
    return HttpResponse(200, _JSON, json.dumps(body).encode())


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
