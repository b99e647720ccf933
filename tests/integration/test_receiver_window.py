"""The receivers' shared MessageId window in real Redis (``DedupWindow``): claims, done marks, in-flight
marks that expire, the bound, and its memory per id (the record's own tests: ``test_receiver_seen.py``)."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from bridge.core.journal import EventKind
from bridge.core.receiving import Claim, Renewal
from bridge.journal.store import JournalStore
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow
from bridge.settings import JournalSettings

pytestmark = pytest.mark.timeout(60)


def window(client: redis.Redis, owner: str, **options: float) -> DedupWindow:
    settings = {"window": 600.0, "max_remembered": 1000, "inflight_ttl": 30.0, **options}
    return DedupWindow(
        client,
        ReceiverKeys("orders"),
        owner=owner,
        window=settings["window"],
        max_remembered=int(settings["max_remembered"]),
        inflight_ttl=settings["inflight_ttl"],
    )


def test_one_claim_per_id_while_in_flight_then_duplicate_once_done(redis_client: redis.Redis) -> None:
    a, b = window(redis_client, "a"), window(redis_client, "b")
    assert a.claim(["m1", "m2", "m1"]) == [Claim.HANDLE, Claim.HANDLE, Claim.BUSY]
    assert b.claim(["m1", "m3"]) == [Claim.BUSY, Claim.HANDLE]
    a.done(["m1"])
    assert b.claim(["m1"]) == [Claim.DUPLICATE] and b.is_done("m1") and not b.in_flight("m1")
    # A failed handler drops its mark: the next copy is handed (a retry), not suppressed
    a.release(["m2"])
    assert b.claim(["m2"]) == [Claim.HANDLE]
    # Only the owner's marks are dropped or extended
    a.release(["m3"])
    assert a.claim(["m3"]) == [Claim.BUSY]
    assert a.renew(["m3"]) == [Renewal.TAKEN] and b.renew(["m3"]) == [Renewal.RENEWED]


def test_a_crashed_owners_in_flight_mark_expires_and_the_id_can_be_handled(redis_client: redis.Redis) -> None:
    crashed, other = window(redis_client, "crashed", inflight_ttl=0.3), window(redis_client, "other")
    assert crashed.claim(["m"]) == [Claim.HANDLE]
    assert other.claim(["m"]) == [Claim.BUSY]
    time.sleep(0.4)
    assert other.claim(["m"]) == [Claim.HANDLE]
    # The crashed owner's late done mark still counts, but it does not delete the new owner's mark, and it
    # says the mark was another's
    assert crashed.done(["m"]).taken == ["m"]
    assert other.in_flight("m") and other.is_done("m") and other.mark_owner("m") == "other"


def test_a_renewal_says_per_id_whether_the_mark_was_still_ours(redis_client: redis.Redis) -> None:
    a, b = window(redis_client, "a", inflight_ttl=0.3), window(redis_client, "b")
    assert a.claim(["late", "taken", "gone"]) == [Claim.HANDLE] * 3
    assert window(redis_client, "a", inflight_ttl=30).claim(["ours"]) == [Claim.HANDLE]  # a longer mark
    time.sleep(0.5)  # the marks' life runs out (receivers reach Redis all along: under a second between)
    assert b.claim(["taken"]) == [Claim.HANDLE]
    redis_client.delete(ReceiverKeys("orders").inflight("gone"))  # as a failover to a late replica would
    assert a.renew(["ours", "late", "taken", "gone"]) == [
        Renewal.RENEWED,  # renewed in time
        Renewal.LATE,  # its life had run out, but nobody claimed the id: still ours
        Renewal.TAKEN,  # another receiver claimed it
        Renewal.GONE,  # no mark at all: set again, ours
    ]
    assert a.mark_owner("gone") == "a" and b.claim(["gone"]) == [Claim.BUSY]
    # Another receiver's handler of the id returned: its done mark, no mark of ours
    b.done(["taken"])
    assert a.renew(["taken"]) == [Renewal.HANDLED]
    assert not a.in_flight("taken")
    # The heartbeat (no ids) renews nothing
    assert a.renew([]) == []


def test_a_gap_in_which_no_receiver_reaches_redis_ages_the_marks_by_one_second_only(
    redis_client: redis.Redis,
) -> None:
    holder, other = window(redis_client, "holder", inflight_ttl=1.5), window(redis_client, "other")
    assert holder.claim(["m"]) == [Claim.HANDLE]
    # Given no receiver ran a script for longer than the mark's life (Redis cut off from all of them)
    time.sleep(2.5)
    # Then the mark aged by a second: still live
    assert other.claim(["m"]) == [Claim.BUSY] and other.in_flight("m")
    # And once receivers reach Redis again it ages as usual
    time.sleep(0.7)
    assert other.claim(["m"]) == [Claim.HANDLE]


def test_done_marks_count_and_journal_each_id_once_even_when_written_again(redis_client: redis.Redis) -> None:
    journaled = DedupWindow(
        redis_client,
        ReceiverKeys("orders"),
        owner="a",
        window=600,
        max_remembered=1000,
        inflight_ttl=30,
        journal_max=1000,
    )
    assert journaled.claim(["m1", "m2"]) == [Claim.HANDLE, Claim.HANDLE]
    # The done marks, the handled counter and the handled events are written in one step
    assert journaled.done(["m1", "m2"], at=1790000000.5).new == 2
    # Written again (a retry after a reply lost with Redis, or another copy's late handler): nothing twice
    assert journaled.done(["m2", "m1"], at=1790000001.0).new == 0
    events = JournalStore(redis_client, JournalSettings()).read("orders", 100)
    assert [(e.kind, e.message_id, e.at) for _, e in events] == [
        (EventKind.HANDLED, "m1", 1790000000.5),
        (EventKind.HANDLED, "m2", 1790000000.5),
    ]
    assert int(redis_client.hget(ReceiverKeys("orders").counts, "handled") or 0) == 2
    assert journaled.is_done("m1") and not journaled.in_flight("m1")


def test_done_marks_expire_after_the_window(redis_client: redis.Redis) -> None:
    short = window(redis_client, "a", window=0.35)
    assert short.claim(["m"]) == [Claim.HANDLE]
    short.done(["m"])
    assert short.claim(["m"]) == [Claim.DUPLICATE]
    time.sleep(0.45)  # the window and one span (a seventh of it): the id's bucket has expired
    assert not short.is_done("m")
    assert short.claim(["m"]) == [Claim.HANDLE]
    assert short.remembered() == 0  # its bucket expired with it


def test_a_full_window_refuses_claims_rather_than_forgetting_ids(redis_client: redis.Redis) -> None:
    bounded = window(redis_client, "a", window=0.5, max_remembered=3)
    assert bounded.claim(["a", "b", "c", "d"]) == [Claim.HANDLE] * 3 + [Claim.FULL]
    bounded.done(["a", "b", "c"])
    # Full: nothing new is claimed, and every remembered id is still recognised
    assert bounded.claim(["d", "a"]) == [Claim.FULL, Claim.DUPLICATE]
    time.sleep(0.6)
    # Once the ids expire there is room again
    assert bounded.claim(["d"]) == [Claim.HANDLE]


def test_memory_per_remembered_id_is_about_the_fingerprint(redis_client: redis.Redis) -> None:
    ids = [uuid.uuid4().hex for _ in range(5000)]
    big = window(redis_client, "a", max_remembered=10**6)
    for start in range(0, len(ids), 500):
        big.claim(ids[start : start + 500])
        big.done(ids[start : start + 500])
    keys = list(redis_client.scan_iter(match=ReceiverKeys("orders").seen + "*"))
    per_id = sum(int(redis_client.memory_usage(k, samples=0) or 0) for k in keys) / len(ids)
    # docs/receiving.md ("Window") documents ~23 bytes (14 of them the fingerprint); bench.receiver
    # measures it at scale
    assert 14 < per_id < 32, per_id
    assert big.remembered() == len(ids)
    assert all(redis_client.pttl(k) > 0 for k in keys)  # the record expires by itself when unused
