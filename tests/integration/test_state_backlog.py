"""The backlog ledger's key maps across shards (``bridge.state.backlog``) against a real Redis."""

from __future__ import annotations

import redis

from bridge.core.barriers import OPEN
from bridge.state import keys
from bridge.state.backlog import BacklogLedger, ShardBacklog


def test_a_shard_finds_the_keys_other_shards_stuck_and_takes_them_over(redis_client: redis.Redis) -> None:
    ledger = BacklogLedger(redis_client)
    # Given shard 0 of a one-shard layout that stuck k and j to queues while failed over
    ledger.open("orders", 0, [1, 2])
    ledger.assign("orders", 0, {"k": 1, "j": 2})
    # When shard 2 of a new layout reads its own side and looks for its keys elsewhere
    mine = ledger.read("orders", 2, ["k", "x"])
    assert mine.ledger == {} and mine.sticky == {} and mine.others == (0,)
    maps, ledgers = ledger.elsewhere("orders", mine.others, ["k", "x"])
    assert maps == {0: {"k": 1}} and ledgers == {0: {1: OPEN, 2: OPEN}}
    # And takes k over: its own map first, then k leaves shard 0's
    ledger.open("orders", 2, [1])
    ledger.assign("orders", 2, {"k": 1})
    ledger.forget("orders", {0: ["k"]})
    assert ledger.read("orders", 2, ["k"]).sticky == {"k": 1}
    assert ledger.read("orders", 0, ["k", "j"]) == ShardBacklog({1: OPEN, 2: OPEN}, {"j": 2}, (2,))
    # When j leaves too, shard 0's map is gone and no longer listed
    ledger.forget("orders", {0: ["j"]})
    assert ledger.read("orders", 2, []).others == ()
    assert not redis_client.exists(keys.backlog_keys("orders", 0))


def test_the_last_barrier_passed_drops_the_map_and_its_listing(redis_client: redis.Redis) -> None:
    ledger = BacklogLedger(redis_client)
    ledger.open("orders", 1, [0])
    ledger.assign("orders", 1, {"k": 0})
    ledger.set_barrier("orders", 1, 0, "wait:t1")
    assert ledger.confirm_barrier("orders", 1, 0, "t1")
    assert ledger.read("orders", 0, ["k"]).others == (1,)
    # When the syphon passes the shard's last barrier
    assert ledger.pass_barrier("orders", 1, 0, "t1")
    # Then no other shard looks in its map any more
    assert ledger.read("orders", 0, ["k"]).others == ()
    assert not redis_client.exists(keys.backlog_keys("orders", 1))
