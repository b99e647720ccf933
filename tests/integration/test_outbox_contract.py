"""One contract for both outbox shells: every case runs against ``SyncOutbox`` and ``AsyncOutbox``.

The two share their steps (``bridge.outbox.store._write_steps``); these cases make sure each shell carries
them out the same way on a real Redis: acks and duplicates, one group's refusal beside another's success,
``NOSCRIPT`` after ``SCRIPT FLUSH`` (lone call and pipeline), ``WAIT`` without enough replicas, Redis out of
memory, Redis down, and on a Cluster the totals kept outside the entity script.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import pytest
import redis

from bridge.core.envelope import Envelope
from bridge.embedded.ports import free_port
from bridge.embedded.redis_server import RedisServer
from bridge.errors import BackpressureError, OutboxUnavailableError
from bridge.outbox import keys
from bridge.outbox.scripts import WRITE
from bridge.outbox.store import AsyncOutbox, GroupResult, SyncOutbox
from bridge.outbox.writer import Ack, Group, OutboxWriter
from bridge.redis.connection import async_client, sync_client
from bridge.settings import Settings

SHELLS = ("sync", "async")


class Shell:
    """Drives one of the two outbox classes with the same blocking calls (the async one on its own loop)."""

    def __init__(self, kind: str, settings: Settings) -> None:
        self.kind = kind
        url = settings.redis_url.get_secret_value()
        if kind == "sync":
            self.sync = SyncOutbox(sync_client(url), settings)
            self.writer: OutboxWriter = self.sync.writer
        else:
            self.loop = asyncio.new_event_loop()
            self.async_ = AsyncOutbox(async_client(url), settings)
            self.writer = self.async_.writer

    def write(self, groups: Sequence[Group]) -> list[GroupResult]:
        if self.kind == "sync":
            return self.sync.write(groups)
        return self.loop.run_until_complete(self.async_.write(groups))

    def close(self) -> None:
        if self.kind == "sync":
            self.sync.client.close()
        else:
            self.loop.run_until_complete(self.async_.client.aclose())
            self.loop.close()

    def group(self, entity: str, *message_ids: str) -> Group:
        envelopes = [Envelope(entity, mid, f"body of {mid}".encode(), 1.0) for mid in message_ids]
        return self.writer.group(entity, envelopes)


@pytest.fixture
def make_shell(request: pytest.FixtureRequest) -> Iterator[Callable[..., Shell]]:
    made: list[Shell] = []

    def make(url: str, **settings: Any) -> Shell:
        shell = Shell(request.param, Settings(redis_url=url, **settings))
        made.append(shell)
        return shell

    yield make
    for shell in made:
        shell.close()


def shells() -> Any:
    return pytest.mark.parametrize("make_shell", SHELLS, indirect=True)


def _acks(result: GroupResult) -> list[Ack]:
    assert isinstance(result, list), result
    return result


@shells()
def test_acks_and_duplicates(make_shell: Callable[..., Shell], redis_url: str, redis_client: redis.Redis):
    shell = make_shell(redis_url)
    (first,) = shell.write([shell.group("orders", "a", "b", "a")])
    assert [(a.message_id, a.duplicate) for a in _acks(first)] == [("a", False), ("b", False), ("a", True)]
    (again,) = shell.write([shell.group("orders", "b")])
    assert _acks(again)[0].duplicate and _acks(again)[0].entry_id == _acks(first)[1].entry_id
    assert redis_client.xlen(keys.outbox("orders", 0)) == 2
    assert redis_client.hget(keys.TOTALS, "messages") == b"2"
    assert redis_client.smembers(keys.ENTITIES) == {b"orders"}


@shells()
def test_one_group_refused_beside_others_stored(
    make_shell: Callable[..., Shell], redis_url: str, redis_client: redis.Redis
):
    shell = make_shell(redis_url, entities={"tiny": {"max_pending_messages": 1}})
    results = shell.write(
        [shell.group("orders", "a"), shell.group("tiny", "t1", "t2"), shell.group("events", "e")]
    )
    assert isinstance(results[1], BackpressureError)
    assert [_acks(results[i])[0].message_id for i in (0, 2)] == ["a", "e"]
    assert redis_client.exists(keys.outbox("tiny", 0)) == 0
    assert redis_client.smembers(keys.ENTITIES) == {b"orders", b"events"}


@shells()
@pytest.mark.parametrize("entities", [1, 2], ids=["lone-call", "pipeline"])
def test_noscript_loads_the_script_and_sends_again(
    make_shell: Callable[..., Shell], redis_url: str, redis_client: redis.Redis, entities: int
):
    shell = make_shell(redis_url)
    shell.write([shell.group("warm", "w")])
    # Given a server that forgot its scripts (restart without persistence, failover, SCRIPT FLUSH)
    redis_client.script_flush()
    # When groups are written (one entity: a lone EVALSHA; two: one pipeline)
    results = shell.write([shell.group(f"e{i}", f"m{i}") for i in range(entities)])
    # Then each was stored exactly once, and the script is cached again for the next caller
    assert all(not _acks(r)[0].duplicate for r in results)
    assert [redis_client.xlen(keys.outbox(f"e{i}", 0)) for i in range(entities)] == [1] * entities
    assert redis_client.script_exists(WRITE.sha) == [True]


@shells()
def test_wait_without_enough_replicas_fails_every_written_group(
    make_shell: Callable[..., Shell], redis_url: str
):
    shell = make_shell(redis_url, ingress={"wait_replicas": 1, "wait_timeout": 0.05})
    results = shell.write([shell.group("orders", "a")])
    assert isinstance(results[0], OutboxUnavailableError)
    assert "0 of 1 replicas" in str(results[0])


@shells()
def test_out_of_memory_is_backpressure(
    make_shell: Callable[..., Shell], redis_url: str, redis_client: redis.Redis
):
    shell = make_shell(redis_url)
    redis_client.config_set("maxmemory", 1)
    try:
        results = shell.write([shell.group("orders", "a"), shell.group("events", "e")])
    finally:
        redis_client.config_set("maxmemory", 0)
    assert all(isinstance(r, BackpressureError) for r in results), results
    assert redis_client.xlen(keys.outbox("orders", 0)) == 0


@shells()
def test_redis_down_is_outbox_unavailable(make_shell: Callable[..., Shell]):
    shell = make_shell(f"redis://:pa55word@127.0.0.1:{free_port()}/0")
    with pytest.raises(OutboxUnavailableError) as caught:
        shell.write([shell.group("orders", "a")])
    assert "pa55word" not in str(caught.value)
    assert caught.value.__suppress_context__


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                RedisServer(
                    extra_args=(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-port",
                        str(free_port()),
                    )
                )
            )
            for _ in range(3)
        ]
        addresses = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        probe = redis.Redis(port=servers[0].port)
        deadline = time.monotonic() + 20
        while probe.cluster("info").get("cluster_state") != "ok":
            assert time.monotonic() < deadline, "cluster did not become ok"
            time.sleep(0.1)
        probe.flushall()
        probe.close()
        yield "redis+cluster://" + ",".join(addresses)


@pytest.mark.cluster
@shells()
def test_cluster_totals_outside_the_script(make_shell: Callable[..., Shell], cluster_url: str):
    prefix = uuid.uuid4().hex  # the cluster is shared by both shells: entities of their own
    client = sync_client(cluster_url)
    client.delete(keys.TOTALS)
    shell = make_shell(cluster_url, ingress={"max_total_messages": 3})
    results = shell.write([shell.group(f"{prefix}a", "1", "2"), shell.group(f"{prefix}b", "3")])
    assert [len(_acks(r)) for r in results] == [2, 1]
    try:
        totals = client.hmget(keys.TOTALS, ["messages", "bytes"])
        assert int(totals[0] or 0) == 3
        assert shell.writer.seen_totals == (3, int(totals[1] or 0))
        # The bound as last seen refuses up front, without a script call
        (refused,) = shell.write([shell.group(f"{prefix}c", "4")])
        assert isinstance(refused, BackpressureError)
        assert client.exists(keys.outbox(f"{prefix}c", 0)) == 0
    finally:
        client.close()
