"""PairedStore against a real Redis, with ``core.paired.apply_change`` as the oracle."""

from __future__ import annotations

import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.core.outcomes import scrub_secrets
from bridge.core.paired import (
    BacklogRotation,
    EngageFailover,
    MarkAvailable,
    PairedChange,
    PairedState,
    RecordError,
    RecordPing,
    RemoveFromRotation,
    StartTimer,
    apply_changes,
)
from bridge.redis.connection import sync_client
from bridge.state import keys
from bridge.state.paired import PairedStore
from tests.contention import Contender, race

times = st.floats(0, 2e9, allow_nan=False) | st.integers(0, 2_000_000_000)
changes = st.one_of(
    st.builds(StartTimer, at=times),
    st.builds(EngageFailover, at=times, reason=st.text(max_size=10)),
    st.builds(MarkAvailable, at=times, reason=st.text(max_size=10)),
    # The store scrubs secrets from recorded errors; the oracle gets already-scrubbed text
    st.builds(RecordError, at=times, error=st.text(max_size=30).map(scrub_secrets)),
    st.builds(RecordPing, at=times),
)


def fresh() -> str:
    return f"e-{uuid.uuid4().hex}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(changes, max_size=5), max_size=6))
def test_apply_matches_the_pure_reference(
    redis_client: redis.Redis, batches: list[list[PairedChange]]
) -> None:
    store = PairedStore(redis_client)
    entity = fresh()
    expected = PairedState()
    for batch in batches:
        update = store.apply(entity, batch)
        assert update.before == expected
        expected = apply_changes(expected, batch)
        assert update.after == expected
        assert store.get(entity) == expected
        # The ping's set follows the hash atomically on a single server
        assert bool(redis_client.sismember(keys.FAILED_OVER, entity)) == expected.failed_over


# A table of the cases that matter most, named, so a failure reads as a sentence.
CASES: list[tuple[str, list[PairedChange], PairedState]] = [
    ("first failure starts the timer", [StartTimer(10.0), StartTimer(20.0)], PairedState(failing_since=10.0)),
    (
        "engage keeps the running timer's start",
        [StartTimer(10.0), EngageFailover(70.0, "interval")],
        PairedState(failing_since=10.0, failed_over_at=70.0, last_failover_at=70.0),
    ),
    (
        "engage without a timer starts both (failover_interval 0)",
        [EngageFailover(5.0, "immediate")],
        PairedState(failing_since=5.0, failed_over_at=5.0, last_failover_at=5.0),
    ),
    (
        "a second engage changes nothing",
        [EngageFailover(5.0, "a"), EngageFailover(9.0, "b")],
        PairedState(failing_since=5.0, failed_over_at=5.0, last_failover_at=5.0),
    ),
    (
        "available deletes both timer fields, keeps error, ping and the last failover's time",
        [EngageFailover(5.0, "a"), RecordError(6.0, "boom"), RecordPing(7.0), MarkAvailable(8.0, "ping ok")],
        PairedState(last_error="boom", last_error_at=6.0, last_ping_at=7.0, last_failover_at=5.0),
    ),
    (
        "after recovery a new failure starts a new timer",
        [EngageFailover(5.0, "a"), MarkAvailable(8.0, "ok"), StartTimer(100.0)],
        PairedState(failing_since=100.0, last_failover_at=5.0),
    ),
]


@pytest.mark.parametrize(("name", "sequence", "want"), CASES, ids=[c[0] for c in CASES])
def test_change_table(
    redis_client: redis.Redis, name: str, sequence: list[PairedChange], want: PairedState
) -> None:
    assert apply_changes(PairedState(), sequence) == want  # the table itself agrees with the reference
    assert PairedStore(redis_client).apply("orders", sequence).after == want


def test_recorded_errors_are_scrubbed(redis_client: redis.Redis) -> None:
    secret = "Endpoint=sb://ns/;SharedAccessKeyName=root;SharedAccessKey=TOPSECRETkey0123="
    PairedStore(redis_client).apply("orders", [RecordError(1.0, f"auth failed for {secret}")])
    stored = redis_client.hget(keys.paired("orders"), "last_error")
    assert stored is not None and b"TOPSECRET" not in stored and b"SharedAccessKey=***" in stored


def test_racing_workers_start_one_timer_and_exactly_one_engages(redis_url: str) -> None:
    # Given twelve workers that all saw the primary fail at their own time
    workers = 12

    def worker(c: Contender[redis.Redis]) -> bool:
        store = PairedStore(c.client)
        c.together()
        store.apply("orders", [StartTimer(100.0 + c.index)])
        c.together()
        update = store.apply(
            "orders", [RecordError(200.0 + c.index, "down"), EngageFailover(200.0 + c.index, "x")]
        )
        return update.engaged

    engaged = race(workers, lambda: sync_client(redis_url), worker)

    # Then one timer start won, and exactly one worker saw itself engage failover (and logs it)
    state = PairedStore(redis.Redis.from_url(redis_url)).get("orders")
    assert state.failing_since in {100.0 + i for i in range(workers)}
    assert state.failed_over_at in {200.0 + i for i in range(workers)}
    assert engaged.count(True) == 1 and len(engaged) == workers


def test_engage_and_restore_are_logged_once_at_warning(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store = PairedStore(redis_client)
    with caplog.at_level("WARNING", logger="bridge.state.paired"):
        assert store.apply("orders", [EngageFailover(1.0, "interval passed")]).engaged
        assert not store.apply("orders", [EngageFailover(2.0, "again")]).engaged
        assert store.apply("orders", [MarkAvailable(3.0, "ping accepted")]).restored
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "paired failover engaged for orders: primary -> backlog: interval passed",
        "paired failover ended for orders: backlog -> primary: ping accepted",
    ]


def test_failed_over_entities_checks_members_and_candidates(redis_client: redis.Redis) -> None:
    store = PairedStore(redis_client)
    store.apply("a", [EngageFailover(1.0, "x")])
    store.apply("b", [EngageFailover(1.0, "x")])
    store.apply("b", [MarkAvailable(2.0, "ok")])
    assert store.failed_over_entities() == ["a"]

    # A lagging set (as a Cluster may briefly have) is corrected by the check and the candidates
    redis_client.sadd(keys.FAILED_OVER, "ghost")
    redis_client.hset(keys.paired("lost"), "failed_over_at", "5.0")
    assert store.failed_over_entities() == ["a"]
    assert store.failed_over_entities(candidates=["lost", "nothing"]) == ["a", "lost"]


def test_rotation_is_shared_and_matches_the_pure_apply(redis_client: redis.Redis) -> None:
    store = PairedStore(redis_client)
    first = RemoveFromRotation(index=3, at=10.25, error="QuotaExceeded: full")
    second = RemoveFromRotation(index=7, at=11.0, error="sig=abcdef&se=1 refused")
    again = RemoveFromRotation(index=3, at=30.0, error="still full")
    expected = BacklogRotation(count=10)
    for change in (first, second, again):
        store.remove_from_rotation("ns1", change)
        expected = expected.apply(change)
    other_worker = PairedStore(redis_client)

    assert other_worker.rotation("ns1", 10) == expected
    assert other_worker.rotation("ns1", 10).in_rotation(now=40.0, readmit_after=None) == (
        0,
        1,
        2,
        4,
        5,
        6,
        8,
        9,
    )
    assert other_worker.rotation("ns1", 5).removed == {3: 30.0}  # a smaller count ignores queue 7
    assert other_worker.rotation("ns2", 10) == BacklogRotation(count=10)
    assert other_worker.rotation_errors("ns1") == {3: "still full", 7: "sig=***&se=1 refused"}


def test_rotation_removal_log_carries_no_secret(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("DEBUG"):
        PairedStore(redis_client).remove_from_rotation(
            "ns1", RemoveFromRotation(index=0, at=1.0, error="denied: SharedAccessKey=TOPSECRET0123;")
        )
    assert caplog.records and "TOPSECRET" not in caplog.text


def test_apply_all_routes_rotation_removals_to_the_shared_rotation(redis_client: redis.Redis) -> None:
    store = PairedStore(redis_client)
    removal = RemoveFromRotation(index=2, at=5.0, error="entity outage")
    update = store.apply_all("orders", "ns1", [StartTimer(4.0), removal, RecordError(5.0, "entity outage")])
    assert update.after == PairedState(failing_since=4.0, last_error="entity outage", last_error_at=5.0)
    assert store.rotation("ns1", 10) == BacklogRotation(count=10).apply(removal)
