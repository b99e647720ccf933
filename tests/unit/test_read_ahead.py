"""The read ahead of a drainer's next batch (``bridge.delivery.read_ahead``): never lost, never overtaken."""

from __future__ import annotations

import threading

import pytest

from bridge.delivery.read_ahead import Ahead, ReadAhead
from bridge.errors import LeaseLostError
from bridge.outbox.reader import OutboxEntry, ShardRead


def _entry(entry_id: str) -> OutboxEntry:
    return OutboxEntry("e", 0, entry_id, {}, None, None)


def _slow_read(gate: threading.Event, *ids: str) -> Ahead:
    gate.wait(5)
    return Ahead(ShardRead([_entry(i) for i in ids], None if ids else "1-0"), None)


def test_drop_waits_for_the_read_in_flight_so_a_claim_after_it_sees_its_entries() -> None:
    ahead, gate = ReadAhead(), threading.Event()
    ahead.start(lambda: _slow_read(gate, "1-0"))
    threading.Timer(0.05, gate.set).start()
    assert ahead.drop() is True  # returned only after the read took its entry
    assert gate.is_set() and not ahead.pending
    ahead.close()


def test_a_read_that_found_nothing_leaves_nothing_to_claim() -> None:
    ahead, gate = ReadAhead(), threading.Event()
    gate.set()
    ahead.start(lambda: _slow_read(gate))
    assert ahead.drop() is False
    ahead.close()


def test_a_read_in_flight_at_the_end_of_a_turn_is_kept_for_the_next_turn() -> None:
    ahead, gate = ReadAhead(), threading.Event()
    ahead.start(lambda: _slow_read(gate, "1-0", "2-0"))
    threading.Timer(0.05, gate.set).start()
    ahead.close()
    assert ahead.pending
    taken = ahead.take()
    assert taken is not None and [e.entry_id for e in taken.read.entries] == ["1-0", "2-0"]
    assert ahead.take() is None


def test_a_failed_read_is_raised_where_the_drainer_takes_it() -> None:
    ahead = ReadAhead()

    def lost() -> Ahead:
        raise LeaseLostError("passed to another drainer")

    ahead.start(lost)
    with pytest.raises(LeaseLostError):
        ahead.take()
    ahead.start(lost)
    with pytest.raises(LeaseLostError):
        ahead.close()


def test_a_quiet_close_forgets_the_read_and_its_failure() -> None:
    ahead = ReadAhead()

    def lost() -> Ahead:
        raise LeaseLostError("passed to another drainer")

    ahead.start(lost)
    ahead.close(quiet=True)
    assert not ahead.pending and ahead.take() is None


def test_one_read_at_a_time() -> None:
    ahead, gate = ReadAhead(), threading.Event()
    ahead.start(lambda: _slow_read(gate, "1-0"))
    with pytest.raises(RuntimeError):
        ahead.start(lambda: _slow_read(gate, "2-0"))
    gate.set()
    ahead.close()
