"""Keys that moved to another outbox shard (``bridge.core.moved_keys``) and what the paired plan does with
them: tables, no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bridge.core.barriers import OPEN
from bridge.core.decisions import Retry
from bridge.core.moved_keys import NO_MOVED_KEYS, MovedKey, MovedKeys, moved_keys, retired_ledgers
from bridge.core.paired_plan import PairedView, plan_batch
from tests.unit.test_paired_plan import HEALTHY, NOW, A, B, entries, sends, view

SENT = f"sent:x.{int((NOW - 10) * 1000)}.0"
"""A barrier of this shard sent 10 s ago, not passed yet."""


@pytest.mark.parametrize(
    ("keys", "own", "maps", "ledgers", "found", "stale"),
    [
        # another shard's map names the key in a queue its ledger still names: taken over
        (["k"], {}, {1: {"k": 2}}, {1: {2: OPEN}}, {"k": MovedKey((2,), (1,))}, {}),
        # whatever the barrier's state there: not passed means maybe not syphoned
        (["k"], {}, {1: {"k": 2}}, {1: {2: SENT}}, {"k": MovedKey((2,), (1,))}, {}),
        # the old ledger no longer names the queue: its barrier passed, the entry is stale
        (["k"], {}, {1: {"k": 2}}, {1: {3: OPEN}}, {}, {1: ("k",)}),
        (["k"], {}, {1: {"k": 2}}, {}, {}, {1: ("k",)}),
        # the shard's own map names it: not moved, the other maps are not even looked at
        (["k"], {"k": 0}, {1: {"k": 2}}, {1: {2: OPEN}}, {}, {}),
        # the shard's own (stale) entry in ``maps`` is not a move
        (["k"], {}, {0: {"k": 2}}, {0: {2: OPEN}}, {}, {}),
        # no key, or a key no map names: nothing
        ([None, "k"], {}, {1: {"j": 2}}, {1: {2: OPEN}}, {}, {}),
        # named by two shards (counts changed twice): every pending queue, stuck to the lowest shard's
        (
            ["k"],
            {},
            {1: {"k": 2}, 3: {"k": 1}, 4: {"k": 2}},
            {1: {2: OPEN}, 3: {1: SENT}, 4: {2: OPEN}},
            {"k": MovedKey((2, 1), (1, 3, 4))},
            {},
        ),
        # one pending, one stale
        (["k"], {}, {1: {"k": 2}, 2: {"k": 3}}, {1: {2: OPEN}}, {"k": MovedKey((2,), (1,))}, {2: ("k",)}),
    ],
)
def test_moved_keys_table(
    keys: list[str | None],
    own: dict[str, int],
    maps: dict[int, dict[str, int]],
    ledgers: dict[int, dict[int, str]],
    found: dict[str, MovedKey],
    stale: dict[int, tuple[str, ...]],
) -> None:
    moved = moved_keys(0, keys, own, maps, ledgers)
    assert dict(moved.keys) == found
    assert dict(moved.stale) == stale


def test_a_key_leaves_its_old_maps_only_once_taken_over() -> None:
    moved = MovedKeys({"k": MovedKey((2,), (1, 3)), "j": MovedKey((1,), (1,))}, {1: ("s",), 4: ("t",)})
    assert moved.forget(["k"]) == {1: ("k", "s"), 3: ("k",), 4: ("t",)}
    assert moved.forget([]) == {1: ("s",), 4: ("t",)}
    assert NO_MOVED_KEYS.forget(["k"]) == {}


MOVED_A = MovedKeys({A: MovedKey((1,), (2,))}, {3: ("z",)})
MOVED_AB = MovedKeys({A: MovedKey((1,), (2,)), B: MovedKey((0, 3), (2, 5))})


@pytest.mark.parametrize(
    ("ledger", "moved", "to_primary", "barriers", "opened", "assigned"),
    [
        # nothing moved, nothing in the ledger: the primary at once (stale entries are forgotten on the way)
        ({}, MovedKeys(stale={3: ("z",)}), True, (), (), {}),
        # a moved key with a backlog: its queue joins the ledger and gets this shard's barrier; all wait
        ({}, MOVED_A, False, (1,), (1,), {A: 1}),
        # the queue already has this shard's barrier, sent maybe before the key's older messages: a new one
        ({1: SENT}, MOVED_A, False, (1,), (1,), {A: 1}),
        # the shard's own backlog elsewhere keeps its barrier as it is
        ({2: SENT}, MOVED_A, False, (1,), (1,), {A: 1}),
        # a key in two queues: both
        ({}, MOVED_AB, False, (0, 1, 3), (0, 1, 3), {A: 1, B: 0}),
    ],
)
def test_a_moved_key_keeps_the_primary_waiting_for_its_backlog(
    ledger: dict[int, str],
    moved: MovedKeys,
    to_primary: bool,
    barriers: tuple[int, ...],
    opened: tuple[int, ...],
    assigned: dict[str, int],
) -> None:
    v = view(HEALTHY, ledger=ledger, backlog=False)
    plan = plan_batch(entries(A, B, None), view_with(v, moved))
    assert plan.route == "primary"
    assert (plan.to_primary == (0, 1, 2)) is to_primary
    if not to_primary:
        assert all(isinstance(s, Retry) and s.backoff is False for s in plan.decided.values())
        assert sorted(plan.decided) == [0, 1, 2]
    assert plan.barriers == barriers
    assert plan.open == opened
    assert dict(plan.assign) == assigned
    assert dict(plan.forget) == moved.forget(assigned)


def test_fast_mode_ignores_moved_keys() -> None:
    v = view(HEALTHY, ordered=False, backlog=False)
    plan = plan_batch(entries(A), view_with(v, MOVED_A))
    assert plan.to_primary == (0,) and plan.open == () and dict(plan.forget) == {}


@pytest.mark.parametrize(
    ("options", "to_backlog", "opened", "assigned", "forget"),
    [
        # failed over: a moved key keeps its old queue (not the one rendezvous hashing would pick, 2)
        ({}, {1: (0, 2), 3: (1,)}, (1, 3), {A: 1, B: 3}, {2: (A,), 3: ("z",)}),
        # its own map wins over another shard's
        ({"sticky": {A: 0}}, {0: (0, 2), 3: (1,)}, (0, 3), {B: 3}, {3: ("z",)}),
        # its old queue is out of the rotation: it is held, and stays named by its old shard
        ({"removed": {1: NOW}}, {3: (1,)}, (3,), {B: 3}, {3: ("z",)}),
    ],
)
def test_a_moved_key_sticks_to_its_old_queue_while_failed_over(
    options: dict[str, Any],
    to_backlog: dict[int, tuple[int, ...]],
    opened: tuple[int, ...],
    assigned: dict[str, int],
    forget: dict[int, tuple[str, ...]],
) -> None:
    plan = plan_batch(entries(A, B, A), view_with(view(**options), MOVED_A))
    assert plan.route == "backlog"
    assert sends(plan) == to_backlog
    assert plan.open == opened
    assert dict(plan.assign) == assigned
    assert dict(plan.forget) == forget


def test_a_moved_key_in_two_queues_opens_both_when_sent() -> None:
    plan = plan_batch(entries(B), view_with(view(), MOVED_AB))
    assert sends(plan) == {0: (0,)}
    assert plan.open == (0, 3)
    assert dict(plan.assign) == {B: 0}
    assert dict(plan.forget) == {2: (B,), 5: (B,)}


def view_with(v: PairedView, moved: MovedKeys) -> PairedView:
    return replace(v, moved=moved)


@pytest.mark.parametrize(
    ("shard", "shards", "ledgers", "looked_after"),
    [
        # 4 shards lowered to 2: shard 0 looks after 2, shard 1 after 3
        (0, 2, {1: {0: OPEN}, 2: {0: OPEN}, 3: {1: SENT}}, {2: {0: OPEN}}),
        (1, 2, {1: {0: OPEN}, 2: {0: OPEN}, 3: {1: SENT}}, {3: {1: SENT}}),
        # a live shard's ledger is its own drainer's business
        (0, 4, {1: {0: OPEN}, 2: {0: OPEN}, 3: {1: SENT}}, {}),
        # while the change runs no shard is retired (the old layout's drainers still write their ledgers)
        (0, None, {2: {0: OPEN}}, {}),
        # an empty ledger needs nothing
        (0, 1, {1: {}, 2: {3: OPEN}}, {2: {3: OPEN}}),
    ],
)
def test_retired_ledgers_table(
    shard: int,
    shards: int | None,
    ledgers: dict[int, dict[int, str]],
    looked_after: dict[int, dict[int, str]],
) -> None:
    assert retired_ledgers(shard, shards, ledgers) == looked_after


LOST = f"sent:x.{int((NOW - 1000) * 1000)}.0"
"""A barrier sent 1,000 s ago: past the 900 s timeout, lost."""


@pytest.mark.parametrize(
    ("ledger", "retired", "to_primary", "retired_barriers"),
    [
        # a retired ledger gets its barriers in its own name; this shard does not wait for them
        ({}, {2: {0: OPEN, 1: SENT}, 4: {1: f"wait:{SENT[5:]}"}}, True, {2: (0,), 4: (1,)}),
        # its barriers in the queue and not lost: nothing to send
        ({}, {2: {1: SENT}}, True, {}),
        # a lost one is replaced
        ({}, {2: {1: LOST}}, True, {2: (1,)}),
        # while this shard waits for its own, it sends the retired ones' too
        ({0: OPEN}, {2: {0: OPEN}}, False, {2: (0,)}),
    ],
)
def test_a_live_shard_sends_the_barriers_of_the_retired_ledgers_it_looks_after(
    ledger: dict[int, str],
    retired: dict[int, dict[int, str]],
    to_primary: bool,
    retired_barriers: dict[int, tuple[int, ...]],
) -> None:
    v = replace(view(HEALTHY, ledger=ledger, backlog=False), retired=retired)
    plan = plan_batch(entries(A), v)
    assert (plan.to_primary == (0,)) is to_primary
    assert dict(plan.retired_barriers) == retired_barriers
