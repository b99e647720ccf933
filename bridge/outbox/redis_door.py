"""The Redis door: applications ``XADD`` to ``bridge:{<entity>}:in``; ``move_ingress`` validates and moves.

Layout of an ingress entry (``docs/doors/redis-stream.md``): ``body`` (required, raw bytes), optional
``body_encoding`` (``text`` or ``base64``), ``message_id``, ``content_type``, ``correlation_id``,
``subject``, ``reply_to``, ``reply_to_session_id``, ``to``, ``session_id``, ``partition_key``,
``via_partition_key``, ``time_to_live`` (seconds, decimal),
``scheduled_enqueue_time_utc`` (ISO-8601 with offset), ``application_properties`` (JSON object), and the
message's W3C trace context ``traceparent`` and ``tracestate`` (``docs/tracing.md``; malformed: dropped).

``move_ingress`` reads entries with the consumer group ``ingress``, writes the valid ones to the outbox as one
atomic group, and then, in one ``MULTI``, appends the invalid ones to the quarantine stream (with the code
and reason) and acknowledges and deletes every entry it handled. Nothing is dropped silently. A crash
between the two steps leaves the entries pending; the next call reclaims them (``XAUTOCLAIM``) and the
outbox write repeats harmlessly because an entry without ``message_id`` gets one derived from its entry id.

Order: the door keeps the stream's order, which is each key's order. One mover at a time per entity: a
call holds the entity's lease (``keys.ingest_lease``, ``lease_ms``) or returns at once having
moved nothing. Under the lease every entry still pending in the group — refused by backpressure, or left
by a mover that died — is older than any unread one, so the call first claims all of them (``XAUTOCLAIM``
from ``0-0`` with no idle time: whoever read them is gone or is this caller) and only then reads new ones
(``>``). An entry refused once is therefore never moved after a newer one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import redis

from bridge.core.door_formats import door_message_id, redis_door_message
from bridge.core.envelope import Envelope
from bridge.core.validation import build_envelope, validate_entity
from bridge.errors import BridgeError, InvalidMessageError, OutboxUnavailableError, ProblemStreamFullError
from bridge.observability import transitions
from bridge.outbox import keys
from bridge.outbox.problems import problem_fields
from bridge.outbox.store import SyncOutbox
from bridge.redis.errors import driver_errors
from bridge.redis.lease import Lease
from bridge.redis.types import SyncRedis


@dataclass(frozen=True)
class MoveReport:
    """What one ``move_ingress`` call did."""

    moved: int
    duplicates: int
    quarantined: int


def _no_new_id() -> str:
    raise AssertionError("redis_door_message always sets message_id")


def ensure_ingress_group(client: SyncRedis, entity: str) -> None:
    """Create the ``ingress`` consumer group (and the stream) if missing."""
    with driver_errors(OutboxUnavailableError):
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
    reclaim_idle_ms: int = 0,
    lease_ms: int = 30_000,
) -> MoveReport:
    """Validate up to ``count`` ingress entries, oldest first, and move them to the outbox or to quarantine.

    Returns an empty report when another mover holds the entity's lease. Raises ``BackpressureError``
    (``ProblemStreamFullError`` when invalid entries find the quarantine full) / ``OutboxUnavailableError``
    with nothing acknowledged, so the caller (a Celery task) simply runs again
    later; the refused entries stay pending and go first next time. ``reclaim_idle_ms`` only matters to a
    caller that shares the group outside the lease (none in the bridge).
    """
    validate_entity(entity)
    lease = Lease(outbox.client, keys.ingest_lease(entity))
    owner = f"{consumer}:{uuid.uuid4().hex[:8]}"
    if not lease.acquire(owner, lease_ms):
        return MoveReport(0, 0, 0)
    try:
        return _move(outbox, entity, consumer=consumer, now=now, count=count, reclaim_idle_ms=reclaim_idle_ms)
    finally:
        lease.release(owner)


def _pending_first(
    client: SyncRedis, stream: str, consumer: str, count: int, reclaim_idle_ms: int
) -> list[Any]:
    """Every entry still pending in the group (oldest first), then new ones, up to ``count`` in all."""
    items: list[Any] = []
    cursor = "0-0"
    while len(items) < count:
        claimed: Any = client.xautoclaim(
            stream, keys.INGRESS_GROUP, consumer, reclaim_idle_ms, cursor, count=count - len(items)
        )
        items.extend(item for item in claimed[1] if item[1] is not None)
        cursor = claimed[0].decode() if isinstance(claimed[0], bytes) else str(claimed[0])
        if cursor == "0-0":
            break
    if len(items) < count and cursor == "0-0":
        reply: Any = client.xreadgroup(keys.INGRESS_GROUP, consumer, {stream: ">"}, count=count - len(items))
        for _, fresh in reply or []:
            items.extend(fresh)
    return items


def _check_quarantine_room(client: SyncRedis, entity: str, wanted: int, bound: int) -> None:
    """``ProblemStreamFullError`` (nothing moved, every entry stays pending and goes first next time) when
    the entity's quarantine has no room for ``wanted`` more entries."""
    with driver_errors(OutboxUnavailableError):
        held = int(client.xlen(keys.quarantine(entity)))
    if held + wanted > bound:
        transitions.problem_stream_full(entity, "quarantine")
        raise ProblemStreamFullError(entity, "quarantine", held, bound)


def _move(
    outbox: SyncOutbox, entity: str, *, consumer: str, now: float, count: int, reclaim_idle_ms: int
) -> MoveReport:
    client = outbox.client
    stream = keys.ingress(entity)
    ensure_ingress_group(client, entity)
    with driver_errors(OutboxUnavailableError):
        items = _pending_first(client, stream, consumer, count, reclaim_idle_ms)
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
    if problems:
        _check_quarantine_room(
            client, entity, len(problems), outbox.writer.settings.entity(entity).max_problem_entries
        )
    duplicates = 0
    if envelopes:
        (result,) = outbox.write([outbox.writer.group(entity, envelopes, door="redis-door")])
        if isinstance(result, BridgeError):
            raise result
        duplicates = sum(1 for ack in result if ack.duplicate)
    with driver_errors(OutboxUnavailableError):
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
    transitions.redis_door_moved(
        entity, len(envelopes) - duplicates, duplicates, [(p.code, p.detail) for *_, p in problems]
    )
    return MoveReport(moved=len(envelopes) - duplicates, duplicates=duplicates, quarantined=len(problems))
