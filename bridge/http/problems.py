"""Bridge errors as HTTP answers: one JSON shape, the right status, ``Retry-After`` where retrying helps.

Body of every error: ``{"error": {"code": ..., "message": ..., "field": ..., "index": ...}}``. Statuses on
``/v1``: 400 malformed JSON (or text, or an incomplete body), 422 a message or batch that breaks a rule,
413 too large, 408 a body that did not arrive in time, 401 no or bad credentials, 403 key not allowed for
the entity, 404 unknown entity, 503 + ``Retry-After`` when the outbox is full or Redis is unavailable. The
durability (``ingress.durability``) that too few replicas confirmed answers 503 ``durability_not_reached``
with ``error.durability`` naming the mode and the counts. The
Service Bus REST door answers 400 where ``/v1`` answers 422 and 403 where ``/v1`` answers 413, as Microsoft's
reference for Send Message documents ("403: Quota exceeded or message too large"). After a 408 or a 413 (403)
for the request's size the connection is closed (``Connection: close``): the rest of the body is not read.
"""

from __future__ import annotations

import math

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bridge.errors import (
    AuthenticationError,
    BackpressureError,
    BridgeError,
    DurabilityNotReachedError,
    EntityNotAllowedError,
    InvalidMessageError,
    MessageTooLargeError,
    OutboxUnavailableError,
    PartitionUnavailableError,
    StateStoreUnavailableError,
    UnknownEntityError,
)

MALFORMED = frozenset(("invalid_json", "invalid_utf8", "request_incomplete"))
# Codes after which the request's body is left unread: the connection cannot carry another request.
CLOSES_CONNECTION = frozenset(("request_timeout", "request_too_large"))


def status_of(exc: BridgeError, *, rest: bool = False) -> int:
    """The HTTP status for a bridge error."""
    if isinstance(exc, MessageTooLargeError):
        return 403 if rest else 413
    if isinstance(exc, InvalidMessageError) and exc.code == "request_timeout":
        return 408
    if isinstance(exc, InvalidMessageError):
        return 400 if rest or exc.code in MALFORMED else 422
    if isinstance(exc, EntityNotAllowedError):
        return 403
    if isinstance(exc, AuthenticationError):
        return 401
    if isinstance(exc, UnknownEntityError):
        return 404
    if isinstance(exc, BackpressureError | StateStoreUnavailableError | PartitionUnavailableError):
        return 503
    return 500


def error_response(exc: BridgeError, *, rest: bool = False) -> JSONResponse:
    """The JSON error answer; never includes request data beyond field names."""
    status = status_of(exc, rest=rest)
    error: dict[str, object] = {"code": error_code(exc), "message": str(exc)}
    if isinstance(exc, InvalidMessageError):
        error["field"] = exc.field
        error["index"] = exc.index
    if isinstance(exc, DurabilityNotReachedError):
        error["durability"] = {
            "mode": exc.mode,
            "required_replicas": exc.required,
            "confirmed_replicas": exc.confirmed,
            "primary_fsync": exc.local_fsync,
        }
    headers = {}
    if status == 503:
        retry_after = exc.retry_after if isinstance(exc, BackpressureError) else 1.0
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="bridge"'
    if error["code"] in CLOSES_CONNECTION:
        headers["Connection"] = "close"
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def error_code(exc: BridgeError) -> str:
    """The ``code`` of the JSON error answer (also the ``reason`` label of the rejected-requests metric)."""
    if isinstance(exc, InvalidMessageError):
        return exc.code
    names = {
        EntityNotAllowedError: "entity_not_allowed",
        AuthenticationError: "unauthorized",
        UnknownEntityError: "unknown_entity",
        BackpressureError: "outbox_full",
        DurabilityNotReachedError: "durability_not_reached",
        OutboxUnavailableError: "outbox_unavailable",
        StateStoreUnavailableError: "state_store_unavailable",
        PartitionUnavailableError: "partition_unavailable",
    }
    for kind, code in names.items():
        if isinstance(exc, kind):
            return code
    return "internal_error"


# Starlette's own refusals (no route, wrong method), answered in the same JSON shape with a code.
HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's ``HTTPException`` (an unknown path, a method a route lacks) as a JSON error."""
    if not isinstance(exc, HTTPException):  # pragma: no cover - registered for HTTPException only
        raise exc
    code = HTTP_CODES.get(exc.status_code, "bad_request")
    return JSONResponse(
        {"error": {"code": code, "message": exc.detail}}, status_code=exc.status_code, headers=exc.headers
    )


async def server_error(request: Request, exc: Exception) -> Response:
    """An unexpected exception: 500 ``internal_error`` (logged by Starlette; no detail to the client)."""
    return JSONResponse({"error": {"code": "internal_error", "message": "internal error"}}, status_code=500)
