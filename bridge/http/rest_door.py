"""The Service Bus REST send protocol, so a REST client switches to the bridge by changing its base URL.

``POST /{entity}/messages`` (``messages`` in any case, as Service Bus matches it: Node's ``azure-sb`` posts
to ``/Messages``; ``?api-version=`` and ``?timeout=`` are accepted and change nothing) with the raw body,
``BrokerProperties`` (JSON: every settable property of Microsoft's table, ``bridge.core.door_formats``),
``Content-Type`` as the message's ContentType, and any other header as a custom property, named as sent.
With ``Content-Type: application/vnd.microsoft.servicebus.json`` the body is a batch
(``[{"Body": ..., "BrokerProperties": {...}, "UserProperties": {...}}, ...]``), stored atomically.
Broker properties Service Bus ignores (read-only ones such as ``State`` or ``SequenceNumber``, unknown
names) are ignored here too: named in the ``X-Bridge-Ignored-Properties`` answer header and logged at
DEBUG, never refused. Answers 201 like Service Bus; errors use the statuses of Microsoft's reference (400,
401, 403 for too large, 503). Credentials: an API key, or the ``SharedAccessSignature`` header REST
clients already send.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.core.door_formats import rest_batch, rest_message
from bridge.http import paths  # noqa: F401  (registers the {entity} and {messages} path convertors)
from bridge.http.server import HEADER_NAMES
from bridge.http.v1 import DURABILITY_HEADER, answers_errors, ingress_of

log = logging.getLogger(__name__)

BATCH_TYPE = "application/vnd.microsoft.servicebus.json"
IGNORED_HEADER = "X-Bridge-Ignored-Properties"

# Request headers that belong to HTTP (RFC 9110/9111/9112 and common extensions), to the protocol, or to
# proxies and browsers: never custom properties. Compared lower-case. Documented in docs/doors/http.md.
NOT_PROPERTIES = frozenset(
    (
        # the protocol
        "authorization",
        "brokerproperties",
        "content-type",
        "x-api-key",
        # HTTP request and representation headers
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-datetime",
        "cache-control",
        "connection",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "cookie",
        "date",
        "dnt",
        "early-data",
        "expect",
        "forwarded",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "keep-alive",
        "max-forwards",
        "origin",
        "pragma",
        "prefer",
        "proxy-authorization",
        "proxy-connection",
        "range",
        "referer",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "upgrade-insecure-requests",
        "user-agent",
        "via",
        "warning",
        # tracing and proxies
        "traceparent",
        "tracestate",
        "baggage",
        "request-id",
        "correlation-context",
        "x-request-id",
        "x-correlation-id",
        "x-real-ip",
        "x-http-method-override",
        "x-requested-with",
        "x-csrf-token",
    )
)
NOT_PROPERTY_PREFIXES = ("x-ms-", "x-forwarded-", "sec-", "x-amz-", "x-b3-", "cf-")


def is_http_priority(name: str, value: str) -> bool:
    """RFC 9218's ``Priority: u=3, i`` is HTTP's; the reference's own example sends a custom property
    ``Priority: High``, which stays a property. Only the RFC 9218 form is left out."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    return name == "priority" and bool(parts) and all(part.split("=", 1)[0] in ("u", "i") for part in parts)


def custom_properties(request: Request) -> dict[str, str]:
    """Custom properties from the request's headers, named as the client wrote them when the server kept the
    names (``bridge.http.server.HeaderCaseProtocol``), else lower-cased."""
    raw_names = request.scope.get("extensions", {}).get(HEADER_NAMES, {}).get("names")
    pairs = request.scope["headers"]
    if raw_names is not None and len(raw_names) != len(pairs):
        raw_names = None
    out = {}
    for position, (raw_name, raw_value) in enumerate(pairs):
        name = raw_name.decode("latin-1")
        value = raw_value.decode("latin-1")
        if name in NOT_PROPERTIES or name.startswith(NOT_PROPERTY_PREFIXES) or is_http_priority(name, value):
            continue
        sent = raw_names[position].decode("latin-1") if raw_names is not None else name
        out[sent] = value
    return out


@answers_errors(rest=True)
async def post_messages(request: Request) -> Response:
    """Send one message or a batch, Service Bus REST style."""
    ingress = ingress_of(request)
    entity = request.path_params["entity"]
    ingress.check_entity(ingress.authenticate(request, allow_sas=True), entity)
    content_type = request.headers.get("content-type")
    ignored: list[str] = []
    trace = ingress.trace(request, entity, "rest")
    if content_type is not None and content_type.split(";")[0].strip().lower() == BATCH_TYPE:
        items = rest_batch(await ingress.json_body(request), ignored)
        envelopes, fresh = ingress.envelopes(entity, items, trace=trace)
        ingress.check_batch(envelopes, transactional=False, trace=trace)
    else:
        body = await ingress.body(request)
        item = rest_message(
            body,
            request.headers.get("brokerproperties"),
            custom_properties(request),
            content_type,
            ignored=ignored,
        )
        envelopes, fresh = ingress.envelopes(entity, [item], single=True, trace=trace)
    acks = await ingress.store(entity, envelopes, fresh, door="rest", trace=trace)
    headers = {DURABILITY_HEADER: acks[0].durability.header()} if acks else {}
    if ignored:
        headers[IGNORED_HEADER] = ignored_names(ignored)
        log.debug("REST send to %s: ignored broker properties %s", entity, headers[IGNORED_HEADER])
    return Response(status_code=201, headers=headers)


MAX_IGNORED_NAMES = 20


def ignored_names(names: list[str]) -> str:
    """The ``X-Bridge-Ignored-Properties`` value: distinct names, percent-encoded beyond ``[A-Za-z0-9-._~]``
    (a JSON name may hold a newline or non-Latin-1 text, which a header must not), at most 20, then
    ``...``."""
    distinct = list(dict.fromkeys(names))
    shown = [quote(name, safe="") for name in distinct[:MAX_IGNORED_NAMES]]
    return ", ".join(shown + (["..."] if len(distinct) > MAX_IGNORED_NAMES else []))


routes = [Route("/{entity:entity}/{segment:messages}", post_messages, methods=["POST"])]
