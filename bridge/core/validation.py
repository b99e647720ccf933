"""The one set of ingress rules, shared by every door (HTTP, ``Producer``, the Redis ingress stream).

A message that breaks a rule raises ``InvalidMessageError`` with a stable ``code`` (the table below), the
``field`` at fault and, in a batch, its ``index``; nothing is stored. The rules are Service Bus's own, applied
before the message is acknowledged so that a message the bridge accepted is one Service Bus will accept.

==================================  ==========================================================================
code                                rule
==================================  ==========================================================================
entity_name_empty / _too_long       entity path is 1..260 characters
entity_name_invalid                 letters, digits, ``. - _ /``; starts and ends with a letter or digit; no
                                    empty, ``.`` or ``..`` segment (nothing that could escape a key or a path)
entity_name_reserved                ``bridge``: the hash tag ``{bridge}`` holds the totals over all entities
entity_not_sendable                 a subscription path (``topic/Subscriptions/name``) cannot be sent to
unknown_field                       a property name the envelope does not have
invalid_type                        a property of the wrong type (e.g. a number for ``message_id``)
invalid_utf8                        text that has no UTF-8 form (a lone surrogate, e.g. JSON ``"\\ud800"``)
message_id_empty / _too_long        MessageId is 1..128 characters
session_id_too_long                 SessionId is at most 128 characters (as are ReplyToSessionId and
                                    ViaPartitionKey: ``reply_to_session_id_too_long``, ...)
partition_key_too_long              PartitionKey is at most 128 characters
session_partition_mismatch          SessionId and PartitionKey both set and different (InvalidOperation)
session_id_required                 the entity requires sessions and SessionId is missing
time_to_live_not_positive           TimeToLive must be > 0
time_to_live_invalid                TimeToLive is not a finite number of seconds within TimeSpan.MaxValue
scheduled_enqueue_time_invalid      ScheduledEnqueueTimeUtc is not ISO-8601
scheduled_enqueue_time_naive        ScheduledEnqueueTimeUtc has no UTC offset
application_property_name_invalid   property names are non-empty strings
application_property_type           values: str, bool, int, float, bytes, UUID, aware datetime, timedelta
application_property_out_of_range   integers fit a signed or unsigned 64-bit AMQP integer
application_property_invalid        floats are finite, datetimes carry an offset
headers_too_large                   properties (system and application) exceed 64 KB, Service Bus's limit
body_too_large                      body exceeds the entity's maximum message size (``MessageTooLargeError``)
message_too_large                   body plus properties exceed it (``MessageTooLargeError``)
batch_empty / batch_too_large       a batch holds 1..max messages
transaction_partition_keys          a transactional batch spans more than one partition key
==================================  ==========================================================================
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.core.envelope import Envelope, PropertyValue
from bridge.core.trace_context import within
from bridge.errors import InvalidMessageError, MessageTooLargeError

MAX_ENTITY_LENGTH = 260
MAX_ID_LENGTH = 128
MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 256 * 1024
"""Service Bus Standard tier's largest message (Premium entities allow more): the default per-entity limit
and the backlog queues' limit. The one definition on the bridge's side (the emulator models Azure's own)."""
MAX_TIME_TO_LIVE = timedelta.max.total_seconds()
_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1

# Used with ``fullmatch``: ``$`` would also match before a trailing newline. No ``//`` by construction.
_ENTITY = re.compile(r"[A-Za-z0-9](?:(?:[A-Za-z0-9._-]|/[A-Za-z0-9._-])*/?[A-Za-z0-9])?")
ENTITY_PATTERN = f"^{_ENTITY.pattern}$"
"""The entity path rule as a JSON Schema ``pattern`` (ECMA-262: ``$`` is the end of the text)."""
RESERVED_ENTITIES = frozenset(("bridge",))
"""Names whose keys ``bridge:{<name>}:...`` would be the shared records under the ``{bridge}`` tag
(``bridge.redis.keys``): an entity ``bridge`` would count its messages into the totals twice."""

TEXT_FIELDS = ("content_type", "correlation_id", "subject", "reply_to", "to")
ID_FIELDS = ("reply_to_session_id", "via_partition_key")
"""Text fields limited to ``MAX_ID_LENGTH`` like SessionId and PartitionKey (``<field>_too_long``)."""
ENVELOPE_FIELDS = frozenset(
    (
        "message_id",
        "session_id",
        "partition_key",
        "time_to_live",
        "scheduled_enqueue_time_utc",
        "application_properties",
        *TEXT_FIELDS,
        *ID_FIELDS,
    )
)


TRACE_FIELDS = frozenset(("traceparent", "tracestate"))
"""The creation context (``bridge.core.trace_context``): accepted from the ``Producer`` and the Redis door as
fields, from HTTP as headers; not ``/v1`` JSON fields. Malformed values are dropped, never refused."""


@dataclass(frozen=True, slots=True)
class EntityRules:
    """What the rules need to know about the destination entity (from its settings)."""

    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    requires_session: bool = False
    requires_duplicate_detection: bool = False


def validate_entity(entity: str) -> None:
    """Raise ``InvalidMessageError`` unless ``entity`` is a queue or topic path Service Bus accepts."""
    if not isinstance(entity, str) or not entity:
        raise InvalidMessageError("entity_name_empty", "entity path is empty", field="entity")
    if len(entity) > MAX_ENTITY_LENGTH:
        raise InvalidMessageError(
            "entity_name_too_long", f"entity path is longer than {MAX_ENTITY_LENGTH} characters", "entity"
        )
    segments = entity.split("/")
    if not _ENTITY.fullmatch(entity) or "." in segments or ".." in segments:
        raise InvalidMessageError(
            "entity_name_invalid",
            "entity path may hold letters, digits, '.', '-', '_' and '/', must start and end with a "
            "letter or digit, and has no '.' or '..' segment",
            field="entity",
        )
    if entity in RESERVED_ENTITIES:
        raise InvalidMessageError(
            "entity_name_reserved", f"entity path {entity!r} is reserved by the bridge", field="entity"
        )
    if len(segments) >= 2 and segments[-2].lower() == "subscriptions":
        raise InvalidMessageError("entity_not_sendable", "cannot send to a subscription", field="entity")


def build_envelope(
    entity: str,
    body: bytes,
    props: Mapping[str, Any],
    *,
    rules: EntityRules,
    now: float,
    new_id: Callable[[], str],
    index: int | None = None,
) -> Envelope:
    """Check one message against every rule and return its ``Envelope``.

    ``props`` uses the envelope's public field names (``ENVELOPE_FIELDS``) with typed values: strings,
    ``time_to_live`` as seconds (int/float) or a ``timedelta``, ``scheduled_enqueue_time_utc`` as an aware
    ``datetime`` or ISO-8601 text. ``None`` means absent. ``new_id`` supplies a MessageId when none is given
    and ``now`` becomes ``accepted_at``; the caller owns both, so this function stays deterministic.
    """
    if len(body) > rules.max_message_size:
        raise MessageTooLargeError(
            "body_too_large",
            f"body is {len(body)} bytes; the entity accepts at most {rules.max_message_size}",
            field="body",
            index=index,
        )
    values: dict[str, Any] = {}
    header_bytes = 0
    for name, value in props.items():
        if value is None:
            continue
        if name not in ENVELOPE_FIELDS:
            if name not in TRACE_FIELDS:
                raise InvalidMessageError("unknown_field", f"unknown field {name!r}", field=name, index=index)
            if type(value) is not str:
                raise InvalidMessageError("invalid_type", f"{name} must be a string", field=name, index=index)
            values[name] = value
            continue
        if name == "time_to_live":
            values[name] = _time_to_live(value, index)
        elif name == "scheduled_enqueue_time_utc":
            values[name] = scheduled_time(value, index)
        elif name == "application_properties":
            values[name], size = _application_properties(value, index)
            header_bytes += size
        else:
            if type(value) is not str:
                raise InvalidMessageError("invalid_type", f"{name} must be a string", field=name, index=index)
            check_text(value, name, index)
            values[name] = value
            header_bytes += len(value)
    message_id = values.get("message_id")
    if message_id is None:
        message_id = values["message_id"] = new_id()
    elif not message_id:
        raise InvalidMessageError("message_id_empty", "message_id is empty", field="message_id", index=index)
    _check_ids(values, message_id, rules, index)
    if header_bytes > MAX_HEADER_BYTES:
        raise InvalidMessageError(
            "headers_too_large",
            f"properties take {header_bytes} bytes; Service Bus allows {MAX_HEADER_BYTES}",
            index=index,
        )
    if len(body) + header_bytes > rules.max_message_size:
        raise MessageTooLargeError(
            "message_too_large",
            f"body and properties take {len(body) + header_bytes} bytes; the entity accepts at most "
            f"{rules.max_message_size}",
            index=index,
        )
    if "traceparent" in values or "tracestate" in values:  # kept while it fits (trace_context.within)
        room = min(MAX_HEADER_BYTES, rules.max_message_size - len(body)) - header_bytes
        values.update(within(values.pop("traceparent", None), values.pop("tracestate", None), room))
    return Envelope(entity=entity, body=body, accepted_at=now, **values)


def _check_ids(values: dict[str, Any], message_id: str, rules: EntityRules, index: int | None) -> None:
    if len(message_id) > MAX_ID_LENGTH:
        raise InvalidMessageError(
            "message_id_too_long",
            f"message_id is longer than {MAX_ID_LENGTH}",
            field="message_id",
            index=index,
        )
    session_id = values.get("session_id")
    partition_key = values.get("partition_key")
    if session_id is not None and len(session_id) > MAX_ID_LENGTH:
        raise InvalidMessageError(
            "session_id_too_long",
            f"session_id is longer than {MAX_ID_LENGTH}",
            field="session_id",
            index=index,
        )
    if partition_key is not None and len(partition_key) > MAX_ID_LENGTH:
        raise InvalidMessageError(
            "partition_key_too_long",
            f"partition_key is longer than {MAX_ID_LENGTH}",
            field="partition_key",
            index=index,
        )
    for name in ID_FIELDS:
        value = values.get(name)
        if value is not None and len(value) > MAX_ID_LENGTH:
            raise InvalidMessageError(
                f"{name}_too_long", f"{name} is longer than {MAX_ID_LENGTH}", field=name, index=index
            )
    if session_id is not None and partition_key is not None and session_id != partition_key:
        raise InvalidMessageError(
            "session_partition_mismatch",
            "InvalidOperation: partition_key must equal session_id when both are set",
            field="partition_key",
            index=index,
        )
    if rules.requires_session and session_id is None:
        raise InvalidMessageError(
            "session_id_required", "the entity requires sessions; session_id is missing", "session_id", index
        )


def check_text(value: str, field: str, index: int | None = None) -> None:
    """Refuse text without a UTF-8 form (a lone surrogate, which JSON's ``\\ud800`` escape can carry).

    Such text would fail later, when the outbox encodes it; refused here it is the caller's 400/422, not
    a server error. ASCII (``isascii`` is O(1)) needs no check.
    """
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidMessageError(
                "invalid_utf8", f"{field} holds a lone surrogate, which has no UTF-8 form", field, index
            ) from None


def _time_to_live(value: object, index: int | None) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an integer beyond any float (JSON allows any number of digits)
            seconds = math.inf
    else:
        raise InvalidMessageError(
            "invalid_type", "time_to_live must be a number of seconds", field="time_to_live", index=index
        )
    if not math.isfinite(seconds) or seconds > MAX_TIME_TO_LIVE:
        raise InvalidMessageError(
            "time_to_live_invalid", "time_to_live is not a finite duration", field="time_to_live", index=index
        )
    if seconds <= 0:
        raise InvalidMessageError(
            "time_to_live_not_positive",
            "time_to_live must be greater than 0",
            field="time_to_live",
            index=index,
        )
    return seconds


def scheduled_time(value: object, index: int | None = None) -> datetime:
    """An aware UTC ``datetime`` from an aware ``datetime`` or ISO-8601 text with an offset (``Z`` is UTC)."""
    field = "scheduled_enqueue_time_utc"
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidMessageError(
                "scheduled_enqueue_time_invalid", f"{field} is not ISO-8601", field=field, index=index
            ) from None
    elif isinstance(value, datetime):
        moment = value
    else:
        raise InvalidMessageError("invalid_type", f"{field} must be ISO-8601 text", field=field, index=index)
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidMessageError(
            "scheduled_enqueue_time_naive", f"{field} needs a UTC offset (e.g. 'Z')", field=field, index=index
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before the first UTC datetime
        raise InvalidMessageError(
            "scheduled_enqueue_time_invalid", f"{field} is out of range in UTC", field=field, index=index
        ) from None


def _application_properties(value: object, index: int | None) -> tuple[dict[str, PropertyValue], int]:
    if not isinstance(value, Mapping):
        raise InvalidMessageError(
            "invalid_type", "application_properties must be an object", "application_properties", index
        )
    size = 0
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise InvalidMessageError(
                "application_property_name_invalid",
                "application property names must be non-empty strings",
                field="application_properties",
                index=index,
            )
        check_text(name, "application_properties", index)
        size += len(name) + _property_size(name, item, index)
    return dict(value), size


def _property_size(name: str, value: object, index: int | None) -> int:
    """Check one application property value; return its approximate encoded size."""
    field = f"application_properties.{name}"
    kind = type(value)
    if kind is str and isinstance(value, str):
        check_text(value, field, index)
        return len(value)
    if kind is bool:
        return 1
    if kind is int:
        if not _INT_MIN <= value <= _UINT_MAX:  # type: ignore[operator]
            raise InvalidMessageError(
                "application_property_out_of_range", f"{field} does not fit a 64-bit integer", field, index
            )
        return 8
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise InvalidMessageError("application_property_invalid", f"{field} is not finite", field, index)
        return 8
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidMessageError("application_property_invalid", f"{field} has no offset", field, index)
        return 8
    if isinstance(value, uuid.UUID | timedelta):
        return 16
    raise InvalidMessageError(
        "application_property_type",
        f"{field} has type {kind.__name__}; Service Bus accepts string, boolean, integer, number, bytes, "
        "UUID, timestamp and duration values",
        field,
        index,
    )


def check_batch(envelopes: Sequence[Envelope], *, transactional: bool, max_messages: int) -> None:
    """Rules on a batch as a whole (each envelope was built with ``build_envelope`` already)."""
    if not envelopes:
        raise InvalidMessageError("batch_empty", "a batch needs at least one message", field="messages")
    if len(envelopes) > max_messages:
        raise InvalidMessageError(
            "batch_too_large", f"a batch holds at most {max_messages} messages", field="messages"
        )
    if transactional:
        first = effective_key(envelopes[0])
        for index, envelope in enumerate(envelopes):
            if effective_key(envelope) != first:
                raise InvalidMessageError(
                    "transaction_partition_keys",
                    "a transactional batch must use a single partition key (session_id or partition_key)",
                    field="partition_key",
                    index=index,
                )


def effective_key(envelope: Envelope) -> str | None:
    """The key Service Bus partitions a transactional batch by: SessionId, else PartitionKey."""
    return envelope.session_id if envelope.session_id is not None else envelope.partition_key
