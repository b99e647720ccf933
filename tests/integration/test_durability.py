"""``ingress.durability``: ``replicated`` acknowledges only what WAITAOF confirmed on the primary and on
replicas, through every door; too few confirmations are refused with the counts, and nothing is promised
that a replica does not hold on disk."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from bridge import Producer
from bridge.embedded.redis_server import WAITAOF_VERSION, RedisServer, redis_server_binary
from bridge.errors import ConfigurationError, DurabilityNotReachedError
from bridge.outbox import keys
from bridge.outbox.redis_door import move_ingress
from bridge.outbox.store import SyncOutbox
from bridge.outbox.view import AsyncOutboxView
from bridge.redis.connection import async_client, sync_client
from bridge.settings import Settings
from tests.integration.ingress_support import running_ingress

pytestmark = pytest.mark.xdist_group("durability")

REPLICATED = {"durability": "replicated", "wait_replicas": 1, "wait_timeout": 0.3}


class Pair:
    """A primary and one replica of a WAITAOF-speaking server, the replica synced."""

    def __init__(self, base: Path) -> None:
        binary = redis_server_binary(WAITAOF_VERSION)
        options = ("--repl-diskless-sync-delay", "0", "--hz", "100")
        self.primary = RedisServer(data_dir=base / "primary", binary=binary, extra_args=options)
        self.replica = RedisServer(data_dir=base / "replica", binary=binary, extra_args=options)

    def start(self) -> Pair:
        self.primary.start()
        self.replica.extra_args = (
            *self.replica.extra_args,
            "--replicaof",
            "127.0.0.1",
            str(self.primary.port),
        )
        self.replica.start()
        self.wait_synced()
        return self

    def wait_synced(self) -> None:
        with redis.Redis(port=self.replica.port, socket_timeout=2) as client:
            deadline = time.monotonic() + 30
            while not _aof_synced(client):
                assert time.monotonic() < deadline, "the replica never synced"
                time.sleep(0.05)

    @contextlib.contextmanager
    def replica_frozen(self) -> Iterator[None]:
        """SIGSTOP the replica: connected, but it confirms nothing until SIGCONT."""
        pid = int(redis.Redis(port=self.replica.port).info("server")["process_id"])
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
            self.wait_confirming()

    def wait_confirming(self) -> None:
        """Return once the replica confirms writes again (a thawed replica takes a moment to catch up)."""
        with redis.Redis(port=self.primary.port, socket_timeout=5) as client:
            deadline = time.monotonic() + 30
            while True:
                client.set("confirming", "1")
                if client.execute_command("WAITAOF", 1, 1, 200) == [1, 1]:
                    client.delete("confirming")
                    return
                assert time.monotonic() < deadline, "the replica never confirmed again"

    def close(self) -> None:
        self.replica.close()
        self.primary.close()


def _aof_synced(client: redis.Redis) -> bool:
    """The replica's link is up and its AOF rewritten after the full sync (only then does it confirm)."""
    info = client.info()
    return info.get("master_link_status") == "up" and not (
        int(info["aof_rewrite_in_progress"]) or int(info["aof_rewrite_scheduled"])
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    pair = Pair(tmp_path_factory.mktemp("durability")).start()
    try:
        yield pair
    finally:
        pair.close()


@pytest.fixture
def settings(pair: Pair) -> Settings:
    with redis.Redis(port=pair.primary.port) as client:
        client.flushall()
    pair.wait_synced()
    return Settings(redis_url=pair.primary.url, ingress=REPLICATED)


def test_replicated_acknowledges_what_the_replica_holds_and_says_so(settings: Settings, pair: Pair) -> None:
    with running_ingress(settings) as base:
        answer = httpx.post(f"{base}/v1/entities/orders/messages", json={"body": "one", "message_id": "m1"})
    assert answer.status_code == 202, answer.text
    assert answer.json()["durability"] == "replicated"
    assert answer.headers["x-bridge-durability"] == "replicated; replicas=1"
    # Then: the replica holds the entry the moment the sender holds the acknowledgement.
    with redis.Redis(port=pair.replica.port) as replica:
        assert replica.xrange(keys.outbox("orders", 0))[0][1][b"id"] == b"m1"


def test_too_few_confirmations_are_a_503_naming_the_mode_and_a_retry_is_confirmed(
    settings: Settings, pair: Pair
) -> None:
    with running_ingress(settings) as base:
        # Given: the replica confirms nothing
        with pair.replica_frozen():
            refused = httpx.post(
                f"{base}/v1/entities/orders/messages", json={"body": "one", "message_id": "m1"}
            )
        # (the replica confirms again when the block above ends)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "durability_not_reached"
        assert error["durability"] == {
            "mode": "replicated",
            "required_replicas": 1,
            "confirmed_replicas": 0,
            "primary_fsync": True,
        }
        assert "retry with the same message_id" in error["message"]
        assert refused.headers["retry-after"] == "1"
        # When: the sender retries with the same message_id once the replica is back
        again = httpx.post(f"{base}/v1/entities/orders/messages", json={"body": "one", "message_id": "m1"})
    # Then: the one entry written by the refused request is confirmed now, and not stored twice
    assert again.status_code == 202, again.text
    assert again.json() == {
        "message_id": "m1",
        "entity": "orders",
        "duplicate": True,
        "durability": "replicated",
    }
    with redis.Redis(port=pair.primary.port) as primary:
        assert primary.xlen(keys.outbox("orders", 0)) == 1


def test_a_re_posted_duplicate_is_confirmed_not_waved_through(settings: Settings, pair: Pair) -> None:
    # Given: m1 written on the primary but refused, the replica frozen
    with pair.replica_frozen():
        with Producer(settings=settings) as producer, pytest.raises(DurabilityNotReachedError):
            producer.send("orders", "one", message_id="m1")
        # When: another producer (a fresh connection that wrote nothing yet) re-posts it
        with Producer(settings=settings) as other, pytest.raises(DurabilityNotReachedError) as caught:
            other.send("orders", "one", message_id="m1")
    # Then: refused too, as the first copy is still on the primary alone (WAITAOF alone would have
    # counted the fresh connection's empty history as confirmed)
    assert caught.value.confirmed == 0
    with Producer(settings=settings) as producer:
        assert producer.send("orders", "one", message_id="m1") == "m1"
        assert producer.durability == "replicated"


def test_one_round_confirms_a_large_write_when_the_replica_is_healthy(settings: Settings, pair: Pair) -> None:
    """A replica asked for its fsync'd offset in the same pass that reads the write answers "not yet" (one
    round in twenty here, alone), and that round then waits out its timeout; the round's ``WAIT`` makes the
    ``WAITAOF``'s question come after the fsync. 200 writes of 300 KB, each confirmed in one round."""
    from bridge.core.durability import DurabilityPolicy, Reached, verdict
    from bridge.redis.held import HeldConnection

    policy = DurabilityPolicy("replicated", 1, timeout_ms=250)
    body = "x" * 1024
    short = []
    with redis.Redis(port=pair.primary.port) as client:
        held = HeldConnection(client)
        try:
            for write in range(200):
                held.run([("XADD", "large", "*", "b", body) for _ in range(300)], errors_as_values=False)
                reply = held.run(policy.confirm_commands(250))[-1]
                if not isinstance(verdict(policy, reply), Reached):
                    short.append((write, reply))
        finally:
            held.release()
    assert short == []


def test_a_write_goes_out_while_an_earlier_one_waits_for_its_replicas(pair: Pair) -> None:
    """The replica confirms nothing for a while: a second request's write reaches the primary while the
    first request still waits for its confirmation (two pipelines in flight), and each is answered."""
    with redis.Redis(port=pair.primary.port) as client:
        client.flushall()
    pair.wait_synced()
    slow = Settings(redis_url=pair.primary.url, ingress={**REPLICATED, "wait_timeout": 3.0})
    answers: dict[str, int] = {}

    def post(message_id: str) -> None:
        answer = httpx.post(
            f"{base}/v1/entities/orders/messages",
            json={"body": message_id, "message_id": message_id},
            timeout=10,
        )
        answers[message_id] = answer.status_code

    with running_ingress(slow) as base, pair.replica_frozen():
        first = threading.Thread(target=post, args=("first",))
        first.start()
        with redis.Redis(port=pair.primary.port) as primary:
            _wait_for_entry(primary, "first")
            second = threading.Thread(target=post, args=("second",))
            second.start()
            # Then: the second write is on the primary while the first still waits for its replica
            _wait_for_entry(primary, "second")
            assert "first" not in answers
        first.join()
        second.join()
    assert answers == {"first": 503, "second": 503}


def _wait_for_entry(primary: redis.Redis, message_id: str, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(
        fields[b"id"] == message_id.encode() for _, fields in primary.xrange(keys.outbox("orders", 0))
    ):
        assert time.monotonic() < deadline, f"{message_id} never reached the primary"
        time.sleep(0.02)


def test_the_redis_door_moves_only_what_replicas_confirmed(settings: Settings, pair: Pair) -> None:
    client = sync_client(pair.primary.url)
    outbox = SyncOutbox(client, settings)
    client.xadd(keys.ingress("orders"), {"body": b"door", "message_id": b"d1"})
    with pair.replica_frozen(), pytest.raises(DurabilityNotReachedError):
        move_ingress(outbox, "orders", consumer="t", now=time.time())
    # The entry stays pending in the door's stream; the next move confirms it and acknowledges it there.
    assert client.xlen(keys.ingress("orders")) == 1
    report = move_ingress(outbox, "orders", consumer="t", now=time.time())
    assert (report.moved, report.duplicates) == (0, 1)
    assert client.xlen(keys.ingress("orders")) == 0
    assert client.xlen(keys.outbox("orders", 0)) == 1
    client.close()


def test_replicated_is_refused_at_start_up_by_a_server_without_waitaof(redis_url: str) -> None:
    # The session's server is Debian's redis-server 7.0: it has no WAITAOF.
    settings = Settings(redis_url=redis_url, ingress=REPLICATED)

    async def start() -> None:
        client = async_client(redis_url)
        try:
            await AsyncOutboxView(client, settings).check_start_up()
        finally:
            await client.aclose()

    with pytest.raises(ConfigurationError, match="WAITAOF"):
        asyncio.run(start())


def test_replicated_needs_a_replica_count() -> None:
    with pytest.raises(ValueError, match="wait_replicas >= 1"):
        Settings(ingress={"durability": "replicated"})
