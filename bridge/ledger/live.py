"""What the report needs from the live Redis: the roll first, and which accepted messages are still waiting.

"Lost" means accepted and neither delivered, dead-lettered, quarantined, handled nor still in the outbox.
The last part needs the outbox itself, and a snapshot of it races with the drainers. The race is closed by
taking, per entity, the journal's newest stream id *before* reading the outbox (the ``watermark``):

- an accepted event at or before the watermark was in the outbox when the snapshot started (the outbox
  write script journals it in the same step); by the time the snapshot reads its shard it is either still
  there (pending) or was acknowledged, and the acknowledgement journals its ``sent`` (or dead-letter) event
  in the same step — and the roll that follows picks that event up;
- an accepted event after the watermark is too recent to judge: pending, not lost.

The snapshot reads only the ``id`` of each outbox entry, in chunks; an entity whose outbox holds more than
``max_bytes`` is not read (its open messages count as pending, flagged ``outbox_checked: false``).

Needs Redis (``bridge.redis``) and pyarrow; never Spark.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from bridge.journal.roll import RollReport, roll, write_durably
from bridge.journal.store import JournalStore
from bridge.outbox import keys as outbox_keys
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis
from bridge.settings import Settings

SNAPSHOT_CHUNK = 1000
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024


@dataclass
class Snapshot:
    """Outbox contents per entity, and the journal position each was taken against."""

    watermarks: dict[str, tuple[int, int]] = field(default_factory=dict)
    message_ids: list[tuple[str, str]] = field(default_factory=list)
    depths: dict[str, int] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)

    def write(self, folder: Path) -> tuple[Path, Path]:
        """Write ``outbox.parquet`` (entity, message_id) and ``watermarks.parquet`` into ``folder``."""
        outbox = folder / "outbox.parquet"
        marks = folder / "watermarks.parquet"
        write_durably(
            pa.table(
                {
                    "entity": pa.array([e for e, _ in self.message_ids], pa.string()),
                    "message_id": pa.array([m for _, m in self.message_ids], pa.string()),
                }
            ),
            outbox,
        )
        checked = sorted(self.watermarks)
        write_durably(
            pa.table(
                {
                    "entity": pa.array(checked, pa.string()),
                    "wm_ms": pa.array([self.watermarks[e][0] for e in checked], pa.int64()),
                    "wm_seq": pa.array([self.watermarks[e][1] for e in checked], pa.int64()),
                }
            ),
            marks,
        )
        return outbox, marks


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def take_snapshot(
    client: SyncRedis,
    settings: Settings,
    entities: Iterable[str],
    max_bytes: int = MAX_SNAPSHOT_BYTES,
) -> Snapshot:
    """Watermark, then the MessageIds in every outbox shard, per entity."""
    store = JournalStore(client, settings.journal)
    snap = Snapshot()
    for entity in sorted(set(entities)):
        position = store.position(entity)
        with driver_errors():
            stats = client.hmget(outbox_keys.stats(entity), ["messages", "bytes"])
        depth, size = int(stats[0] or 0), int(stats[1] or 0)
        snap.depths[entity] = depth
        if size > max_bytes:
            snap.unchecked[entity] = f"outbox holds {size} bytes (> {max_bytes})"
            continue
        snap.watermarks[entity] = position
        for shard in range(settings.entity(entity).outbox_shards):
            snap.message_ids.extend((entity, mid) for mid in _shard_ids(client, entity, shard))
    return snap


def _shard_ids(client: SyncRedis, entity: str, shard: int) -> list[str]:
    stream = outbox_keys.outbox(entity, shard)
    out: list[str] = []
    start = "-"
    while True:
        with driver_errors():
            reply: Any = client.xrange(stream, start, "+", count=SNAPSHOT_CHUNK)
        for entry_id, data in reply:
            mid = data.get(b"id", data.get("id"))
            if mid is not None:
                out.append(_text(mid))
            start = "(" + _text(entry_id)
        if len(reply) < SNAPSHOT_CHUNK:
            return out


def roll_now(
    client: SyncRedis,
    settings: Settings,
    directory: Path,
    owners: Iterable[str],
    *,
    wait: float | None = None,
    sleep: float = 0.25,
) -> RollReport:
    """Roll every journal into ``directory`` now, waiting up to ``wait`` seconds (default: the lease TTL)
    for a roller that is running already (beat's), so the report that follows sees everything."""
    store = JournalStore(client, settings.journal)
    deadline = time.monotonic() + (settings.journal.roll_lease_ttl if wait is None else wait)
    while True:
        report = roll(
            store,
            directory,
            chunk=settings.journal.roll_chunk,
            lease_ttl=settings.journal.roll_lease_ttl,
            owners=owners,
        )
        if not report.busy or time.monotonic() > deadline:
            return report
        time.sleep(sleep)


def outbox_entities(client: SyncRedis) -> list[str]:
    """Entities in the outbox's entity set (written to, not retired as idle: ``bridge.outbox.entities``)."""
    with driver_errors():
        return sorted(_text(name) for name in client.smembers(outbox_keys.ENTITIES))


def roll_live(client: SyncRedis, settings: Settings, journal_dir: Path) -> None:
    """Roll every entity's live journal into ``journal_dir`` now (a roller already busy: not waited for):
    what the live ledger and ``bridge report --follow`` do before each publication."""
    owners = set(outbox_entities(client)) | set(settings.entities)
    owners |= {o for o in JournalStore(client, settings.journal).owners() if not o.startswith("~")}
    roll_now(client, settings, journal_dir, owners, wait=0)
