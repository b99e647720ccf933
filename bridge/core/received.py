"""``ReceivedMessage``: what a receiver's handler is given, independent of the Service Bus SDK.

The handler contract (``docs/receiving.md``, "Handler contract"): a handler is called with one
``ReceivedMessage`` and succeeds by returning; raising anything means "not handled" (the copy is abandoned
and retried). The value is plain data, so handlers can be tested without Service Bus, and ``to_json`` gives
the form handed to a Celery task.

Application property values come back with the Python types Service Bus carries (``str``, ``int``,
``float``, ``bool``, ``bytes``, ``uuid.UUID``, aware ``datetime``, ``timedelta``). Messages read from a
paired-mode backlog queue (``bridge receive --backlog``) come with their aliased properties restored:
SessionId, PartitionKey, the remaining TimeToLive and ScheduledEnqueueTimeUtc, and ``entity`` is the
original destination (``x-ms-path``); ``backlog_queue`` names the queue it was read from.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from bridge.core.message_fields import PropertyValue


def _no_properties() -> Mapping[str, PropertyValue]:
    return MappingProxyType({})


@dataclass(frozen=True)
class ReceivedMessage:
    """One received copy of a message, as handed to the handler.

    ``namespace`` is the role of the namespace it came from (``"primary"`` or ``"secondary"``);
    ``delivery_count`` is the number of earlier deliveries of this copy (0 on the first).
    """

    message_id: str | None
    body: bytes
    entity: str
    namespace: str
    subscription: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    to: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    time_to_live: float | None = None
    scheduled_enqueue_time_utc: datetime | None = None
    enqueued_time_utc: datetime | None = None
    sequence_number: int | None = None
    delivery_count: int = 0
    application_properties: Mapping[str, PropertyValue] = field(default_factory=_no_properties)
    backlog_queue: str | None = None

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (``UnicodeDecodeError`` when it is not text)."""
        return self.body.decode("utf-8")

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: the body in base64 (``body_base64``), datetimes in ISO-8601, and each
        application property as ``{"type": ..., "value": ...}`` so a Celery task can restore the types."""
        out: dict[str, Any] = {
            "message_id": self.message_id,
            "body_base64": base64.b64encode(self.body).decode("ascii"),
            "entity": self.entity,
            "namespace": self.namespace,
        }
        optional: dict[str, Any] = {
            "subscription": self.subscription,
            "content_type": self.content_type,
            "correlation_id": self.correlation_id,
            "subject": self.subject,
            "reply_to": self.reply_to,
            "to": self.to,
            "session_id": self.session_id,
            "partition_key": self.partition_key,
            "time_to_live": self.time_to_live,
            "scheduled_enqueue_time_utc": _iso(self.scheduled_enqueue_time_utc),
            "enqueued_time_utc": _iso(self.enqueued_time_utc),
            "sequence_number": self.sequence_number,
            "backlog_queue": self.backlog_queue,
        }
        out.update({name: value for name, value in optional.items() if value is not None})
        out["delivery_count"] = self.delivery_count
        out["application_properties"] = {
            name: json_property(value) for name, value in self.application_properties.items()
        }
        return out


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def json_property(value: PropertyValue) -> dict[str, Any]:
    """``{"type", "value"}`` for one application property value (see ``ReceivedMessage.to_json``)."""
    if value is None:
        return {"type": "null", "value": None}
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        return {"type": "float", "value": value}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if isinstance(value, bytes):
        return {"type": "bytes", "value": base64.b64encode(value).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"type": "uuid", "value": str(value)}
    if isinstance(value, datetime):
        return {"type": "datetime", "value": value.isoformat()}
    if isinstance(value, timedelta):
        return {"type": "timedelta", "value": value.total_seconds()}
    raise TypeError(f"unsupported application property type {type(value).__name__}")
