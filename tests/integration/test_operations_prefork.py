"""The prefork worker's metrics count every child, also the children that exited long ago.

Celery replaces a pool child after ``--max-tasks-per-child`` tasks. A per-child HTTP server would serve only
the child that happens to answer, and a dead child's counts would vanish; in multiprocess mode the worker's
main process serves the sum over every child's file (``bridge.status.exposition``).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from bridge.embedded.ports import free_port
from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.operations_support import scrape, start_serve

MESSAGES = 40
ROUNDS = 4


def pool_children(pid: int) -> set[int]:
    """The worker's pool processes, from the kernel's own list of its children. A thread of the worker
    may end between the listing of its threads and the reading of its children: it has none left then."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text()
        except FileNotFoundError:
            continue
        found.update(int(child) for child in children.split())
    return found


def test_counts_survive_recycled_pool_children(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_999999.db").write_bytes(b"left over from an earlier run")
    port = free_port()
    with LocalStack(
        tmp_path, entities={"orders": {}}, settings={"BRIDGE_WORKERS__SWEEP_INTERVAL": "0.3"}
    ) as stack:
        worker = stack.start_bridge(
            "worker",
            "worker",
            "--concurrency",
            "1",
            "--max-tasks-per-child",
            "2",
            "--without-gossip",
            "--without-mingle",
            BRIDGE_METRICS_PORT=str(port),
            BRIDGE_METRICS_DIR=str(metrics_dir),
        )
        stack.start_beat()
        url = start_serve(stack)
        url_metrics = f"http://127.0.0.1:{port}/metrics"
        per_round = MESSAGES // ROUNDS
        delivered_by: set[int] = set()
        with httpx.Client(base_url=url, timeout=10) as http:
            for r in range(ROUNDS):
                # Each round is delivered by a pool child that did not deliver an earlier one: the beat's
                # sweeps are tasks, so a child is replaced after two of them (the drain service in it too).
                wait_until(
                    lambda seen=frozenset(delivered_by): bool(pool_children(worker.proc.pid) - seen),
                    60,
                    0.1,
                    "a fresh pool child",
                )
                delivered_by |= pool_children(worker.proc.pid)
                for i in range(per_round):
                    body = str(r * per_round + i)
                    assert http.post("/v1/entities/orders/messages", json={"body": body}).status_code == 202
                wait_until(
                    lambda n=(r + 1) * per_round: (
                        scrape(url_metrics).value(
                            "bridge_send_messages_total", entity="orders", result="accepted"
                        )
                        == n
                    ),
                    60,
                    0.3,
                    f"{(r + 1) * per_round} accepted",
                )
        # Given children that were replaced every two tasks (sweeps and drains), the count is exact.
        files = {p.name for p in metrics_dir.iterdir()}
        pids = {name.rsplit("_", 1)[1].removesuffix(".db") for name in files}
        assert "counter_999999.db" not in files  # wiped at start
        assert len(pids) >= 3, files  # several children wrote counts (the main process too)
        found = scrape(url_metrics)
        assert found.value("bridge_send_messages_total", entity="orders", result="accepted") == MESSAGES
        assert found.value("bridge_delivery_latency_seconds_count", entity="orders") == MESSAGES
        assert worker.running


def test_a_retired_entitys_series_leave_the_prefork_workers_metrics(tmp_path: Path) -> None:
    port = free_port()
    settings = {"BRIDGE_WORKERS__SWEEP_INTERVAL": "0.3", "BRIDGE_WORKERS__ENTITY_IDLE": "1"}
    with LocalStack(tmp_path, entities={"orders": {}}, settings=settings) as stack:
        stack.start_bridge(
            "worker",
            "worker",
            "--concurrency",
            "2",
            "--without-gossip",
            "--without-mingle",
            BRIDGE_METRICS_PORT=str(port),
        )
        url = start_serve(stack)
        url_metrics = f"http://127.0.0.1:{port}/metrics"

        def accepted(entity: str) -> float:
            return scrape(url_metrics).value("bridge_send_messages_total", entity=entity, result="accepted")

        # Given a message to a configured entity and one to an entity nobody configured, both delivered
        # by the worker's pool processes (whose metric values live in files the main process sums)
        with httpx.Client(base_url=url, timeout=10) as http:
            for entity in ("orders", "passing"):
                answer = http.post(f"/v1/entities/{entity}/messages", json={"body": entity})
                assert answer.status_code == 202
        wait_until(lambda: accepted("orders") == accepted("passing") == 1, 60, 0.3, "both delivered")
        # When the unconfigured one stays empty past workers.entity_idle and retires
        # Then its series leave the worker's metrics; the configured entity's stay
        wait_until(
            lambda: 'entity="passing"' not in scrape(url_metrics).text, 60, 0.3, "passing's series gone"
        )
        assert accepted("orders") == 1
