"""The chaos checker's ``broker`` order rule (``bench/chaos_checker``) across a namespace re-created after a
disaster.

A re-created namespace numbers its messages from 1 again, so its copies are judged as a series of their own.
Where that series begins is read from the copies themselves (sequence numbers fall back in enqueued-time
order), not from a time taken by the harness: the seed-1 finding "old active-mode messages on the
re-created secondary after newer ones" (``docs/findings.md``) was the old namespace's last copies put
into the new series by a boundary one second early. The rule must still catch a copy that really came late.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.chaos_checker import _order

RUN = {"entities": [{"name": "chaos-active", "mode": "active", "subscription": "all"}]}
DISASTER = 100.0
"""When the secondary became unreachable and lost everything (re-created, reachable again, at 110)."""


def copy(message_id: str, ns: str, seq: int, bseq: int, enq: float) -> dict[str, Any]:
    """One handled first copy as ``bench/chaos_handler.py`` records it (key ``k``)."""
    return {
        "id": message_id,
        "entity": "chaos-active",
        "ns": ns,
        "key": "k",
        "seq": seq,
        "bseq": bseq,
        "enq": enq,
        "t": enq + 0.05,
    }


def judge(copies: list[dict[str, Any]], resets: dict[str, list[float]]) -> dict[str, int]:
    counts, _ = _order({c["id"]: [c] for c in copies}, {**RUN, "resets": resets})
    return counts


# Given: seq 0-2 handed from the old secondary (its sequence numbers 500-502), the last one 0.8 s before
# the disaster; seq 3-5 went to the primary while the secondary was gone; seq 6-8 handed from the
# re-created secondary (numbered from 1).
OLD = [copy(f"m{i}", "secondary", i, 500 + i, DISASTER - 2.8 + i) for i in range(3)]
GONE = [copy(f"m{i}", "primary", i, 40 + i, DISASTER + 5 + i) for i in range(3, 6)]
NEW = [copy(f"m{i}", "secondary", i, i - 5, 110 + i) for i in range(6, 9)]


@pytest.mark.parametrize(
    "recorded",
    [
        DISASTER,  # the time the harness records once the outage is on
        DISASTER - 1.5,  # a boundary taken from chaos.log: whole seconds, written before the outage
        DISASTER + 30,  # or one taken late
    ],
)
def test_the_re_created_namespace_is_a_series_of_its_own_wherever_the_recorded_time_falls(
    recorded: float,
) -> None:
    # When the checker judges the copies with a disaster recorded at `recorded`
    counts = judge(OLD + GONE + NEW, {"secondary": [recorded]})
    # Then no copy is out of order: the old series ends and the new one begins where the numbers fall back
    assert counts["broker"] == 0
    assert counts["sequence_restart"] == 0


def test_a_numbering_restart_without_a_recorded_disaster_is_reported() -> None:
    # When no disaster of the secondary was recorded, the fall in its numbering has no explanation
    counts = judge(OLD + GONE + NEW, {})
    # Then it is counted (an order problem of its own), and still no copy is judged against another series
    assert counts["sequence_restart"] == 1
    assert counts["broker"] == 0


def test_a_copy_enqueued_late_in_the_re_created_namespace_is_still_a_violation() -> None:
    # Given seq 2 reached the re-created secondary after seq 6-8 (numbered 4, after 1-3): a real reorder
    late = copy("m2", "secondary", 2, 4, 119.0)
    counts = judge(OLD[:2] + GONE + NEW + [late], {"secondary": [DISASTER]})
    # Then it is counted, whatever the boundary
    assert counts["broker"] == 1
    assert counts["sequence_restart"] == 0


def test_a_copy_enqueued_late_in_a_namespace_that_kept_its_data_is_still_a_violation() -> None:
    # Given the primary enqueued seq 3 after seq 4 and 5 (numbers 45 after 44, 45): late, same series
    copies = [copy("m4", "primary", 4, 44, 105.0), copy("m5", "primary", 5, 45, 106.0)]
    copies.append(copy("m3", "primary", 3, 46, 107.0))
    counts = judge(copies, {"secondary": [DISASTER]})
    assert counts["broker"] == 1
    assert counts["sequence_restart"] == 0


def test_the_primary_numbering_again_is_reported_even_when_the_secondary_had_a_disaster() -> None:
    # Given the primary, which kept its data (a namespace kill), numbered from 1 again after a restart
    copies = [copy("m0", "primary", 0, 7, 100.0), copy("m1", "primary", 1, 8, 101.0)]
    copies.append(copy("m2", "primary", 2, 1, 102.0))
    counts = judge(copies, {"secondary": [DISASTER]})
    # Then that restart is counted: only the secondary's was recorded
    assert counts["sequence_restart"] == 1
