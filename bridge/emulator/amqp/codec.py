"""AMQP 1.0 message sections: split transfers, read the fields the broker needs, build deliveries.

A message stays bytes from the moment it arrives: the broker reads the header, message annotations and
properties (and, for topics, the application properties that filters look at) and keeps the encoded
sections as they came. At delivery the header and message-annotations sections are re-encoded with the
broker's values (sequence number, enqueued time, lock, delivery count) and the other sections are copied
byte-for-byte, so the body a receiver gets is exactly the body that was sent.

The SDK sends a list or a ``ServiceBusMessageBatch`` as one transfer with message format 0x80013700 whose
Data sections each hold one encoded message. The Python binding of proton does not expose the message
format, so ``split_transfer`` recognises a batch by its shape: every body section is a Data section that
itself parses completely as message sections.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from proton import Data, Described, Message, symbol, timestamp, ubyte, uint, ulong

HEADER, DELIVERY_ANN, MESSAGE_ANN, PROPERTIES, APP_PROPS, DATA, SEQUENCE, VALUE, FOOTER = range(0x70, 0x79)
_BODY = (DATA, SEQUENCE, VALUE)

# Broker annotations the SDK reads back (azure/servicebus/_common/constants.py).
SEQUENCE_NUMBER = symbol("x-opt-sequence-number")
ENQUEUED_TIME = symbol("x-opt-enqueued-time")
LOCKED_UNTIL = symbol("x-opt-locked-until")
SCHEDULED_TIME = symbol("x-opt-scheduled-enqueue-time")
PARTITION_KEY = symbol("x-opt-partition-key")
DEADLETTER_SOURCE = symbol("x-opt-deadletter-source")
ENQUEUE_SEQUENCE = symbol("x-opt-enqueue-sequence-number")
LOCK_TOKEN = symbol("x-opt-lock-token")
MESSAGE_STATE = symbol("x-opt-message-state")
"""0 active, 1 deferred, 2 scheduled: what the SDK's ``ServiceBusReceivedMessage.state`` reads (a peek shows
deferred and scheduled messages too, docs/servicebus-sdk.md)."""

_SYSTEM_PROPERTY_INDEX = {
    0: "sys.MessageId",
    2: "sys.To",
    3: "sys.Label",
    4: "sys.ReplyTo",
    5: "sys.CorrelationId",
    6: "sys.ContentType",
    10: "sys.SessionId",
    12: "sys.ReplyToSessionId",
}


class MalformedMessageError(ValueError):
    """Bytes that are not AMQP message sections."""


def split_sections(raw: bytes) -> list[tuple[int, bytes]]:
    """``[(section code, encoded section)]`` in order; raises MalformedMessageError."""
    out: list[tuple[int, bytes]] = []
    data = Data()
    pos = 0
    view = memoryview(raw)
    while pos < len(raw):
        if raw[pos] != 0x00 or pos + 2 >= len(raw) or raw[pos + 1] != 0x53:
            raise MalformedMessageError("not an AMQP message section")
        code = raw[pos + 2]
        if not HEADER <= code <= FOOTER:
            raise MalformedMessageError(f"unknown section descriptor 0x{code:x}")
        data.clear()
        try:
            used = data.decode(bytes(view[pos:]))
        except Exception as exc:  # proton raises its own DataException family
            raise MalformedMessageError(str(exc)) from None
        if used <= 0:
            raise MalformedMessageError("empty section")
        out.append((code, bytes(view[pos : pos + used])))
        pos += used
    return out


def _value(section: bytes) -> Any:
    data = Data()
    data.decode(section)
    data.rewind()
    data.next()
    obj = data.get_object()
    return _owned(obj.value if isinstance(obj, Described) else obj)


def _owned(value: Any) -> Any:
    """``value`` with every binary copied out: proton hands binaries out as memoryviews into the Data
    object's buffer, which dies with it (a binary message-id in the properties list, a binary map value)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [_owned(v) for v in value]
    if isinstance(value, dict):
        return {k: _owned(v) for k, v in value.items()}
    return value


def _encode(code: int, value: Any) -> bytes:
    data = Data()
    data.put_object(Described(ulong(code), value))
    return bytes(data.encode())


def split_transfer(raw: bytes) -> list[list[tuple[int, bytes]]]:
    """The messages of one transfer: one for a plain message, several for an SDK batch envelope."""
    outer = split_sections(raw)
    bodies = [s for code, s in outer if code in _BODY]
    if bodies and all(code not in (SEQUENCE, VALUE) for code, _ in outer):
        try:
            inner = [split_sections(_data_payload(s)) for s in bodies]
        except MalformedMessageError:
            return [outer]
        if all(any(code in _BODY for code, _ in msg) for msg in inner):
            return inner
    return [outer]


def application_properties(message: Message) -> dict[Any, Any]:
    """The application properties of a decoded request message (CBS, management), ``{}`` if none."""
    # proton's Message sets ``properties = None`` in ``__init__``, so its inferred type is just None.
    return cast("dict[Any, Any] | None", message.properties) or {}


def _data_payload(section: bytes) -> bytes:
    value = _value(section)
    if not isinstance(value, bytes | bytearray | memoryview):
        raise MalformedMessageError("data section without binary")
    return bytes(value)


@dataclass(slots=True)
class ParsedMessage:
    """What the broker reads from a message's sections."""

    sections: list[tuple[int, bytes]]
    message_id: str | None
    session_id: str | None
    partition_key: str | None
    time_to_live: float | None
    scheduled_at: float | None
    properties: dict[str, Any] | None

    @property
    def raw(self) -> bytes:
        """The message as stored: every section as received."""
        return b"".join(s for _, s in self.sections)


def parse_message(sections: list[tuple[int, bytes]], with_properties: bool) -> ParsedMessage:
    """Read ids, TTL, schedule and partition key; ``with_properties`` adds what filters need.

    A message without a message-id gets one (``with_message_id``), as Service Bus assigns one.
    """
    sections = with_message_id(sections)
    header: list[Any] = []
    annotations: Mapping[Any, Any] = {}
    props: list[Any] = []
    app: Mapping[Any, Any] = {}
    for code, section in sections:
        if code == HEADER:
            header = list(_value(section) or [])
        elif code == MESSAGE_ANN:
            annotations = _value(section) or {}
        elif code == PROPERTIES:
            props = list(_value(section) or [])
        elif code == APP_PROPS and with_properties:
            app = _value(section) or {}
    ttl_ms = header[2] if len(header) > 2 else None
    scheduled = annotations.get(SCHEDULED_TIME)
    partition_key = annotations.get(PARTITION_KEY)
    filter_props: dict[str, Any] | None = None
    if with_properties:
        filter_props = {str(k): _plain(v) for k, v in app.items()}
        for index, name in _SYSTEM_PROPERTY_INDEX.items():
            if len(props) > index and props[index] is not None:
                filter_props[name] = _plain(props[index])
    return ParsedMessage(
        sections=sections,
        message_id=_text(props[0]) if props else None,
        session_id=_text(props[10]) if len(props) > 10 else None,
        partition_key=_text(partition_key),
        time_to_live=ttl_ms / 1000.0 if ttl_ms else None,
        scheduled_at=epoch_seconds(scheduled),
        properties=filter_props,
    )


_LIST0, _LIST8, _LIST32, _NULL = 0x45, 0xC0, 0xD0, 0x40


def with_message_id(sections: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """``sections`` with a message-id in the properties where it had none: a GUID as 32 hex digits.

    Only the properties section changes, and only its first field (a null, or a section made for a
    message that had none): the other fields keep their encoded bytes and types.
    """
    index = next((i for i, (code, _) in enumerate(sections) if code == PROPERTIES), None)
    field = Data()
    field.put_string(uuid.uuid4().hex)
    new_id = bytes(field.encode())
    if index is None:
        at = next((i for i, (code, _) in enumerate(sections) if code > PROPERTIES), len(sections))
        return [*sections[:at], (PROPERTIES, _properties(1, new_id)), *sections[at:]]
    body = sections[index][1][3:]  # after the descriptor 0x00 0x53 0x73
    if body[0] == _LIST0:
        count, items = 0, b""
    elif body[0] == _LIST8:
        count, items = body[2], body[3 : 2 + body[1]]
    elif body[0] == _LIST32:
        count, items = int.from_bytes(body[5:9]), body[9 : 5 + int.from_bytes(body[1:5])]
    else:
        raise MalformedMessageError("the properties section is not a list")
    if count and items[0] != _NULL:
        return sections
    items = new_id + items[1:] if count else new_id
    out = list(sections)
    out[index] = (PROPERTIES, _properties(max(count, 1), items))
    return out


def _properties(count: int, items: bytes) -> bytes:
    """A properties section holding ``count`` encoded fields."""
    if len(items) < 255 and count < 256:
        return bytes([0x00, 0x53, PROPERTIES, _LIST8, len(items) + 1, count]) + items
    size = (len(items) + 4).to_bytes(4)
    return bytes([0x00, 0x53, PROPERTIES, _LIST32]) + size + count.to_bytes(4) + items


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, int):  # proton's ulong prints as "ulong(5)"
        return str(int(value))
    return str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, symbol):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def epoch_seconds(value: Any) -> float | None:
    """An AMQP timestamp (milliseconds, or a datetime) as epoch seconds; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) / 1000.0


def ts(seconds: float) -> timestamp:
    """An AMQP timestamp (milliseconds) for epoch seconds."""
    return timestamp(int(seconds * 1000))


@dataclass(slots=True)
class BrokerStamp:
    """What the broker adds to a message it hands out."""

    sequence_number: int
    enqueued_at: float
    delivery_count: int
    locked_until: float | None = None
    scheduled_at: float | None = None
    time_to_live: float | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    dead_letter_source: str | None = None
    state: int = 0
    """``MESSAGE_STATE``: 0 active, 1 deferred, 2 scheduled."""


def stamp_message(raw: bytes, stamp: BrokerStamp) -> bytes:
    """The stored message with a fresh header and broker annotations; other sections byte-for-byte."""
    sections = split_sections(raw)
    header: list[Any] = [None, None, None, None, None]
    annotations: dict[Any, Any] = {}
    app_section: bytes | None = None
    rest_before: list[bytes] = []
    rest_after: list[bytes] = []
    for code, section in sections:
        if code == HEADER:
            header = (list(_value(section) or []) + [None] * 5)[:5]
        elif code == MESSAGE_ANN:
            annotations = dict(_value(section) or {})
        elif code == DELIVERY_ANN:
            continue
        elif code == APP_PROPS:
            app_section = section
        elif code == PROPERTIES:
            rest_before.append(section)
        else:
            rest_after.append(section)
    header[4] = uint(stamp.delivery_count)
    if stamp.time_to_live is not None:  # the effective TTL: an entity default caps or fills it in
        header[2] = uint(min(int(stamp.time_to_live * 1000), 2**32 - 1))
    elif header[2] is not None:
        header[2] = uint(int(header[2]))
    if header[1] is not None:
        header[1] = ubyte(int(header[1]))
    annotations[SEQUENCE_NUMBER] = int(stamp.sequence_number)
    annotations[ENQUEUED_TIME] = ts(stamp.enqueued_at)
    annotations[MESSAGE_STATE] = int(stamp.state)
    if stamp.locked_until is not None:
        annotations[LOCKED_UNTIL] = ts(stamp.locked_until)
    if stamp.scheduled_at is not None:
        annotations[SCHEDULED_TIME] = ts(stamp.scheduled_at)
    if stamp.dead_letter_source is not None:
        annotations[DEADLETTER_SOURCE] = stamp.dead_letter_source
    if stamp.dead_letter_reason is not None or stamp.dead_letter_description is not None:
        app = dict(_value(app_section) or {}) if app_section is not None else {}
        if stamp.dead_letter_reason is not None:
            app["DeadLetterReason"] = stamp.dead_letter_reason
        if stamp.dead_letter_description is not None:
            app["DeadLetterErrorDescription"] = stamp.dead_letter_description
        app_section = _encode(APP_PROPS, app)
    parts = [_encode(HEADER, header), _encode(MESSAGE_ANN, annotations), *rest_before]
    if app_section is not None:
        parts.append(app_section)
    parts.extend(rest_after)
    return b"".join(parts)


def with_application_properties(raw: bytes, updates: Mapping[str, Any], removed: set[str]) -> bytes:
    """``raw`` with its application properties changed (a rule action); every other section as it was.

    A message without application properties gets the section, placed where AMQP wants it: after the
    header, annotations and properties, before the body.
    """
    sections = split_sections(raw)
    index = next((i for i, (code, _) in enumerate(sections) if code == APP_PROPS), None)
    current: dict[Any, Any] = dict(_value(sections[index][1]) or {}) if index is not None else {}
    for name in removed:
        current.pop(name, None)
    current.update(updates)
    encoded = (APP_PROPS, _encode(APP_PROPS, current))
    if index is not None:
        sections[index] = encoded
    else:
        at = next((i for i, (code, _) in enumerate(sections) if code > APP_PROPS), len(sections))
        sections.insert(at, encoded)
    return b"".join(section for _, section in sections)
