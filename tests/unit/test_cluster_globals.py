"""The Cluster writer's state about the global keys: when to list an entity again, what a failure refuses."""

from __future__ import annotations

from bridge.outbox.cluster_globals import PAUSE, ClusterGlobals


def test_an_entity_listed_recently_is_not_listed_again_until_half_the_idle_time_passed() -> None:
    state = ClusterGlobals(configured={"orders"}, relist_after=300.0)
    assert state.to_list(["orders", "new"], now=0.0) == ["new", "orders"]
    state.listed(["orders", "new"], now=0.0)
    assert state.to_list(["orders", "new"], now=299.0) == []
    # A write refreshes the time: retirement needs a whole idle period without one
    state.listed(["new"], now=299.0)
    assert state.to_list(["orders", "new"], now=300.0) == ["orders"]


def test_a_failure_pauses_the_global_keys_and_refuses_only_new_unconfigured_entities() -> None:
    state = ClusterGlobals(configured={"orders"}, relist_after=300.0)
    state.failed(now=10.0)
    assert state.paused(10.0 + PAUSE / 2) and not state.paused(10.0 + PAUSE)
    assert state.must_refuse("new") and not state.must_refuse("orders")


def test_totals_a_failure_did_not_add_are_added_by_the_next_write() -> None:
    state = ClusterGlobals(configured=(), relist_after=1.0)
    assert state.add(3, 300) == (3, 300)
    assert state.add(1, 100) == (4, 400)  # the first HINCRBY failed: both go next time
    state.added()
    assert state.add(2, 20) == (2, 20)


def test_listing_times_are_bounded() -> None:
    state = ClusterGlobals(configured=(), relist_after=1.0, keep=3)
    state.listed([f"e{i}" for i in range(10)], now=0.0)
    state.listed(["e0"], now=5.0)
    assert len(state.listed_at) == 3 and "e0" in state.listed_at
