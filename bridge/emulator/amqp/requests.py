"""The request/response nodes of a connection: CBS put-token on ``$cbs`` and ``<entity>/$management``.

A request arrives as a transfer on the client's sender link to the node; we settle it at once and answer
on the client's receiver link for the same node (the "reply link", found as ``replies`` says).

A granted put-token (SAS or Entra ID JWT, ``bridge.emulator.identity.grants``) is remembered on the
connection as ``(token, audience authority)``; attaches and management operations are then authorized
against those grants and the right they need (``links.authorize``). A namespace-wide ``stall`` fault
delays or swallows the put-token answer, which is how a hung authentication is injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proton import Delivery, Message, int32, symbol

from bridge.emulator.amqp import links, management
from bridge.emulator.amqp.codec import application_properties
from bridge.emulator.errors import BrokerError, UnauthorizedError
from bridge.emulator.faults import FaultKind

if TYPE_CHECKING:
    from bridge.emulator.amqp.connection import AmqpConnection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Request:
    """A decoded request message, the node it was sent to and the source address of the link it came on."""

    message: Message
    node: str
    source: str


def decode_request(dlv: Delivery, raw: bytes) -> Request:
    """The request carried by one transfer to a request node."""
    message = Message()
    message.decode(raw)
    link = dlv.link
    return Request(message, getattr(link, "sb_path", ""), link.remote_source.address or "")


def on_cbs(conn: AmqpConnection, dlv: Delivery, raw: bytes) -> None:
    """A put-token request: validate the SAS token for its audience and answer 202 or 401."""
    request = decode_request(dlv, raw)
    conn.settle(dlv)
    fault = conn.broker.faults.for_namespace()
    if fault is not None and fault.kind is FaultKind.STALL:
        if fault.delay is None:
            return  # never answered: the SDK's authentication hangs until its own timeout
        asyncio.get_running_loop().call_later(fault.delay, _answer_cbs, conn, request)
        return
    _answer_cbs(conn, request)


def _answer_cbs(conn: AmqpConnection, request: Request) -> None:
    if conn.closed:
        return
    broker = conn.broker
    message = request.message
    audience = str(application_properties(message).get("name", ""))
    token = message.body.decode() if isinstance(message.body, bytes) else str(message.body)
    try:
        grant = broker.auth.grant(token, audience, broker.clock())
    except UnauthorizedError as exc:
        log.info("put-token refused: %s", exc)
        _reply(conn, request, {"status-code": int32(401), "status-description": str(exc)})
    else:
        conn.remember_token(token, _authority(audience), grant.expires_at)
        _reply(conn, request, {"status-code": int32(202), "status-description": "Accepted"})
    broker.after_io()  # may run from a timer (stall delay), outside any data_received


def _authority(audience: str) -> str:
    # The grant is kept as ``scheme://host``: attaches re-validate the token against
    # ``<authority>/<entity>``, so the token's own signed scope decides which entities it covers.
    return audience.split("://", 1)[0] + "://" + audience.split("://", 1)[-1].split("/", 1)[0]


def on_management(conn: AmqpConnection, dlv: Delivery, raw: bytes, path: str) -> None:
    """A ``$management`` operation on ``path``: run it and answer with its status and body."""
    request = decode_request(dlv, raw)
    conn.settle(dlv)
    broker = conn.broker
    try:
        links.authorize(conn, path, management.right_for(request.message), node=request.node)
    except UnauthorizedError as exc:
        refusal = {
            "statusCode": int32(401),
            "statusDescription": str(exc),
            "errorCondition": symbol(exc.condition),
        }
        _reply(conn, request, refusal)
        return
    status, description, body, condition = management.handle(broker, path, request.message)
    props: dict[str, Any] = {"statusCode": int32(status), "statusDescription": description}
    if condition:
        props["errorCondition"] = symbol(condition)
    _reply(conn, request, props, body)
    if status == 200 and management.wakes_receivers(request.message):
        with contextlib.suppress(BrokerError):
            broker.pump_store(broker.namespace.store(path))


def _reply(conn: AmqpConnection, request: Request, properties: dict[str, Any], body: Any = None) -> None:
    # Status codes go out as AMQP int (int32), as Service Bus sends them: the .NET and Java clients cast
    # the value to a 32-bit integer, which a long (a bare Python int) would fail.
    message = request.message
    link = conn.reply_links.find(message.reply_to, request.source)
    if link is None:
        log.warning("no reply link for %r", message.reply_to)
        return
    response = Message(body=body, correlation_id=message.id, properties=properties)
    link.send(response)
    conn.broker.mark_dirty(conn)
