"""The receiving end on session entities (per-session order) and the backlog operator tool.

Real parts: two local namespaces for the module, a private redis-server, ``bridge receive`` processes.
Backlog queues are filled the way a failed-over paired worker fills them (``to_backlog_message``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.core.envelope import Envelope
from bridge.core.paired import backlog_queue_paths
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.receiving import Receiver
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import BacklogMessage, to_backlog_message
from bridge.servicebus.pool import NamespacePool
from tests.integration.receiver_support import (
    HANDLERS,
    counts,
    environment,
    jsonl,
    log_of,
    namespace,
    namespace_pair,
    per_id,
    recorded,
    send,
    settings,
    start_receiver,
)
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalNamespace, LocalNamespace]]:
    """A primary and a secondary namespace for the whole module (queues created on first use)."""
    yield from namespace_pair(tmp_path_factory.mktemp("receiver-sessions-ns"))


def test_a_session_entity_keeps_per_session_order_with_both_namespaces_sending_copies(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    for ns in pair:
        with NamespaceAdmin(namespace(ns)) as admin:
            admin.create_queue("sessions", requires_session=True)
    # Given three sessions of 20 messages each, sent in order to both namespaces (active replication)
    sessions = ("s-a", "s-b", "s-c")
    for session in sessions:
        ids = [f"{session}-{i:03d}" for i in range(20)]
        send(primary, "sessions", ids, session=session)
        send(secondary, "sessions", ids, session=session)
    # When a receiver holding up to two sessions per namespace reads them (batches of 7)
    env = environment(
        redis_url, primary, secondary,
        BRIDGE_ENTITIES='{"sessions": {"requires_session": true}}',
        BRIDGE_RECEIVER__CONCURRENCY="2", BRIDGE_RECEIVER__BATCH_SIZE="7",
        BRIDGE_RECEIVER__SESSION_IDLE="0.5",
    )  # fmt: skip
    proc = start_receiver(tmp_path, env, "sessions")
    try:
        wait_until(
            lambda: counts(redis_url, "sessions").duplicates_suppressed >= 60,
            60,
            what=f"every copy settled: {log_of(proc)}",
        )
        time.sleep(1)
    finally:
        proc.stop()
    # Then every message was handed once, and each session's in the order it was sent
    entries = recorded(redis_url, "sessions")
    assert max(per_id(entries).values()) == 1 and len(entries) == 60
    for session in sessions:
        got = [e["id"] for e in entries if e["session"] == session]
        assert got == [f"{session}-{i:03d}" for i in range(20)]
    assert counts(redis_url, "sessions").handled == 60


def test_backlog_peek_shows_restored_properties_and_drain_hands_one_entitys_messages_once(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    config = settings(
        redis_url, primary, secondary, paired={"backlog_queue_count": 2}, receiver={"max_wait": 0.5}
    )
    assert config.primary is not None
    paths = backlog_queue_paths(config.primary.namespace_name, 2)
    with NamespaceAdmin(namespace(secondary)) as admin:
        for path in paths:
            admin.create_queue(path, max_delivery_count=2**31 - 1)
    # Given aliased messages of two entities in the backlog queues (as failed-over paired workers send them)
    orders = [Envelope(entity="orders", message_id=f"bk-{i}", body=f"order {i}".encode(),
                       accepted_at=time.time(), session_id=f"cust-{i % 2}", partition_key=f"cust-{i % 2}",
                       time_to_live=3600.0, application_properties={"n": i}) for i in range(6)]  # fmt: skip
    others = [Envelope(entity="audit", message_id=f"au-{i}", body=b"audit", accepted_at=time.time())
              for i in range(3)]  # fmt: skip
    pool = NamespacePool(config)
    try:
        for index, envelopes in enumerate((orders[:3] + others, orders[3:])):
            aliased = [to_backlog_message(e) for e in envelopes]
            assert all(isinstance(a, BacklogMessage) for a in aliased)
            result = pool.send("secondary", paths[index], [a.message for a in aliased])  # type: ignore[union-attr]
            assert result.ok, result.failed
    finally:
        pool.close()
    env = environment(redis_url, primary, secondary, BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT="2")
    # When an operator peeks into the backlog
    peek = subprocess.run([sys.executable, "-m", "bridge.cli.main", "receive", "--backlog"], env=env,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    rows = {row["message_id"]: row for row in jsonl(peek.stdout)}
    # Then every message shows, with its aliased properties restored and nothing removed
    assert set(rows) == {e.message_id for e in orders + others}
    first = rows["bk-1"]
    assert first["destination"] == "orders"
    assert (first["session_id"], first["partition_key"]) == ("cust-1", "cust-1")
    assert 3000 < first["time_to_live"] <= 3600 and first["application_properties"]["n"]["value"] == 1
    assert not any(name.startswith("x-ms-") for name in first["application_properties"])
    assert {rows[f"au-{i}"]["destination"] for i in range(3)} == {"audit"}
    assert sum(count_in(secondary, path) for path in paths) == 9
    # When the operator drains the orders entity's backlog to its handler
    drain = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "receive", "orders", "--backlog", "--drain",
         "--handler", f"{HANDLERS}:record"],
        env=env, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert drain.returncode == 0, drain.stdout + drain.stderr
    # Then each orders message was handed once with its restored session, and the others stay for the syphon
    entries = recorded(redis_url, "orders")
    assert sorted(per_id(entries)) == sorted(e.message_id for e in orders)
    assert max(per_id(entries).values()) == 1
    assert {e["id"]: e["session"] for e in entries} == {e.message_id: e.session_id for e in orders}
    assert sum(count_in(secondary, path) for path in paths) == 3
    assert counts(redis_url, "orders").handled == 6
    # And a copy of a drained message that still reaches the entity later is recognised
    send(primary, "orders", ["bk-0"])
    late: list[str] = []
    receiver = Receiver("orders", lambda m: late.append(m.message_id or ""), settings=config)
    thread = threading.Thread(target=receiver.run)
    thread.start()
    try:
        wait_until(lambda: counts(redis_url, "orders").duplicates_suppressed == 1, 30, what="late copy")
    finally:
        receiver.stop()
        thread.join(20)
    assert late == [] and count_in(primary, "orders") == 0
