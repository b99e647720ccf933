"""The ``/v1`` JSON envelope API (public contract: ``docs/doors/http.md``; schema: ``/v1/openapi.json``).

``POST /v1/entities/{entity}/messages``        one envelope -> 202 ``{"message_id", "entity", "duplicate",
                                               "durability"}`` (and the ``X-Bridge-Durability`` header)
``POST /v1/entities/{entity}/messages:batch``  ``{"messages": [...]}`` -> 202 ``{"message_ids": [...]}``,
                                               all stored or none; ``?transactional=true``: one partition key
``GET  /v1/entities/{entity}/quarantine``      entries that failed validation (``?count=&after=``)
``GET  /v1/entities/{entity}/deadletter``      messages Service Bus will never take
``GET  /v1/entities/{entity}/outbox``          pending messages and bytes, problem stream lengths
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bridge.core.door_formats import v1_message
from bridge.errors import BridgeError, InvalidMessageError
from bridge.http import paths  # noqa: F401  (registers the {entity} path convertor)
from bridge.http.ingress import Ingress
from bridge.http.problems import error_code, error_response
from bridge.observability import metrics

DURABILITY_HEADER = "X-Bridge-Durability"
"""What an acknowledgement reached: ``local``, ``local; replicas=n`` (WAIT) or ``replicated; replicas=n``."""

Handler = Callable[[Request], Awaitable[Response]]

# ``?after=``: a stream entry id (``<ms>`` or ``<ms>-<seq>``) or ``-``, checked before it reaches Redis.
AFTER_PATTERN = "^(?:-|[0-9]{1,19}(?:-[0-9]{1,19})?)$"  # 19 digits: always below 2**64
_AFTER = re.compile(AFTER_PATTERN.replace("$", r"\Z"))


def answers_errors(*, rest: bool = False) -> Callable[[Handler], Handler]:
    """Turn bridge errors raised by a route into their JSON answer."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapper(request: Request) -> Response:
            try:
                return await handler(request)
            except BridgeError as exc:
                metrics.record_rejected("http", error_code(exc))
                return error_response(exc, rest=rest)

        return wrapper

    return decorate


def ingress_of(request: Request) -> Ingress:
    """The shared ``Ingress`` built by the app's lifespan."""
    ingress: Ingress = request.app.state.ingress
    return ingress


@answers_errors()
async def post_message(request: Request) -> Response:
    """One JSON envelope."""
    ingress = ingress_of(request)
    entity = request.path_params["entity"]
    ingress.check_entity(ingress.authenticate(request), entity)
    item = v1_message(await ingress.json_body(request))
    trace = ingress.trace(request, entity, "http")
    envelopes, fresh = ingress.envelopes(entity, [item], single=True, trace=trace)
    (ack,) = await ingress.store(entity, envelopes, fresh, trace=trace)
    reached = ack.durability
    return JSONResponse(
        {
            "message_id": ack.message_id,
            "entity": entity,
            "duplicate": ack.duplicate,
            "durability": reached.mode,
        },
        status_code=202,
        headers={DURABILITY_HEADER: reached.header()},
    )


@answers_errors()
async def post_batch(request: Request) -> Response:
    """Several envelopes, stored atomically."""
    ingress = ingress_of(request)
    entity = request.path_params["entity"]
    ingress.check_entity(ingress.authenticate(request), entity)
    transactional = _flag(request, "transactional")
    payload = await ingress.json_body(request)
    if not isinstance(payload, dict) or set(payload) != {"messages"}:
        raise InvalidMessageError("invalid_type", 'a batch is {"messages": [...]}', field="messages")
    messages = payload["messages"]
    if not isinstance(messages, list):
        raise InvalidMessageError("invalid_type", "messages must be an array", field="messages")
    limit = ingress.settings.ingress.max_batch_messages
    if len(messages) > limit:
        raise InvalidMessageError("batch_too_large", f"a batch holds at most {limit} messages", "messages")
    items = [v1_message(message, index) for index, message in enumerate(messages)]
    trace = ingress.trace(request, entity, "http")
    envelopes, fresh = ingress.envelopes(entity, items, trace=trace)
    ingress.check_batch(envelopes, transactional=transactional, trace=trace)
    acks = await ingress.store(entity, envelopes, fresh, transactional=transactional, trace=trace)
    return JSONResponse(
        {
            "message_ids": [ack.message_id for ack in acks],
            "entity": entity,
            "duplicates": sum(1 for ack in acks if ack.duplicate),
            "durability": acks[0].durability.mode if acks else "local",
        },
        status_code=202,
        headers={DURABILITY_HEADER: acks[0].durability.header()} if acks else {},
    )


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise InvalidMessageError("invalid_type", f"?{name}= is true or false", field=name)
    return value in ("true", "1")


def _count(request: Request) -> int:
    text = request.query_params.get("count", "50")
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 1000:  # int() refuses "²"
        raise InvalidMessageError("invalid_type", "?count= is an integer from 1 to 1000", field="count")
    return int(text)


async def _problems(request: Request, which: str) -> Response:
    ingress = ingress_of(request)
    entity = request.path_params["entity"]
    ingress.check_entity(ingress.authenticate(request), entity)
    after = request.query_params.get("after", "-")
    if not _AFTER.match(after):
        raise InvalidMessageError("invalid_type", "?after= is a stream entry id", field="after")
    entries = await ingress.view.problems(entity, which, count=_count(request), after=after)
    return JSONResponse({"entity": entity, "entries": entries})


@answers_errors()
async def get_quarantine(request: Request) -> Response:
    """Entries that failed validation, with the reason."""
    return await _problems(request, "quarantine")


@answers_errors()
async def get_deadletter(request: Request) -> Response:
    """Messages moved to the local dead-letter stream, with the reason."""
    return await _problems(request, "deadletter")


@answers_errors()
async def get_outbox(request: Request) -> Response:
    """Outbox depth of one entity."""
    ingress = ingress_of(request)
    entity = request.path_params["entity"]
    ingress.check_entity(ingress.authenticate(request), entity)
    depth = await ingress.view.depth(entity)
    fields = ("pending_messages", "pending_bytes", "quarantine", "deadletter")
    return JSONResponse({"entity": entity, **{name: depth[name] for name in fields}})


routes = [
    Route("/v1/entities/{entity:entity}/messages:batch", post_batch, methods=["POST"]),
    Route("/v1/entities/{entity:entity}/messages", post_message, methods=["POST"]),
    Route("/v1/entities/{entity:entity}/quarantine", get_quarantine, methods=["GET"]),
    Route("/v1/entities/{entity:entity}/deadletter", get_deadletter, methods=["GET"]),
    Route("/v1/entities/{entity:entity}/outbox", get_outbox, methods=["GET"]),
]
