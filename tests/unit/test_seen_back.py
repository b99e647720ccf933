"""Which waits news of a namespace seen back ends: every backoff, and only the holds that wait for it."""

from __future__ import annotations

import pytest

from bridge.core.roles import Role
from bridge.core.seen_back import NOTHING, SeenBack

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
