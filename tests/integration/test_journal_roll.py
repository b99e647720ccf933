"""The journal in real Redis and its roll into Parquet: bounded appends, durable files, crash safety, one
roller at a time. No Spark here: files are read back with pyarrow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import redis

from bridge.core import journal as J
from bridge.journal import keys
from bridge.journal.roll import roll, write_step
from bridge.journal.store import JournalStore
from bridge.producer import Producer
from bridge.redis.connection import sync_client
from bridge.redis.lease import Lease
from bridge.settings import JournalSettings, Settings


@pytest.fixture
def store(redis_url: str) -> JournalStore:
    return JournalStore(sync_client(redis_url), JournalSettings())


def _accepted(n: int, start: int = 0) -> list[J.JournalEvent]:
    return [J.accepted(f"m-{i}", 1000.0 + i, door="producer", size=10) for i in range(start, start + n)]


def _rows(directory: Path) -> list[dict[str, object]]:
    files = sorted(p for p in directory.rglob("*.parquet") if not p.name.startswith("."))
    return [row for path in files for row in pq.read_table(path).to_pylist()]


def test_events_are_appended_in_one_batch_and_registered(
    store: JournalStore, redis_client: redis.Redis
) -> None:
    written = store.append("orders", [*_accepted(3), J.handled("m-0", 1001.0)])

    assert written == 4
    entries = redis_client.xrange(keys.journal("orders"))
    assert [J.JournalEvent.decode_entry(f)[0].kind for _, f in entries] == ["accepted"] * 3 + ["handled"]
    assert redis_client.smembers(keys.REGISTRY) == {b"orders"}


def test_a_full_journal_counts_what_it_could_not_hold_and_never_trims(redis_url: str) -> None:
    store = JournalStore(sync_client(redis_url), JournalSettings(max_length=10))

    written = store.append("orders", [*_accepted(12), J.handled("m-0", 1.0), J.handled("m-1", 2.0)])

    assert written == 10
    assert store.length("orders") == 10
    assert store.overflow("orders") == {"accepted": 2, "handled": 2}
    assert [e.message_id for _, e in store.read("orders", 100)] == [f"m-{i}" for i in range(10)]


def test_a_disabled_journal_writes_nothing(redis_url: str, redis_client: redis.Redis) -> None:
    store = JournalStore(sync_client(redis_url), JournalSettings(enabled=False))

    assert store.append("orders", _accepted(3)) == 0
    assert redis_client.exists(keys.journal("orders")) == 0


def test_roll_writes_hour_partitions_durably_trims_and_carries_the_overflow(
    redis_url: str, tmp_path: Path
) -> None:
    store = JournalStore(sync_client(redis_url), JournalSettings(max_length=5))
    store.append("orders", _accepted(7))
    store.append("~backlog:ns1", [J.syphon_receive(1.0, namespace="ns2", queue="0", calls=3, empty=True)])

    report = roll(store, tmp_path, chunk=100, lease_ttl=10)

    assert (report.events, report.overflow, report.owners) == (6, 2, 2)
    assert store.length("orders") == 0
    assert store.overflow("orders") == {}
    rows = _rows(tmp_path)
    accepted = [r for r in rows if r["kind"] == "accepted"]
    assert [r["message_id"] for r in accepted] == [f"m-{i}" for i in range(5)]
    assert [(r["kind"], r["reason"], r["count"]) for r in rows if r["kind"] == "journal_overflow"] == [
        ("journal_overflow", "accepted", 2)
    ]
    assert all(path.parent.name.startswith("hour=") for path in tmp_path.rglob("*.parquet"))
    assert not list(tmp_path.rglob(".*.tmp"))
    # the stream keeps working after the trim: the bound counts what is there now
    assert store.append("orders", _accepted(2, start=100)) == 2


def _kill_between_write_and_trim(
    redis_url: str, directory: Path, chunk: int
) -> subprocess.CompletedProcess[str]:
    """Run one roll step in a process that is SIGKILLed after the files are durable, before the trim."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from bridge.journal.roll import write_step
        from bridge.journal.store import JournalStore
        from bridge.redis.connection import sync_client
        from bridge.settings import JournalSettings, Settings

        store = JournalStore(sync_client({redis_url!r}), JournalSettings())
        step = write_step(store, Path({str(directory)!r}), "orders", {chunk})
        print(len(step.files), step.events, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("next_chunk", [200, 1000], ids=["same-range", "longer-range"])
def test_a_roller_killed_between_write_and_trim_loses_and_doubles_nothing(
    store: JournalStore, redis_url: str, tmp_path: Path, next_chunk: int
) -> None:
    # Given 500 events, and a roller killed after writing its first 200 to a file but before trimming
    store.append("orders", _accepted(500))
    killed = _kill_between_write_and_trim(redis_url, tmp_path, chunk=200)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert killed.stdout.split() == ["1", "200"]
    assert store.length("orders") == 500  # nothing trimmed
    # When more events arrive and the next roller runs
    store.append("orders", _accepted(100, start=500))
    report = roll(store, tmp_path, chunk=next_chunk, lease_ttl=10)

    # Then every event is in the files, each event id once after de-duplication, and the stream is empty
    rows = _rows(tmp_path)
    ids = [r["event_id"] for r in rows]
    assert len(set(ids)) == 600
    assert sorted(r["message_id"] for r in {r["event_id"]: r for r in rows}.values()) == sorted(
        f"m-{i}" for i in range(600)
    )
    assert store.length("orders") == 0
    assert report.events == 600
    if next_chunk == 200:
        # the same range was written under the same name: replaced, not repeated
        assert len(ids) == 600
    else:
        # a longer range is a new file that repeats the killed roller's 200 events (the ledger drops them)
        assert len(ids) == 800


def test_one_roller_at_a_time(store: JournalStore, tmp_path: Path) -> None:
    store.append("orders", _accepted(3))
    other = Lease.named(store.client, keys.ROLL_LEASE)
    assert other.acquire("someone-else", 10_000)

    busy = roll(store, tmp_path, chunk=100, lease_ttl=10)

    assert busy.busy and busy.events == 0
    assert store.length("orders") == 3
    other.release("someone-else")
    assert roll(store, tmp_path, chunk=100, lease_ttl=10).events == 3


def test_a_step_without_events_writes_nothing(store: JournalStore, tmp_path: Path) -> None:
    step = write_step(store, tmp_path, "nobody", 10)

    assert (step.last_id, step.files) == (None, [])
    assert not any(os.scandir(tmp_path))


def test_position_is_after_every_event_even_once_the_journal_was_trimmed(
    store: JournalStore, tmp_path: Path
) -> None:
    store.append("orders", _accepted(2))
    last = J.split_stream_id(store.read("orders", 10)[-1][0])
    roll(store, tmp_path, chunk=100, lease_ttl=10)

    assert store.position("orders") == last
    assert store.position("never-written")[0] > last[0] - 60_000


# ---- the outbox write journals ``accepted`` in the same script ---------------------------------------------
def _journal(redis_client: redis.Redis, entity: str) -> list[J.JournalEvent]:
    entries = redis_client.xrange(keys.journal(entity))
    return [event for _, fields in entries for event in J.JournalEvent.decode_entry(fields)]


def test_the_outbox_write_journals_each_stored_message_once(
    redis_url: str, redis_client: redis.Redis
) -> None:
    settings = Settings(redis_url=redis_url)
    with Producer(settings=settings) as producer:
        # Given a keyed message, a keyless one, and a re-post of the first within the idempotency window
        first = producer.send("orders", b"hello", session_id="customer-7", message_id="m-1")
        second = producer.send("orders", "x" * 100)
        again = producer.send("orders", b"hello", session_id="customer-7", message_id="m-1")

    events = _journal(redis_client, "orders")

    # Then one accepted event per stored message (the duplicate stored nothing and journals nothing)
    assert again == first
    assert [(e.kind, e.message_id, e.door, e.keys) for e in events] == [
        ("accepted", "m-1", "producer", "customer-7"),
        ("accepted", second, "producer", None),
    ]
    entries = redis_client.xrange(b"bridge:{orders}:out:0")
    stored = {
        fields[b"id"].decode(): sum(len(k) + len(v) for k, v in fields.items()) for _, fields in entries
    }
    assert {e.message_id: e.size for e in events} == stored  # the size the bounds count
    assert all(e.shard == 0 and e.at > 0 for e in events)


def test_one_request_is_one_batch_entry_with_every_message(redis_url: str, redis_client: redis.Redis) -> None:
    settings = Settings(redis_url=redis_url, entities={"orders": {"outbox_shards": 2}})
    with Producer(settings=settings) as producer:
        ids = producer.send_batch("orders", [{"body": b"a", "session_id": "s-1"}, b"b", b"c"])

    assert redis_client.xlen(keys.journal("orders")) == 1
    events = _journal(redis_client, "orders")
    assert [(e.message_id, e.keys, e.door) for e in events] == [
        (ids[0], "s-1", "producer"),
        (ids[1], None, "producer"),
        (ids[2], None, "producer"),
    ]
    assert {e.shard for e in events} <= {0, 1}


def test_a_full_journal_never_refuses_an_outbox_write(redis_url: str, redis_client: redis.Redis) -> None:
    settings = Settings(redis_url=redis_url, journal=JournalSettings(max_length=1))
    with Producer(settings=settings) as producer:
        # One request is one journal entry (a batch entry for its messages): the second finds no room
        ids = producer.send_batch("orders", [b"a", b"b"])
        late = producer.send("orders", b"c")

    assert len(redis_client.xrange(b"bridge:{orders}:out:0")) == 3
    assert [e.message_id for e in _journal(redis_client, "orders")] == ids
    assert late not in ids
    assert redis_client.hgetall(keys.overflow("orders")) == {b"accepted": b"1"}


def test_a_disabled_journal_is_not_written_by_the_outbox(redis_url: str, redis_client: redis.Redis) -> None:
    settings = Settings(redis_url=redis_url, journal=JournalSettings(enabled=False))
    with Producer(settings=settings) as producer:
        producer.send("orders", b"a")

    assert redis_client.exists(keys.journal("orders")) == 0


# ---- what the send side journals (bridge.journal.emit) ---------------------------------------------------
def test_a_batch_journals_its_copies_by_path_in_one_grouped_call(
    store: JournalStore, redis_client: redis.Redis
) -> None:
    from bridge.core.error_classes import ErrorClass
    from bridge.core.outcomes import Outcome
    from bridge.journal.emit import BatchJournal, namespace_names

    ok, down = Outcome.success(), Outcome.failure(ErrorClass.OUTAGE, "refused")
    journal = BatchJournal(namespace_names("east", "west"))
    # Given a passive batch: m1 and m3 taken by the primary, m2 refused and then taken by the backup
    journal.record_send("primary", ["m1", "m2", "m3"], [ok, down, ok], 10.0)
    journal.record_send("secondary", ["m2"], [ok], 10.5)
    journal.dead_lettered("m4", 10.6, "message_too_large")
    journal.take().write(store, "orders")
    # And a paired batch to a backlog queue
    journal.clear()
    journal.record_send("secondary", ["p1"], [ok], 11.0, backlog_queue="east/x-servicebus-transfer/3")
    journal.take().write(store, "orders")

    events = _journal(redis_client, "orders")
    assert [(e.kind, e.message_id, e.namespace, e.path, e.error_class) for e in events] == [
        ("sent", "m1", "east", "direct", None),
        ("sent", "m3", "east", "direct", None),
        ("send_failed", "m2", "east", None, "outage"),
        ("sent", "m2", "west", "backup", None),
        ("dead_lettered", "m4", None, None, None),
        ("sent", "p1", "west", "backlog", None),
    ]
    assert events[-1].queue == "east/x-servicebus-transfer/3"
    assert len({e.batch for e in events[:3]}) == 1 and events[3].batch != events[0].batch


def test_control_messages_are_journaled_as_such(store: JournalStore, redis_client: redis.Redis) -> None:
    from bridge.core.outcomes import Outcome
    from bridge.core.receiving import EventKind as ReceiverKind
    from bridge.core.receiving import ReceiverEvent
    from bridge.journal.emit import BatchJournal, ReceiverJournal, namespace_names

    names = namespace_names("east", "west")
    # Given a shard's restore barrier sent to a backlog queue, and a receiver that got a ping and a message
    batch = BatchJournal(names)
    batch.record_send("secondary", ["barrier-1"], [Outcome.success()], 1.0, backlog_queue="q/3", barrier=True)
    batch.take().write(store, "payments")
    receiver = ReceiverJournal(store, "payments", names)
    receiver.record(
        [
            ReceiverEvent(ReceiverKind.RECEIVED, "primary", "ping-1"),
            ReceiverEvent(ReceiverKind.RECEIVED, "primary", "m1"),
            ReceiverEvent(ReceiverKind.PING_DROPPED, "primary", "ping-1"),
        ],
        2.0,
    )

    # Then the barrier is a send on path "barrier" and the ping's receive has result "ping": billed, and
    # marked so the ledger counts no message for them; the message's receive is plain
    events = _journal(redis_client, "payments")
    assert [(e.kind, e.message_id, e.path, e.result, e.queue) for e in events] == [
        ("sent", "barrier-1", "barrier", None, "q/3"),
        ("received", "ping-1", None, "ping", None),
        ("received", "m1", None, None, None),
    ]
    from bridge.core.control_events import is_control

    assert [is_control(e.kind, e.path, e.result) for e in events] == [True, True, False]


def test_active_mode_copies_are_both_direct(store: JournalStore, redis_client: redis.Redis) -> None:
    from bridge.core.outcomes import Outcome
    from bridge.journal.emit import BatchJournal, namespace_names

    journal = BatchJournal(namespace_names("east", "west"), dual=True)
    journal.record_send("primary", ["m1"], [Outcome.success()], 1.0)
    journal.record_send("secondary", ["m1"], [Outcome.success()], 1.0)
    journal.take().write(store, "audit")

    paths = [e.path for e in _journal(redis_client, "audit")]
    assert paths == ["direct", "direct"]


def test_grouped_appends_are_bounded_too(redis_url: str) -> None:
    store = JournalStore(sync_client(redis_url), JournalSettings(max_length=1))
    template = J.JournalEvent(J.EventKind.HANDLED, 1.0)

    assert store.append_groups("orders", [(template, ["a", "b"]), (template, ["c", "d", "e"])]) == 1
    assert [e.message_id for _, e in store.read("orders", 10)] == ["a", "b"]
    assert store.overflow("orders") == {"handled": 1}
