"""The state stores on a real Redis Cluster (one node owning all 16384 slots).

A one-node cluster is a real cluster to the client and the server: redis-py routes by slot and the server
refuses a script whose keys span slots (CROSSSLOT), so this proves every script keeps to one entity's slot
and exercises the stores' cluster branches (failed-over set and cost totals updated outside the script).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from bridge.core.cost import CostTally, Operation
from bridge.core.paired import EngageFailover, MarkAvailable, PairedState, StartTimer
from bridge.core.receiving import Claim, Renewal
from bridge.core.roles import NamespaceHealth, RoleState, Swap
from bridge.core.seen_back import SeenBack
from bridge.core.syphon import syphon_lease_name
from bridge.embedded.ports import free_port
from bridge.embedded.redis_server import RedisServer
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow
from bridge.redis.connection import is_cluster, sync_client
from bridge.redis.lease import Lease
from bridge.settings import Settings
from bridge.state.cost import CostStore
from bridge.state.lease import LeaseStore
from bridge.state.paired import PairedStore
from bridge.state.resume import KEEP, ResumeSignals
from bridge.state.retry import RetryStore
from bridge.state.roles import RoleStore
from bridge.status.collect import collect_status
from bridge.status.snapshot import entity_extras, syphon_state

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    # The bus port defaults to port + 10000, past 65535 for a high free port: name one explicitly.
    bus = ("--cluster-port", str(free_port()))
    server = RedisServer(extra_args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", *bus))
    try:
        server.start()
        admin = redis.Redis(port=server.port, socket_timeout=5)
        try:
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
            deadline = time.monotonic() + 10
            while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "the one-node cluster never became ok"
                time.sleep(0.05)
        finally:
            admin.close()
        yield f"redis+cluster://127.0.0.1:{server.port}"
    finally:
        server.close()


@pytest.fixture
def client(cluster_url: str) -> Iterator[object]:
    c = sync_client(cluster_url)
    assert is_cluster(c)
    c.flushall()
    try:
        yield c
    finally:
        c.close()


def test_role_swap_and_health(client: object) -> None:
    store = RoleStore(client)
    applied, state = store.swap("orders", Swap("primary", "secondary", 0, 1, 1.0, "outage"))
    assert applied and state == store.get("orders") == RoleState("secondary", 1, 1.0, "outage")
    assert not store.swap("orders", Swap("primary", "secondary", 0, 1, 2.0, "stale"))[0]
    assert store.healths("orders")["primary"].available
    assert store.set_health("orders", "primary", NamespaceHealth(False, 5.0, "refused", 5.0))
    assert not store.set_health("orders", "primary", NamespaceHealth(True, 4.0))
    assert not store.health("orders", "primary").available


def test_paired_apply_keeps_the_failed_over_set(client: object) -> None:
    store = PairedStore(client)
    update = store.apply("orders", [StartTimer(1.0), EngageFailover(2.0, "interval")])
    assert update.engaged
    assert update.after == PairedState(failing_since=1.0, failed_over_at=2.0, last_failover_at=2.0)
    assert store.failed_over_entities() == ["orders"]
    assert store.apply("orders", [MarkAvailable(3.0, "ping ok")]).restored
    assert store.failed_over_entities() == []


def test_cost_leases_and_retry(client: object) -> None:
    cost = CostStore(client)
    cost.add("orders", Operation.PRIMARY_SEND, 2)
    cost.add("invoices", CostTally(pings=1))
    assert cost.totals() == CostTally(primary_sends=2, pings=1) == cost.get("orders") + cost.get("invoices")

    leases = LeaseStore(client)
    assert leases.acquire("orders", 3, "a", 10_000) and not leases.acquire("orders", 3, "b", 10_000)
    assert leases.renew("orders", 3, "a", 10_000) and not leases.release("orders", 3, "b")
    assert Lease.named(client, "beat").acquire("a", 10_000)

    retry = RetryStore(client)
    assert retry.back_off("orders", 3, 5.0) == 1
    left = retry.backoff_left("orders", 3)
    assert left is not None and 4 < left <= 5.0
    retry.wait_after_abandoned("orders", 3, "primary", "orders", wait=5.0)
    assert set(retry.abandoned_waits_left("orders", 3)) == {("primary", "orders")}


def test_the_namespace_back_news_and_the_scout(client: object) -> None:
    resume = ResumeSignals(client)  # type: ignore[arg-type]
    assert resume.last_id() == "0-0"
    resume.seen_back("primary", "e0", "a send was accepted")
    first = resume.last_id()
    resume.seen_back("secondary", "e1", "a probe was accepted")
    news, newest = resume.news_after(first)
    assert news == SeenBack.of([("secondary", "e1")]) and newest == resume.last_id()
    for n in range(KEEP + 4):
        resume.seen_back("primary", f"e{n}", "a send was accepted")
    assert client.xlen(resume.key) == KEEP  # type: ignore[attr-defined]
    # A reader that fell further behind than the stream keeps takes its news as everything
    assert resume.news_after(newest)[0].everything
    # One scout per interval across the deployment
    assert resume.claim_scout("worker-a", 0.3) and not resume.claim_scout("worker-b", 0.3)
    time.sleep(0.4)
    assert resume.claim_scout("worker-b", 0.3)


def test_status(client: object, cluster_url: str) -> None:
    settings = Settings(redis_url=cluster_url, entities={"orders": {"replication": "paired"}})
    PairedStore(client).apply("orders", [EngageFailover(2.0, "interval")])
    report = collect_status(settings, client)
    assert report["entities"][0]["name"] == "orders" and report["entities"][0]["active"] == "secondary"


def test_the_snapshots_batched_reads_span_slots(client: object, cluster_url: str) -> None:
    # The extras of an entity keep to its slot; the syphon leases of the backlog queues each sit in a slot
    # of their own, and one batch reads them all (the cluster pipeline splits it per node).
    settings = Settings(redis_url=cluster_url, entities={"orders": {"outbox_shards": 2}})
    ReceiverCounterStore(client, ReceiverKeys("orders")).add({"handled": 3})  # type: ignore[arg-type]
    queues = [f"ns/x-servicebus-transfer/{i}" for i in range(3)]
    Lease.named(client, syphon_lease_name(queues[2])).acquire("syphon-2", 30_000)  # type: ignore[arg-type]
    assert entity_extras(settings, client, "orders", now=10.0)["receiver"]["handled"] == 3
    assert syphon_state(settings, client, queues)["running"] == {queues[2]: "syphon-2"}


def test_the_receivers_window_keeps_to_its_entitys_slot(client: object) -> None:
    # The window's scripts name its slots' keys themselves (from the index's name, same hash tag): the
    # cluster runs them, table growth included, and refuses nothing
    window = DedupWindow(
        client,  # type: ignore[arg-type]
        ReceiverKeys("orders"),
        owner="a",
        window=600,
        max_remembered=10**6,
        inflight_ttl=30,
    )
    window.check_compact()
    ids = [f"m{i}" for i in range(200)]
    assert window.claim(ids) == [Claim.HANDLE] * 200
    assert window.done(ids).new == 200
    assert window.claim(ids[:3]) == [Claim.DUPLICATE] * 3
    assert window.renew(["m0"]) == [Renewal.HANDLED] and window.is_done("m199")
    assert window.remembered() == 200
