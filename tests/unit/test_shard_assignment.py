"""The fair share of outbox shards per drainer and which shards a drainer keeps, hands over or tries."""

from __future__ import annotations

import pytest

from bridge.core.shard_assignment import fair_share, plan_assignment, weight

SHARDS = [("orders", i) for i in range(4)] + [("audit", 0), ("audit", 1)]


@pytest.mark.parametrize(
    ("shards", "drainers", "fair"),
    [(0, 3, 0), (1, 1, 1), (1, 2, 1), (4, 2, 2), (5, 2, 3), (6, 4, 2), (3, 0, 3), (100, 7, 15)],
)
def test_fair_share_covers_every_shard(shards: int, drainers: int, fair: int) -> None:
    assert fair_share(shards, drainers) == fair
    assert fair * max(1, drainers) >= shards


def test_a_lone_drainer_wants_every_shard_best_first() -> None:
    plan = plan_assignment("a", SHARDS, held=[], drainers=1)
    assert plan.fair == 6 and plan.release == ()
    assert sorted(plan.candidates) == sorted(SHARDS)
    weights = [weight("a", ref) for ref in plan.candidates]
    assert weights == sorted(weights, reverse=True)


def test_a_drainer_over_its_share_hands_over_its_least_preferred_shards() -> None:
    # Given "a" holds all six and a second drainer joined
    plan = plan_assignment("a", SHARDS, held=SHARDS, drainers=2)
    # Then it keeps its three most preferred and tries nothing
    by_preference = sorted(SHARDS, key=lambda ref: -weight("a", ref))
    assert plan.fair == 3
    assert sorted(plan.release) == sorted(by_preference[3:])
    assert plan.candidates == ()


def test_a_drainer_at_its_share_tries_nothing_and_one_below_tries_the_rest() -> None:
    assert plan_assignment("a", SHARDS, held=SHARDS[:3], drainers=2).candidates == ()
    below = plan_assignment("b", SHARDS, held=SHARDS[:1], drainers=2)
    assert below.release == ()
    assert sorted(below.candidates) == sorted(SHARDS[1:])


def test_shards_no_longer_known_are_handed_over() -> None:
    plan = plan_assignment("a", SHARDS, held=[("gone", 0), SHARDS[0]], drainers=1)
    assert plan.release == (("gone", 0),)


def test_drainers_prefer_different_shards() -> None:
    # Rendezvous hashing: the identities rank the shards differently, so racing starts mostly differ.
    firsts = {plan_assignment(f"host:{pid}", SHARDS, held=[], drainers=3).candidates[0] for pid in range(12)}
    assert len(firsts) >= 3


def test_a_weight_is_the_same_in_every_release() -> None:
    # Drainers of two releases side by side (a rolling upgrade) must agree on who drains which shard.
    assert weight("w1", ("orders", 3)) == 18328175339606839291
