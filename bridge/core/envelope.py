"""The envelope: one message as the bridge holds it between ingress and Service Bus.

Every door (HTTP, ``Producer``, the Redis ingress stream) turns its input into an ``Envelope``; the outbox
stores it as Redis stream fields; the send workers read it back and build a ``ServiceBusMessage``. The
stream layout is therefore a contract between processes of different versions, and it is versioned.

Outbox entry layout, version 1 (all values are bytes; absent optional fields are simply not written)::

    v     b"1"                       format version (required; an unknown version is refused, never guessed)
    id    MessageId                  (required)
    b     body, raw bytes            (required, may be empty)
    at    accepted_at, epoch seconds as a decimal string (required)
    e     entity path                (required)
    ct    ContentType                cid  CorrelationId       sub  Subject (Label)
    rt    ReplyTo                    to   To                  sid  SessionId
    pk    PartitionKey               ttl  TimeToLive, seconds as a decimal string
    rsid  ReplyToSessionId           vpk  ViaPartitionKey (the ``x-opt-via-partition-key`` annotation)
    sch   ScheduledEnqueueTimeUtc, ISO-8601 with offset
    ap    application properties, JSON object (see ``encode_properties``)
    tp    the message's creation context, a W3C ``traceparent``   ts  its ``tracestate``
          (``bridge.core.trace_context``; entries written before them have neither, and a malformed
          value reads back as absent: a trace context never makes an entry unreadable)

Fields a reader does not know are ignored, so version 1 may gain optional fields without breaking older
workers; a change that older workers must not misread bumps ``v``.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.core.trace_context import valid_traceparent, valid_tracestate
from bridge.errors import CorruptEntryError

FORMAT_VERSION = b"1"

# What Service Bus accepts as an application property value (the AMQP simple types the SDKs map).
PropertyValue = str | bool | int | float | bytes | uuid.UUID | datetime | timedelta

_OPTIONAL_TEXT = (
    ("content_type", b"ct"),
    ("correlation_id", b"cid"),
    ("subject", b"sub"),
    ("reply_to", b"rt"),
    ("to", b"to"),
    ("session_id", b"sid"),
    ("partition_key", b"pk"),
    ("reply_to_session_id", b"rsid"),
    ("via_partition_key", b"vpk"),
)


@dataclass(frozen=True, slots=True)
class Envelope:
    """One validated message bound for ``entity``; ``accepted_at`` is when the bridge acknowledged it."""

    entity: str
    message_id: str
    body: bytes
    accepted_at: float
    content_type: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    to: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    reply_to_session_id: str | None = None
    via_partition_key: str | None = None
    time_to_live: float | None = None
    scheduled_enqueue_time_utc: datetime | None = None
    application_properties: dict[str, PropertyValue] = field(default_factory=dict)
    traceparent: str | None = None
    """The creation context (``docs/tracing.md``): W3C ``traceparent`` text, carried to Service Bus."""
    tracestate: str | None = None

    def encode(self) -> dict[bytes, bytes]:
        """The outbox stream fields (layout in the module docstring)."""
        flat = self.encode_flat()
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def encode_flat(self) -> list[bytes]:
        """The same fields as ``[name, value, name, value, ...]``, the shape ``XADD`` takes."""
        flat = [
            b"v",
            FORMAT_VERSION,
            b"id",
            self.message_id.encode(),
            b"b",
            self.body,
            b"at",
            encode_time(self.accepted_at),
            b"e",
            self.entity.encode(),
        ]
        flat.extend(self.encode_optional())
        return flat

    def encode_optional(self) -> list[bytes]:
        """The optional fields alone (what follows ``e`` in ``encode_flat``), ``[]`` when there are none.

        For writers that send the required fields apart (the outbox write script takes them as separate
        arguments and writes them in ``encode_flat``'s order; see ``bridge.outbox.scripts``).
        """
        flat: list[bytes] = []
        if not (
            self.partition_key is None
            and self.session_id is None
            and self.content_type is None
            and self.correlation_id is None
            and self.subject is None
            and self.reply_to is None
            and self.to is None
            and self.reply_to_session_id is None
            and self.via_partition_key is None
            and self.time_to_live is None
            and self.scheduled_enqueue_time_utc is None
            and not self.application_properties
        ):  # the common case (none of them) is checked without the loop in ``_encode_properties``
            self._encode_properties(flat)
        if self.traceparent is not None:
            flat.append(b"tp")
            flat.append(self.traceparent.encode())
            if self.tracestate:
                flat.append(b"ts")
                flat.append(self.tracestate.encode())
        return flat

    def _encode_properties(self, flat: list[bytes]) -> None:
        for name, key in _OPTIONAL_TEXT:
            value = getattr(self, name)
            if value is not None:
                flat.append(key)
                flat.append(value.encode())
        if self.time_to_live is not None:
            flat.append(b"ttl")
            flat.append(repr(self.time_to_live).encode())
        if self.scheduled_enqueue_time_utc is not None:
            flat.append(b"sch")
            flat.append(self.scheduled_enqueue_time_utc.isoformat().encode())
        if self.application_properties:
            flat.append(b"ap")
            flat.append(encode_properties(self.application_properties))

    @classmethod
    def decode(cls, fields: dict[bytes, bytes]) -> Envelope:
        """Read an outbox entry back; raise ``CorruptEntryError`` naming the field when it is malformed.

        Accepts the mapping redis-py returns with ``decode_responses=False``. Never trusts a value's type:
        a worker that meets a damaged entry must be able to quarantine it with a reason, not crash.
        """
        version = fields.get(b"v")
        if version != FORMAT_VERSION:
            raise CorruptEntryError(f"unsupported outbox entry version {version!r}", field="v")
        try:
            text = {name: _text(fields, key) for name, key in _OPTIONAL_TEXT}
            message_id = _text(fields, b"id")
            entity = _text(fields, b"e")
            if message_id is None or entity is None or b"b" not in fields:
                raise CorruptEntryError("outbox entry lacks id, e or b", field=None)
            accepted_at = _number(fields, b"at")
            if accepted_at is None:
                raise CorruptEntryError("outbox entry lacks at", field="at")
            raw_sch = _text(fields, b"sch")
            scheduled = datetime.fromisoformat(raw_sch) if raw_sch is not None else None
            if scheduled is not None and scheduled.tzinfo is None:
                raise CorruptEntryError("scheduled time has no offset", field="sch")
            raw_ap = fields.get(b"ap")
            props = decode_properties(raw_ap) if raw_ap is not None else {}
            traceparent = valid_traceparent(fields.get(b"tp"))
            return cls(
                entity=entity,
                message_id=message_id,
                body=bytes(fields[b"b"]),
                accepted_at=accepted_at,
                time_to_live=_number(fields, b"ttl"),
                scheduled_enqueue_time_utc=scheduled,
                application_properties=props,
                traceparent=traceparent,
                tracestate=valid_tracestate(fields.get(b"ts")) if traceparent else None,
                **text,
            )
        except CorruptEntryError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptEntryError(f"malformed outbox entry: {exc}") from None


# The bytes the required field names and the version value take in every entry: an entry's size (the sum
# of its field name and value lengths, what the backpressure counters count) is this plus the lengths of
# the MessageId, body, ``at`` and entity values and of the optional fields.
REQUIRED_OVERHEAD = len(b"v" + FORMAT_VERSION + b"id" + b"b" + b"at" + b"e")


def encode_time(accepted_at: float) -> bytes:
    """``accepted_at`` as stored in ``at``: the shortest decimal that reads back as the same float."""
    return repr(accepted_at).encode()


def _text(fields: dict[bytes, bytes], key: bytes) -> str | None:
    raw = fields.get(key)
    if raw is None:
        return None
    try:
        return bytes(raw).decode()
    except UnicodeDecodeError:
        raise CorruptEntryError(f"field {key.decode()} is not UTF-8", field=key.decode()) from None


def _number(fields: dict[bytes, bytes], key: bytes) -> float | None:
    raw = _text(fields, key)
    if raw is None:
        return None
    value = float(raw)
    if not math.isfinite(value):
        raise CorruptEntryError(f"field {key.decode()} is not a finite number", field=key.decode())
    return value


# Application properties are a JSON object. str, bool, int and float values are stored as themselves; the
# types JSON lacks are wrapped in a one-key object, which cannot be confused with a plain value because
# objects are never valid property values.
_TAGGED = ("$bytes", "$uuid", "$datetime", "$timedelta")


def encode_properties(props: dict[str, PropertyValue]) -> bytes:
    """Application properties as compact JSON with type tags for bytes, UUID, datetime and timedelta."""
    out: dict[str, Any] = {}
    for name, value in props.items():
        if isinstance(value, bytes):
            out[name] = {"$bytes": base64.b64encode(value).decode()}
        elif isinstance(value, uuid.UUID):
            out[name] = {"$uuid": str(value)}
        elif isinstance(value, datetime):
            out[name] = {"$datetime": value.isoformat()}
        elif isinstance(value, timedelta):
            out[name] = {"$timedelta": value.total_seconds()}
        else:
            out[name] = value
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def decode_properties(raw: bytes) -> dict[str, PropertyValue]:
    """Inverse of ``encode_properties``; raises ``CorruptEntryError`` on anything it did not write."""
    try:
        loaded = json.loads(raw)
    except ValueError:
        raise CorruptEntryError("application properties are not JSON", field="ap") from None
    if not isinstance(loaded, dict):
        raise CorruptEntryError("application properties are not a JSON object", field="ap")
    props: dict[str, PropertyValue] = {}
    for name, value in loaded.items():
        if isinstance(value, dict):
            props[name] = _untag(name, value)
        elif isinstance(value, str | bool | int | float):
            props[name] = value
        else:
            raise CorruptEntryError(f"application property {name!r} has an unsupported type", field="ap")
    return props


def _untag(name: str, value: dict[str, Any]) -> PropertyValue:
    if len(value) != 1 or next(iter(value)) not in _TAGGED:
        raise CorruptEntryError(f"application property {name!r} has an unknown tag", field="ap")
    tag, inner = next(iter(value.items()))
    try:
        if tag == "$bytes":
            return base64.b64decode(inner, validate=True)
        if tag == "$uuid":
            return uuid.UUID(inner)
        if tag == "$datetime":
            moment = datetime.fromisoformat(inner)
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        return timedelta(seconds=float(inner))
    except (ValueError, TypeError):
        raise CorruptEntryError(f"application property {name!r} has a malformed {tag}", field="ap") from None
