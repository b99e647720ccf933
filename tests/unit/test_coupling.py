"""Close/fault coupling decision (bridge.core.coupling): a table of stories, no clients, no clock."""

from __future__ import annotations

import pytest

from bridge.core.coupling import (
    COUPLING_GRACE,
    CloseCause,
    CouplingState,
    PartnerClose,
    due_closes,
    next_due_at,
    on_close,
    on_open,
)


def both_open() -> CouplingState:
    return on_open(on_open(CouplingState(), "primary", 1), "secondary", 2)


@pytest.mark.parametrize("cause", [CloseCause.FAULT, CloseCause.CLOSED])
def test_fault_or_close_schedules_the_open_partner(cause: CloseCause) -> None:
    state = on_close(both_open(), "primary", 1, now=100.0, cause=cause)
    assert not state.is_open("primary") and state.is_open("secondary")
    (pending,) = state.pending
    assert (pending.role, pending.generation, pending.due_at) == ("secondary", 2, 100.0 + COUPLING_GRACE)
    assert next_due_at(state) == 105.0


def test_nothing_is_due_before_the_grace_ends() -> None:
    state = on_close(both_open(), "primary", 1, now=100.0, cause=CloseCause.FAULT)
    after, due = due_closes(state, 104.999)
    assert due == () and after.pending == state.pending


def test_partner_is_closed_when_the_grace_ends() -> None:
    state = on_close(both_open(), "primary", 1, now=100.0, cause=CloseCause.FAULT)
    after, due = due_closes(state, 105.0)
    assert [(d.role, d.generation) for d in due] == [("secondary", 2)]
    assert after.pending == () and next_due_at(after) is None
    # The pool reports the close it made; that creates no obligation back at the primary
    closed = on_close(after, "secondary", 2, now=105.0, cause=CloseCause.COUPLING)
    assert closed.pending == () and not closed.open_generations


def test_partner_that_closes_by_itself_lapses_the_obligation() -> None:
    state = on_close(both_open(), "primary", 1, now=100.0, cause=CloseCause.FAULT)
    state = on_close(state, "secondary", 2, now=101.0, cause=CloseCause.FAULT)
    assert state.pending == ()
    assert due_closes(state, 200.0)[1] == ()


def test_partner_opened_after_the_fault_is_clean() -> None:
    # Given only the primary is open when it faults: nothing to couple
    state = on_close(on_open(CouplingState(), "primary", 1), "primary", 1, now=100.0, cause=CloseCause.FAULT)
    assert state.pending == ()
    # When the secondary opens afterwards, it is never closed for that fault
    state = on_open(state, "secondary", 2)
    assert due_closes(state, 1000.0)[1] == ()


def test_partner_reopened_within_grace_is_not_the_target() -> None:
    state = on_close(both_open(), "primary", 1, now=100.0, cause=CloseCause.FAULT)
    # The secondary generation 2 closes on its own and generation 3 opens before the grace ends
    state = on_close(state, "secondary", 2, now=101.0, cause=CloseCause.CLOSED)
    state = on_open(state, "secondary", 3)
    assert due_closes(state, 106.0)[1] == ()


def test_late_report_about_an_old_generation_changes_nothing() -> None:
    state = on_open(both_open(), "primary", 5)
    assert on_close(state, "primary", 1, now=100.0, cause=CloseCause.FAULT) == state


def test_primary_reopening_does_not_cancel_the_partner_close() -> None:
    # Both must reopen cleanly: a quick primary reopen does not rescue the old secondary client
    state = on_close(both_open(), "primary", 1, now=100.0, cause=CloseCause.FAULT)
    state = on_open(state, "primary", 3)
    _, due = due_closes(state, 105.0)
    assert due == (PartnerClose("secondary", 2, 105.0, due[0].reason),)
    assert "primary client fault" in due[0].reason


def test_custom_grace() -> None:
    state = on_close(both_open(), "secondary", 2, now=10.0, cause=CloseCause.CLOSED, grace=0.5)
    assert next_due_at(state) == 10.5
    assert [d.role for d in due_closes(state, 10.5)[1]] == ["primary"]


def test_a_close_lapses_only_the_obligation_on_that_very_client() -> None:
    # Given obligations on the secondary's generation 2 and on the primary's generation 1
    state = CouplingState(
        open_generations={"primary": 2, "secondary": 2},
        pending=(PartnerClose("secondary", 2, 50.0, "a"), PartnerClose("primary", 1, 50.0, "b")),
    )
    # When the primary's generation 2 closes by itself
    after = on_close(state, "primary", 2, 10.0, cause=CloseCause.COUPLING)
    # Then the obligation on the secondary's generation 2 stands
    assert after.pending == (PartnerClose("secondary", 2, 50.0, "a"), PartnerClose("primary", 1, 50.0, "b"))
    assert dict(after.open_generations) == {"secondary": 2}


def test_an_obligation_on_a_closed_client_does_not_hide_the_ones_after_it() -> None:
    state = CouplingState(
        open_generations={"secondary": 3},
        pending=(PartnerClose("secondary", 2, 5.0, "old"), PartnerClose("secondary", 3, 5.0, "due")),
    )

    after, due = due_closes(state, now=6.0)

    assert due == (PartnerClose("secondary", 3, 5.0, "due"),)
    assert after.pending == ()


def test_the_state_keeps_its_own_copy_of_the_open_generations() -> None:
    generations = {"primary": 1}
    state = CouplingState(open_generations=generations)
    generations["secondary"] = 2

    assert not state.is_open("secondary")
