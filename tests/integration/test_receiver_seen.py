"""The window's compact record of handled ids in real Redis (``bridge.core.seen``, the scripts of
``bridge.receiving.scripts``): fingerprints in time buckets of small hashes that grow one slot at a time,
stay in the compact encoding, expire with their bucket, and agree under two receivers at once; an earlier
version's sorted set is honoured until it expires."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from bridge.core.receiving import Claim
from bridge.core.seen import COMPACT_ENTRIES, FILL
from bridge.errors import ConfigurationError
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow

pytestmark = pytest.mark.timeout(90)

KEYS = ReceiverKeys("orders")


def window(client: redis.Redis, owner: str = "a", window_s: float = 600.0) -> DedupWindow:
    return DedupWindow(client, KEYS, owner=owner, window=window_s, max_remembered=10**9, inflight_ttl=30)


def handle(w: DedupWindow, ids: list[str]) -> int:
    """Claim and mark done ``ids`` as a receiver does; how many were new to the record."""
    assert w.claim(ids) == [Claim.HANDLE] * len(ids)
    return w.done(ids).new


def buckets(client: redis.Redis) -> dict[str, tuple[int, int, int, int]]:
    """The index: bucket name -> (expiry ms, level, split, count)."""
    raw = client.hgetall(KEYS.seen)
    return {k.decode(): tuple(int(x) for x in v.split()) for k, v in raw.items()}  # type: ignore[misc]


def slot_of(fp: bytes, level: int, split: int) -> int:
    h = int.from_bytes(fp[:4], "big")
    slot = h % 2**level
    return h % 2 ** (level + 1) if slot < split else slot


def redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_until_ms(client: redis.Redis, at: int) -> None:
    while (left := at - redis_ms(client)) > 0:
        time.sleep(min(left, 50) / 1000)


def test_a_bucket_grows_one_slot_at_a_time_and_every_slot_stays_compact(redis_client: redis.Redis) -> None:
    # A week's window: day-long buckets, so the ids almost always land in one (a 10-minute window's
    # 86 s buckets were crossed by a slow run; a crossing still passes, bucket by bucket)
    w = window(redis_client, window_s=7 * 86400.0)
    ids = [uuid.uuid4().hex for _ in range(20_000)]
    for start in range(0, len(ids), 500):
        assert handle(w, ids[start : start + 500]) == 500
    # Every id is found, and none of 2,000 others is taken for handled
    assert all(w.is_done(m) for m in ids[::97])
    fresh = [uuid.uuid4().hex for _ in range(2000)]
    assert w.claim(fresh) == [Claim.HANDLE] * len(fresh)
    assert w.remembered() == len(ids)
    # Each bucket's table holds FILL to 2·FILL fingerprints per slot, each where its address says
    index = buckets(redis_client)
    assert 1 <= len(index) <= 2, index
    assert sum(count for _, _, _, count in index.values()) == len(ids)
    for name, (_, level, split, count) in index.items():
        slots = 2**level + split
        assert count / slots <= FILL
        sizes = []
        for slot in range(slots):
            key = f"{KEYS.seen}:{name}:{slot}"
            fields = redis_client.hkeys(key)
            assert all(slot_of(f, level, split) == slot for f in fields)
            assert redis_client.object("encoding", key) == b"listpack"
            assert redis_client.pttl(key) > 0
            sizes.append(len(fields))
        assert sum(sizes) == count and max(sizes) <= COMPACT_ENTRIES
        assert not redis_client.exists(f"{KEYS.seen}:{name}:{slots}")  # no slot beyond the table
    # The week's bucket that took most of them grew to at least the slots its count needs
    level, split, count = max(((lv, sp, c) for _, lv, sp, c in index.values()), key=lambda b: b[2])
    assert count / (2**level + split) > FILL / 2


def test_ids_expire_with_their_bucket_and_a_rollover_keeps_both_sides(redis_client: redis.Redis) -> None:
    # A 3.5 s window: spans of 500 ms, so an id is remembered 3.5 to 4 s
    w = window(redis_client, window_s=3.5)
    span = w.span_ms
    assert span == 500
    # Given one id handled just before a span's end and another just after it
    for _attempt in range(5):
        boundary = ((redis_ms(redis_client) + 100) // span + 1) * span
        wait_until_ms(redis_client, boundary - 60)
        handle(w, ["before"])
        wait_until_ms(redis_client, boundary + 5)
        handle(w, ["after"])
        index = buckets(redis_client)
        if sorted(int(name) for name in index) == [boundary - span, boundary]:
            break
        # a loaded machine delayed a write past its span's edge: the Given did not hold, so start again
        redis_client.delete(*redis_client.scan_iter(match=f"{KEYS.seen}*"))
    assert len(index) == 2, index
    (first, expires_first), (second, expires_second) = sorted((k, v[0]) for k, v in index.items())
    assert int(second) - int(first) == span and expires_second - expires_first == span
    assert expires_first == int(first) + span + 3500
    # Then both are remembered, across the boundary, for at least the window
    assert w.claim(["before", "after"]) == [Claim.DUPLICATE, Claim.DUPLICATE]
    # When the first bucket expires, only its id is forgotten
    wait_until_ms(redis_client, expires_first + 1)
    assert not w.is_done("before") and w.is_done("after")
    assert w.claim(["before"]) == [Claim.HANDLE]
    # And once the second expires, nothing of the record is left in Redis
    wait_until_ms(redis_client, expires_second + 1)
    assert not w.is_done("after") and w.remembered() == 0
    assert list(redis_client.scan_iter(match=f"{KEYS.seen}*")) == []


def test_an_id_remembered_in_an_earlier_bucket_is_neither_new_nor_stored_again(
    redis_client: redis.Redis,
) -> None:
    w = window(redis_client, window_s=3.5)
    handle(w, ["x"])
    # Given the id's done mark written again a span later (a retry after a lost reply, another copy's
    # late handler): it is found in the earlier bucket
    wait_until_ms(redis_client, (redis_ms(redis_client) // w.span_ms + 1) * w.span_ms + 5)
    again = w.done(["x", "y"])
    # Then it is not counted twice, and only the new id went to the new bucket
    assert again.new == 1
    counts = sorted(v[3] for v in buckets(redis_client).values())
    assert counts == [1, 1], counts
    assert int(redis_client.hget(KEYS.counts, "handled") or 0) == 2


def test_two_receivers_at_once_hand_each_id_once_and_agree_on_the_record(redis_url: str) -> None:
    ids = [f"order-{i}" for i in range(3000)]
    handed: dict[str, list[str]] = {"a": [], "b": []}
    new: dict[str, int] = {"a": 0, "b": 0}

    def run(owner: str, order: list[str]) -> None:
        client = redis.Redis.from_url(redis_url)
        w = window(client, owner)
        pending = list(order)
        while pending:
            batch, pending = pending[:50], pending[50:]
            claims = w.claim(batch)
            mine = [m for m, c in zip(batch, claims, strict=True) if c is Claim.HANDLE]
            pending += [m for m, c in zip(batch, claims, strict=True) if c is Claim.BUSY]
            handed[owner] += mine
            new[owner] += w.done(mine).new
        client.close()

    # Given two receivers taking the same ids in opposite orders, at the same time
    threads = [
        threading.Thread(target=run, args=("a", ids)),
        threading.Thread(target=run, args=("b", ids[::-1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then each id was handed by one of them, once, and counted once
    assert sorted(handed["a"] + handed["b"]) == sorted(ids)
    assert new["a"] + new["b"] == len(ids)
    client = redis.Redis.from_url(redis_url)
    try:
        w = window(client, "c")
        assert w.remembered() == len(ids) and w.claim(ids[:100]) == [Claim.DUPLICATE] * 100
        [(name, (_, level, split, count))] = buckets(client).items()
        slots = [f"{KEYS.seen}:{name}:{s}" for s in range(2**level + split)]
        assert count == sum(int(client.hlen(k)) for k in slots) == len(ids)
    finally:
        client.close()


def test_an_earlier_versions_window_is_honoured_until_its_ids_expire(redis_client: redis.Redis) -> None:
    # Given the sorted set an earlier version left: one id remembered for 2 more seconds, one expired
    now = redis_ms(redis_client)
    redis_client.zadd(KEYS.done, {"old": now + 2000, "expired": now - 1})
    redis_client.pexpire(KEYS.done, 2000)
    w = window(redis_client)
    # Then the remembered id is a duplicate (and not counted or journaled again), the expired one is new
    assert w.claim(["old", "expired"]) == [Claim.DUPLICATE, Claim.HANDLE]
    assert w.is_done("old") and w.remembered() == 1
    assert w.done(["old", "expired"]).new == 1
    # And once the earlier set expired, only the new record answers
    time.sleep(2.1)
    assert w.claim(["old", "expired"]) == [Claim.HANDLE, Claim.DUPLICATE]


def test_a_server_that_would_not_keep_the_record_compact_is_refused_at_start(
    redis_client: redis.Redis,
) -> None:
    w = window(redis_client)
    w.check_compact()  # Redis's defaults: 512 entries, 64 bytes
    assert list(redis_client.scan_iter(match="*probe*")) == []
    default = redis_client.config_get("hash-max-listpack-entries")["hash-max-listpack-entries"]
    redis_client.config_set("hash-max-listpack-entries", COMPACT_ENTRIES // 2)
    try:
        with pytest.raises(ConfigurationError, match="hash-max-listpack-entries"):
            w.check_compact()
    finally:
        redis_client.config_set("hash-max-listpack-entries", default)
    assert list(redis_client.scan_iter(match="*probe*")) == []
