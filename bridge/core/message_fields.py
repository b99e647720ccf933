"""The broker-level fields of one message that replication and aliasing reason about, and their size.

Paired mode rewrites a message on its way to a backlog queue and back (``aliasing``); the failover logic
needs only these fields, not the body, so they live in a small plain value here rather than in the outbox
``Envelope`` (the worker maps one to the other). ``body_size`` stands in for the body.

``encoded_size`` estimates the AMQP encoding of such a message from above: it uses the larger AMQP
constructors (str32, map32) when in doubt and adds a fixed allowance for the header, the other system
properties and framing. An estimate that is slightly high only moves the "too large" decision a little
earlier; one that is low would let the broker reject a message the bridge thought would fit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType

PropertyValue = str | bool | int | float | bytes | uuid.UUID | datetime | timedelta | None
"""Application property values Service Bus accepts (AMQP simple types)."""

FIXED_OVERHEAD = 256
"""Bytes allowed for the AMQP header, message-id, content type, correlation id, subject and framing."""


def _empty() -> Mapping[str, PropertyValue]:
    return MappingProxyType({})


@dataclass(frozen=True)
class MessageFields:
    """One message's broker-level fields: what Service Bus interprets, plus the application properties.

    ``time_to_live`` is in seconds; ``scheduled_enqueue_time_utc`` is an aware datetime; ``body_size`` is
    the body's encoded size in bytes (an estimate is fine).
    """

    message_id: str
    body_size: int = 0
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live: float | None = None
    scheduled_enqueue_time_utc: datetime | None = None
    application_properties: Mapping[str, PropertyValue] = field(default_factory=_empty, hash=False)

    def __post_init__(self) -> None:
        if self.body_size < 0:
            raise ValueError("body_size must not be negative")
        when = self.scheduled_enqueue_time_utc
        if when is not None and when.utcoffset() is None:
            raise ValueError("scheduled_enqueue_time_utc must be timezone-aware")
        # A read-only copy: callers cannot change a frozen message through a dict they still hold.
        frozen = MappingProxyType(dict(self.application_properties))
        object.__setattr__(self, "application_properties", frozen)


def _text_size(text: str) -> int:
    encoded = len(text.encode("utf-8"))
    return encoded + (2 if encoded <= 255 else 5)


def value_size(value: PropertyValue) -> int:
    """Bytes of one AMQP-encoded value (constructor included)."""
    if value is None:
        return 1
    if isinstance(value, bool):
        return 2  # the SDK writes the boolean constructor and a byte, not AMQP's one-byte true/false
    if isinstance(value, str):
        return _text_size(value)
    if isinstance(value, bytes):
        return len(value) + (2 if len(value) <= 255 else 5)
    if isinstance(value, uuid.UUID):
        return 17
    # int (long), float (double), datetime (timestamp), timedelta (described long): 8 bytes + constructor;
    # a described type adds its descriptor marker and the descriptor (sym8 "com.microsoft:timespan").
    if isinstance(value, timedelta):
        return 1 + 24 + 9
    return 9


def properties_size(properties: Mapping[str, PropertyValue]) -> int:
    """Bytes of an application-properties section holding ``properties`` (map32 constructor)."""
    if not properties:
        return 0
    return 3 + 9 + sum(_text_size(key) + value_size(value) for key, value in properties.items())


def encoded_size(fields: MessageFields) -> int:
    """An upper-bound estimate of the whole encoded message, as the broker's size limit counts it."""
    size = FIXED_OVERHEAD + fields.body_size + 5
    if fields.session_id is not None:
        size += _text_size(fields.session_id)
    if fields.partition_key is not None:
        size += _text_size("x-opt-partition-key") + _text_size(fields.partition_key)
    if fields.time_to_live is not None:
        size += 5
    if fields.scheduled_enqueue_time_utc is not None:
        size += _text_size("x-opt-scheduled-enqueue-time") + 9
    return size + properties_size(fields.application_properties)
