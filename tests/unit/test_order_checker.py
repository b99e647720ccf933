"""The order checker itself must be able to fail: a table of arrivals, no namespace."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.integration.order_checker import check


def _msgs(*ids: str) -> list[Any]:
    return [SimpleNamespace(message_id=m, sequence_number=n) for n, m in enumerate(ids, 1)]


SENT = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"]}


def test_in_order_with_duplicates_and_foreign_messages_is_zero() -> None:
    report = check(SENT, {"primary": _msgs("a0", "b0", "ping", "a1", "a0", "b1", "a2")})
    assert (report.out_of_sequence, report.duplicates, report.first_copies, report.missing) == (
        0,
        1,
        5,
        set(),
    )


def test_every_first_copy_behind_a_later_one_counts() -> None:
    report = check(SENT, {"primary": _msgs("a1", "a0", "a2", "b1", "b0")})
    assert report.out_of_sequence == 2
    assert report.examples == ["a: #0 after #1 in primary", "b: #0 after #1 in primary"]


def test_missing_messages_and_per_namespace_order() -> None:
    report = check(SENT, {"primary": _msgs("a0", "a2"), "secondary": _msgs("a1", "b0")})
    assert report.out_of_sequence == 0  # each namespace in order on its own
    assert report.missing == {"b1"}
