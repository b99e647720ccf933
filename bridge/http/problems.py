"""Bridge errors as HTTP answers: one JSON shape, the right status, ``Retry-After`` where retrying helps.

Body of every error: ``{"error": {"code": ..., "message": ..., "field": ..., "index": ...}}``. Statuses on
``/v1``: 400 malformed JSON, 422 a message or batch that breaks a rule, 413 too large, 401 no or bad
credentials, 403 key not allowed for the entity, 404 unknown entity, 503 + ``Retry-After`` when the outbox
is full or Redis is unavailable. The Service Bus REST door answers 400 where ``/v1`` answers 422, as
Service Bus does.
"""

from __future__ import annotations

import math

from starlette.responses import JSONResponse

from bridge.errors import (
    AuthenticationError,
    BackpressureError,
    BridgeError,
    EntityNotAllowedError,
    InvalidMessageError,
    MessageTooLargeError,
    OutboxUnavailableError,
    PartitionUnavailableError,
    UnknownEntityError,
)

MALFORMED = frozenset(("invalid_json", "invalid_utf8"))


def status_of(exc: BridgeError, *, rest: bool = False) -> int:
    """The HTTP status for a bridge error."""
    if isinstance(exc, MessageTooLargeError):
        return 413
    if isinstance(exc, InvalidMessageError):
        return 400 if rest or exc.code in MALFORMED else 422
    if isinstance(exc, EntityNotAllowedError):
        return 403
    if isinstance(exc, AuthenticationError):
        return 401
    if isinstance(exc, UnknownEntityError):
        return 404
    if isinstance(exc, BackpressureError | OutboxUnavailableError | PartitionUnavailableError):
        return 503
    return 500


def error_response(exc: BridgeError, *, rest: bool = False) -> JSONResponse:
    """The JSON error answer; never includes request data beyond field names."""
    status = status_of(exc, rest=rest)
    error: dict[str, object] = {"code": _code(exc), "message": str(exc)}
    if isinstance(exc, InvalidMessageError):
        error["field"] = exc.field
        error["index"] = exc.index
    headers = {}
    if status == 503:
        retry_after = exc.retry_after if isinstance(exc, BackpressureError) else 1.0
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="bridge"'
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def _code(exc: BridgeError) -> str:
    if isinstance(exc, InvalidMessageError):
        return exc.code
    names = {
        EntityNotAllowedError: "entity_not_allowed",
        AuthenticationError: "unauthorized",
        UnknownEntityError: "unknown_entity",
        BackpressureError: "outbox_full",
        OutboxUnavailableError: "outbox_unavailable",
        PartitionUnavailableError: "partition_unavailable",
    }
    for kind, code in names.items():
        if isinstance(exc, kind):
            return code
    return "internal_error"
