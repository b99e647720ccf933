"""The outbox layout while its shard count changes (``bridge.core.layout``): a table, no Redis."""

from __future__ import annotations

import pytest

from bridge.core.layout import Layout, next_migration, stream_id


def test_stream_ids_compare_numerically() -> None:
    assert stream_id("10-0") > stream_id("9-5")
    assert stream_id("10-10") > stream_id("10-9")
    assert stream_id("7") == (7, 0)


MIGRATING = Layout(shards=4, previous=2, boundaries={0: "100-0", 1: "90-3"})


@pytest.mark.parametrize(
    ("shard", "entry_id", "old", "waits"),
    [
        (0, "99-9", True, False),  # written before the change: goes
        (0, "100-0", True, False),  # the boundary itself is old
        (0, "100-1", False, True),  # written after: waits for the old layout
        (1, "90-4", False, True),
        (3, "50-0", False, True),  # a new shard holds only new entries
    ],
)
def test_old_entries_go_and_new_ones_wait_while_migrating(
    shard: int, entry_id: str, old: bool, waits: bool
) -> None:
    assert MIGRATING.is_old(shard, entry_id) is old
    assert MIGRATING.must_wait(shard, entry_id) is waits


def test_read_count_covers_both_layouts_and_nothing_waits_when_stable() -> None:
    assert MIGRATING.read_count == 4
    assert Layout(shards=2, previous=4, boundaries={3: "1-0"}).read_count == 4
    stable = Layout(shards=3)
    assert stable.read_count == 3 and not stable.migrating and not stable.must_wait(0, "1-0")
    # Every old shard was empty when the change started: nothing to wait for
    assert not Layout(shards=4, previous=2).must_wait(3, "5-0")


def test_fields_round_trip_and_next_migration() -> None:
    assert Layout.from_fields(MIGRATING.to_fields()) == MIGRATING
    assert Layout.from_fields({}) is None
    assert Layout.from_fields({b"shards": b"2", b"b:0": b"1-1", b"previous": b"1"}) == Layout(
        2, 1, {0: "1-1"}
    )
    assert next_migration(None, 4) is None  # the first write records the count
    assert next_migration(Layout(2), 2) is None
    assert next_migration(Layout(2), 4) == 4
    assert next_migration(MIGRATING, 8) is None  # one change at a time


def test_one_shard_is_a_layout_and_none_is_refused() -> None:
    assert Layout(1, previous=1).read_count == 1
    with pytest.raises(ValueError, match=r"^an outbox has at least one shard$"):
        Layout(0)
    with pytest.raises(ValueError, match=r"^an outbox has at least one shard$"):
        Layout(2, previous=0)


def test_a_layout_without_a_migration_reads_back_from_its_hash() -> None:
    boundaries = {1: "5-0"}
    layout = Layout(4, boundaries=boundaries)
    boundaries[2] = "6-0"  # the caller's dict changes afterwards

    assert Layout.from_fields({b"shards": b"4", b"b:1": b"5-0"}) == layout
    assert dict(layout.boundaries) == {1: "5-0"}
