"""Envelopes to broker messages and back: direct sends, backlog aliasing (paired mode), pings.

Field mapping (``Envelope`` → broker message): ``message_id`` → MessageId, ``session_id`` → SessionId,
``partition_key`` → PartitionKey, ``time_to_live`` (seconds) → TimeToLive, ``scheduled_enqueue_time_utc``
→ ScheduledEnqueueTimeUtc, ``correlation_id``, ``subject`` (Label), ``reply_to``, ``reply_to_session_id``,
``to``, ``content_type``, ``via_partition_key`` → the ``x-opt-via-partition-key`` message annotation (the
SDK has no keyword for it), the body as one AMQP data section, and application properties with their AMQP
types. The SDK's ``time_to_live`` setter truncates to whole seconds; the AMQP header carries milliseconds,
so ``_build`` writes the TTL there rounded to the millisecond (90.5 s arrives as 90.5 s).

Trace context (``docs/tracing.md``): an envelope's creation context goes on the message as the application
properties the SDK writes when its own tracing is on, ``Diagnostic-Id`` and ``traceparent`` (the same
traceparent text) and ``tracestate``, unless the application set ``traceparent`` or ``Diagnostic-Id``
itself; backlog messages carry them too, so the syphon moves them with the message.

Application property types. The SDK's own encoder would send every ``int`` as a 32-bit AMQP int (and fail
on larger ones), turns ``bytes`` into strings (failing on non-UTF-8) and cannot send a ``timedelta``; here
``bytes`` go as AMQP binary, an int outside the int32 range as AMQP long and a ``timedelta`` as the
described type ``com.microsoft:timespan`` (ticks of 100 ns), as the .NET client writes a ``TimeSpan``.
On receipt the SDK decodes AMQP string and binary both to ``bytes`` and timestamps to ``int``
milliseconds, so a *received* message cannot tell them apart. A backlog message therefore carries one more
application property, ``x-bridge-ptypes`` (compact JSON ``{"name": "b" | "t"}``, written
only when some property is binary or a timestamp), and ``from_backlog_message`` restores the exact types:
``bytes`` values become ``str`` unless marked ``b``; ints marked ``t`` become aware UTC datetimes
(millisecond precision, the AMQP timestamp's).

Backlog aliasing is ``bridge.core.aliasing``: ``to_backlog_message`` leaves no SessionId, TTL, schedule or
partition key on the broker message; ``from_backlog_message`` is its inverse for the syphon, with the
remaining TTL (or the core's expired / not-aliased decision).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias, cast

from azure.servicebus import ServiceBusMessageState, ServiceBusReceivedMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType

from bridge.core.aliasing import (
    ALIAS_PATH,
    Aliased,
    ExpiredInBacklog,
    NotAliased,
    ReservedPropertyConflict,
    TooLargeForBacklog,
    alias_for_backlog,
    unalias,
)
from bridge.core.envelope import Envelope
from bridge.core.message_fields import MessageFields, PropertyValue
from bridge.core.paired import PingMode
from bridge.core.paired import ping_message as core_ping_message
from bridge.core.syphon import Barrier
from bridge.core.trace_context import DIAGNOSTIC_ID, TRACEPARENT, message_properties, property_bytes
from bridge.core.validation import DEFAULT_MAX_MESSAGE_SIZE

ReceivedMessage: TypeAlias = ServiceBusReceivedMessage
"""A message received from a queue, as ``NamespacePool`` hands it out and takes it back to settle. Code
outside this package names it by this alias (never the SDK's class) and reads only its
``sequence_number``, ``locked_until_utc`` and ``message_id``; its contents go through the functions here
(``from_backlog_message``, ``barrier_of``)."""

TYPES_PROPERTY = "x-bridge-ptypes"
"""Application property naming the binary (``b``) and timestamp (``t``) properties of a backlog message."""
TIMESPAN_DESCRIPTOR = b"com.microsoft:timespan"
TRACE_PROPERTY_NAMES = frozenset((TRACEPARENT, DIAGNOSTIC_ID))
"""A message whose application properties hold one of these already keeps the application's context."""
_INT32 = range(-(2**31), 2**31)
_TICKS_PER_SECOND = 10_000_000


@dataclass(frozen=True)
class BacklogMessage:
    """An aliased message for a backlog queue; ``destination`` is its original entity (``x-ms-path``)."""

    message: OutgoingMessage
    destination: str
    size: int


@dataclass(frozen=True)
class RestoredMessage:
    """A backlog message restored for ``destination`` on the primary (``fields.time_to_live`` = remaining)."""

    message: OutgoingMessage
    destination: str
    fields: MessageFields


OutgoingMessage: TypeAlias = AmqpAnnotatedMessage
"""A message ready to send (``to_message``, ``to_backlog_message``, ``barrier_message``, ``ping_message``):
what ``NamespacePool.send`` takes. Code outside this package names it so, never by the SDK's class, and
reads its MessageId with ``message_id_of``."""

BacklogDecision: TypeAlias = BacklogMessage | TooLargeForBacklog | ReservedPropertyConflict
RestoreDecision: TypeAlias = RestoredMessage | ExpiredInBacklog | NotAliased


def sdk_property_value(value: PropertyValue) -> Any:
    """``value`` as the SDK's encoder should write it (AMQP long, timespan or the plain value)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, bytes):
        return {"TYPE": "BINARY", "VALUE": value}
    if isinstance(value, int) and value not in _INT32:
        return {"TYPE": "LONG", "VALUE": value}
    if isinstance(value, timedelta):
        ticks = round(value.total_seconds() * _TICKS_PER_SECOND)
        descriptor = {"TYPE": "SYMBOL", "VALUE": TIMESPAN_DESCRIPTOR}
        return {"TYPE": "DESCRIBED", "VALUE": (descriptor, {"TYPE": "LONG", "VALUE": ticks})}
    if isinstance(value, datetime) and value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    return value


def envelope_fields(envelope: Envelope) -> MessageFields:
    """The broker-level fields of ``envelope`` that replication and aliasing reason about."""
    return MessageFields(
        message_id=envelope.message_id,
        body_size=len(envelope.body),
        session_id=envelope.session_id,
        partition_key=envelope.partition_key,
        time_to_live=envelope.time_to_live,
        scheduled_enqueue_time_utc=envelope.scheduled_enqueue_time_utc,
        application_properties=envelope.application_properties,
    )


def _build(
    body: bytes,
    fields: MessageFields,
    *,
    content_type: str | None,
    correlation_id: str | None,
    subject: str | None,
    reply_to: str | None,
    to: str | None,
    extra_properties: dict[str, PropertyValue] | None = None,
    reply_to_session_id: str | None = None,
    via_partition_key: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> AmqpAnnotatedMessage:
    """The message as the SDK's ``AmqpAnnotatedMessage``, its sections written the way the
    ``ServiceBusMessage`` setters write them (the same checks, the same values), but without the setters:
    each of them measures the properties section first, which made building a message cost about twice as
    much (``docs/servicebus-sdk.md``). The unit tests hold the two encodings equal."""
    # dict[str | bytes, Any]: typed values such as {"TYPE": "LONG", ...} are what the SDK's encoder reads.
    properties: dict[str | bytes, Any] = {
        name: sdk_property_value(value) for name, value in fields.application_properties.items()
    }
    for name, value in (extra_properties or {}).items():
        properties[name] = sdk_property_value(value)
    if traceparent is not None and not (properties.keys() & TRACE_PROPERTY_NAMES):
        # The SDK's own names and values; a context the application set itself is left as it is.
        properties.update(message_properties(traceparent, tracestate))
    session_id, partition_key = fields.session_id, fields.partition_key
    for name, text in (
        ("session_id", session_id),
        ("message_id", fields.message_id),
        ("partition_key", partition_key),
        ("reply_to_session_id", reply_to_session_id),
    ):
        if text and len(text) > MAX_PROPERTY_LENGTH:
            raise ValueError(f"{name} cannot be longer than {MAX_PROPERTY_LENGTH} characters.")
    if partition_key and session_id is not None and partition_key != session_id:
        raise ValueError(f"partition_key:{partition_key} cannot be set to a different value than session_id")
    message_id = fields.message_id or str(uuid.uuid4())  # as the SDK's scheduled-time setter does
    annotations: dict[str | bytes, Any] = {}  # in the order the setters write them
    if fields.scheduled_enqueue_time_utc is not None:
        annotations[SCHEDULED_ENQUEUE_TIME] = fields.scheduled_enqueue_time_utc
    if partition_key is not None:
        annotations[PARTITION_KEY] = partition_key
    if via_partition_key is not None:
        annotations[VIA_PARTITION_KEY] = via_partition_key
    sections: dict[str, Any] = {
        "message_id": message_id,
        "content_type": content_type,
        "correlation_id": correlation_id,
        "to": to,
        "reply_to": reply_to,
        "reply_to_group_id": reply_to_session_id,
        "subject": subject,
        "group_id": session_id,
    }
    header = None
    if fields.time_to_live is not None:
        header = {"time_to_live": _time_to_live_ms(fields.time_to_live, sections)}
    return AmqpAnnotatedMessage(
        data_body=body,
        header=header,
        properties=sections,
        # The SDK's hints say str keys; its encoder takes the bytes keys its own setters write, too.
        annotations=cast(dict[str, Any], annotations) or None,
        application_properties=cast(dict[str, Any], properties) or None,
    )


PARTITION_KEY = b"x-opt-partition-key"
SCHEDULED_ENQUEUE_TIME = b"x-opt-scheduled-enqueue-time"
VIA_PARTITION_KEY = b"x-opt-via-partition-key"
MAX_PROPERTY_LENGTH = 128  # the SDK's MESSAGE_PROPERTY_MAX_LENGTH
_MAX_DURATION_MS = 2**63 - 1  # an AMQP header TTL this large is one the bridge leaves at the SDK's value
_SDK_MAX_DURATION_MS = 922337203685477  # the SDK's MAX_DURATION_VALUE: a TTL it sends without an expiry
_MAX_EXPIRY_MS = 253402243199000  # the SDK's MAX_ABSOLUTE_EXPIRY_TIME: 9999-12-31 in epoch milliseconds


def _time_to_live_ms(seconds: float, sections: dict[str, Any]) -> int:
    """The header's TTL in milliseconds (the SDK's setter keeps whole seconds; the header carries
    milliseconds, so 90.5 s arrives as 90.5 s), and the creation and expiry times the setter writes with
    it. The SDK writes both again from the header when it encodes the message, except for a TTL of its
    maximum, which it sends as written here."""
    whole = int(timedelta(seconds=seconds).total_seconds()) * 1000  # what the SDK's setter writes
    millis = max(1, round(seconds * 1000))
    ttl = whole if millis >= _MAX_DURATION_MS else millis
    if whole and whole != _SDK_MAX_DURATION_MS:
        created = int(time.time()) * 1000
        sections["creation_time"] = created
        sections["absolute_expiry_time"] = min(_MAX_EXPIRY_MS, created + ttl)
    return ttl


def message_id_of(message: OutgoingMessage) -> str:
    """The MessageId of an outgoing message ("" when it has none)."""
    properties = message.properties
    value = properties.message_id if properties is not None else None
    return value.decode() if isinstance(value, bytes) else str(value or "")


def scheduled_time_of(message: OutgoingMessage) -> datetime | None:
    """The ScheduledEnqueueTimeUtc of an outgoing message, None when it has none."""
    value = (message.annotations or {}).get(SCHEDULED_ENQUEUE_TIME)
    return value if isinstance(value, datetime) else None


def to_message(envelope: Envelope) -> OutgoingMessage:
    """The broker message for a direct send of ``envelope`` to its entity; every field is preserved."""
    return _build(
        envelope.body,
        envelope_fields(envelope),
        content_type=envelope.content_type,
        correlation_id=envelope.correlation_id,
        subject=envelope.subject,
        reply_to=envelope.reply_to,
        to=envelope.to,
        reply_to_session_id=envelope.reply_to_session_id,
        via_partition_key=envelope.via_partition_key,
        traceparent=envelope.traceparent,
        tracestate=envelope.tracestate,
    )


def _type_marks(properties: Mapping[str, PropertyValue]) -> dict[str, str]:
    marks: dict[str, str] = {}
    for name, value in properties.items():
        if isinstance(value, bytes):
            marks[name] = "b"
        elif isinstance(value, datetime):
            marks[name] = "t"
    return marks


def to_backlog_message(
    envelope: Envelope,
    destination: str | None = None,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> BacklogDecision:
    """``envelope`` aliased for a backlog queue, or why it must stay in the outbox for the primary.

    ``destination`` defaults to the envelope's entity. ``max_message_size`` is the backlog queue's limit;
    the type marks this module adds are counted against it as well.
    """
    fields = envelope_fields(envelope)
    target = destination or envelope.entity
    probe = alias_for_backlog(fields, target, max_message_size)
    if not isinstance(probe, Aliased):
        return probe
    marks = _type_marks(probe.fields.application_properties)
    extra: dict[str, PropertyValue] = {}
    extra_bytes = 0
    if marks:
        extra[TYPES_PROPERTY] = json.dumps(marks, separators=(",", ":"), ensure_ascii=False)
        extra_bytes = len(TYPES_PROPERTY) + len(str(extra[TYPES_PROPERTY]).encode()) + 10
    traceparent = envelope.traceparent
    if traceparent is not None and not (probe.fields.application_properties.keys() & TRACE_PROPERTY_NAMES):
        extra.update(message_properties(traceparent, envelope.tracestate))
        extra_bytes += property_bytes(traceparent, envelope.tracestate)
    if probe.size + extra_bytes > max_message_size:
        return TooLargeForBacklog(
            size=probe.size + extra_bytes, limit=max_message_size, added_bytes=probe.added_bytes + extra_bytes
        )
    message = _build(
        envelope.body,
        probe.fields,
        content_type=envelope.content_type,
        correlation_id=envelope.correlation_id,
        subject=envelope.subject,
        reply_to=envelope.reply_to,
        to=envelope.to,
        extra_properties=extra,
        reply_to_session_id=envelope.reply_to_session_id,
        via_partition_key=envelope.via_partition_key,
    )
    return BacklogMessage(message=message, destination=target, size=probe.size + extra_bytes)


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def received_properties(received: ServiceBusReceivedMessage) -> dict[str, PropertyValue]:
    """The received message's application properties with Python types restored (see module docstring).

    ``ValueError`` when the type marks are malformed.
    """
    raw = received.application_properties or {}
    props: dict[str, PropertyValue] = {}
    for key, value in raw.items():
        props[_text(key) or ""] = value
    marks_raw = props.pop(TYPES_PROPERTY, None)
    marks: dict[str, str] = {}
    if marks_raw is not None:
        loaded = json.loads(marks_raw if isinstance(marks_raw, str | bytes) else "")
        if not isinstance(loaded, dict):
            raise ValueError(f"{TYPES_PROPERTY} is not a JSON object")
        marks = {str(k): str(v) for k, v in loaded.items()}
    return {name: _restore_value(value, marks.get(name)) for name, value in props.items()}


def _restore_value(value: object, mark: str | None) -> PropertyValue:
    if getattr(value, "descriptor", None) == TIMESPAN_DESCRIPTOR and isinstance(value, int):
        return timedelta(microseconds=int(value) // 10)
    if mark == "t" and isinstance(value, int) and not isinstance(value, bool):
        return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
    if isinstance(value, bytes):
        if mark == "b":
            return bytes(value)
        return value.decode("utf-8")
    if isinstance(value, bool | int | float | str | uuid.UUID | datetime) or value is None:
        return value
    raise ValueError(f"unsupported application property value type {type(value).__name__}")


def from_backlog_message(received: ServiceBusReceivedMessage, now: float) -> RestoreDecision:
    """The syphon's view of one backlog message at ``now``: restored for its destination, or why not.

    The TTL clock starts at the backlog enqueue time (the original send), so the restored TTL is what is
    left of it; a message with nothing left is ``ExpiredInBacklog``; a message without aliases (or with
    malformed ones, or a body that is not one data section) is ``NotAliased``. Both are dead-lettered by
    the syphon with the decision's ``reason``.
    """
    if received.body_type != AmqpMessageBodyType.DATA:
        return NotAliased(reason=f"not_aliased: body type {received.body_type} is not data")
    body = b"".join(received.body)
    try:
        properties = received_properties(received)
    except (ValueError, UnicodeDecodeError) as exc:
        return NotAliased(reason=f"not_aliased: {exc}")
    message_id = _text(received.message_id) or ""
    fields = MessageFields(message_id=message_id, body_size=len(body), application_properties=properties)
    enqueued = received.enqueued_time_utc
    enqueued_at = enqueued.timestamp() if enqueued is not None else now
    decision = unalias(fields, enqueued_at, now)
    if isinstance(decision, ExpiredInBacklog | NotAliased):
        return decision
    message = _build(
        body,
        decision.fields,
        content_type=_text(received.content_type),
        correlation_id=_text(received.correlation_id),
        subject=_text(received.subject),
        reply_to=_text(received.reply_to),
        to=_text(received.to),
        reply_to_session_id=_text(received.reply_to_session_id),
        via_partition_key=_text((received.raw_amqp_message.annotations or {}).get(VIA_PARTITION_KEY)),
    )
    return RestoredMessage(message=message, destination=decision.destination, fields=decision.fields)


BARRIER_CONTENT_TYPE = "application/vnd.bridge.restore-barrier"
BARRIER_PROPERTY = "x-bridge-barrier"
"""Application property of a restore barrier: ``<shard>:<token>`` (its destination is ``x-ms-path``)."""


def barrier_message(destination: str, shard: int, token: str) -> OutgoingMessage:
    """The restore barrier that shard ``shard`` of ``destination`` sends to a backlog queue.

    Empty; the syphon recognises it by ``x-bridge-barrier`` and never sends it on to the primary
    (``bridge.state.backlog``).
    """
    properties: dict[str, PropertyValue] = {ALIAS_PATH: destination, BARRIER_PROPERTY: f"{shard}:{token}"}
    fields = MessageFields(message_id=f"barrier-{token}", body_size=0, application_properties=properties)
    content_type = BARRIER_CONTENT_TYPE
    return _build(
        b"", fields, content_type=content_type, correlation_id=None, subject=None, reply_to=None, to=None
    )


def barrier_of(received: ServiceBusReceivedMessage) -> Barrier | None:
    """The restore barrier ``received`` is, None for any other message."""
    props = received.application_properties or {}
    raw = props.get(BARRIER_PROPERTY.encode(), props.get(BARRIER_PROPERTY))
    destination = props.get(ALIAS_PATH.encode(), props.get(ALIAS_PATH))
    if raw is None or destination is None:
        return None
    shard, _, token = (_text(raw) or "").partition(":")
    if not shard.isdigit() or not token:
        return None
    return Barrier(_text(destination) or "", int(shard), token)


def deferred_destination(peeked: ServiceBusReceivedMessage) -> str | None:
    """The ``x-ms-path`` of a peeked backlog message that is deferred (a restore barrier's too); None when
    the message is not deferred (``state``, read from ``x-opt-message-state``) or names no destination."""
    if peeked.state != ServiceBusMessageState.DEFERRED:
        return None
    props = peeked.application_properties or {}
    destination = props.get(ALIAS_PATH.encode(), props.get(ALIAS_PATH))
    return (_text(destination) or None) if destination is not None else None


def ping_message(mode: PingMode, session_id: str, now: float) -> OutgoingMessage:
    """The ping for ``mode`` (``bridge.core.paired.ping_message``) as a broker message.

    In ``schedule`` mode the message carries its far-future ScheduledEnqueueTimeUtc; send it with
    ``NamespacePool.schedule_and_cancel`` so it is cancelled at once and never becomes visible.
    """
    ping = core_ping_message(mode, session_id, now)
    fields = MessageFields(
        message_id=f"ping-{uuid.uuid4().hex}",
        session_id=ping.session_id,
        time_to_live=ping.time_to_live,
        scheduled_enqueue_time_utc=ping.scheduled_enqueue_time_utc,
    )
    return _build(
        b"", fields, content_type=ping.content_type, correlation_id=None, subject=None, reply_to=None, to=None
    )
