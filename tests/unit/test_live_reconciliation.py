"""The report's reconciliation from the live ledger's totals: pending and lost as the batch report has
them (``bridge.ledger.tables.classify``), for every state of the outbox check."""

from __future__ import annotations

from bridge.core.live_reconciliation import HeldMessage, OutboxCheck, reconcile

EVENTS = {"orders": {"first_event_at": 10.0, "last_event_at": 20.0, "quarantined_without_id": 2}}
COUNTS = {"orders": {"accepted": 5, "open": 2, "pending_backlog": 1, "quarantined_messages": 1}}


def held(
    mid: str, pos: tuple[int, int] | None, *, is_open: bool = True, suppressed: bool = False
) -> HeldMessage:
    return HeldMessage("orders", mid, 1.0 if pos is None else pos[0] / 1000, pos, is_open, suppressed)


def row(check: OutboxCheck, *messages: HeldMessage) -> dict[str, object]:
    return reconcile(COUNTS, EVENTS, {"orders": 9}, messages, check)["orders"]


def test_with_no_outbox_check_an_open_message_is_pending_and_a_suppressed_duplicate_lost() -> None:
    out = row(OutboxCheck(), held("a", (1000, 0)), held("s", (900, 0), is_open=False, suppressed=True))
    assert (out["pending_outbox"], out["pending"], out["lost"], out["lost_ids"]) == (1, 2, 1, ["s"])


def test_in_a_drained_run_every_open_message_is_lost_oldest_first() -> None:
    out = row(OutboxCheck(drained=True), held("b", (2000, 0)), held("a", (1000, 0)))
    assert (out["pending_outbox"], out["lost"], out["lost_ids"]) == (0, 2, ["a", "b"])


def test_against_a_snapshot_an_open_message_is_pending_in_the_outbox_or_after_the_watermark() -> None:
    check = OutboxCheck(checked=True, in_outbox={("orders", "in")}, watermarks={"orders": (5000, 3)})
    messages = (
        held("in", (1000, 0)),  # in the outbox: pending
        held("gone", (5000, 3)),  # at the watermark, not in the outbox: lost
        held("recent", (5000, 4)),  # after the watermark: too recent to judge, pending
        held("unplaced", None),  # no acceptance position: pending
    )
    out = row(check, *messages)
    assert (out["pending_outbox"], out["lost"], out["lost_ids"]) == (3, 1, ["gone"])


def test_an_entity_the_snapshot_did_not_check_keeps_its_open_messages_pending() -> None:
    check = OutboxCheck(checked=True, watermarks={})
    assert row(check, held("a", (1000, 0)))["pending_outbox"] == 1


def test_an_open_suppressed_duplicate_counts_as_pending_and_as_lost_as_in_the_batch_report() -> None:
    out = row(OutboxCheck(), held("x", (1000, 0), suppressed=True))
    assert (out["pending_outbox"], out["lost"]) == (1, 1)


def test_the_row_carries_the_entitys_event_figures_and_drops_the_open_count() -> None:
    out = row(OutboxCheck())
    assert "open" not in out
    assert (out["events"], out["first_event_at"], out["last_event_at"]) == (9, 10.0, 20.0)
    assert (out["quarantined_without_id"], out["quarantined"], out["accepted"]) == (2, 3, 5)


def test_scopes_are_not_entities_wherever_they_come() -> None:
    scope = {"first_event_at": 1.0, "last_event_at": 2.0, "quarantined_without_id": 0}
    events = {"~host": scope, **EVENTS, "~z": scope}
    assert set(reconcile(COUNTS, events, {}, [], OutboxCheck())) == {"orders"}


def test_an_entity_whose_events_name_no_message_gets_every_count_as_zero() -> None:
    # Given an entity that only quarantined entries without a MessageId (no per-message counts at all)
    events = {**EVENTS, "audit": {"first_event_at": 5.0, "last_event_at": 6.0, "quarantined_without_id": 3}}
    out = reconcile(COUNTS, events, {"orders": 9, "audit": 3}, [], OutboxCheck())["audit"]
    # Then it has the other entities' counts, all zero, and its quarantines
    assert {k: out[k] for k in ("accepted", "pending_backlog", "quarantined_messages")} == dict.fromkeys(
        ("accepted", "pending_backlog", "quarantined_messages"), 0
    )
    assert (out["pending"], out["quarantined"], out["lost"], out["events"]) == (0, 3, 0, 3)


def test_missing_event_figures_count_as_zero() -> None:
    out = reconcile(COUNTS, {"orders": {}}, {}, [], OutboxCheck())["orders"]
    assert (out["events"], out["quarantined_without_id"], out["quarantined"]) == (0, 0, 1)
    assert (out["first_event_at"], out["last_event_at"]) == (None, None)


def test_lost_ids_list_a_message_without_an_acceptance_time_first_as_the_batch_report_sorts_them() -> None:
    late = HeldMessage("orders", "late", 2.0, (2000, 0), True, False)
    early = HeldMessage("orders", "early", 1.0, (1000, 0), True, False)
    unknown = HeldMessage("orders", "unknown", None, None, False, True)
    out = row(OutboxCheck(drained=True), late, unknown, early)
    assert out["lost_ids"] == ["unknown", "early", "late"]
