"""The billable-operation tally."""

from __future__ import annotations

import pytest

from bridge.core.cost import CostTally, Operation, idle_syphon_receives, operations_per_message


def test_a_failed_over_message_costs_four_operations_end_to_end() -> None:
    # Given one message that went through a backlog queue and was syphoned to the primary
    tally = CostTally().add(Operation.BACKLOG_SEND).add(Operation.SYPHON_RECEIVE).add(Operation.SYPHON_SEND)
    # Then the bridge performed three operations and the end-to-end count (with the app's receive) is four
    assert tally.total == 3
    assert tally.failed_over_messages == 1
    assert tally.end_to_end_operations() == 4 == operations_per_message("backlog")


@pytest.mark.parametrize(("path", "operations"), [("direct", 2), ("backup", 2), ("backlog", 4)])
def test_operations_per_path(path: str, operations: int) -> None:
    assert operations_per_message(path) == operations  # type: ignore[arg-type]


def test_end_to_end_mixes_paths_and_pings() -> None:
    tally = CostTally(
        primary_sends=10, backup_sends=3, backlog_sends=2, pings=5, syphon_receives=7, syphon_sends=2
    )
    assert tally.end_to_end_operations() == 10 * 2 + 3 * 2 + 2 * 4 + 5
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


@pytest.mark.parametrize(
    ("queues", "wait", "seconds", "receives"),
    [
        (10, 900.0, 3600.0, 40),  # the .NET syphon: 10 queues, 15-minute long polls
        (10, 900.0, 86400.0, 960),
        (10, 900.0, 30 * 86400.0, 28800),
        (10, 60.0, 3600.0, 600),
    ],
)
def test_idle_syphon_polls_are_one_per_queue_per_long_poll(
    queues: int, wait: float, seconds: float, receives: int
) -> None:
    assert idle_syphon_receives(queues, wait, seconds) == receives
