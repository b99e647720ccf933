"""``<entity>/$management`` operations: request/response messages of azure-servicebus.

Each operation reads a map body, acts on the entity's store and answers ``(statusCode, description,
body, errorCondition)``; a ``BrokerError`` becomes its HTTP-like status and its AMQP condition, which the
SDK maps to the same exception it would raise against Azure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from proton import UNDESCRIBED, Array, Data, Message, int32

from bridge.emulator.amqp import rule_requests
from bridge.emulator.amqp.broker import Broker
from bridge.emulator.amqp.codec import (
    BrokerStamp,
    MalformedMessageError,
    application_properties,
    epoch_seconds,
    parse_message,
    split_sections,
    stamp_message,
    ts,
    with_application_properties,
)
from bridge.emulator.errors import ArgumentError, BrokerError, ServerBusyError, SessionLockLostError
from bridge.emulator.identity.rights import Right
from bridge.emulator.model.entities import Topic
from bridge.emulator.model.messages import Delivery, IncomingMessage, MessageState, StoredMessage
from bridge.emulator.model.store import MessageStore

Result = tuple[int, str, Any, str | None]
_SENDING = {"com.microsoft:schedule-message", "com.microsoft:cancel-scheduled-message"}
_WAKING = {"com.microsoft:update-disposition", "com.microsoft:schedule-message"}


def _operation(request: Message) -> str | None:
    operation = application_properties(request).get("operation")
    return None if operation is None else str(operation)


def right_for(request: Message) -> Right:
    """The right an operation needs: scheduling is sending; everything else reads or settles."""
    return Right.SEND if _operation(request) in _SENDING else Right.LISTEN


def wakes_receivers(request: Message) -> bool:
    """True if the operation can make messages ready (receivers should be pumped)."""
    return _operation(request) in _WAKING


def handle(broker: Broker, path: str, request: Message) -> Result:
    """Run one management request against ``path``."""
    operation = _operation(request) or ""
    handler = _HANDLERS.get(operation)
    if handler is None and operation not in rule_requests.OPERATIONS:
        return (
            501,
            f"Operation {operation!r} is not supported by the local Service Bus.",
            None,
            "amqp:not-implemented",
        )
    body = request.body if isinstance(request.body, dict) else {}
    remaining = broker.throttled()
    if remaining is not None:
        busy = ServerBusyError.throttled(remaining)
        return busy.http_status, str(busy), None, busy.condition
    try:
        if operation == "com.microsoft:schedule-message":
            return 200, "OK", _schedule(broker, path, body), None
        if operation in rule_requests.OPERATIONS:
            result = rule_requests.OPERATIONS[operation](broker.namespace, path, body, broker.clock())
            return (200, "OK", result, None) if result is not None else (204, "No Content", None, None)
        topic = broker.namespace.send_target(path)
        if operation == "com.microsoft:cancel-scheduled-message" and isinstance(topic, Topic):
            # A topic numbers a scheduled message once and every subscription holds its copy under that
            # number (``Namespace.enqueue``): cancelling on the topic removes the copies (as on Azure).
            numbers = [int(s) for s in _list(body.get("sequence-numbers"))]
            for subscription in topic.subscriptions.values():
                subscription.store.cancel_scheduled(numbers)
            return 200, "OK", {}, None
        store = broker.namespace.store(path, broker.clock())
        assert handler is not None  # the rule operations returned above
        result = handler(broker, store, body)
    except BrokerError as exc:
        return exc.http_status, str(exc), None, exc.condition
    if result is None:
        return 204, "No Content", None, None
    return 200, "OK", result, None


def _array(kind: int, values: Iterable[Any]) -> Array:
    """An AMQP array, as Service Bus types ``sequence-numbers``, ``expirations`` and ``sessions-ids``: the
    .NET and Java clients read these as ``long[]``, ``DateTime[]``/``Date[]`` and ``string[]``, which an
    AMQP list would not give them."""
    return Array(UNDESCRIBED, kind, *values)  # type: ignore[arg-type]  # proton's stub omits UNDESCRIBED


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    return list(value)


def _tokens(body: dict[Any, Any]) -> list[uuid.UUID]:
    out = []
    for token in _list(body.get("lock-tokens")):
        out.append(token if isinstance(token, uuid.UUID) else uuid.UUID(str(token)))
    return out


_STATE_CODES = {MessageState.ACTIVE: 0, MessageState.DEFERRED: 1, MessageState.SCHEDULED: 2}
"""The codes Azure stamps as ``x-opt-message-state`` (the SDK's ``ServiceBusMessageState``)."""


def _encode(msg: StoredMessage, delivery: Delivery | None) -> bytes:
    return stamp_message(
        msg.raw,
        BrokerStamp(
            sequence_number=msg.seq,
            enqueued_at=msg.visible_since,
            delivery_count=delivery.delivery_count if delivery else msg.delivery_count,
            locked_until=delivery.locked_until if delivery else msg.locked_until,
            scheduled_at=msg.scheduled_at,
            time_to_live=msg.time_to_live,
            dead_letter_reason=msg.dead_letter_reason,
            dead_letter_description=msg.dead_letter_description,
            dead_letter_source=msg.dead_letter_source,
            state=_STATE_CODES[msg.state],
        ),
    )


def _renew_lock(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    now = broker.clock()
    return {"expirations": _array(Data.TIMESTAMP, [ts(store.renew(token, now)) for token in _tokens(body)])}


def _peek(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    from_seq = int(body.get("from-sequence-number", 0))
    count = int(body.get("message-count", 1))
    session = body.get("session-id")
    found = store.peek(from_seq, count, str(session) if session else None)
    if not found:
        return None
    return {"messages": [{"message": _encode(m, None)} for m in found]}


def _schedule(broker: Broker, path: str, body: dict[Any, Any]) -> Any:
    incoming = []
    for entry in _list(body.get("messages")):
        try:
            parsed = parse_message(split_sections(bytes(entry["message"])), broker.namespace.is_topic(path))
        except (MalformedMessageError, KeyError, TypeError):
            raise ArgumentError("A scheduled message could not be decoded.") from None
        incoming.append(
            IncomingMessage(
                raw=parsed.raw,
                message_id=parsed.message_id,
                session_id=parsed.session_id,
                partition_key=parsed.partition_key,
                time_to_live=parsed.time_to_live,
                scheduled_at=parsed.scheduled_at,
                properties=parsed.properties,
            )
        )
    seqs = broker.namespace.send(path, incoming, broker.clock())
    return {"sequence-numbers": _array(Data.LONG, [int(s) for s in seqs])}


def _cancel(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    store.cancel_scheduled(int(s) for s in _list(body.get("sequence-numbers")))
    return {}


def _disposition(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    status = str(body.get("disposition-status", ""))
    now = broker.clock()
    changes = body.get("properties-to-modify")
    updates = {str(k): v for k, v in changes.items()} if isinstance(changes, dict) else {}
    for token in _tokens(body):
        if updates and status != "completed":
            store.rewrite(token, now, lambda raw: with_application_properties(raw, updates, set()))
        if status == "completed":
            store.complete(token, now)
        elif status == "abandoned":
            store.abandon(token, now)
        elif status == "defered":
            store.defer(token, now)
        elif status == "suspended":
            reason = body.get("deadletter-reason")
            desc = body.get("deadletter-description")
            store.dead_letter(
                token,
                now,
                str(reason) if reason is not None else None,
                str(desc) if desc is not None else None,
            )
        else:
            raise ArgumentError(f"Unknown disposition status {status!r}.")
    return {}


def _receive_by_sequence(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    seqs = [int(s) for s in _list(body.get("sequence-numbers"))]
    peek_lock = int(body.get("receiver-settle-mode", 1)) == 1
    deliveries = store.receive_deferred(seqs, broker.clock(), peek_lock)
    out = []
    for delivery in deliveries:
        entry: dict[str, Any] = {"message": _encode(delivery.message, delivery)}
        if delivery.lock_token is not None:
            entry["lock-token"] = delivery.lock_token
        out.append(entry)
    return {"messages": out}


def _session_id(body: dict[Any, Any]) -> str:
    session = body.get("session-id")
    if not session:
        raise ArgumentError("session-id is required.")
    return str(session)


def _renew_session(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    session = _session_id(body)
    held = store.sessions.locks.get(session)
    now = broker.clock()
    if held is None or held.locked_until < now:
        raise SessionLockLostError(f"The session lock for '{session}' was lost.")
    until = store.renew_session(session, held.owner, now)
    return {"expiration": ts(until)}


def _get_state(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    return {"session-state": store.sessions.state.get(_session_id(body))}


def _set_state(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    state = body.get("session-state")
    store.set_session_state(_session_id(body), bytes(state) if state is not None else None)
    return {}


def _sessions(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    ids = sorted({m.session_id for m in store.messages.values() if m.session_id} | set(store.sessions.state))
    skip, top = int(body.get("skip", 0)), int(body.get("top", 100))
    page = ids[skip : skip + top]
    if not page:
        # Service Bus answers 204 No Content past the last session; the Python SDK's decoder also cannot
        # read an empty AMQP array (it leaves the array's element constructor unread).
        return None
    return {"skip": int32(skip + len(page)), "sessions-ids": _array(Data.STRING, page)}


MAX_DELETE = 4000
"""The most messages one batch delete removes: Service Bus's Premium limit (Standard's is 500, what the
JavaScript SDK's purge asks for); larger requests are refused."""


def _delete_batch(broker: Broker, store: MessageStore, body: dict[Any, Any]) -> Any:
    count = int(body.get("message-count", 0))
    if not 0 < count <= MAX_DELETE:
        raise ArgumentError(f"message-count must be between 1 and {MAX_DELETE}.")
    cutoff = body.get("enqueued-time-utc")
    before = epoch_seconds(cutoff) or broker.clock()
    session = body.get("session-id")
    deleted = store.delete_batch(count, before, str(session) if session else None)
    return {"message-count": int32(deleted)}


_HANDLERS: dict[str, Callable[[Broker, MessageStore, dict[Any, Any]], Any]] = {
    "com.microsoft:renew-lock": _renew_lock,
    "com.microsoft:peek-message": _peek,
    "com.microsoft:schedule-message": lambda b, s, body: None,  # handled before store lookup
    "com.microsoft:cancel-scheduled-message": _cancel,
    "com.microsoft:update-disposition": _disposition,
    "com.microsoft:receive-by-sequence-number": _receive_by_sequence,
    "com.microsoft:renew-session-lock": _renew_session,
    "com.microsoft:get-session-state": _get_state,
    "com.microsoft:set-session-state": _set_state,
    "com.microsoft:get-message-sessions": _sessions,
    "com.microsoft:batch-delete-messages": _delete_batch,
}
