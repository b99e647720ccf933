"""How many outbox entries one read or claim takes (``bridge.delivery.tenure.read_count``)."""

from __future__ import annotations

from bridge.delivery.tenure import READ_BYTES, READ_COUNT, read_count


def test_small_or_unknown_entries_are_read_up_to_the_most_at_a_time() -> None:
    assert read_count(None) == READ_COUNT
    assert read_count(0) == READ_COUNT
    assert read_count(300) == READ_COUNT


def test_large_entries_are_read_fewer_at_a_time_so_a_read_stays_about_read_bytes() -> None:
    assert read_count(256 * 1024) == READ_BYTES // (256 * 1024)
    assert read_count(READ_BYTES / 10) == 10
    assert read_count(READ_BYTES * 10) == 1  # never none
