"""The Redis door: applications ``XADD`` to ``bridge:{<entity>}:in``; ``move_ingress`` validates and moves.

Layout of an ingress entry (README, "Redis door"): ``body`` (required, raw bytes), optional
``body_encoding`` (``text`` or ``base64``), ``message_id``, ``content_type``, ``correlation_id``,
``subject``, ``reply_to``, ``to``, ``session_id``, ``partition_key``, ``time_to_live`` (seconds, decimal),
``scheduled_enqueue_time_utc`` (ISO-8601 with offset), ``application_properties`` (JSON object).

``move_ingress`` reads entries with the consumer group ``ingress``, writes the valid ones to the outbox as one
atomic group, and then, in one ``MULTI``, appends the invalid ones to the quarantine stream (with the code
and reason) and acknowledges and deletes every entry it handled. Nothing is dropped silently. A crash
between the two steps leaves the entries pending; the next call reclaims them (``XAUTOCLAIM``) and the
outbox write repeats harmlessly because an entry without ``message_id`` gets one derived from its entry id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from bridge.core.door_formats import door_message_id, redis_door_message
from bridge.core.envelope import Envelope
from bridge.core.validation import build_envelope, validate_entity
from bridge.errors import BridgeError, InvalidMessageError
from bridge.outbox import keys
from bridge.outbox.connection import driver_errors
from bridge.outbox.reader import problem_fields
from bridge.outbox.store import SyncOutbox


@dataclass(frozen=True)
class MoveReport:
    """What one ``move_ingress`` call did."""

    moved: int
    duplicates: int
    quarantined: int


def _no_new_id() -> str:
    raise AssertionError("redis_door_message always sets message_id")


def ensure_ingress_group(client: Any, entity: str) -> None:
    """Create the ``ingress`` consumer group (and the stream) if missing."""
    with driver_errors():
        try:
            client.xgroup_create(keys.ingress(entity), keys.INGRESS_GROUP, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


def move_ingress(
    outbox: SyncOutbox,
    entity: str,
    *,
    consumer: str,
    now: float,
    count: int = 100,
    reclaim_idle_ms: int = 30_000,
) -> MoveReport:
    """Validate up to ``count`` ingress entries and move them to the outbox or to quarantine.

    Raises ``BackpressureError`` / ``OutboxUnavailableError`` with nothing acknowledged, so the caller (a
    Celery task) simply runs again later.
    """
    validate_entity(entity)
    client = outbox.client
    stream = keys.ingress(entity)
    ensure_ingress_group(client, entity)
    with driver_errors():
        claimed = client.xautoclaim(stream, keys.INGRESS_GROUP, consumer, reclaim_idle_ms, "0-0", count=count)
        items: list[Any] = [item for item in claimed[1] if item[1] is not None]
        if len(items) < count:
            reply = client.xreadgroup(keys.INGRESS_GROUP, consumer, {stream: ">"}, count=count - len(items))
            for _, fresh in reply or []:
                items.extend(fresh)
    if not items:
        return MoveReport(0, 0, 0)
    rules = outbox.writer.policy(entity).rules
    envelopes: list[Envelope] = []
    problems: list[tuple[str, dict[bytes, bytes], InvalidMessageError]] = []
    for raw_id, fields in items:
        entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        try:
            # The MessageId always comes from the entry (given, or derived from the entry id), never new.
            body, props = redis_door_message(fields, door_message_id(entity, entry_id))
            envelopes.append(build_envelope(entity, body, props, rules=rules, now=now, new_id=_no_new_id))
        except InvalidMessageError as refused:
            problems.append((entry_id, fields, refused))
    duplicates = 0
    if envelopes:
        (result,) = outbox.write([outbox.writer.group(entity, envelopes)])
        if isinstance(result, BridgeError):
            raise result
        duplicates = sum(1 for ack in result if ack.duplicate)
    with driver_errors():
        pipe = client.pipeline(transaction=True)
        for entry_id, fields, problem in problems:
            pipe.xadd(
                keys.quarantine(entity),
                problem_fields(
                    fields,
                    code=problem.code,
                    reason=problem.detail,
                    field=problem.field,
                    source="redis-door",
                    source_id=entry_id,
                    now=now,
                ),
            )
        ids = [item[0] for item in items]
        pipe.xack(stream, keys.INGRESS_GROUP, *ids)
        pipe.xdel(stream, *ids)
        pipe.execute()
    return MoveReport(moved=len(envelopes) - duplicates, duplicates=duplicates, quarantined=len(problems))
