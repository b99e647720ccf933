"""One AMQP 1.0 connection of the local Service Bus: a proton engine driven by an asyncio protocol.

proton's engine (``Transport`` + ``Connection`` + ``Collector``) does the framing and the link state
machines; this module feeds it bytes, dispatches its events and writes its output. It speaks what
azure-servicebus expects (see ``docs/servicebus-sdk.md``): SASL ANONYMOUS, CBS put-token on ``$cbs``,
``<entity>/$management`` request/response, sender links that deliver into entities and receiver links that
read from queues, subscriptions and dead-letter queues in PEEK_LOCK (settle second) or RECEIVE_AND_DELETE.

The work an event causes lives by responsibility: ``links`` (attach/detach, sessions), ``sends``
(transfers into entities), ``requests`` (CBS and management), ``settlement`` (dispositions of what we
sent). Output is never written here directly: the broker flushes the journal first (``Broker.after_io``).
"""

from __future__ import annotations

import asyncio
import logging

from proton import Collector, Condition, Connection, Delivery, Event, Receiver, Transport

from bridge.emulator.amqp import idle, links, requests, sends, settlement
from bridge.emulator.amqp.broker import Broker, Consumer, PendingSession
from bridge.emulator.amqp.conditions import error_condition, with_info
from bridge.emulator.amqp.replies import ReplyLinks
from bridge.emulator.amqp.sequencing import DeliveryIdFilter
from bridge.emulator.errors import BrokerError
from bridge.emulator.faults import FaultKind

log = logging.getLogger(__name__)
# Put-tokens kept per connection: one per entity and audience the client uses, plus its refreshes.
MAX_TOKENS = 256


class AmqpConnection(asyncio.Protocol):
    """The asyncio side of one client connection, and what the connection's links share."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.aio: asyncio.Transport | None = None
        self.engine = Transport(Transport.SERVER)
        sasl = self.engine.sasl()
        sasl.allowed_mechs("ANONYMOUS")  # authorization is CBS put-token, after the connection opens
        self.conn = Connection()
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.engine.bind(self.conn)
        self.tokens: list[tuple[str, str]] = []  # (token, audience authority) accepted by put-token
        # When the newest Entra ID token put on this connection expires; then the connection is closed
        # unless a fresh token arrived first (Azure does the same; the SDK refreshes ahead of expiry).
        self.token_expiry: float | None = None
        self.reply_links = ReplyLinks()  # our links answering requests to $cbs and $management
        self.wire = DeliveryIdFilter()
        self.last_activity = idle.now()  # the client's last frame other than a heartbeat (``idle``)
        self.closed = False

    # ---- asyncio protocol --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register with the broker, which pumps and flushes this connection from now on."""
        assert isinstance(transport, asyncio.Transport)
        self.aio = transport
        self.broker.connections.add(self)

    def data_received(self, data: bytes) -> None:
        """Feed the engine, handle what it makes of the bytes, then let the broker commit and flush."""
        fault = self.broker.faults.for_namespace()
        if fault is not None and fault.kind is FaultKind.BLACKHOLE:
            return  # swallow everything: the peer sees an open socket that never answers
        if len(data) > 8:  # an empty frame (8 bytes) is a heartbeat, not activity
            self.last_activity = idle.now()
        for piece in self.wire.incoming(data):
            if not self._push(memoryview(piece)):
                break
        condition = self.engine.condition
        if condition is not None and not condition.info and self.wire.close_condition is None:
            self.wire.close_condition = with_info(condition)  # see ``sequencing``
        self.broker.mark_dirty(self)
        self.broker.after_io()

    def _push(self, view: memoryview) -> bool:
        """Feed ``view`` to the engine and handle its events; False once the engine takes no more."""
        while view:
            capacity = self.engine.capacity()
            if capacity <= 0:
                return False
            chunk, view = view[:capacity], view[capacity:]
            try:
                self.engine.push(bytes(chunk))
            except Exception:
                log.debug("protocol error from client", exc_info=True)
                return False
            self._process_events()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop this connection's consumers (their locks run out) and waiting session attaches."""
        self.closed = True
        self.broker.connections.discard(self)
        for consumer in self._consumers():
            self.broker.remove_consumer(consumer)
        self.broker.pending_sessions = [p for p in self.broker.pending_sessions if p.conn is not self]
        try:
            self.engine.close_tail()
            self.engine.close_head()
        except Exception:  # the engine may already be closed
            log.debug("engine close after connection loss", exc_info=True)

    def _consumers(self) -> list[Consumer]:
        out = []
        link = self.conn.link_head(0)
        while link is not None:
            consumer: Consumer | None = getattr(link, "sb_consumer", None)
            if consumer is not None:
                out.append(consumer)
            link = link.next(0)
        return out

    def remember_token(self, token: str, authority: str, expires_at: float | None) -> None:
        """Keep a granted put-token; the SDK puts a fresh one before the last expires, so keep a few."""
        self.tokens.append((token, authority))
        del self.tokens[:-MAX_TOKENS]
        if expires_at is not None:
            self.token_expiry = max(self.token_expiry or 0.0, expires_at)

    # ---- called by the broker and the server ------------------------------------------------------------
    def flush_output(self) -> None:
        """Write everything the engine produced; close the socket when the engine is done."""
        if self.aio is None or self.closed:
            return
        while True:
            pending = self.engine.pending()
            if pending < 0:
                self.aio.close()
                return
            if pending == 0:
                return
            output = self.engine.peek(pending)
            if output is not None:  # never None with pending > 0; proton's stub allows it
                data = bytes(output)
                self.aio.write(self.wire.outgoing(data) if self.wire.scans_output else data)
            self.engine.pop(pending)

    def abort(self) -> None:
        """Drop the TCP connection at once (an outage)."""
        if self.aio is not None:
            self.aio.abort()

    def tick(self, now: float) -> None:
        """Let the engine send heartbeats; close the connection once its Entra ID token has expired."""
        if not self.closed and self.token_expiry is not None and now >= self.token_expiry:
            self.token_expiry = None
            log.info("closing a connection whose token expired without renewal")
            self.conn.condition = Condition(
                "amqp:unauthorized-access", "ExpiredToken: the token put on $cbs expired and was not renewed."
            )
            self.conn.close()
        if not self.closed:
            try:
                self.engine.tick(now)
            except Exception:
                log.debug("engine tick", exc_info=True)
            self.broker.mark_dirty(self)

    def detach_entity(self, entity: str) -> None:
        """Force-detach every link of this connection that works on ``entity`` (an entity outage)."""
        links.detach_entity(self, entity)

    def force_detach(self, entity: str | None) -> int:
        """Force-detach the entity links (of ``entity``, or all) as Service Bus does; returns how many."""
        return links.force_detach_links(self, entity)

    def try_pending_session(self, pending: PendingSession) -> None:
        """Give a waiting next-available-session attach a session if one has become available."""
        links.try_pending_session(self, pending)

    def expire_pending_session(self, pending: PendingSession) -> None:
        """No session became available in time: the SDK raises OperationTimeoutError."""
        links.expire_pending_session(self, pending)

    def settle(self, dlv: Delivery, error: BrokerError | None = None) -> None:
        """Settle a transfer from the client: ACCEPTED, or REJECTED with the broker's error."""
        if error is None:
            dlv.update(Delivery.ACCEPTED)
        else:
            dlv.local.condition = error_condition(error)
            dlv.update(Delivery.REJECTED)
        dlv.settle()
        self.broker.mark_dirty(self)

    # ---- engine events -----------------------------------------------------------------------------
    def _process_events(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                return
            try:
                self._dispatch(event)
            except Exception:
                # One bad event must not take the connection (or the server) down with it.
                log.exception("emulator failed handling %s", event.type)
            finally:
                self.collector.pop()

    def _dispatch(self, event: Event) -> None:
        kind = event.type
        if kind == Event.CONNECTION_REMOTE_OPEN:
            self.conn.container = f"bridge-emulator-{self.broker.namespace.name}"
            self.conn.open()
        elif kind == Event.SESSION_REMOTE_OPEN:
            if event.session is not None:
                event.session.open()
        elif kind == Event.LINK_REMOTE_OPEN:
            if event.link is not None:
                links.on_attach(self, event.link)
        elif kind == Event.LINK_FLOW:
            consumer: Consumer | None = getattr(event.link, "sb_consumer", None)
            if consumer is not None:
                self.broker.pump_consumer(consumer)
        elif kind == Event.DELIVERY:
            link, dlv = event.link, event.delivery
            if link is None or dlv is None:
                return
            if isinstance(link, Receiver):
                self._on_transfer(link, dlv)
            else:
                settlement.on_disposition(self, link, dlv)
        elif kind in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
            if event.link is not None:
                links.on_detach(self, event.link)
        elif kind == Event.SESSION_REMOTE_CLOSE:
            if event.session is not None:
                event.session.close()
        elif kind == Event.CONNECTION_REMOTE_CLOSE:
            self.conn.close()

    def _on_transfer(self, link: Receiver, dlv: Delivery) -> None:
        if not dlv.readable or dlv.partial:
            return  # wait for the whole message: proton reports every frame of a multi-frame transfer
        raw = link.recv(dlv.pending) or b""
        link.advance()
        if link.credit < links.RECEIVER_CREDIT // 2:
            link.flow(links.RECEIVER_CREDIT - link.credit)
        path: str = link.sb_path
        if path == "$cbs":
            requests.on_cbs(self, dlv, raw)
        elif path.endswith(links.MANAGEMENT_SUFFIX):
            requests.on_management(self, dlv, raw, path.removesuffix(links.MANAGEMENT_SUFFIX))
        else:
            idle.touch(link)
            sends.on_send(self, dlv, raw, path)
