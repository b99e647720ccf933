"""Attach and detach of a connection's links: entity links, session receivers and refusals.

A client's sender link (our ``Receiver``) delivers into a queue or topic, or carries requests to ``$cbs``
and ``<entity>/$management``; a client's receiver link (our ``Sender``) reads from a queue, subscription or
dead-letter queue, or carries the replies of those request nodes. Every entity link is authorized against
the connection's put-token grants and checked for injected outages before it opens.

Receivers with a ``com.microsoft:session-filter`` lock a session first: a named one at once, or — for a
null filter, "next available" — whichever session gets ready messages first within the client's operation
timeout (a ``PendingSession`` the broker retries as stores change).

What we remember about a link (its entity path, its ``Consumer``) is set as attributes on proton's link
object: proton re-creates its Python wrappers for every event but keeps such attributes in the C object's
record, so they live as long as the link does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proton import Link, Receiver, Sender, Terminus, symbol

from bridge.emulator.amqp import idle
from bridge.emulator.amqp.broker import Consumer, PendingSession
from bridge.emulator.amqp.conditions import error_condition, timeout_condition
from bridge.emulator.errors import (
    BrokerError,
    DetachForcedError,
    EntityNotFoundError,
    InvalidOperationError,
    ServerBusyError,
    UnauthorizedError,
)
from bridge.emulator.faults import FaultKind
from bridge.emulator.identity.grants import missing_right
from bridge.emulator.identity.rights import Right
from bridge.emulator.model.store import MessageStore

if TYPE_CHECKING:
    from bridge.emulator.amqp.connection import AmqpConnection

SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL_UTC = symbol("com.microsoft:locked-until-utc")
OPERATION_TIMEOUT = symbol("com.microsoft:timeout")
DOTNET_EPOCH_TICKS = 621355968000000000
# Credit we grant a client's sender, topped up at half: enough for the SDK's batches to flow unthrottled.
RECEIVER_CREDIT = 1000
# What a next-available-session attach waits without a client timeout: the SDK's own default of 65 s.
DEFAULT_SESSION_WAIT = 65.0
MANAGEMENT_SUFFIX = "/$management"


def entity_of(address: str | None) -> str:
    """``amqps://host:port/q1/$management`` → ``q1/$management``; bare names pass through."""
    if not address:
        return ""
    if "://" in address:
        rest = address.split("://", 1)[1]
        address = rest.split("/", 1)[1] if "/" in rest else ""
    return address.strip("/")


def is_request_node(path: str) -> bool:
    """True for the request/response nodes (``$cbs``, ``<entity>/$management``) rather than an entity."""
    return path == "$cbs" or path.endswith(MANAGEMENT_SUFFIX)


def dotnet_ticks(seconds: float) -> int:
    """Epoch seconds as .NET ticks, the unit of ``com.microsoft:locked-until-utc``."""
    return DOTNET_EPOCH_TICKS + int(seconds * 10_000_000)


def on_attach(conn: AmqpConnection, link: Sender | Receiver) -> None:
    """Answer a client's attach: open the link on its node, or refuse it with the broker's error."""
    # Terminus addresses start out null, so a null remote address needs no copying.
    if link.remote_source.address is not None:
        link.source.address = link.remote_source.address
    if link.remote_target.address is not None:
        link.target.address = link.remote_target.address
    link.snd_settle_mode = link.remote_snd_settle_mode
    link.rcv_settle_mode = link.remote_rcv_settle_mode
    if isinstance(link, Receiver):
        _attach_incoming(conn, link)  # the client's sender
    else:
        _attach_outgoing(conn, link)  # the client's receiver


def on_detach(conn: AmqpConnection, link: Link) -> None:
    """The client detached: forget the link's consumer or pending session attach and close our end."""
    consumer: Consumer | None = getattr(link, "sb_consumer", None)
    broker = conn.broker
    if consumer is not None:
        broker.remove_consumer(consumer)
    broker.pending_sessions = [p for p in broker.pending_sessions if p.link != link]
    conn.reply_links.remove(link)
    if not link.state & Link.LOCAL_CLOSED:
        link.close()


def detach_entity(conn: AmqpConnection, entity: str) -> None:
    """Force-detach every link of ``conn`` that works on ``entity`` or below it (an entity outage)."""
    error = DetachForcedError(f"The entity '{entity}' is unavailable (injected outage).")
    for link in _entity_links(conn, entity):
        force_detach(conn, link, error)


def force_detach_links(conn: AmqpConnection, entity: str | None) -> int:
    """Force-detach the entity links of ``conn`` (of ``entity`` and below, or all); returns how many."""
    detached = _entity_links(conn, entity)
    for link in detached:
        force_detach(conn, link, idle.forced_detach_error(link))
    return len(detached)


def force_detach(conn: AmqpConnection, link: Link, exc: BrokerError) -> None:
    """Detach one of our links with ``exc``, dropping its consumer."""
    consumer: Consumer | None = getattr(link, "sb_consumer", None)
    if consumer is not None:
        conn.broker.remove_consumer(consumer)
    link.condition = error_condition(exc)
    link.close()
    conn.broker.mark_dirty(conn)


def _entity_links(conn: AmqpConnection, entity: str | None) -> list[Link]:
    """The open links of ``conn`` on ``entity`` or below it (every entity link for ``None``)."""
    prefix = entity.strip("/").lower() if entity is not None else None
    out: list[Link] = []
    link = conn.conn.link_head(0)
    while link is not None:
        consumer: Consumer | None = getattr(link, "sb_consumer", None)
        path: str = consumer.store.path if consumer is not None else getattr(link, "sb_path", "")
        path = path.lower()
        if prefix is None:
            wanted = bool(path) and not is_request_node(path)
        else:
            wanted = path == prefix or path.startswith(prefix + "/")
        if wanted and not link.state & Link.LOCAL_CLOSED:
            out.append(link)
        link = link.next(0)
    return out


def try_pending_session(conn: AmqpConnection, pending: PendingSession) -> None:
    """Give a waiting next-available-session attach a session if one has become available."""
    broker = conn.broker
    try:
        sid, until = pending.store.lock_session(None, _owner(conn, pending.link), broker.clock())
    except BrokerError:
        return  # still nothing: keep waiting until the deadline
    broker.pending_sessions.remove(pending)
    _open_session_consumer(conn, pending.link, pending.store, pending.peek_lock, session_id=sid, until=until)
    broker.mark_dirty(conn)


def expire_pending_session(conn: AmqpConnection, pending: PendingSession) -> None:
    """No session became available in time: the SDK raises OperationTimeoutError."""
    broker = conn.broker
    if pending in broker.pending_sessions:
        broker.pending_sessions.remove(pending)
    # As Azure answers: the attach comes back without a source, then a timeout detach. Echoing the source
    # would let the SDK "open" a receiver without a session (it reads the session from the source).
    link = pending.link
    link.source.type = Terminus.UNSPECIFIED
    link.open()
    link.condition = timeout_condition("No session available within the timeout.")
    link.close()
    broker.mark_dirty(conn)


def _refuse(link: Link, exc: BrokerError) -> None:
    # A refused attach answers with a null terminus for the node, then detaches with the error (AMQP
    # 1.0 section 2.6.3, and what Azure does): echoing the address would let the SDK think the link
    # usable and send before it reads the detach, losing the error (MessagingEntityNotFoundError).
    (link.target if link.is_receiver else link.source).type = Terminus.UNSPECIFIED
    link.open()
    link.condition = error_condition(exc)
    link.close()


def _attach_incoming(conn: AmqpConnection, link: Receiver) -> None:
    path = entity_of(link.remote_target.address)
    link.sb_path = path
    if not is_request_node(path):
        try:
            _check_entity(conn, path, sending=True)
        except BrokerError as exc:
            _refuse(link, exc)
            return
        link.max_message_size = conn.broker.namespace.max_message_size(path)
        idle.touch(link)
    link.open()
    link.flow(RECEIVER_CREDIT)


def _attach_outgoing(conn: AmqpConnection, link: Sender) -> None:
    path = entity_of(link.remote_source.address)
    broker = conn.broker
    if is_request_node(path):
        conn.reply_links.add(link, link.remote_target.address)
        link.open()
        return
    try:
        _check_entity(conn, path, sending=False)
        store = broker.namespace.store(path, broker.clock())
    except BrokerError as exc:
        _refuse(link, exc)
        return
    peek_lock = link.remote_snd_settle_mode != Link.SND_SETTLED
    requested = _session_filter(link)
    if store.options.requires_session and requested is None:
        _refuse(
            link,
            InvalidOperationError(
                "It is not possible for an entity that requires sessions to create a non-sessionful receiver."
            ),
        )
        return
    if requested is None:
        _open_consumer(conn, link, store, peek_lock, None)
        return
    session_id = requested[0]
    if session_id is None:
        wait_ms = (link.remote_properties or {}).get(OPERATION_TIMEOUT)
        wait = float(wait_ms) / 1000.0 if wait_ms else DEFAULT_SESSION_WAIT
        pending = PendingSession(link, conn, store, peek_lock, broker.clock() + wait)
        broker.pending_sessions.append(pending)
        try_pending_session(conn, pending)
        return
    try:
        sid, until = store.lock_session(session_id, _owner(conn, link), broker.clock())
    except BrokerError as exc:
        _refuse(link, exc)
        return
    _open_session_consumer(conn, link, store, peek_lock, session_id=sid, until=until)


def _session_filter(link: Link) -> tuple[str | None] | None:
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


def _owner(conn: AmqpConnection, link: Link) -> str:
    # Link names are only unique per connection, so the owner of a session lock names both.
    return f"{id(conn)}:{link.name}"


def _open_session_consumer(
    conn: AmqpConnection, link: Sender, store: MessageStore, peek_lock: bool, *, session_id: str, until: float
) -> None:
    # The SDK reads the session it got and its lock expiry from the attach we answer with.
    link.source.filter.put_dict({SESSION_FILTER: session_id})
    link.properties = {LOCKED_UNTIL_UTC: dotnet_ticks(until)}
    _open_consumer(conn, link, store, peek_lock, session_id)


def _open_consumer(
    conn: AmqpConnection, link: Sender, store: MessageStore, peek_lock: bool, session_id: str | None
) -> None:
    link.open()
    consumer = Consumer(
        link, conn, store, peek_lock, session_id, _owner(conn, link), link.remote_source.address or ""
    )
    link.sb_consumer = consumer
    conn.broker.add_consumer(consumer)


def _check_entity(conn: AmqpConnection, path: str, sending: bool) -> None:
    base = path.removesuffix(MANAGEMENT_SUFFIX)
    authorize(conn, base, Right.SEND if sending else Right.LISTEN)
    broker = conn.broker
    remaining = broker.throttled()
    if remaining is not None:
        raise ServerBusyError.throttled(remaining)
    fault = broker.fault_for(base)
    if fault is not None and fault.kind is FaultKind.OUTAGE:
        raise DetachForcedError(f"The entity '{base}' is unavailable (injected outage).")
    if sending:
        ns = broker.namespace
        if not ns.is_topic(base) and base.lower() not in ns.queues and not ns.auto_create:
            raise EntityNotFoundError(f"The messaging entity '{base}' could not be found.")


def authorize(conn: AmqpConnection, path: str, right: Right, *, node: str | None = None) -> None:
    """Pass if a token the connection put covers ``path`` (or the request ``node`` the operation came
    on, e.g. ``q1/$management``) with ``right``; else the most telling refusal.

    A valid token without the right gives Azure's "'Send' claim(s) are required" error, which names what
    to assign; no valid token at all gives the generic refusal.
    """
    broker = conn.broker
    now = broker.clock()
    lacking: UnauthorizedError | None = None
    resources = [path] if node is None else [path, node]
    for (token, authority), where in ((t, r) for t in conn.tokens for r in resources):
        resource = f"{authority}/{where}"
        try:
            grant = broker.auth.grant(token, resource, now)
        except UnauthorizedError:
            continue
        if right in grant.rights:
            return
        lacking = missing_right(right, resource)
    if lacking is not None:
        raise lacking
    raise UnauthorizedError(f"Unauthorized access to '{path}': no valid token covers it.")
