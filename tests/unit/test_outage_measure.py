"""``bench/outage_measure.py``'s pure parts with known answers: which messages the journal shows existed
only on a lost primary, the outbox drain figures, and the ride-out table."""

from __future__ import annotations

from typing import Any

import pytest

from bench.outage_measure import OutboxWatch, aggregate, duration, only_on_lost, ride_out_table


def sent(message_id: str, role: str, at: float, entity: str = "e") -> dict[str, Any]:
    return {
        "kind": "sent",
        "message_id": message_id,
        "role": role,
        "stream_ms": int(at * 1000),
        "entity": entity,
    }


def test_only_on_lost_keeps_the_primarys_unhandled_copies_from_before_the_re_creation() -> None:
    rows = [
        sent("only", "primary", 10.0),
        sent("both", "primary", 10.0),
        sent("both", "secondary", 10.0),
        sent("handled", "primary", 10.0),
        {"kind": "handled", "message_id": "handled", "role": "primary", "stream_ms": 11_000, "entity": "e"},
        sent("again", "primary", 10.0),
        sent("again", "primary", 30.0),  # syphoned or re-sent to the re-created primary
        sent("late", "primary", 30.0),
        sent("other", "primary", 12.0, entity="f"),
        {"kind": "accepted", "message_id": "never-sent", "role": None, "stream_ms": 1, "entity": "e"},
    ]
    assert only_on_lost(rows, recreated_at=20.0) == {"e": ["only"], "f": ["other"]}


def test_the_drain_of_each_entity_runs_from_its_first_fall_after_the_restore_to_its_empty_outbox() -> None:
    watch = OutboxWatch("redis://unused", ["a", "b"])
    watch.rows = [
        (9.0, {"a": 90, "b": 0}),
        (10.0, {"a": 100, "b": 0}),
        (10.5, {"a": 100, "b": 0}),
        (11.0, {"a": 60, "b": 0}),
        (12.0, {"a": 2, "b": 0}),
    ]
    acked = [{"entity": "a", "t_ack": 11.5}, {"entity": "b", "t_ack": 11.5}, {"entity": "a", "t_ack": 20.0}]
    result = watch.drain(restored=10.0, acked=acked, empty_at=5)
    assert result["peak"] == 100
    a = result["per_entity"]["a"]
    assert (a["at_restore"], a["start_after_restore_s"], a["end_after_restore_s"]) == (100, 0.5, 2.0)
    assert a["moved"] == 101 and a["rate"] == pytest.approx(101 / 1.5, abs=0.1)
    assert result["all_entities"] == {"moved": 101, "busy_s": 1.5, "rate": round(101 / 1.5, 1)}
    # b held nothing to drain: it counts as drained at the restore
    assert "rate" not in result["per_entity"]["b"] and result["drained_after_restore_s"] == 2.0
    # The drain as a whole runs from the restore, its wait included: both entities' arrivals count
    assert result["from_restore"] == {"moved": 102, "seconds": 2.0, "rate": 51.0}
    stuck = OutboxWatch("redis://unused", ["a"])
    stuck.rows = [(10.0, {"a": 100}), (11.0, {"a": 100})]
    assert "drained_after_restore_s" not in stuck.drain(restored=10.0, acked=[], empty_at=5)


def test_the_ride_out_table_divides_the_default_bound_by_the_rate() -> None:
    rows = ride_out_table(bytes_per_entry=400.0, counted_size=200.0, rates=(1_000,))
    # 1 GiB / 200 bytes is more than 1,000,000 messages: the message bound comes first
    assert rows[0]["bound_messages"] == 1_000_000
    assert rows[0]["bound_seconds"] == 1_000.0
    assert rows[0]["redis_bytes_at_bound"] == 400_000_000.0
    big = ride_out_table(bytes_per_entry=4000.0, counted_size=4096.0, rates=(100,))
    assert big[0]["bound_messages"] == 1024**3 // 4096
    assert duration(1000) == "16 min 40 s" and duration(7260) == "2 h 1 min" and duration(42) == "42 s"


def test_the_drains_together_count_overlapping_windows_once() -> None:
    per_entity: dict[str, dict[str, Any]] = {
        "a": {"start_after_restore_s": 1.0, "end_after_restore_s": 5.0, "moved": 100, "rate": 25.0},
        "b": {"start_after_restore_s": 3.0, "end_after_restore_s": 6.0, "moved": 50, "rate": 16.7},
        "c": {"start_after_restore_s": 10.0, "end_after_restore_s": 12.0, "moved": 50, "rate": 25.0},
        "d": {"at_restore": 0},
    }
    assert aggregate(per_entity, restored=100.0) == {"moved": 200, "busy_s": 7.0, "rate": round(200 / 7, 1)}
