"""Property aliasing for backlog queues (paired mode, ``docs/paired.md``) and its inverse for the syphon.

A backlog queue holds messages for many entities and is neither session-enabled nor partitioned, so the
broker-level fields that would change how Service Bus treats the message move into application properties
and the broker message carries none of them:

==========================  ==================================  ==========================================
broker field                application property                value
==========================  ==================================  ==========================================
SessionId                   ``x-ms-sessionid``                  str
TimeToLive                  ``x-ms-timetolive``                 float, seconds
ScheduledEnqueueTimeUtc     ``x-ms-scheduledenqueuetimeutc``    aware UTC datetime (AMQP timestamp, ms)
PartitionKey                ``x-ms-partitionkey``               str
(destination entity)        ``x-ms-path``                       str
==========================  ==================================  ==========================================

The names are the .NET SDK's aliasing constants (``docs/references.md``); ScheduledEnqueueTimeUtc
has its own, ``x-ms-scheduledenqueuetimeutc``, and never shares ``x-ms-path`` with the destination. Body,
MessageId and every other application property are untouched.

Size: aliasing adds bytes (the property names, the path). ``alias_for_backlog`` estimates the aliased size
and answers ``TooLargeForBacklog`` when it would exceed the backlog entity's limit. The caller keeps such a
message in the outbox and retries it on the primary, where it fits un-aliased; for a keyed shard that also
holds the later messages of the key, which keeps their order. It is never dropped and never dead-lettered
just for being near the limit. ``ReservedPropertyConflict`` (the application already uses an ``x-ms-``
alias name) is handled the same way, because aliasing it would overwrite the application's value.

The syphon's inverse restores the fields with the *remaining* TTL: the TTL clock of the original message
starts at its enqueue time (the scheduled time for a scheduled message), so the restored TTL is what is
left of it at ``now``; a message with nothing left is ``ExpiredInBacklog`` and the syphon dead-letters it
in the backlog with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

from bridge.core.message_fields import MessageFields, PropertyValue, encoded_size

ALIAS_SESSION_ID = "x-ms-sessionid"
ALIAS_TIME_TO_LIVE = "x-ms-timetolive"
ALIAS_SCHEDULED_ENQUEUE_TIME = "x-ms-scheduledenqueuetimeutc"
ALIAS_PARTITION_KEY = "x-ms-partitionkey"
ALIAS_PATH = "x-ms-path"
ALIAS_NAMES: frozenset[str] = frozenset(
    {ALIAS_SESSION_ID, ALIAS_TIME_TO_LIVE, ALIAS_SCHEDULED_ENQUEUE_TIME, ALIAS_PARTITION_KEY, ALIAS_PATH}
)
MIN_REMAINING_TTL = 0.001
"""Service Bus counts TTL in milliseconds; less than one left means expired."""


@dataclass(frozen=True)
class Aliased:
    """The message as it goes to the backlog queue; ``size`` is its estimated encoded size."""

    fields: MessageFields
    destination: str
    added_bytes: int
    size: int


@dataclass(frozen=True)
class TooLargeForBacklog:
    """Aliasing would push the message past the backlog entity's limit: keep it for the primary."""

    size: int
    limit: int
    added_bytes: int

    @property
    def reason(self) -> str:
        """A journal/status reason."""
        return (
            f"too_large_for_backlog: {self.size} bytes after aliasing (+{self.added_bytes}) "
            f"exceeds {self.limit}"
        )


@dataclass(frozen=True)
class ReservedPropertyConflict:
    """The application already set alias property names; aliasing would overwrite them."""

    names: tuple[str, ...]

    @property
    def reason(self) -> str:
        """A journal/status reason."""
        return f"reserved_property: application properties use {', '.join(self.names)}"


AliasDecision: TypeAlias = Aliased | TooLargeForBacklog | ReservedPropertyConflict


def alias_properties(fields: MessageFields, destination: str) -> MessageFields:
    """The pure mapping: broker fields moved into alias properties, plus ``x-ms-path``.

    ``ValueError`` if an application property already uses an alias name (``alias_for_backlog`` turns that
    into a decision instead).
    """
    clash = sorted(ALIAS_NAMES.intersection(fields.application_properties))
    if clash:
        raise ValueError(f"application properties already use {clash}")
    properties: dict[str, PropertyValue] = dict(fields.application_properties)
    properties[ALIAS_PATH] = destination
    if fields.session_id is not None:
        properties[ALIAS_SESSION_ID] = fields.session_id
    if fields.time_to_live is not None:
        properties[ALIAS_TIME_TO_LIVE] = float(fields.time_to_live)
    if fields.scheduled_enqueue_time_utc is not None:
        properties[ALIAS_SCHEDULED_ENQUEUE_TIME] = fields.scheduled_enqueue_time_utc.astimezone(UTC)
    if fields.partition_key is not None:
        properties[ALIAS_PARTITION_KEY] = fields.partition_key
    return MessageFields(
        message_id=fields.message_id,
        body_size=fields.body_size,
        application_properties=properties,
    )


def alias_for_backlog(fields: MessageFields, destination: str, max_message_size: int) -> AliasDecision:
    """Alias ``fields`` for a backlog queue whose size limit is ``max_message_size`` bytes, or say why not."""
    clash = tuple(sorted(ALIAS_NAMES.intersection(fields.application_properties)))
    if clash:
        return ReservedPropertyConflict(clash)
    aliased = alias_properties(fields, destination)
    size = encoded_size(aliased)
    added = size - encoded_size(fields)
    if size > max_message_size:
        return TooLargeForBacklog(size=size, limit=max_message_size, added_bytes=added)
    return Aliased(fields=aliased, destination=destination, added_bytes=added, size=size)


@dataclass(frozen=True)
class Restored:
    """A backlog message restored for ``destination``; ``fields.time_to_live`` is the remaining TTL."""

    fields: MessageFields
    destination: str


@dataclass(frozen=True)
class ExpiredInBacklog:
    """The message's TTL ran out while it waited in the backlog: dead-letter it there with ``reason``."""

    destination: str
    expired_at: float

    @property
    def reason(self) -> str:
        """The dead-letter reason."""
        return f"expired_in_backlog: TTL ended at {self.expired_at:.3f} before delivery to {self.destination}"


@dataclass(frozen=True)
class NotAliased:
    """The backlog message lacks ``x-ms-path`` or has malformed aliases: dead-letter it with ``reason``."""

    reason: str


UnaliasDecision: TypeAlias = Restored | ExpiredInBacklog | NotAliased


def _as_seconds(value: PropertyValue) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{ALIAS_TIME_TO_LIVE} is not a number of seconds")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    raise ValueError(f"{ALIAS_TIME_TO_LIVE} is not a number of seconds")


def _as_datetime(value: PropertyValue) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise ValueError(f"{ALIAS_SCHEDULED_ENQUEUE_TIME} is not a timestamp")
    # AMQP timestamps decode naive in some clients; they are UTC by definition.
    return value if value.utcoffset() is not None else value.replace(tzinfo=UTC)


def _as_text(name: str, value: PropertyValue) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} is not a string")
    return value


def restore_properties(fields: MessageFields) -> tuple[MessageFields, str]:
    """The exact inverse of ``alias_properties``: ``(original fields, destination)``; TTL not adjusted.

    ``ValueError`` when ``x-ms-path`` is missing or an alias has the wrong type.
    """
    properties = dict(fields.application_properties)
    if ALIAS_PATH not in properties:
        raise ValueError(f"no {ALIAS_PATH} property: not an aliased backlog message")
    destination = _as_text(ALIAS_PATH, properties.pop(ALIAS_PATH))
    if not destination:
        raise ValueError(f"{ALIAS_PATH} is empty")
    session_id = properties.pop(ALIAS_SESSION_ID, None)
    partition_key = properties.pop(ALIAS_PARTITION_KEY, None)
    ttl = properties.pop(ALIAS_TIME_TO_LIVE, None)
    scheduled = properties.pop(ALIAS_SCHEDULED_ENQUEUE_TIME, None)
    restored = MessageFields(
        message_id=fields.message_id,
        body_size=fields.body_size,
        session_id=None if session_id is None else _as_text(ALIAS_SESSION_ID, session_id),
        partition_key=None if partition_key is None else _as_text(ALIAS_PARTITION_KEY, partition_key),
        time_to_live=None if ttl is None else _as_seconds(ttl),
        scheduled_enqueue_time_utc=None if scheduled is None else _as_datetime(scheduled),
        application_properties=properties,
    )
    return restored, destination


def remaining_time_to_live(
    time_to_live: float, enqueued_at: float, scheduled_at: float | None, now: float
) -> float:
    """What is left of a TTL at ``now``; its clock starts at enqueue, or at the scheduled time if later."""
    start = enqueued_at if scheduled_at is None else max(enqueued_at, scheduled_at)
    return time_to_live - max(0.0, now - start)


def unalias(fields: MessageFields, enqueued_at: float, now: float) -> UnaliasDecision:
    """The syphon's decision for one backlog message received at ``now``.

    ``enqueued_at`` (epoch seconds) is when the message entered the backlog queue, i.e. when the original
    send happened. Returns ``Restored`` with the remaining TTL, ``ExpiredInBacklog`` or ``NotAliased``.
    """
    try:
        restored, destination = restore_properties(fields)
    except ValueError as exc:
        return NotAliased(reason=f"not_aliased: {exc}")
    if restored.time_to_live is None:
        return Restored(fields=restored, destination=destination)
    when = restored.scheduled_enqueue_time_utc
    scheduled_at = None if when is None else when.timestamp()
    remaining = remaining_time_to_live(restored.time_to_live, enqueued_at, scheduled_at, now)
    if remaining < MIN_REMAINING_TTL:
        start = enqueued_at if scheduled_at is None else max(enqueued_at, scheduled_at)
        return ExpiredInBacklog(destination=destination, expired_at=start + restored.time_to_live)
    return Restored(fields=replace(restored, time_to_live=remaining), destination=destination)
