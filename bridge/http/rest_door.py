"""The Service Bus REST send protocol, so a REST client switches to the bridge by changing its base URL.

``POST /{entity}/messages`` with the raw body, ``BrokerProperties`` (JSON: MessageId, SessionId,
PartitionKey, TimeToLive, ScheduledEnqueueTimeUtc, CorrelationId, Label, ReplyTo, To, ContentType),
``Content-Type`` as the message's ContentType, and any other header as a custom property. With
``Content-Type: application/vnd.microsoft.servicebus.json`` the body is a batch
(``[{"Body": ..., "BrokerProperties": {...}, "UserProperties": {...}}, ...]``), stored atomically.
Answers 201 like Service Bus; errors use Service Bus's statuses (400, 401, 403, 413, 503).
Credentials: an API key, or the ``SharedAccessSignature`` header REST clients already send.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.core.door_formats import rest_batch, rest_message
from bridge.core.validation import check_batch
from bridge.http.v1 import answers_errors, ingress_of

BATCH_TYPE = "application/vnd.microsoft.servicebus.json"

# Headers that are part of HTTP or of the protocol, never custom properties.
NOT_PROPERTIES = frozenset(
    (
        "host",
        "content-length",
        "content-type",
        "authorization",
        "brokerproperties",
        "user-agent",
        "accept",
        "accept-encoding",
        "accept-language",
        "connection",
        "expect",
        "transfer-encoding",
        "x-api-key",
        "date",
        "cache-control",
        "pragma",
        "origin",
        "referer",
        "cookie",
        "te",
        "upgrade",
        "keep-alive",
        "content-encoding",
        "traceparent",
        "tracestate",
        "x-request-id",
        "x-real-ip",
        "forwarded",
        "via",
    )
)
NOT_PROPERTY_PREFIXES = ("x-ms-", "x-forwarded-", "sec-")


def custom_properties(request: Request) -> dict[str, str]:
    """Custom properties from the request's headers (names as sent, lower-cased by HTTP/1.1 servers)."""
    out = {}
    for name, value in request.headers.items():
        if name in NOT_PROPERTIES or name.startswith(NOT_PROPERTY_PREFIXES):
            continue
        out[name] = value
    return out


@answers_errors(rest=True)
async def post_messages(request: Request) -> Response:
    """Send one message or a batch, Service Bus REST style."""
    ingress = ingress_of(request)
    entity = request.path_params["entity"]
    ingress.check_entity(ingress.authenticate(request, allow_sas=True), entity)
    content_type = request.headers.get("content-type")
    limit = ingress.settings.ingress.max_batch_messages
    if content_type is not None and content_type.split(";")[0].strip().lower() == BATCH_TYPE:
        items = rest_batch(await ingress.json_body(request))
        envelopes, fresh = ingress.envelopes(entity, items)
        check_batch(envelopes, transactional=False, max_messages=limit)
    else:
        body = await ingress.body(request)
        item = rest_message(
            body, request.headers.get("brokerproperties"), custom_properties(request), content_type
        )
        envelopes, fresh = ingress.envelopes(entity, [item], single=True)
    await ingress.store(entity, envelopes, fresh, door="rest")
    return Response(status_code=201)


routes = [Route("/{entity:path}/messages", post_messages, methods=["POST"])]
