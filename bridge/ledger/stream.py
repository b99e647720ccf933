"""The live ledger's Structured Streaming query: new journal files in, committed ledger state out.

The query reads every rolled file once (``maxFilesPerTrigger`` at a time), drops repeated events with
``dropDuplicatesWithinWatermark`` on ``event_id`` (Spark keeps that state in its checkpoint, bounded by a
watermark on ``rolled_at``: a re-roll writes its copies minutes after the first, whatever their event
time), and hands each micro-batch to ``fold``, which merges the batch's per-message facts into the facts
of the messages it holds — with ``bridge.ledger.figures``, the batch report's own functions — and commits
the result under the batch's id (``bridge.ledger.live_store``).

The state holds a message while it is open (accepted, no end yet) or waiting in a backlog queue, and for
``linger`` seconds of journal time after it settled, so a late copy or a late ``handled`` still finds its
message; then it leaves. The journal time is the newest event time read (the ``clock``), not this host's.

A micro-batch costs six Spark actions, whatever its size: its row count (which runs the de-duplication
once and keeps the batch; a batch without rows, which Spark runs only to move the watermark, ends there),
then, at once, the change counts (which materialise the batch's merged facts, joined to the state by a
broadcast of its keys) and the new latency samples (both sides fetched as Arrow and told apart here, no
join) in two threads, and the event counts with the batch's clock and the new state (one Parquet write;
``is_open`` is a column of it, read by ``live_store.open_messages``) in this one; then the latency
percentiles of the minutes it added to. Each runs in one shuffle partition: a batch holds a few thousand
events, and a task costs more than the data it would split.

``Running.stop`` lets the micro-batch in flight finish first: a stop that interrupts a Spark call inside
``foreachBatch`` makes Spark match its own pattern for interruptions against the long Python error that
follows, and that match overflows the stream thread's stack (a ``StackOverflowError`` printed instead of
a clean stop, and the batch lost until the restart).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bridge.core.live_ledger import add_counts, add_entity_events, add_event_counts
from bridge.errors import LedgerStoppingError
from bridge.ledger import figures, live_store
from bridge.ledger.live_store import LedgerPaths
from bridge.ledger.spark import JOURNAL_SCHEMA, LEDGER_COLUMNS, uri

log = logging.getLogger(__name__)

WATERMARK_DELAY = "1 hour"
MAX_FILES_PER_TRIGGER = 200
STATE_FILES = 1
FOLD_PARTITIONS = 1
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
STATE_STORE = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SAMPLE_SCHEMA = "entity string, measure string, ms double, minute long"
KEYS = list(figures.KEYS)


@dataclass
class LiveFold:
    """What the query's ``foreachBatch`` calls: ``fold``, one batch at a time and never after
    ``stopping`` is set."""

    paths: LedgerPaths
    options: Mapping[str, float]
    stopping: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self.lock:
            if self.stopping:
                raise LedgerStoppingError("the live ledger is stopping")
            fold(batch, batch_id, self.paths, self.options)


@dataclass
class Running:
    """The started query and its fold."""

    query: Any
    fold: LiveFold

    def exception(self) -> Any:
        """Why the query failed (None while it runs)."""
        return self.query.exception()

    def stop(self, wait: float = 600.0) -> None:
        """Stop after the micro-batch in flight, if any, committed (up to ``wait`` seconds for it)."""
        acquired = self.fold.lock.acquire(timeout=wait)
        self.fold.stopping = True
        if acquired:
            self.fold.lock.release()
        self.query.stop()


def start(spark: SparkSession, journal: Path, paths: LedgerPaths, options: Mapping[str, float]) -> Running:
    """Start the query (``options``: ``interval``, ``linger``, ``latency_minutes``, ``max_files``: files per
    micro-batch)."""
    journal.mkdir(parents=True, exist_ok=True)
    paths.root.mkdir(parents=True, exist_ok=True)
    if spark.conf.get(STATE_STORE, None) is None:
        # The de-duplication keeps an hour of event ids. Spark's default store holds them on the JVM heap,
        # two versions at a time (about 430 bytes an event as Spark reports it: some 9 GB for an hour at
        # 2,000 msgs/s); RocksDB keeps them on local disk. A checkpoint keeps the store it was started
        # with (Spark restores the setting from its offset log).
        spark.conf.set(STATE_STORE, ROCKSDB_STATE_STORE)
    stream = (
        spark.readStream.schema(JOURNAL_SCHEMA)
        .option("basePath", uri(journal))
        .option("maxFilesPerTrigger", int(options.get("max_files", MAX_FILES_PER_TRIGGER)))
        .parquet(uri(journal))
        # Only what the fold reads: Parquet decodes these columns alone, the batch caches them alone.
        .select("event_id", "rolled_at", *LEDGER_COLUMNS)
    )
    events = stream.withWatermark("rolled_at", WATERMARK_DELAY).dropDuplicatesWithinWatermark(["event_id"])
    live = LiveFold(paths, options)
    query = (
        events.writeStream.foreachBatch(live)
        .option("checkpointLocation", uri(paths.checkpoint))
        .trigger(processingTime=f"{max(float(options['interval']), 0.2)} seconds")
        .queryName("bridge-ledger")
        .start()
    )
    return Running(query, live)


Counts = dict[str, dict[str, int]]


def _messages(spark: SparkSession, folder: Path | None, like: DataFrame) -> DataFrame:
    """A committed version's messages (their facts, whatever else the version holds); none before the
    first version."""
    path = None if folder is None else folder / "messages"
    if path is None or not path.is_dir():
        return like.limit(0)
    return spark.read.parquet(uri(path)).select(*KEYS, *figures.FACT_COLUMNS)


def fold(batch: DataFrame, batch_id: int, paths: LedgerPaths, options: Mapping[str, float]) -> None:
    """Merge one micro-batch into the committed state and commit it as version ``batch_id`` (a batch
    committed already is read but not counted: Spark runs the last one again after a restart)."""
    spark = batch.sparkSession
    folder, totals = live_store.current(paths)
    if batch_id <= int(totals["batch_id"]):
        # Read it through all the same: Spark commits the de-duplication state of a micro-batch only
        # when foreachBatch consumed every partition of it (and fails the query otherwise).
        batch.write.format("noop").mode("overwrite").save()
        log.info("micro-batch %d is committed already: read, not counted", batch_id)
        return
    events = batch.persist(StorageLevel.MEMORY_AND_DISK)
    if events.count() == 0:
        # A batch Spark runs only to move the watermark (its de-duplication evicts then): it changes no
        # count, and each of the fold's actions would run the de-duplication again (a batch with no rows
        # is not kept by ``persist``), each loading the state and scanning it for what to evict.
        events.unpersist()
        return
    partitions = spark.conf.get(SHUFFLE_PARTITIONS)
    # A micro-batch is small: a shuffle of few partitions costs fewer tasks (the streaming query's own
    # de-duplication keeps the partitions its checkpoint recorded).
    spark.conf.set(SHUFFLE_PARTITIONS, str(FOLD_PARTITIONS))
    try:
        _fold(spark, events, batch_id=batch_id, paths=paths, options=options, folder=folder, totals=totals)
    finally:
        spark.conf.set(SHUFFLE_PARTITIONS, partitions or "200")
        events.unpersist()


def _fold(
    spark: SparkSession,
    events: DataFrame,
    *,
    batch_id: int,
    paths: LedgerPaths,
    options: Mapping[str, float],
    folder: Path | None,
    totals: dict[str, Any],
) -> None:
    """Commit version ``batch_id``: the messages the batch touched merged again with their new events
    (joined by a broadcast of the batch's keys), the others as they were.

    The change counts and the latency samples run in two threads beside this one's event counts and
    state write: each Spark action spends about as long planning on the driver as running, so three
    actions at once keep both of a small machine's cores busy (Spark runs jobs of several threads of
    one session side by side)."""
    new = figures.merge_facts(figures.event_facts(events)).persist()
    previous = _messages(spark, folder, new)
    changed = F.broadcast(new.select(*KEYS))
    touched = previous.join(changed, KEYS, "left_semi").persist()
    after = figures.merge_facts(touched.unionByName(new)).persist()
    try:
        before_flags = figures.flags(figures.with_first_sent(touched))
        after_flags = figures.flags(figures.with_first_sent(after))
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="bridge-ledger-fold") as pool:
            changes = pool.submit(_changes, before_flags, after_flags)
            samples = pool.submit(_new_samples, before_flags, after_flags)
            clock, events_read = _event_counts(events, totals)
            latency = pool.submit(
                lambda: _latency(
                    spark, paths, batch_id=batch_id, samples=samples.result(), clock=clock,
                    rows=totals["latency"], options=options,
                )
            )  # fmt: skip
            state = previous.join(changed, KEYS, "left_anti").unionByName(after)
            kept = _kept(figures.flags(figures.with_first_sent(state)), clock, float(options["linger"]))
            kept = kept.select(*KEYS, *figures.FACT_COLUMNS, "is_open", "is_suppressed_unhandled")
            kept.coalesce(STATE_FILES).write.mode("overwrite").parquet(
                uri(paths.version(batch_id) / "messages")
            )
            totals["counts"] = add_counts(totals["counts"], *changes.result())
            totals["latency"] = latency.result()
    finally:
        for frame in (new, touched, after):
            frame.unpersist()
    totals["events"] = int(totals["events"]) + events_read
    totals["clock"] = clock
    totals["batch_id"] = batch_id
    live_store.commit(paths, batch_id, totals)


def _changes(before: DataFrame, after: DataFrame) -> tuple[Counts, Counts]:
    """The changed messages' counts after and before the batch (one Spark job: the entity column of each
    side is tagged, then untagged)."""
    both = after.withColumn("entity", F.concat(F.lit("+"), "entity")).unionByName(
        before.withColumn("entity", F.concat(F.lit("-"), "entity"))
    )
    plus: Counts = {}
    minus: Counts = {}
    for row in figures.entity_counts(both).collect():
        side = plus if row["entity"].startswith("+") else minus
        side[row["entity"][1:]] = {name: int(row[name]) for name in figures.COUNT_NAMES}
    return plus, minus


def _new_samples(before: DataFrame, after: DataFrame) -> pa.Table:
    """The latency samples the batch added: the changed messages' samples after it that they did not
    have before (one Spark job, no shuffle: both sides fetched as Arrow and told apart here with an
    anti-join; a ``collect`` of Python rows cost about a second per 50,000 samples)."""
    both = (
        figures.latency_samples(after)
        .select("*", F.lit(True).alias("new"))
        .unionByName(figures.latency_samples(before).select("*", F.lit(False).alias("new")))
    )
    table = both.toArrow()
    keys = [*KEYS, "measure"]
    old = table.filter(pc.invert(table["new"])).select(keys)
    added = table.filter(table["new"]).join(old, keys=keys, join_type="left anti")
    return added.select(["entity", "measure", "minute", "ms"])


def _event_counts(events: DataFrame, totals: dict[str, Any]) -> tuple[float | None, int]:
    """Add the batch's event counts to ``totals``, and to each entity's ``entity_events`` its first and
    last event time and its quarantines without a MessageId (what the report's reconciliation row adds
    to the message counts); returns the new clock and the events read (one job: the batch's newest event
    time is the newest of its groups')."""
    extra = (
        F.min("time").alias("first"),
        F.max("time").alias("clock"),
        F.sum(figures.quarantined_without_id()).alias("no_id"),
    )
    rows = figures.event_counts(events, *extra).collect()
    event_rows = [
        ((r["entity"], r["kind"], r["namespace"], r["path"], r["result"]), int(r["events"]), int(r["units"]))
        for r in rows
    ]
    old = {tuple(row[:5]): (int(row[5]), int(row[6])) for row in totals["event_counts"]}
    merged = add_event_counts(old, event_rows)
    totals["event_counts"] = [[*key, n, units] for key, (n, units) in sorted(merged.items(), key=str)]
    per_entity: dict[str, dict[str, Any]] = totals.setdefault("entity_events", {})
    for r in rows:
        add_entity_events(
            per_entity, r["entity"], _seconds(r["first"]), _seconds(r["clock"]), int(r["no_id"])
        )
    newest = max((r["clock"] for r in rows if r["clock"] is not None), default=None)
    return _newest(totals.get("clock"), newest), sum(n for _, n, _ in event_rows)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value.timestamp())


def _newest(old: float | None, batch_clock: Any) -> float | None:
    seconds = _seconds(batch_clock)
    candidates = [value for value in (old, seconds) if value is not None]
    return max(candidates) if candidates else None


def _kept(flagged: DataFrame, clock: float | None, linger: float) -> DataFrame:
    """Messages that stay: open, waiting in a backlog queue, lost as a suppressed duplicate (so a report
    from the ledger can name it), or settled less than ``linger`` ago."""
    if clock is None:
        return flagged
    settled = ~F.col("is_open") & ~F.col("is_pending_backlog") & ~F.col("is_suppressed_unhandled")
    recent = F.unix_micros("last_event_at") >= F.lit(int((clock - linger) * 1_000_000))
    return flagged.where(~settled | recent)


def _latency(
    spark: SparkSession,
    paths: LedgerPaths,
    *,
    batch_id: int,
    samples: pa.Table,
    clock: float | None,
    rows: list[dict[str, Any]],
    options: Mapping[str, float],
) -> list[dict[str, Any]]:
    """``rows`` (percentiles per entity, measure and minute) with the minutes this batch added to
    recomputed, and the minutes older than ``latency_minutes`` before ``clock`` dropped."""
    minutes = live_store.write_samples(paths, batch_id, samples)
    kept = [row for row in rows if int(row["minute"]) not in minutes]
    if minutes:
        folders = [f"file://{(paths.latency / f'minute={m}').resolve()}" for m in sorted(minutes)]
        frame = spark.read.schema(SAMPLE_SCHEMA).option("basePath", uri(paths.latency)).parquet(*folders)
        kept += [row.asDict() for row in figures.latency_per_minute(frame).collect()]
    if clock is not None:
        oldest = int(clock // 60 * 60 - 60 * int(options["latency_minutes"]))
        live_store.drop_samples_before(paths, oldest)
        kept = [row for row in kept if int(row["minute"]) >= oldest]
    return sorted(kept, key=lambda r: (r["entity"], r["measure"], int(r["minute"])))
