"""Finding Redis-door streams of entities the settings do not name, so their entries are delivered too.

Any program may ``XADD bridge:{invoices}:in`` for an entity nobody configured (it then gets the default
settings: passive replication). Nothing in the bridge writes such a stream, so it can only be found by
looking: ``SCAN`` with ``MATCH bridge:{*}:in TYPE stream``. The scan is bounded: at most one pass per
``workers.discover_interval`` across every sweeper (a ``SET NX PX`` mark decides who scans), and on a single
server each sweep runs at most ``PAGES_PER_SWEEP`` ``SCAN`` calls, resuming from the cursor kept in Redis,
so a large keyspace is covered over several sweeps instead of stalling one. What it finds is remembered in
``bridge:{bridge}:door-entities``; the sweeper then treats those entities like configured ones (an ingest
task whenever their stream has entries).

A stream whose name does not decode to a valid entity path is ignored (nothing could deliver it).
"""

from __future__ import annotations

from typing import Any

from bridge.core.validation import validate_entity
from bridge.errors import InvalidMessageError
from bridge.outbox import keys
from bridge.redis.connection import is_cluster
from bridge.redis.errors import driver_errors

DOOR_ENTITIES = "bridge:{bridge}:door-entities"
SCAN_STATE = "bridge:{bridge}:door-scan"
SCAN_MARK = "bridge:{bridge}:door-scan-mark"
PATTERN = "bridge:{*}:in"
PAGES_PER_SWEEP = 10
PAGE = 1000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def entity_of(key: str) -> str | None:
    """The entity whose ingress stream is ``key`` (``bridge:{<entity>}:in``), None for anything else."""
    if not (key.startswith("bridge:{") and key.endswith("}:in")):
        return None
    name = key[len("bridge:{") : -len("}:in")]
    try:
        validate_entity(name)
    except InvalidMessageError:
        return None
    return name if keys.ingress(name) == key else None


def door_entities(client: Any, interval: float) -> list[str]:
    """Entities with a Redis-door stream found so far; scans on (bounded) when a pass is due."""
    with driver_errors():
        if is_cluster(client):
            if client.set(SCAN_MARK, "1", nx=True, px=max(1, int(interval * 1000))):
                _remember(
                    client, [_text(k) for k in client.scan_iter(match=PATTERN, count=PAGE, _type="stream")]
                )
        else:
            _scan_some(client, interval)
        return sorted(_text(m) for m in client.smembers(DOOR_ENTITIES))


def _scan_some(client: Any, interval: float) -> None:
    """Up to ``PAGES_PER_SWEEP`` SCAN calls of the current pass; a new pass once ``interval`` passed."""
    raw = client.get(SCAN_STATE)
    cursor = int(raw) if raw is not None else None
    if cursor is None:
        # No pass in progress: start one if none ran in the last interval.
        if not client.set(SCAN_MARK, "1", nx=True, px=max(1, int(interval * 1000))):
            return
        cursor = 0
    found: list[str] = []
    for _ in range(PAGES_PER_SWEEP):
        cursor, page = client.scan(cursor=cursor, match=PATTERN, count=PAGE, _type="stream")
        found.extend(_text(k) for k in page)
        if int(cursor) == 0:
            break
    _remember(client, found)
    if int(cursor) == 0:
        client.delete(SCAN_STATE)
    else:
        client.set(SCAN_STATE, str(cursor), px=max(60_000, int(interval * 10_000)))


def _remember(client: Any, stream_keys: list[str]) -> None:
    names = {name for name in (entity_of(key) for key in stream_keys) if name is not None}
    if names:
        client.sadd(DOOR_ENTITIES, *sorted(names))
