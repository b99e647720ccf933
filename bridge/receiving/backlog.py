"""``bridge receive --backlog``: what is waiting in the paired-mode backlog queues, and draining it.

Backlog queues are ``<primary namespace>/x-servicebus-transfer/<i>`` in the secondary namespace
(``bridge.core.paired.backlog_queue_paths``); a failed-over worker sends aliased messages there and the
syphon moves them back to the primary. An operator may want to see what is there (``peek_backlog``: each
message with its aliased properties restored — SessionId, PartitionKey, remaining TTL, schedule, the
destination from ``x-ms-path``) or, when the primary will not come back soon, hand an entity's backlog to
its handler directly (``drain_backlog``: the receiver's own path — same window, so a message drained here
and also syphoned is handed once — until the queues hold nothing more of that entity). Messages of other
entities are left where they are, and so are messages that cannot be restored (expired in the backlog,
not aliased), which the syphon dead-letters with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from bridge.core.paired import backlog_queue_paths
from bridge.core.received import json_property
from bridge.errors import ConfigurationError
from bridge.receiving.engine import ReceiveEngine
from bridge.receiving.processing import Handler
from bridge.servicebus.receiving import Delivery, EntityLink
from bridge.settings import Settings

PEEK_PAGE = 100


def backlog_queues(settings: Settings, indexes: Sequence[int] = ()) -> list[str]:
    """The backlog queue paths of the configured primary (all, or those with the given indexes)."""
    if settings.primary is None or settings.secondary is None:
        raise ConfigurationError("backlog queues need both the primary and the secondary namespace")
    paths = backlog_queue_paths(settings.primary.namespace_name, settings.paired.backlog_queue_count)
    if not indexes:
        return list(paths)
    wrong = [i for i in indexes if not 0 <= i < len(paths)]
    if wrong:
        raise ConfigurationError(f"backlog queue index {wrong[0]} is not in [0, {len(paths)})")
    return [paths[i] for i in indexes]


def describe(queue: str, delivery: Delivery) -> dict[str, Any]:
    """One backlog message as a JSON-able row (what ``bridge receive --backlog`` prints per line)."""
    message = delivery.message
    row: dict[str, Any] = {
        "queue": queue,
        "sequence_number": message.sequence_number,
        "message_id": message.message_id,
        "destination": None if delivery.problem else message.entity,
        "problem": delivery.problem,
        "session_id": message.session_id,
        "partition_key": message.partition_key,
        "time_to_live": message.time_to_live,
        "scheduled_enqueue_time_utc": _iso(message.scheduled_enqueue_time_utc),
        "enqueued_time_utc": _iso(message.enqueued_time_utc),
        "content_type": message.content_type,
        "body_bytes": len(message.body),
        "application_properties": {k: json_property(v) for k, v in message.application_properties.items()},
    }
    return row


def _iso(value: object) -> str | None:
    return None if value is None else value.isoformat()  # type: ignore[attr-defined]


def peek_backlog(
    settings: Settings, *, entity: str | None = None, indexes: Sequence[int] = (), limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """Rows for the messages in the backlog queues (nothing is locked or removed); ``entity``'s only."""
    secondary = settings.secondary
    shown = 0
    for queue in backlog_queues(settings, indexes):
        assert secondary is not None
        link = EntityLink("secondary", secondary, settings.retry, entity=queue, backlog=True)
        try:
            sequence: int | None = None
            while limit is None or shown < limit:
                page = link.peek(PEEK_PAGE, sequence)
                if not page:
                    break
                for delivery in page:
                    if entity is not None and (delivery.problem or delivery.message.entity != entity):
                        continue
                    yield describe(queue, delivery)
                    shown += 1
                    if limit is not None and shown >= limit:
                        break
                sequence = (page[-1].message.sequence_number or 0) + 1
        finally:
            link.close()


def drain_backlog(
    settings: Settings,
    entity: str,
    handler: Handler,
    *,
    subscription: str | None = None,
    indexes: Sequence[int] = (),
) -> None:
    """Hand ``entity``'s backlog messages to ``handler`` through the receiver's window until none is left
    (the entity's receiver counters count them, under ``received_secondary``)."""
    ReceiveEngine(
        settings,
        entity,
        handler,
        subscription=subscription,
        sessions=False,
        backlog_queues=backlog_queues(settings, indexes),
        stop_when_idle=True,
    ).run()
