"""Messages as the broker model sees them.

The model never parses AMQP: the protocol adapter extracts the few fields the broker acts on (ids, TTL,
schedule, filter properties) and hands over the encoded bare message (``raw``) untouched, so a message
comes back out byte-for-byte as it went in, plus the broker's annotations added at delivery time.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class MessageState(StrEnum):
    """Where a message is in its life."""

    ACTIVE = "active"
    SCHEDULED = "scheduled"
    DEFERRED = "deferred"


@dataclass(slots=True)
class IncomingMessage:
    """A message as sent; ``properties`` are what subscription filters see (``sys.*`` and user names)."""

    raw: bytes
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live: float | None = None
    scheduled_at: float | None = None
    properties: Mapping[str, Any] | None = None

    @property
    def size(self) -> int:
        """Encoded size in bytes, what the entity's size limit is checked against."""
        return len(self.raw)


@dataclass(slots=True, eq=False)
class StoredMessage:
    """One message in one queue or subscription (a topic's copies share ``raw``)."""

    seq: int
    raw: bytes
    enqueued_at: float
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live: float | None = None
    expires_at: float | None = None
    scheduled_at: float | None = None
    state: MessageState = MessageState.ACTIVE
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until: float | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    dead_letter_source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Encoded size in bytes."""
        return len(self.raw)

    @property
    def visible_since(self) -> float:
        """What receivers see as the enqueued time: a scheduled message is enqueued when it becomes due,
        as on Azure, not when it was accepted."""
        if self.scheduled_at is not None and self.scheduled_at > self.enqueued_at:
            return self.scheduled_at
        return self.enqueued_at

    def to_record(self) -> dict[str, Any]:
        """JSON-able fields (without ``raw``) for the write-ahead log."""
        return {
            "seq": self.seq,
            "enq": self.enqueued_at,
            "mid": self.message_id,
            "sid": self.session_id,
            "pk": self.partition_key,
            "ttl": self.time_to_live,
            "exp": self.expires_at,
            "sch": self.scheduled_at,
            "st": self.state.value,
            "dc": self.delivery_count,
            "dlr": self.dead_letter_reason,
            "dld": self.dead_letter_description,
            "dls": self.dead_letter_source,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], raw: bytes) -> StoredMessage:
        """Inverse of ``to_record``; locks are not persisted (a restart releases them)."""
        return cls(
            seq=int(rec["seq"]),
            raw=raw,
            enqueued_at=float(rec["enq"]),
            message_id=rec.get("mid"),
            session_id=rec.get("sid"),
            partition_key=rec.get("pk"),
            time_to_live=rec.get("ttl"),
            expires_at=rec.get("exp"),
            scheduled_at=rec.get("sch"),
            state=MessageState(rec.get("st", "active")),
            delivery_count=int(rec.get("dc", 0)),
            dead_letter_reason=rec.get("dlr"),
            dead_letter_description=rec.get("dld"),
            dead_letter_source=rec.get("dls"),
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message handed to a receiver; ``lock_token`` is None in RECEIVE_AND_DELETE mode."""

    message: StoredMessage
    lock_token: uuid.UUID | None
    locked_until: float | None
    delivery_count: int
