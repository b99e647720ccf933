"""The journal's event schema: what each lifecycle event records and how it is laid out in a Redis stream.

Every event is one stream entry in the journal of the entity it concerns (``bridge.journal.keys``). The
entry's fields are short names (a busy outbox writes millions of events; the names travel with every
one), laid out as version 1:

======  ===================  ==========================================================================
field   attribute            meaning
======  ===================  ==========================================================================
``v``   (version)            layout version, ``1``; a reader refuses nothing: unknown fields of a later
                             version are kept in ``extra`` and unknown kinds pass through as text
``k``   ``kind``             ``EventKind`` value (``accepted``, ``sent``, ...)
``t``   ``at``               event time, epoch seconds (decimal text); the stream id's time is when Redis
                             stored it
``m``   ``message_id``       the MessageId the event is about (absent for entity-level events)
``d``   ``door``             accepted: ``http``, ``rest``, ``producer``, ``redis-door``
``z``   ``size``             accepted: bytes the outbox entry counts toward the bounds
``y``   ``keys``             accepted: the partition key (SessionId, else PartitionKey), if any
``n``   ``namespace``        namespace name (sent, send_failed, received, ping, syphon_receive)
``r``   ``role``             ``primary`` / ``secondary``: which configured namespace
``p``   ``path``             sent: ``direct``, ``backup``, ``backlog`` or ``syphon``; ``barrier`` for a
                             restore barrier (a control message of paired mode, not the application's)
``b``   ``batch``            sent / send_failed: id shared by the events of one batch send
``c``   ``error_class``      send_failed, ping: ``ErrorClass`` value
``x``   ``reason``           dead_lettered, quarantined, role_swapped, failover: why (secret-free)
``w``   ``where``            dead_lettered: ``local`` (the outbox's dead-letter stream) or ``backlog``
``q``   ``queue``            backlog queue index (sent via backlog, rotation changes, syphon)
``o``   ``result``           ping: ``accepted`` / ``failed``; rotation: ``removed`` / ``readmitted``;
                             syphon_receive: ``empty`` / ``messages``; received: ``ping`` for a copy of
                             the paired mode's ping (dropped by the receiver, not the application's)
``f``   ``from_role``        role_swapped: the previously active role
``u``   ``to_role``          role_swapped: the newly active role
``g``   ``epoch``            role_swapped: the role state's epoch after the swap
``j``   ``count``            operations the event stands for (a schedule-mode ping is 2, a syphon
                             receive event counts its calls); absent means 1
``s``   ``shard``            accepted / sent: the outbox shard
``i``   ``trace_id``         accepted: the W3C trace id of the message's creation context, if any
                             (``docs/tracing.md``), so the ledger's rows lead to the message's trace
======  ===================  ==========================================================================

A *batch entry* stands for one event per MessageId, all alike but for the id (a request's messages, a
send call's copies): instead of ``m`` it has ``M``, a JSON array of the MessageIds, and may have ``Z``,
``S``, ``Y``, ``I`` — JSON arrays of the sizes, shards, partition keys and trace ids (``null`` where none),
one per id — in place of ``z``, ``s``, ``y``, ``i`` (``encode_batch``, ``decode_entry``). One stream entry
instead of hundreds is what keeps the journal cheap on the hot path; the roll expands it into one row per
MessageId.

An event's identity is ``<entity>/<stream id>`` (``<entity>/<stream id>/<i>`` for the i-th id of a batch
entry): unique, and stable however often the roll rewrites it (``event_id``), which is what lets the
ledger drop a copy written twice.

Pure: no Redis, no clock; the adapter (``bridge.journal``) and the outbox's Lua script do the writing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

VERSION = 1
"""The layout version written in ``v``."""


class EventKind(StrEnum):
    """What happened; the value is the ``k`` field."""

    ACCEPTED = "accepted"
    SENT = "sent"
    SEND_FAILED = "send_failed"
    ROLE_SWAPPED = "role_swapped"
    FAILOVER_ENGAGED = "failover_engaged"
    FAILOVER_ENDED = "failover_ended"
    BACKLOG_ROTATION_CHANGED = "backlog_rotation_changed"
    PING = "ping"
    SYPHON_RECEIVE = "syphon_receive"
    SYPHONED = "syphoned"
    RECEIVED = "received"
    HANDLED = "handled"
    DUPLICATE_SUPPRESSED = "duplicate_suppressed"
    DEAD_LETTERED = "dead_lettered"
    QUARANTINED = "quarantined"
    JOURNAL_OVERFLOW = "journal_overflow"
    """Written by the roll, not by emitters: ``count`` events of kind ``reason`` found no room."""


_KINDS: dict[str, EventKind] = {kind.value: kind for kind in EventKind}

SendPath = Literal["direct", "backup", "backlog", "syphon", "barrier"]
"""How a copy reached Service Bus: the active namespace, the backup after a failure, a backlog queue, or
the syphon moving it from a backlog queue to its destination; ``barrier`` is a restore barrier sent to a
backlog queue (a billable send that carries no application message)."""

PATHS: tuple[SendPath, ...] = ("direct", "backup", "backlog", "syphon", "barrier")


DOORS = ("http", "rest", "producer", "redis-door")

# attribute -> stream field, in the documented order; ``kind`` and ``at`` are always written.
FIELD_NAMES: dict[str, str] = {
    "kind": "k",
    "at": "t",
    "message_id": "m",
    "door": "d",
    "size": "z",
    "keys": "y",
    "namespace": "n",
    "role": "r",
    "path": "p",
    "batch": "b",
    "error_class": "c",
    "reason": "x",
    "where": "w",
    "queue": "q",
    "result": "o",
    "from_role": "f",
    "to_role": "u",
    "epoch": "g",
    "count": "j",
    "shard": "s",
    "trace_id": "i",
}
_ATTRIBUTES = {short: name for name, short in FIELD_NAMES.items()}
_INTEGERS = frozenset({"size", "epoch", "count", "shard"})
MAX_REASON_LENGTH = 300
"""Reasons are cut to this (they come from ``describe_error``, already secret-free and short)."""


@dataclass(frozen=True)
class JournalEvent:
    """One lifecycle event; only ``kind`` and ``at`` are always present."""

    kind: EventKind | str
    at: float
    message_id: str | None = None
    door: str | None = None
    size: int | None = None
    keys: str | None = None
    namespace: str | None = None
    role: str | None = None
    path: str | None = None
    batch: str | None = None
    error_class: str | None = None
    reason: str | None = None
    where: str | None = None
    queue: str | None = None
    result: str | None = None
    from_role: str | None = None
    to_role: str | None = None
    epoch: int | None = None
    count: int | None = None
    shard: int | None = None
    trace_id: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    """Fields this version does not know (written by a later one); kept, never interpreted."""

    def encode(self) -> list[str]:
        """The stream entry's field/value list (``XADD key * <these>``), version first."""
        out = ["v", str(VERSION)]
        for name, short in FIELD_NAMES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if name == "at":
                out += [short, repr(float(value))]
            elif name == "reason":
                out += [short, str(value)[:MAX_REASON_LENGTH]]
            else:
                out += [short, str(value)]
        for key, value in self.extra.items():
            out += [key, value]
        return out

    @classmethod
    def decode(cls, data: Mapping[Any, Any]) -> JournalEvent:
        """Inverse of ``encode``; unknown fields go to ``extra``, a missing time reads as 0.0.

        Raises ``ValueError`` for an entry without a kind (not a journal event at all).
        """
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for raw_key, raw_value in data.items():
            key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
            value = raw_value.decode("utf-8", "replace") if isinstance(raw_value, bytes) else raw_value
            if key == "v":
                continue
            name = _ATTRIBUTES.get(key)
            if name is None:
                extra[key] = value
            elif name == "at":
                values[name] = float(value)
            elif name in _INTEGERS:
                values[name] = int(value)
            else:
                values[name] = value
        if "kind" not in values:
            raise ValueError("journal entry without a kind")
        kind = values.pop("kind")
        at = values.pop("at", 0.0)
        return cls(kind=_KINDS.get(kind, kind), at=at, extra=extra, **values)

    @classmethod
    def decode_entry(cls, data: Mapping[Any, Any]) -> list[JournalEvent]:
        """The events of one stream entry: one, or one per MessageId of a batch entry (``encode_batch``)."""
        text = {_str(k): _str(v) for k, v in data.items()}
        if "M" not in text:
            return [cls.decode(data)]
        ids = json.loads(text.pop("M"))
        per_id = {
            short: json.loads(text.pop(batch)) for batch, short in BATCH_FIELDS.items() if batch in text
        }
        events = []
        for index, message_id in enumerate(ids):
            one: dict[str, str] = {**text, "m": str(message_id)}
            for short, values in per_id.items():
                if values[index] is not None:
                    one[short] = str(values[index])
            events.append(cls.decode(one))
        return events


BATCH_FIELDS = {"Z": "z", "S": "s", "Y": "y", "I": "i"}
"""Per-id arrays of a batch entry and the single-event field each one stands for."""


def _str(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def encode_batch(
    template: JournalEvent,
    message_ids: Sequence[str],
    *,
    sizes: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
) -> list[str]:
    """One stream entry for ``template`` once per MessageId (``template.message_id`` must be None)."""
    if template.message_id is not None:
        raise ValueError("a batch entry's template carries no MessageId (the ids are given apart)")
    items = template.encode()
    items += ["M", json.dumps(list(message_ids), separators=(",", ":"))]
    for short, values in (("Z", sizes), ("S", shards)):
        if values is not None:
            items += [short, json.dumps(list(values), separators=(",", ":"))]
    return items


# ---- constructors, one per kind, so emitters cannot forget a field ------------------------------------
def accepted(
    message_id: str,
    at: float,
    *,
    door: str,
    size: int,
    keys: str | None = None,
    shard: int | None = None,
    trace_id: str | None = None,
) -> JournalEvent:
    """The outbox stored a new message (duplicates within the idempotency window are not events)."""
    return JournalEvent(
        EventKind.ACCEPTED, at, message_id, door=door, size=size, keys=keys, shard=shard, trace_id=trace_id
    )


def sent(
    message_id: str,
    at: float,
    *,
    namespace: str,
    role: str,
    path: SendPath,
    batch: str,
    queue: str | None = None,
) -> JournalEvent:
    """A namespace accepted one copy of the message."""
    return JournalEvent(
        EventKind.SENT, at, message_id, namespace=namespace, role=role, path=path, batch=batch, queue=queue
    )


def send_failed(
    message_id: str, at: float, *, namespace: str, role: str, error_class: str, batch: str
) -> JournalEvent:
    """A namespace did not accept the message (it stays where it was)."""
    return JournalEvent(
        EventKind.SEND_FAILED,
        at,
        message_id,
        namespace=namespace,
        role=role,
        error_class=error_class,
        batch=batch,
    )


def role_swapped(at: float, *, from_role: str, to_role: str, epoch: int, reason: str) -> JournalEvent:
    """Passive replication made the other namespace active for every worker."""
    return JournalEvent(
        EventKind.ROLE_SWAPPED, at, from_role=from_role, to_role=to_role, epoch=epoch, reason=reason
    )


def failover_engaged(at: float, *, reason: str = "") -> JournalEvent:
    """Paired mode: sends go to the backlog queues from now on."""
    return JournalEvent(EventKind.FAILOVER_ENGAGED, at, reason=reason or None)


def failover_ended(at: float, *, reason: str = "") -> JournalEvent:
    """Paired mode: the primary takes sends again."""
    return JournalEvent(EventKind.FAILOVER_ENDED, at, reason=reason or None)


def backlog_rotation_changed(at: float, *, queue: str, result: str, reason: str = "") -> JournalEvent:
    """A backlog queue left (``removed``) or re-entered (``readmitted``) the rotation."""
    return JournalEvent(
        EventKind.BACKLOG_ROTATION_CHANGED, at, queue=queue, result=result, reason=reason or None
    )


def ping(
    at: float, *, namespace: str, ok: bool, error_class: str | None = None, count: int = 1
) -> JournalEvent:
    """One ping of the primary (``count`` 2 in schedule mode: schedule and cancel)."""
    return JournalEvent(
        EventKind.PING,
        at,
        namespace=namespace,
        role="primary",
        result="accepted" if ok else "failed",
        error_class=error_class,
        count=count,
    )


def syphon_receive(at: float, *, namespace: str, queue: str, calls: int, empty: bool) -> JournalEvent:
    """Receive calls the syphon made on a backlog queue (an empty long poll is billed too)."""
    return JournalEvent(
        EventKind.SYPHON_RECEIVE,
        at,
        namespace=namespace,
        role="secondary",
        queue=queue,
        count=calls,
        result="empty" if empty else "messages",
    )


def syphoned(message_id: str, at: float, *, namespace: str, queue: str) -> JournalEvent:
    """The syphon completed the message in its backlog queue (in ``namespace``, the secondary) after the
    destination accepted it."""
    return JournalEvent(
        EventKind.SYPHONED, at, message_id, namespace=namespace, role="secondary", queue=queue
    )


def received(message_id: str, at: float, *, namespace: str, role: str) -> JournalEvent:
    """A receiver got one copy of the message from a namespace."""
    return JournalEvent(EventKind.RECEIVED, at, message_id, namespace=namespace, role=role)


def handled(message_id: str, at: float) -> JournalEvent:
    """The application's handler finished the message (once, whatever the copies)."""
    return JournalEvent(EventKind.HANDLED, at, message_id)


def duplicate_suppressed(message_id: str, at: float, *, namespace: str, role: str) -> JournalEvent:
    """A receiver dropped a copy whose MessageId it had handled already."""
    return JournalEvent(EventKind.DUPLICATE_SUPPRESSED, at, message_id, namespace=namespace, role=role)


def dead_lettered(message_id: str | None, at: float, *, where: str, reason: str) -> JournalEvent:
    """The message will not be delivered to its destination: ``local`` dead-letter stream or ``backlog``."""
    return JournalEvent(EventKind.DEAD_LETTERED, at, message_id, where=where, reason=reason)


def quarantined(message_id: str | None, at: float, *, reason: str) -> JournalEvent:
    """An entry could not be decoded or validated and was moved to quarantine."""
    return JournalEvent(EventKind.QUARANTINED, at, message_id, reason=reason)


# ---- identity and stream ids ----------------------------------------------------------------------------
def event_id(entity: str, stream_id: str) -> str:
    """The event's identity: unique per journal stream, unchanged by any roll or copy."""
    return f"{entity}/{stream_id}"


def split_stream_id(stream_id: str) -> tuple[int, int]:
    """``(milliseconds, sequence)`` of a Redis stream id ``"<ms>-<seq>"``."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def next_stream_id(stream_id: str) -> str:
    """The smallest id after ``stream_id`` (``XTRIM MINID`` keeps it and everything later)."""
    ms, seq = split_stream_id(stream_id)
    return f"{ms}-{seq + 1}"
