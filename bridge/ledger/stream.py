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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bridge.core.live_ledger import add_counts, add_event_counts
from bridge.ledger import figures, live_store
from bridge.ledger.live_store import LedgerPaths
from bridge.ledger.spark import JOURNAL_SCHEMA, uri

log = logging.getLogger(__name__)

WATERMARK_DELAY = "1 hour"
MAX_FILES_PER_TRIGGER = 200
STATE_FILES = 2
FOLD_PARTITIONS = 2
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SAMPLE_SCHEMA = "entity string, measure string, ms double, minute long"
KEYS = list(figures.KEYS)


def start(spark: SparkSession, journal: Path, paths: LedgerPaths, options: Mapping[str, float]) -> Any:
    """Start the query (``options``: ``interval``, ``linger``, ``latency_minutes``, ``max_files``: files per
    micro-batch); returns it."""
    journal.mkdir(parents=True, exist_ok=True)
    paths.root.mkdir(parents=True, exist_ok=True)
    stream = (
        spark.readStream.schema(JOURNAL_SCHEMA)
        .option("basePath", uri(journal))
        .option("maxFilesPerTrigger", int(options.get("max_files", MAX_FILES_PER_TRIGGER)))
        .parquet(uri(journal))
    )
    events = stream.withWatermark("rolled_at", WATERMARK_DELAY).dropDuplicatesWithinWatermark(["event_id"])

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        fold(batch, batch_id, paths, options)

    return (
        events.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", uri(paths.checkpoint))
        .trigger(processingTime=f"{max(float(options['interval']), 0.2)} seconds")
        .queryName("bridge-ledger")
        .start()
    )


Counts = dict[str, dict[str, int]]


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


def _messages(spark: SparkSession, folder: Path | None, like: DataFrame) -> DataFrame:
    path = None if folder is None else folder / "messages"
    if path is None or not path.is_dir():
        return like.limit(0)
    return spark.read.schema(like.schema).parquet(uri(path))


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
    new = figures.merge_facts(figures.event_facts(events)).persist()
    previous = _messages(spark, folder, new)
    touched = previous.join(new.select(*KEYS), KEYS, "left_semi").persist()
    after = figures.merge_facts(touched.unionByName(new)).persist()
    try:
        before_flags = figures.flags(figures.with_first_sent(touched))
        after_flags = figures.flags(figures.with_first_sent(after))
        totals["counts"] = add_counts(totals["counts"], *_changes(before_flags, after_flags))
        known = figures.latency_samples(before_flags).select(*KEYS, "measure")
        samples = figures.latency_samples(after_flags).join(known, [*KEYS, "measure"], "left_anti")
        sample_rows = [row.asDict() for row in samples.collect()]
        summary = events.agg(F.count(F.lit(1)).alias("n"), F.max("time").alias("clock")).first()
        assert summary is not None
        clock = _newest(totals.get("clock"), summary["clock"])
        state = previous.join(new.select(*KEYS), KEYS, "left_anti").unionByName(after)
        kept = _kept(figures.flags(figures.with_first_sent(state)), clock, float(options["linger"])).persist()
        version = paths.version(batch_id)
        kept.select(*KEYS, *figures.FACT_COLUMNS).coalesce(STATE_FILES).write.mode("overwrite").parquet(
            uri(version / "messages")
        )
        open_rows = kept.where(F.col("is_open")).select(
            *KEYS, (F.unix_micros("accepted_at") / 1_000_000.0).alias("accepted_at")
        )
        open_rows.coalesce(1).write.mode("overwrite").parquet(uri(version / "open"))
        kept.unpersist()
    finally:
        for frame in (new, touched, after):
            frame.unpersist()
    event_rows = [
        ((r["entity"], r["kind"], r["namespace"], r["path"], r["result"]), int(r["events"]), int(r["units"]))
        for r in figures.event_counts(events).collect()
    ]
    old = {tuple(row[:5]): (int(row[5]), int(row[6])) for row in totals["event_counts"]}
    merged = add_event_counts(old, event_rows)
    totals["event_counts"] = [[*key, n, units] for key, (n, units) in sorted(merged.items(), key=str)]
    totals["events"] = int(totals["events"]) + int(summary["n"])
    totals["clock"] = clock
    totals["latency"] = _latency(
        spark, paths, batch_id=batch_id, samples=sample_rows, totals=totals, options=options
    )
    totals["batch_id"] = batch_id
    live_store.commit(paths, batch_id, totals)


def _newest(old: float | None, batch_clock: Any) -> float | None:
    seconds = None if batch_clock is None else batch_clock.timestamp()
    candidates = [value for value in (old, seconds) if value is not None]
    return max(candidates) if candidates else None


def _kept(flagged: DataFrame, clock: float | None, linger: float) -> DataFrame:
    """Messages that stay: open, waiting in a backlog queue, or settled less than ``linger`` ago."""
    if clock is None:
        return flagged
    settled = ~F.col("is_open") & ~F.col("is_pending_backlog")
    recent = F.unix_micros("last_event_at") >= F.lit(int((clock - linger) * 1_000_000))
    return flagged.where(~settled | recent)


def _latency(
    spark: SparkSession,
    paths: LedgerPaths,
    *,
    batch_id: int,
    samples: list[dict[str, Any]],
    totals: Mapping[str, Any],
    options: Mapping[str, float],
) -> list[dict[str, Any]]:
    """Percentiles per (entity, measure, minute), recomputed for the minutes this batch added to."""
    minutes = live_store.write_samples(paths, batch_id, samples)
    rows = [row for row in totals["latency"] if int(row["minute"]) not in minutes]
    if minutes:
        folders = [f"file://{(paths.latency / f'minute={m}').resolve()}" for m in sorted(minutes)]
        frame = spark.read.schema(SAMPLE_SCHEMA).option("basePath", uri(paths.latency)).parquet(*folders)
        rows += [row.asDict() for row in figures.latency_per_minute(frame).collect()]
    clock = totals.get("clock")
    if clock is not None:
        oldest = int(clock // 60 * 60 - 60 * int(options["latency_minutes"]))
        live_store.drop_samples_before(paths, oldest)
        rows = [row for row in rows if int(row["minute"]) >= oldest]
    return sorted(rows, key=lambda r: (r["entity"], r["measure"], int(r["minute"])))
