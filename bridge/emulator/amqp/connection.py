"""One AMQP 1.0 connection of the local Service Bus: a proton engine driven by an asyncio protocol.

proton's engine (``Transport`` + ``Connection`` + ``Collector``) does the framing and the link state
machines; this module feeds it bytes, reacts to its events and writes its output. It speaks what
azure-servicebus expects (see ``research/SDK_NOTES.md``): SASL ANONYMOUS, CBS put-token on ``$cbs``,
``<entity>/$management`` request/response, sender links that deliver into entities and receiver links that
read from queues, subscriptions and dead-letter queues in PEEK_LOCK (settle second) or RECEIVE_AND_DELETE.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from proton import (
    Collector,
    Condition,
    Connection,
    Delivery,
    Event,
    Link,
    Message,
    Receiver,
    Sender,
    Terminus,
    Transport,
    symbol,
)

from bridge.emulator import sas
from bridge.emulator.amqp import management
from bridge.emulator.amqp.broker import Broker, Consumer, PendingSession
from bridge.emulator.amqp.codec import MalformedMessageError, parse_message, split_transfer
from bridge.emulator.faults import FaultKind
from bridge.emulator.model.messages import IncomingMessage
from bridge.emulator.model.store import MessageStore
from bridge.errors import (
    BrokerDecodeError,
    BrokerDetachForcedError,
    BrokerError,
    BrokerInvalidOperationError,
    BrokerUnauthorizedError,
    EntityNotFoundError,
    ServerBusyBrokerError,
)

log = logging.getLogger(__name__)

SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL_UTC = symbol("com.microsoft:locked-until-utc")
OPERATION_TIMEOUT = symbol("com.microsoft:timeout")
DOTNET_EPOCH_TICKS = 621355968000000000
RECEIVER_CREDIT = 1000
DEFAULT_SESSION_WAIT = 65.0


def entity_of(address: str | None) -> str:
    """``amqps://host:port/q1/$management`` → ``q1/$management``; bare names pass through."""
    if not address:
        return ""
    if "://" in address:
        rest = address.split("://", 1)[1]
        address = rest.split("/", 1)[1] if "/" in rest else ""
    return address.strip("/")


def dotnet_ticks(seconds: float) -> int:
    """Epoch seconds as .NET ticks, the unit of ``com.microsoft:locked-until-utc``."""
    return DOTNET_EPOCH_TICKS + int(seconds * 10_000_000)


def error_condition(exc: BrokerError) -> Condition:
    """An AMQP error the SDK can map; the info map must be present (the SDK indexes it)."""
    return Condition(exc.condition, str(exc), {symbol("tracking-id"): str(uuid.uuid4())})


class AmqpConnection(asyncio.Protocol):
    """The asyncio side of one client connection."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.aio: asyncio.Transport | None = None
        self.engine = Transport(Transport.SERVER)
        sasl = self.engine.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        self.conn = Connection()
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.engine.bind(self.conn)
        self.tokens: list[tuple[str, str]] = []  # (token, audience authority) accepted by put-token
        self.reply_links: dict[str, Sender] = {}
        self.closed = False

    # ---- asyncio protocol --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.aio = transport
        self.broker.connections.add(self)

    def data_received(self, data: bytes) -> None:
        fault = self.broker.faults.for_namespace()
        if fault is not None and fault.kind is FaultKind.BLACKHOLE:
            return  # swallow everything: the peer sees an open socket that never answers
        view = memoryview(data)
        while view:
            capacity = self.engine.capacity()
            if capacity <= 0:
                break
            chunk, view = view[:capacity], view[capacity:]
            try:
                self.engine.push(bytes(chunk))
            except Exception:
                log.debug("protocol error from client", exc_info=True)
                break
            self._process_events()
        self.broker.mark_dirty(self)
        self.broker.after_io()

    def connection_lost(self, exc: Exception | None) -> None:
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
            consumer = getattr(link, "sb_consumer", None)
            if consumer is not None:
                out.append(consumer)
            link = link.next(0)
        return out

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
            self.aio.write(bytes(self.engine.peek(pending)))
            self.engine.pop(pending)

    def abort(self) -> None:
        """Drop the TCP connection at once (an outage)."""
        if self.aio is not None:
            self.aio.abort()

    def tick(self, now: float) -> None:
        """Let the engine send heartbeats for the idle timeout the client asked for."""
        if not self.closed:
            try:
                self.engine.tick(now)
            except Exception:
                log.debug("engine tick", exc_info=True)
            self.broker.mark_dirty(self)

    def detach_entity(self, entity: str) -> None:
        """Force-detach every link of this connection that works on ``entity`` (an entity outage)."""
        prefix = entity.strip("/").lower()
        link = self.conn.link_head(0)
        while link is not None:
            nxt = link.next(0)
            consumer = getattr(link, "sb_consumer", None)
            path = consumer.store.path if consumer is not None else getattr(link, "sb_path", "")
            path = path.lower()
            if (path == prefix or path.startswith(prefix + "/")) and not link.state & Link.LOCAL_CLOSED:
                if consumer is not None:
                    self.broker.remove_consumer(consumer)
                link.condition = error_condition(
                    BrokerDetachForcedError(f"The entity '{entity}' is unavailable (injected outage)."))
                link.close()
            link = nxt
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
                log.exception("emulator failed handling %s", event.type)
            finally:
                self.collector.pop()

    def _dispatch(self, event: Event) -> None:
        kind = event.type
        if kind == Event.CONNECTION_REMOTE_OPEN:
            self.conn.container = f"bridge-emulator-{self.broker.namespace.name}"
            self.conn.open()
        elif kind == Event.SESSION_REMOTE_OPEN:
            event.session.open()
        elif kind == Event.LINK_REMOTE_OPEN:
            self._on_attach(event.link)
        elif kind == Event.LINK_FLOW:
            consumer = getattr(event.link, "sb_consumer", None)
            if consumer is not None:
                self.broker.pump_consumer(consumer)
        elif kind == Event.DELIVERY:
            if event.link.is_receiver:
                self._on_transfer(event.link, event.delivery)
            else:
                self._on_disposition(event.link, event.delivery)
        elif kind in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
            self._on_detach(event.link)
        elif kind == Event.SESSION_REMOTE_CLOSE:
            event.session.close()
        elif kind == Event.CONNECTION_REMOTE_CLOSE:
            self.conn.close()

    # ---- attach / detach -----------------------------------------------------------------------------
    def _on_attach(self, link: Link) -> None:
        link.source.address = link.remote_source.address
        link.target.address = link.remote_target.address
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_receiver:
            self._attach_incoming(link)  # the client's sender
        else:
            self._attach_outgoing(link)  # the client's receiver

    def _refuse(self, link: Link, exc: BrokerError) -> None:
        # A refused attach answers with a null terminus for the node, then detaches with the error (AMQP
        # 1.0 section 2.6.3, and what Azure does): echoing the address would let the SDK think the link
        # usable and send before it reads the detach, losing the error (MessagingEntityNotFoundError).
        (link.target if link.is_receiver else link.source).type = Terminus.UNSPECIFIED
        link.open()
        link.condition = error_condition(exc)
        link.close()

    def _attach_incoming(self, link: Link) -> None:
        path = entity_of(link.remote_target.address)
        link.sb_path = path
        if path != "$cbs" and not path.endswith("/$management"):
            try:
                self._check_entity(path, sending=True)
            except BrokerError as exc:
                self._refuse(link, exc)
                return
            link.max_message_size = self.broker.namespace.max_message_size(path)
        link.open()
        link.flow(RECEIVER_CREDIT)

    def _attach_outgoing(self, link: Link) -> None:
        path = entity_of(link.remote_source.address)
        reply_to = link.remote_target.address
        if path == "$cbs" or path.endswith("/$management"):
            if reply_to:
                self.reply_links[reply_to] = link
            link.open()
            return
        try:
            self._check_entity(path, sending=False)
            store = self.broker.namespace.store(path, self.broker.clock())
        except BrokerError as exc:
            self._refuse(link, exc)
            return
        peek_lock = link.remote_snd_settle_mode != Link.SND_SETTLED
        requested = self._session_filter(link)
        if store.options.requires_session and requested is None:
            self._refuse(link, BrokerInvalidOperationError(
                "It is not possible for an entity that requires sessions to create a non-sessionful receiver."))
            return
        if requested is None:
            self._open_consumer(link, store, peek_lock, None)
            return
        session_id = requested[0]
        if session_id is None:
            wait_ms = (link.remote_properties or {}).get(OPERATION_TIMEOUT)
            wait = float(wait_ms) / 1000.0 if wait_ms else DEFAULT_SESSION_WAIT
            pending = PendingSession(link, self, store, peek_lock, self.broker.clock() + wait)
            self.broker.pending_sessions.append(pending)
            self.try_pending_session(pending)
            return
        try:
            sid, until = store.lock_session(session_id, self._owner(link), self.broker.clock())
        except BrokerError as exc:
            self._refuse(link, exc)
            return
        self._open_session_consumer(link, store, peek_lock, sid, until)

    def _session_filter(self, link: Link) -> tuple[str | None] | None:
        """``None`` without a session filter, else ``(session id or None for next-available,)``."""
        data = link.remote_source.filter
        data.rewind()
        if not data.next():
            return None
        filters = data.get_object()
        if not isinstance(filters, dict) or SESSION_FILTER not in filters:
            return None
        value = filters[SESSION_FILTER]
        if isinstance(value, bytes):
            value = value.decode()
        return (None if value is None else str(value),)

    def _owner(self, link: Link) -> str:
        return f"{id(self)}:{link.name}"

    def try_pending_session(self, pending: PendingSession) -> None:
        """Give a waiting next-available-session attach a session if one has become available."""
        try:
            sid, until = pending.store.lock_session(None, self._owner(pending.link), self.broker.clock())
        except BrokerError:
            return
        self.broker.pending_sessions.remove(pending)
        self._open_session_consumer(pending.link, pending.store, pending.peek_lock, sid, until)
        self.broker.mark_dirty(self)

    def expire_pending_session(self, pending: PendingSession) -> None:
        """No session became available in time: the SDK raises OperationTimeoutError."""
        if pending in self.broker.pending_sessions:
            self.broker.pending_sessions.remove(pending)
        link = pending.link
        link.open()
        link.condition = Condition("com.microsoft:timeout", "No session available within the timeout.",
                                   {symbol("tracking-id"): str(uuid.uuid4())})
        link.close()
        self.broker.mark_dirty(self)

    def _open_session_consumer(
        self, link: Link, store: MessageStore, peek_lock: bool, session_id: str, until: float
    ) -> None:
        link.source.filter.put_dict({SESSION_FILTER: session_id})
        link.properties = {LOCKED_UNTIL_UTC: dotnet_ticks(until)}
        self._open_consumer(link, store, peek_lock, session_id)

    def _open_consumer(self, link: Link, store: MessageStore, peek_lock: bool, session_id: str | None) -> None:
        link.open()
        assert isinstance(link, Sender)
        consumer = Consumer(link, self, store, peek_lock, session_id, self._owner(link),
                            link.remote_source.address or "")
        link.sb_consumer = consumer
        self.broker.add_consumer(consumer)

    def _on_detach(self, link: Link) -> None:
        consumer = getattr(link, "sb_consumer", None)
        if consumer is not None:
            self.broker.remove_consumer(consumer)
        self.broker.pending_sessions = [p for p in self.broker.pending_sessions if p.link != link]
        if not link.state & Link.LOCAL_CLOSED:
            link.close()

    def _check_entity(self, path: str, sending: bool) -> None:
        base = path[: -len("/$management")] if path.endswith("/$management") else path
        self._authorize(base)
        fault = self.broker.fault_for(base)
        if fault is not None and fault.kind is FaultKind.OUTAGE:
            raise BrokerDetachForcedError(f"The entity '{base}' is unavailable (injected outage).")
        if sending:
            ns = self.broker.namespace
            if not ns.is_topic(base) and base.lower() not in ns.queues and not ns.auto_create:
                raise EntityNotFoundError(f"The messaging entity '{base}' could not be found.")

    def _authorize(self, path: str) -> None:
        now = self.broker.clock()
        for token, authority in self.tokens:
            try:
                sas.validate(token, self.broker.sas_keys, f"{authority}/{path}", now)
                return
            except BrokerUnauthorizedError:
                continue
        raise BrokerUnauthorizedError(f"Unauthorized access to '{path}': no valid token covers it.")

    # ---- transfers from the client -------------------------------------------------------------------
    def _on_transfer(self, link: Link, dlv: Delivery) -> None:
        if not dlv.readable or dlv.partial:
            return
        assert isinstance(link, Receiver)
        raw = link.recv(dlv.pending) or b""
        link.advance()
        if link.credit < RECEIVER_CREDIT // 2:
            link.flow(RECEIVER_CREDIT - link.credit)
        path: str = link.sb_path
        if path == "$cbs":
            self._on_cbs(dlv, raw)
        elif path.endswith("/$management"):
            self._on_management(dlv, raw, path[: -len("/$management")])
        else:
            self._on_send(dlv, raw, path)

    def _settle(self, dlv: Delivery, error: BrokerError | None = None) -> None:
        if error is None:
            dlv.update(Delivery.ACCEPTED)
        else:
            dlv.local.condition = error_condition(error)
            dlv.update(Delivery.REJECTED)
        dlv.settle()
        self.broker.mark_dirty(self)

    def _on_send(self, dlv: Delivery, raw: bytes, path: str) -> None:
        fault = self.broker.fault_for(path)
        if fault is not None and fault.trips(self.broker.rand):
            if fault.kind is FaultKind.BUSY:
                self._settle(dlv, ServerBusyBrokerError("The server is busy (injected). Please retry."))
                return
            if fault.kind is FaultKind.STALL:
                if fault.delay is not None:
                    loop = asyncio.get_running_loop()
                    loop.call_later(fault.delay, self._finish_stalled_send, dlv, raw, path)
                return  # never settled: the client's send times out
            if fault.kind is FaultKind.OUTAGE:
                dlv.link.condition = error_condition(BrokerDetachForcedError("Entity unavailable (injected)."))
                dlv.link.close()
                self.broker.mark_dirty(self)
                return
        self._store_send(dlv, raw, path)

    def _finish_stalled_send(self, dlv: Delivery, raw: bytes, path: str) -> None:
        if self.closed or dlv.link.state & Link.LOCAL_CLOSED:
            return
        self._store_send(dlv, raw, path)
        self.broker.after_io()

    def _store_send(self, dlv: Delivery, raw: bytes, path: str) -> None:
        ns = self.broker.namespace
        try:
            with_props = ns.is_topic(path)
            try:
                messages = [parse_message(s, with_props) for s in split_transfer(raw)]
            except MalformedMessageError as exc:
                raise BrokerDecodeError(f"The message could not be decoded: {exc}") from None
            incoming = [
                IncomingMessage(raw=m.raw, message_id=m.message_id, session_id=m.session_id,
                                partition_key=m.partition_key, time_to_live=m.time_to_live,
                                scheduled_at=m.scheduled_at, properties=m.properties)
                for m in messages
            ]
            ns.send(path, incoming, self.broker.clock())
        except BrokerError as exc:
            self._settle(dlv, exc)
            return
        self._settle(dlv)
        self._pump_path(path)

    def _pump_path(self, path: str) -> None:
        ns = self.broker.namespace
        if ns.is_topic(path):
            topic = ns.topics[path.strip("/").lower()]
            for sub in topic.subscriptions.values():
                self.broker.pump_store(sub.store)
        else:
            try:
                self.broker.pump_store(ns.store(path))
            except EntityNotFoundError:
                return

    # ---- CBS and management ------------------------------------------------------------------------
    def _reply(self, request: Message, properties: dict[str, Any], body: Any = None) -> None:
        # The SDK sets no reply-to: its response link targets the same node address its request
        # link uses as source, which is what ``sb_reply_key`` holds.
        link = self.reply_links.get(request.reply_to or "") or self.reply_links.get(request.sb_reply_key)
        if link is None:
            log.warning("no reply link for %r", request.reply_to)
            return
        response = Message(body=body, correlation_id=request.id, properties=properties)
        link.send(response)
        self.broker.mark_dirty(self)

    def _request(self, dlv: Delivery, raw: bytes) -> Message:
        request = Message()
        request.decode(raw)
        request.sb_reply_key = dlv.link.remote_source.address or ""
        return request

    def _on_cbs(self, dlv: Delivery, raw: bytes) -> None:
        request = self._request(dlv, raw)
        self._settle(dlv)
        fault = self.broker.faults.for_namespace()
        if fault is not None and fault.kind is FaultKind.STALL:
            if fault.delay is None:
                return
            asyncio.get_running_loop().call_later(fault.delay, self._answer_cbs, request)
            return
        self._answer_cbs(request)

    def _answer_cbs(self, request: Message) -> None:
        if self.closed:
            return
        props = request.properties or {}
        audience = str(props.get("name", ""))
        token = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        try:
            sas.validate(token, self.broker.sas_keys, audience, self.broker.clock())
        except BrokerUnauthorizedError as exc:
            log.info("put-token refused: %s", exc)
            self._reply(request, {"status-code": 401, "status-description": str(exc)})
        else:
            authority = audience.split("://", 1)[0] + "://" + audience.split("://", 1)[-1].split("/", 1)[0]
            self.tokens.append((token, authority))
            self._reply(request, {"status-code": 202, "status-description": "Accepted"})
        self.broker.after_io()

    def _on_management(self, dlv: Delivery, raw: bytes, path: str) -> None:
        request = self._request(dlv, raw)
        self._settle(dlv)
        status, description, body, condition = management.handle(self.broker, path, request)
        props: dict[str, Any] = {"statusCode": status, "statusDescription": description}
        if condition:
            props["errorCondition"] = symbol(condition)
        self._reply(request, props, body)
        if status == 200 and management.wakes_receivers(request):
            try:
                self.broker.pump_store(self.broker.namespace.store(path))
            except BrokerError:
                pass

    # ---- settlements of deliveries we sent -------------------------------------------------------------
    def _on_disposition(self, link: Link, dlv: Delivery) -> None:
        consumer: Consumer | None = getattr(link, "sb_consumer", None)
        if consumer is None or getattr(dlv, "sb_done", False):
            return
        state = dlv.remote_state
        if state is None or state == 0:
            if not dlv.settled:  # proton's ``settled`` means settled by the peer
                return
            state = Delivery.RELEASED  # settled without an outcome: the client gave the message back
        token = getattr(dlv, "sb_token", None)
        if token is None:
            dlv.settle()
            return
        store, now = consumer.store, self.broker.clock()
        log.debug("disposition %s for %s on %s", state, token, store.path)
        try:
            if state == Delivery.ACCEPTED:
                store.complete(token, now)
            elif state == Delivery.MODIFIED and dlv.remote.undeliverable:
                store.defer(token, now)
            elif state == Delivery.REJECTED:
                info = (dlv.remote.condition.info if dlv.remote.condition else None) or {}
                store.dead_letter(token, now, _text(info.get("DeadLetterReason")),
                                  _text(info.get("DeadLetterErrorDescription")))
            elif state == Delivery.RELEASED:
                store.release(token, now)
            else:
                store.abandon(token, now)
            if state == Delivery.MODIFIED:
                dlv.local.failed = dlv.remote.failed
                dlv.local.undeliverable = dlv.remote.undeliverable
            dlv.update(state)
        except BrokerError as exc:
            dlv.local.condition = error_condition(exc)
            dlv.update(Delivery.REJECTED)
        dlv.sb_done = True
        dlv.settle()
        self.broker.mark_dirty(self)
        # A released message goes to the other consumers only: the SDK releases what arrives outside a
        # receive call, and handing it straight back would just bounce it until the credit is gone.
        self.broker.pump_store(store, skip=consumer if state == Delivery.RELEASED else None)
        if store.dlq is not None and state == Delivery.REJECTED:
            self.broker.pump_store(store.dlq)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


