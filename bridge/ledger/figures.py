"""The one definition of the ledger's figures: Spark transformations, DataFrame in, DataFrame out.

Both the batch report (``bridge.ledger.job``) and the live ledger (``bridge.ledger.stream``) compute
their per-message facts, per-entity counts, event counts and latency samples with these functions, so a
figure means the same thing wherever it is shown (``docs/journal-ledger.md``, "The live ledger").

The per-message facts are *mergeable*: each column is a sum, a minimum or a maximum of a per-event
contribution (``FACTS``). The batch report merges every event of a message at once; the live ledger
merges each micro-batch's events into the facts it already holds, with the same ``merge_facts``, and
gets the same row. Per-entity counts (``COUNTS``) are sums over messages of a per-message value, so the
live ledger keeps them current by adding, per micro-batch, the counts of the changed messages' new facts
and subtracting those of their old facts.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bridge.core.control_events import BARRIER_PATH, PING_RESULT
from bridge.core.journal import EventKind

KEYS = ("entity", "message_id")
PERCENTILES = (0.5, 0.95, 0.99)
PERCENTILE_ACCURACY = 10_000
"""``percentile_approx`` accuracy: exact below this many values per group, 1/10,000 relative rank error
above."""


def _is(kind: str) -> Column:
    return F.col("kind") == kind


def _sent(path: str | None = None) -> Column:
    return _is("sent") if path is None else _is("sent") & (F.col("path") == path)


def _flag(condition: Column) -> Column:
    return F.when(condition, F.lit(1)).otherwise(F.lit(0)).cast("long")


def is_control_event() -> Column:
    """The events of the bridge's control messages (``bridge.core.control_events.is_control``): restore
    barriers and pings, billed but no application message."""
    barrier = _is(EventKind.SENT) & (F.col("path") == BARRIER_PATH)
    ping = _is(EventKind.RECEIVED) & (F.col("result") == PING_RESULT)
    return F.coalesce(barrier | ping, F.lit(False))


def is_message_event() -> Column:
    """Events about one application message: a MessageId, an entity's journal, not a control message."""
    return F.col("message_id").isNotNull() & ~F.col("entity").startswith("~") & ~is_control_event()


Merge = Callable[[str], Column]
FACTS: tuple[tuple[str, Callable[[], Column], Merge], ...] = (
    ("accepted_events", lambda: _flag(_is("accepted")), F.sum),
    ("accepted_at", lambda: F.when(_is("accepted"), F.col("time")), F.min),
    ("accepted_pos", lambda: F.when(_is("accepted"), F.struct("stream_ms", "stream_seq")), F.min),
    ("size", lambda: F.when(_is("accepted"), F.col("size")), F.max),
    ("trace_id", lambda: F.when(_is("accepted"), F.col("trace_id")), F.max),
    ("first_sent", lambda: F.when(_sent(), F.struct(F.col("time").alias("at"), "path")), F.min),
    ("copies", lambda: _flag(_sent() & (F.col("path") != "backlog")), F.sum),
    ("backlog_copies", lambda: _flag(_sent("backlog")), F.sum),
    ("syphon_events", lambda: _flag(_is("syphoned") | _sent("syphon")), F.sum),
    ("dead_letters", lambda: _flag(_is("dead_lettered")), F.sum),
    ("dead_letter_where", lambda: F.when(_is("dead_lettered"), F.col("where")), F.max),
    ("quarantines", lambda: _flag(_is("quarantined")), F.sum),
    ("closed_at", lambda: F.when(_is("dead_lettered") | _is("quarantined"), F.col("time")), F.min),
    ("handled_at", lambda: F.when(_is("handled"), F.col("time")), F.min),
    ("handled_events", lambda: _flag(_is("handled")), F.sum),
    ("receives", lambda: _flag(_is("received")), F.sum),
    ("suppressed", lambda: _flag(_is("duplicate_suppressed")), F.sum),
    ("last_event_at", lambda: F.col("time"), F.max),
)
"""Per-message fact: (name, its value for one event, how two values merge)."""
FACT_COLUMNS = tuple(name for name, _, _ in FACTS)


def event_facts(events: DataFrame) -> DataFrame:
    """One row per message event with its contribution to every fact (no grouping: streams allow it
    anywhere)."""
    return events.where(is_message_event()).select(*KEYS, *(value().alias(name) for name, value, _ in FACTS))


def merge_facts(partial: DataFrame) -> DataFrame:
    """Rows of facts (per event, or already merged) merged into one row per message."""
    return partial.groupBy(*KEYS).agg(*(merge(name).alias(name) for name, _, merge in FACTS))


def message_facts(events: DataFrame) -> DataFrame:
    """Per (entity, message_id): the merged facts, with ``first_sent_at`` and ``first_path`` unpacked."""
    return with_first_sent(merge_facts(event_facts(events)))


def with_first_sent(facts: DataFrame) -> DataFrame:
    """``first_sent_at`` and ``first_path``: when and where the first copy Service Bus accepted went."""
    return facts.select(
        "*", F.col("first_sent.at").alias("first_sent_at"), F.col("first_sent.path").alias("first_path")
    )


def flags(facts: DataFrame) -> DataFrame:
    """``with_first_sent`` facts plus what each message is (``is_accepted``, ..., ``is_open``), the part
    of a message's class that needs no outbox snapshot. ``is_clock_skewed``: the journal says it was sent
    or handled before it was accepted — written by hosts whose clocks disagree."""
    accepted = F.col("accepted_events") > 0
    delivered = F.col("first_sent_at").isNotNull()
    dead = F.col("dead_letters") > 0
    quarantined = F.col("quarantines") > 0
    handled = F.col("handled_at").isNotNull()
    terminal = delivered | dead | quarantined | handled
    in_backlog = (
        delivered & (F.col("first_path") == "backlog") & (F.col("syphon_events") == 0) & ~handled & ~dead
    )
    return facts.select(
        "*",
        accepted.alias("is_accepted"),
        delivered.alias("is_delivered"),
        dead.alias("is_dead_lettered"),
        quarantined.alias("is_quarantined"),
        handled.alias("is_handled"),
        (accepted & ~terminal).alias("is_open"),
        in_backlog.alias("is_pending_backlog"),
        (accepted & (F.col("suppressed") > 0) & ~handled & ~dead).alias("is_suppressed_unhandled"),
        (~accepted & (delivered | handled)).alias("is_unexpected"),
        (
            accepted
            & ((F.col("first_sent_at") < F.col("accepted_at")) | (F.col("handled_at") < F.col("accepted_at")))
        ).alias("is_clock_skewed"),
    )


def _count(flag: str) -> Column:
    return F.sum(F.col(flag).cast("long"))


COUNTS: tuple[tuple[str, Callable[[], Column]], ...] = (
    ("accepted", lambda: _count("is_accepted")),
    ("accepted_events", lambda: F.sum("accepted_events")),
    ("delivered", lambda: _count("is_delivered")),
    ("open", lambda: _count("is_open")),
    ("pending_backlog", lambda: _count("is_pending_backlog")),
    ("dead_lettered", lambda: _count("is_dead_lettered")),
    ("quarantined_messages", lambda: _count("is_quarantined")),
    ("handled", lambda: _count("is_handled")),
    ("unexpected", lambda: _count("is_unexpected")),
    ("broker_duplicates", lambda: F.sum(F.greatest(F.col("copies") - 1, F.lit(0)))),
    ("duplicated_messages", lambda: _count("copies_over_one")),
    ("suppressed_duplicates", lambda: F.sum("suppressed")),
    ("suppressed_unhandled", lambda: _count("is_suppressed_unhandled")),
    ("clock_skewed", lambda: _count("is_clock_skewed")),
)
"""Per-entity counts: each a sum over the entity's messages (``flags`` rows) of one per-message value."""
COUNT_NAMES = tuple(name for name, _ in COUNTS)


def entity_counts(flagged: DataFrame, *extra: Column) -> DataFrame:
    """``COUNTS`` per entity over ``flags`` rows (plus ``extra`` aggregations of the caller's)."""
    rows = flagged.withColumn("copies_over_one", F.col("copies") > 1)
    columns = [F.coalesce(value(), F.lit(0)).cast("long").alias(name) for name, value in COUNTS]
    return rows.groupBy("entity").agg(*columns, *extra)


def event_counts(events: DataFrame, *extra: Column) -> DataFrame:
    """Events and the operations they stand for, per entity, kind, namespace, path and result (what
    billing and the failover counts are computed from), plus ``extra`` aggregations of the caller's."""
    return events.groupBy("entity", "kind", "namespace", "path", "result").agg(
        F.count(F.lit(1)).alias("events"), F.sum(F.coalesce(F.col("count"), F.lit(1))).alias("units"), *extra
    )


def quarantined_without_id() -> Column:
    """1 for a quarantine event whose entry had no MessageId (counted per entity, not per message)."""
    return _flag(_is("quarantined") & F.col("message_id").isNull())


def minute_of(column: str) -> Column:
    """The UTC minute (epoch seconds, a multiple of 60) a timestamp falls in."""
    return (F.floor(F.unix_micros(column) / 60_000_000) * 60).cast("long")


def latency_samples(flagged: DataFrame) -> DataFrame:
    """Per message with a measure: (entity, message_id, measure, minute, ms) — ``service_bus``
    (acceptance to the first copy Service Bus accepted, in the minute of that copy) and ``handler``
    (acceptance to the handler, in the minute it handled it)."""
    accepted = F.unix_micros("accepted_at")
    to_sb = F.struct(
        F.lit("service_bus").alias("measure"),
        minute_of("first_sent_at").alias("minute"),
        ((F.unix_micros("first_sent_at") - accepted) / 1000.0).alias("ms"),
    )
    to_handler = F.struct(
        F.lit("handler").alias("measure"),
        minute_of("handled_at").alias("minute"),
        ((F.unix_micros("handled_at") - accepted) / 1000.0).alias("ms"),
    )
    exploded = flagged.select(*KEYS, F.explode(F.array(to_sb, to_handler)).alias("m"))
    return exploded.select(*KEYS, "m.measure", "m.minute", "m.ms").where(F.col("ms").isNotNull())


def latency_per_minute(samples: DataFrame) -> DataFrame:
    """p50/p95/p99/max per (entity, measure, minute) of ``latency_samples`` rows."""
    return percentiles_by(samples, "entity", "measure", "minute")


def percentiles_by(samples: DataFrame, *keys: str) -> DataFrame:
    """Per ``keys``: the count and the p50/p95/p99/max of the ``ms`` column (one definition for the batch
    report's latency table and the live ledger's latency per minute)."""
    quantiles = F.percentile_approx("ms", list(PERCENTILES), PERCENTILE_ACCURACY)
    return (
        samples.groupBy(*keys)
        .agg(F.count(F.lit(1)).alias("count"), quantiles.alias("q"), F.max("ms").alias("max_ms"))
        .select(
            *keys,
            "count",
            F.col("q")[0].alias("p50_ms"),
            F.col("q")[1].alias("p95_ms"),
            F.col("q")[2].alias("p99_ms"),
            "max_ms",
        )
    )
