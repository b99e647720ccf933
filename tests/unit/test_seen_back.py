"""Which waits news of a namespace seen back ends: only the backoffs and the holds that wait for it."""

from __future__ import annotations

import pytest

from bridge.core.decisions import PRIMARY, SECONDARY, Target, backlog_target
from bridge.core.roles import Role
from bridge.core.seen_back import NOTHING, SeenBack, backoff_awaits

PRIMARY_OF_ORDERS = SeenBack.of([("primary", "orders")])


@pytest.mark.parametrize(
    ("news", "entity", "awaits", "ends"),
    [
        (PRIMARY_OF_ORDERS, "orders", ("primary",), True),
        (PRIMARY_OF_ORDERS, "other", ("primary",), False),  # another entity's failover ended
        (PRIMARY_OF_ORDERS, "orders", ("secondary",), False),  # another namespace
        (SeenBack.of([("secondary", "orders")]), "orders", ("primary", "secondary"), True),
        (SeenBack.of([("secondary", "orders")]), "orders", ("primary",), False),
        (NOTHING, "orders", ("primary", "secondary"), False),  # the scout's try ends no hold
        (SeenBack.of([], everything=True), "orders", ("primary",), True),  # some news was lost
    ],
)
def test_a_hold_ends_only_for_news_about_its_entity_and_a_namespace_it_waits_for(
    news: SeenBack, entity: str, awaits: tuple[Role, ...], ends: bool
) -> None:
    assert news.ends_hold(entity, awaits) is ends


def test_news_adds_up_and_nothing_is_no_news() -> None:
    merged = PRIMARY_OF_ORDERS | SeenBack.of([("secondary", "other")])
    assert merged.named == {("primary", "orders"), ("secondary", "other")} and not merged.everything
    assert (merged | SeenBack(everything=True)).everything
    assert not NOTHING and PRIMARY_OF_ORDERS and SeenBack(everything=True)


SECONDARY_OF_OTHER = SeenBack.of([("secondary", "other")])


@pytest.mark.parametrize(
    ("news", "awaits", "ends"),
    [
        (PRIMARY_OF_ORDERS, frozenset({"primary"}), True),
        (SeenBack.of([("primary", "other")]), frozenset({"primary"}), True),  # the namespace is back
        (SECONDARY_OF_OTHER, frozenset({"primary"}), False),  # a namespace it does not wait for
        (SECONDARY_OF_OTHER, frozenset({"primary", "secondary"}), True),
        (PRIMARY_OF_ORDERS | SECONDARY_OF_OTHER, frozenset({"secondary"}), True),
        (NOTHING, frozenset({"primary"}), True),  # the scout's try
        (SeenBack.of([], everything=True), frozenset({"secondary"}), True),  # some news was lost
        (SECONDARY_OF_OTHER, None, True),  # what it waits for is not known
    ],
)
def test_a_backoff_ends_only_for_news_of_a_namespace_it_waits_for(
    news: SeenBack, awaits: frozenset[Role] | None, ends: bool
) -> None:
    assert news.ends_backoff(awaits) is ends


@pytest.mark.parametrize(
    ("mode", "pending", "awaits"),
    [
        ("none", (PRIMARY,), {"primary"}),
        ("none", (), {"primary"}),  # inherited: where it goes
        ("passive", (PRIMARY,), {"primary", "secondary"}),  # the backup's return lets it fail over
        ("passive", (SECONDARY,), {"primary", "secondary"}),
        ("active", (SECONDARY,), {"secondary"}),  # ``all``: the primary has it, the secondary lacks it
        ("active", (PRIMARY, SECONDARY), {"primary", "secondary"}),
        ("active", (), {"primary", "secondary"}),
        ("paired", (PRIMARY,), {"primary", "secondary"}),  # its failover goes to the secondary's queues
        ("paired", (backlog_target("orders-backlog-1"),), {"primary", "secondary"}),
    ],
)
def test_a_backoff_waits_for_the_namespaces_its_batch_may_go_to_next(
    mode: str, pending: tuple[Target, ...], awaits: set[Role]
) -> None:
    assert backoff_awaits(mode, pending) == awaits
