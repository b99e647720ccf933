"""The ledger's tables, computed by Spark from the rolled journal.

- ``messages``: one row per (entity, MessageId) with what the journal says happened to it, and its
  class (``bridge.ledger.live`` explains how "pending" and "lost" are told apart);
- ``reconciliation``: per entity, accepted / delivered / pending / dead-lettered / quarantined / handled /
  lost / unexpected, duplicates (copies Service Bus accepted, copies receivers suppressed), and of the lost
  the ones completed as duplicates that no receiver handled (``suppressed_unhandled``);
- ``lost`` and ``duplicates``: the MessageIds behind those counts;
- ``latency``: acceptance to first Service Bus acceptance and to the handler, p50/p95/p99/max in
  milliseconds per entity and path (``direct``, ``backup``, ``backlog+syphon``, ``all``);
- ``event_counts``: events per entity, kind, namespace, path and result (what billing is computed from);
- ``timeline_events``: the entity-level events of the failover story (few; collected by the driver);
- ``series``: per entity and time bucket, messages accepted, delivered and settled, and the latency of
  those delivered in it; ``namespace_health``: per namespace and bucket, what it took and what it refused
  (``bridge.core.series`` makes the charts' lines and bands of them).

The tables the driver collects (all but ``lost`` and ``duplicates``) come unsorted: the driver sorts their
few rows itself (``bridge.ledger.job``), where a Spark ``orderBy`` would cost a sampling job and a shuffle
each.

A message's path is the path of its first accepted copy; one that went to a backlog queue is
``backlog+syphon`` (the syphon moves it on; ``pending_backlog`` while it has not).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bridge.ledger import figures

PERCENTILES = figures.PERCENTILES
PERCENTILE_ACCURACY = figures.PERCENTILE_ACCURACY
is_control_event = figures.is_control_event
event_counts = figures.event_counts

TIMELINE_KINDS = ("role_swapped", "failover_engaged", "failover_ended", "backlog_rotation_changed")


def _is(kind: str) -> Column:
    return F.col("kind") == kind


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def message_facts(events: DataFrame) -> DataFrame:
    """Per (entity, message_id): counts and first times of each kind of event (``figures.FACTS``)."""
    return figures.message_facts(events)


def classify(
    facts: DataFrame, outbox: DataFrame, watermarks: DataFrame, *, checked: bool, drained: bool = False
) -> DataFrame:
    """``message_facts`` plus booleans: accepted, delivered, ..., pending_outbox, pending_backlog, lost.

    A message a receiver completed as a duplicate while no receiver ever handled it (nor dead-lettered it)
    is lost too (``is_suppressed_unhandled``): a receiver remembers an id as handled in the same script
    that journals its ``handled`` event, so such a copy matched another id's fingerprint
    (``bridge.core.seen``) and the application never saw the message.

    ``outbox`` (entity, message_id) is the live snapshot and ``watermarks`` (entity, wm_ms, wm_seq) the
    journal position it was taken against; with ``checked`` False there is no snapshot and every open
    message counts as pending. ``drained`` says the outbox is known to be empty (a finished run): every
    open message is lost.
    """
    in_outbox = outbox.select("entity", "message_id", F.lit(True).alias("in_outbox")).dropDuplicates(
        ["entity", "message_id"]
    )
    marks = watermarks.select("entity", "wm_ms", "wm_seq")
    joined = figures.flags(facts).join(in_outbox, ["entity", "message_id"], "left")
    joined = joined.join(F.broadcast(marks), "entity", "left")
    pos = F.col("accepted_pos")
    before_watermark = F.col("wm_ms").isNotNull() & (
        (pos["stream_ms"] < F.col("wm_ms"))
        | ((pos["stream_ms"] == F.col("wm_ms")) & (pos["stream_seq"] <= F.col("wm_seq")))
    )
    # Without a snapshot nothing can be told lost: every open message counts as pending.
    in_snapshot = F.coalesce(F.col("in_outbox"), F.lit(False))
    if drained:
        waiting = F.lit(False)
    elif checked:
        waiting = in_snapshot | ~before_watermark
    else:
        waiting = F.lit(True)
    open_ = F.col("is_open")
    path = (
        F.when(F.col("first_path").isin("backlog", "syphon"), F.lit("backlog+syphon"))
        .when(F.col("first_path").isNotNull(), F.col("first_path"))
        .otherwise(F.lit(None))
    )
    return joined.select(
        "*",
        (open_ & waiting).alias("is_pending_outbox"),
        ((open_ & ~waiting) | F.col("is_suppressed_unhandled")).alias("is_lost"),
        path.alias("path"),
        ((F.unix_micros("first_sent_at") - F.unix_micros("accepted_at")) / 1000.0).alias("to_service_bus_ms"),
        ((F.unix_micros("handled_at") - F.unix_micros("accepted_at")) / 1000.0).alias("to_handler_ms"),
    ).drop("in_outbox", "wm_ms", "wm_seq")


def reconciliation(messages: DataFrame, events: DataFrame) -> DataFrame:
    """Per entity counts (``bridge.core.ledger.SUMMARY_KEYS`` and ``EXTRA_KEYS``): ``figures.COUNTS``,
    and what needs the outbox snapshot (pending in the outbox, lost)."""

    def total(flag: str) -> Column:
        return _count_if(F.col(flag))

    per_message = figures.entity_counts(
        messages, total("is_pending_outbox").alias("pending_outbox"), total("is_lost").alias("lost")
    )
    per_message = per_message.select(
        "*", (F.col("pending_outbox") + F.col("pending_backlog")).alias("pending")
    ).drop("open")
    entity_level = (
        events.where(~F.col("entity").startswith("~"))
        .groupBy("entity")
        .agg(
            F.sum(figures.quarantined_without_id()).alias("quarantined_without_id"),
            F.count(F.lit(1)).alias("events"),
            F.min("time").alias("first_event_at"),
            F.max("time").alias("last_event_at"),
        )
    )
    joined = entity_level.join(per_message, "entity", "left").na.fill(0)
    return joined.select(
        "*", (F.col("quarantined_messages") + F.col("quarantined_without_id")).alias("quarantined")
    )


def overflow(rolled: DataFrame) -> DataFrame:
    """Per journal owner, events that found the journal full (``journal_overflow`` rows, read before the
    de-duplication: a re-roll repeats a row's id with a count at least as high, and the highest is right).
    """
    rows = rolled.where(_is("journal_overflow"))
    highest = rows.groupBy("entity", "event_id").agg(F.max(F.coalesce(F.col("count"), F.lit(1))).alias("n"))
    return highest.groupBy("entity").agg(F.sum("n").alias("journal_overflow"))


def lost(messages: DataFrame) -> DataFrame:
    """The MessageIds counted as lost, with when they were accepted and their trace (``docs/tracing.md``)."""
    return messages.where(F.col("is_lost")).select("entity", "message_id", "accepted_at", "size", "trace_id")


def duplicates(messages: DataFrame) -> DataFrame:
    """Messages Service Bus accepted more than once, or of which a receiver suppressed a copy."""
    return messages.where((F.col("copies") > 1) | (F.col("suppressed") > 0)).select(
        "entity", "message_id", "copies", "backlog_copies", "suppressed", "path", "trace_id"
    )


def latency(messages: DataFrame) -> DataFrame:
    """Percentiles per (entity, path, measure), plus ``path = all`` per entity."""
    measures = messages.select(
        "entity",
        "path",
        F.explode(
            F.array(
                F.struct(F.lit("service_bus").alias("measure"), F.col("to_service_bus_ms").alias("ms")),
                F.struct(F.lit("handler").alias("measure"), F.col("to_handler_ms").alias("ms")),
            )
        ).alias("m"),
    ).select("entity", "path", "m.measure", "m.ms")
    measures = measures.where(F.col("ms").isNotNull() & F.col("path").isNotNull())
    everything = measures.withColumn("path", F.lit("all"))
    both = measures.unionByName(everything)
    return figures.percentiles_by(both, "entity", "path", "measure")


def timeline_events(events: DataFrame) -> DataFrame:
    """The failover story's events (few)."""
    return events.where(F.col("kind").isin(*TIMELINE_KINDS)).select(
        "entity", "time", "kind", "from_role", "to_role", "reason", "queue", "result"
    )


def _bucket(column: Column | str, origin: float, step: int) -> Column:
    seconds = F.unix_micros(column) / 1_000_000.0
    return F.floor((seconds - F.lit(origin)) / F.lit(step)).cast("int")


def series(messages: DataFrame, origin: float, step: int) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Per (entity, bucket): messages accepted; messages whose first copy Service Bus accepted, with the
    p50/p99 of their time to it; accepted messages settled (delivered, handled, dead-lettered or
    quarantined: the outbox no longer holds them)."""
    accepted = (
        messages.where(F.col("is_accepted"))
        .groupBy("entity", _bucket("accepted_at", origin, step).alias("bucket"))
        .agg(F.count(F.lit(1)).alias("n"))
    )
    quantiles = F.percentile_approx("to_service_bus_ms", [0.5, 0.99], PERCENTILE_ACCURACY)
    delivered = (
        messages.where(F.col("first_sent_at").isNotNull())
        .groupBy("entity", _bucket("first_sent_at", origin, step).alias("bucket"))
        .agg(F.count(F.lit(1)).alias("n"), quantiles.alias("q"))
        .select("entity", "bucket", "n", F.col("q")[0].alias("p50_ms"), F.col("q")[1].alias("p99_ms"))
    )
    settled_at = F.least("first_sent_at", "handled_at", "closed_at")
    settled = (
        messages.where(F.col("is_accepted") & settled_at.isNotNull())
        .groupBy("entity", _bucket(settled_at, origin, step).alias("bucket"))
        .agg(F.count(F.lit(1)).alias("n"))
    )
    return accepted, delivered, settled


def namespace_health(events: DataFrame, origin: float, step: int) -> DataFrame:
    """Per (namespace, bucket): operations it accepted (copies sent, pings answered) and refused (failed
    sends and pings)."""
    ok = _is("sent") | (_is("ping") & (F.col("result") == "accepted"))
    failed = _is("send_failed") | (_is("ping") & (F.col("result") == "failed"))
    return (
        events.where(F.col("namespace").isNotNull() & (ok | failed))
        .groupBy("namespace", _bucket("time", origin, step).alias("bucket"))
        .agg(_count_if(ok).alias("ok"), _count_if(failed).alias("failed"))
    )
