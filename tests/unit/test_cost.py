"""The billable-operation tally."""

from __future__ import annotations

import pytest

from bridge.core.cost import CostTally, Operation


def test_a_failed_over_message_is_three_operations_of_the_bridge() -> None:
    # Given one message that went through a backlog queue and was syphoned to the primary
    tally = CostTally().add(Operation.BACKLOG_SEND).add(Operation.SYPHON_RECEIVE).add(Operation.SYPHON_SEND)
    # Then the bridge performed three operations (the application's receive, the fourth, is the ledger's:
    # tests/unit/test_ledger_core.py)
    assert tally.total == 3
    assert tally.backlog_sends == 1


def test_the_total_counts_every_operation_the_bridge_performed() -> None:
    tally = CostTally(
        primary_sends=10, backup_sends=3, backlog_sends=2, pings=5, syphon_receives=7, syphon_sends=2
    )
    assert tally.total == 29


@pytest.mark.parametrize("operation", list(Operation))
def test_each_operation_has_its_counter(operation: Operation) -> None:
    tally = CostTally().add(operation, 3)
    assert getattr(tally, operation.value) == 3
    assert tally.total == 3


def test_tallies_add_and_round_trip() -> None:
    a = CostTally(primary_sends=1, pings=2)
    b = CostTally(primary_sends=4, syphon_receives=1)
    total = a + b
    assert total == CostTally(primary_sends=5, pings=2, syphon_receives=1)
    assert CostTally.from_fields(total.to_fields()) == total
    assert CostTally.from_fields({b"pings": b"9", b"unknown": b"1"}) == CostTally(pings=9)
    with pytest.raises(ValueError, match="negative"):
        a.add(Operation.PING, -1)


def test_adding_nothing_is_allowed_and_a_negative_count_is_refused() -> None:
    assert CostTally().add(Operation.PRIMARY_SEND, 0) == CostTally()
    with pytest.raises(ValueError, match=r"^count must not be negative$"):
        CostTally().add(Operation.PRIMARY_SEND, -1)
