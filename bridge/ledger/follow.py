"""``bridge report --follow``: a live reconciliation, Structured Streaming over the journal folder.

The stream reads every rolled file once (existing ones in the first batch, new ones as the roll writes
them), drops repeated events with ``dropDuplicatesWithinWatermark`` on ``event_id`` — the watermark is on
``rolled_at``, the roll's clock, because a repeated event (a re-roll after a crash) is written minutes after
the first copy while its event time may be hours old — and folds each micro-batch's per-message facts into
a ``LiveTally`` on the driver (``bridge.core.live_tally``), which keeps the per-entity counts current.

Every ``interval`` it rolls the live journal (when another roller is busy it just waits for the next turn)
and redraws the table. "Missing" are messages open for longer than ``grace`` seconds that the live outbox
no longer holds: lost, unless their events are still on the way into the journal folder; the batch report
(``bridge report``) is the one that decides.

The tally lives in the driver's memory (a dict entry per message seen), and the stream's checkpoint in a
temporary folder: a restarted ``--follow`` starts over from every file.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bridge.core.live_tally import (
    ACCEPTED,
    DEAD_LETTERED,
    DELIVERED,
    HANDLED,
    LIVE_KEYS,
    QUARANTINED,
    LiveTally,
)
from bridge.ledger import tables
from bridge.ledger.spark import JOURNAL_SCHEMA, uri
from bridge.settings import Settings

WATERMARK_DELAY = "1 hour"
GRACE = 300.0
MAX_FILES_PER_TRIGGER = 1000


def _bit(kind: str, bit: int) -> Any:
    return F.max(F.when(F.col("kind") == kind, F.lit(bit)).otherwise(F.lit(0)))


def batch_facts(batch: DataFrame) -> DataFrame:
    """Per (entity, message_id) of one micro-batch: flag bits, acceptance time, copies, suppressed."""
    rows = batch.where(
        F.col("message_id").isNotNull() & ~F.col("entity").startswith("~") & ~tables.is_control_event()
    )
    bits = (
        _bit("accepted", ACCEPTED)
        .bitwiseOR(_bit("sent", DELIVERED))
        .bitwiseOR(_bit("dead_lettered", DEAD_LETTERED))
        .bitwiseOR(_bit("quarantined", QUARANTINED))
        .bitwiseOR(_bit("handled", HANDLED))
    )
    return rows.groupBy("entity", "message_id").agg(
        bits.alias("bits"),
        F.min(F.when(F.col("kind") == "accepted", F.unix_micros("time") / 1_000_000.0)).alias("accepted_at"),
        F.sum(F.when((F.col("kind") == "sent") & (F.col("path") != "backlog"), 1).otherwise(0)).alias(
            "copies"
        ),
        F.sum(F.when(F.col("kind") == "duplicate_suppressed", 1).otherwise(0)).alias("suppressed"),
    )


def start_stream(
    spark: SparkSession,
    journal_dir: Path,
    checkpoint: Path,
    tally: LiveTally,
    *,
    interval: float,
    lock: Any,
    folded: threading.Event | None = None,
) -> Any:
    """Start the streaming query that folds new journal files into ``tally``; returns the query. ``folded``
    is set after each micro-batch is in the tally."""
    journal_dir.mkdir(parents=True, exist_ok=True)
    stream = (
        spark.readStream.schema(JOURNAL_SCHEMA)
        .option("basePath", uri(journal_dir))
        .option("maxFilesPerTrigger", MAX_FILES_PER_TRIGGER)
        .parquet(uri(journal_dir))
    )
    events = stream.withWatermark("rolled_at", WATERMARK_DELAY).dropDuplicatesWithinWatermark(["event_id"])

    def fold(batch: DataFrame, _batch_id: int) -> None:
        # Runs on the stream's thread while the main thread draws the tally: fold under the lock.
        facts = batch_facts(batch).collect()
        with lock:
            for row in facts:
                tally.add(
                    row["entity"],
                    row["message_id"],
                    int(row["bits"]),
                    accepted_at=row["accepted_at"],
                    copies=int(row["copies"]),
                    suppressed=int(row["suppressed"]),
                )
        if folded is not None:
            folded.set()

    return (
        events.writeStream.foreachBatch(fold)
        .option("checkpointLocation", uri(checkpoint))
        .trigger(processingTime=f"{max(interval, 0.5)} seconds")
        .start()
    )


def missing(settings: Settings, overdue: list[tuple[str, str]]) -> dict[str, int]:
    """Per entity, the ``overdue`` open messages that the live outbox does not hold (module docstring)."""
    from bridge.ledger.live import take_snapshot
    from bridge.redis.connection import sync_client

    if not overdue:
        return {}
    client = sync_client(settings.redis_url.get_secret_value())
    try:
        snapshot = take_snapshot(client, settings, {entity for entity, _ in overdue})
    finally:
        client.close()
    held = set(snapshot.message_ids)
    out: dict[str, int] = {}
    for key in overdue:
        if key not in held and key[0] not in snapshot.unchecked:
            out[key[0]] = out.get(key[0], 0) + 1
    return out


def render(tally: LiveTally, missing_counts: dict[str, int], note: str) -> Any:
    """The live table."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"bridge report --follow  ({note})")
    table.add_column("entity")
    for key in (*LIVE_KEYS, "missing", "broker_duplicates", "suppressed_duplicates"):
        table.add_column(key.replace("_", " "), justify="right")
    for entity, counts in sorted(tally.counts.items()):
        cells = [str(counts[k]) for k in LIVE_KEYS]
        cells += [str(missing_counts.get(entity, 0)), str(counts["broker_duplicates"])]
        cells.append(str(counts["suppressed_duplicates"]))
        table.add_row(Text(entity), *(Text(c) for c in cells))
    return table


def follow(
    spark: SparkSession,
    settings: Settings,
    journal_dir: Path,
    interval: float,
    duration: float | None,
    *,
    live: bool = True,
    grace: float = GRACE,
    on_update: Callable[[LiveTally, dict[str, int]], bool] | None = None,
) -> LiveTally:
    """Run the live view until ``duration`` passes, Ctrl-C, or ``on_update`` (called after every redraw)
    returns True; returns the final tally."""
    from rich.console import Console
    from rich.live import Live

    from bridge.errors import BridgeError

    tally = LiveTally()
    checkpoint = Path(tempfile.mkdtemp(prefix="bridge-follow-"))
    lock = threading.Lock()
    folded = threading.Event()
    query = start_stream(spark, journal_dir, checkpoint, tally, interval=interval, lock=lock, folded=folded)
    shown = False  # the first micro-batch's tally is drawn as soon as it is folded, not up to interval later
    started = time.monotonic()
    missing_counts: dict[str, int] = {}
    note = "starting"
    try:
        with Live(
            render(tally, missing_counts, note), console=Console(stderr=True), auto_refresh=False
        ) as view:
            while duration is None or time.monotonic() - started < duration:
                if query.exception() is not None:
                    raise RuntimeError(f"the streaming query failed: {query.exception()}")
                if live:
                    try:
                        _roll(settings, journal_dir)
                        with lock:
                            overdue = tally.overdue(time.time(), grace)
                        missing_counts = missing(settings, overdue)
                        note = f"journal rolled {time.strftime('%H:%M:%S')}"
                    except BridgeError as exc:
                        note = f"Redis unavailable: {type(exc).__name__}"
                else:
                    note = "offline"
                with lock:
                    view.update(render(tally, missing_counts, note), refresh=True)
                    done = on_update is not None and on_update(tally, missing_counts)
                if done:
                    break
                if shown:
                    time.sleep(interval)
                else:
                    shown = folded.wait(interval)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    return tally


def _roll(settings: Settings, journal_dir: Path) -> None:
    from bridge.redis.connection import sync_client

    client = sync_client(settings.redis_url.get_secret_value())
    try:
        roll_live(client, settings, journal_dir)
    finally:
        client.close()


def roll_live(client: Any, settings: Settings, journal_dir: Path) -> None:
    """Roll every entity's live journal into ``journal_dir`` now (a roller already busy: not waited for)."""
    from bridge.journal.store import JournalStore
    from bridge.ledger.live import outbox_entities, roll_now

    owners = set(outbox_entities(client)) | set(settings.entities)
    owners |= {o for o in JournalStore(client, settings.journal).owners() if not o.startswith("~")}
    roll_now(client, settings, journal_dir, owners, wait=0)
