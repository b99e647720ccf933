"""The prefork worker's metrics count every child, also the children that exited long ago.

Celery replaces a pool child after ``--max-tasks-per-child`` tasks. A per-child HTTP server would serve only
the child that happens to answer, and a dead child's counts would vanish; in multiprocess mode the worker's
main process serves the sum over every child's file (``bridge.observability.exposition``).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from bridge.embedded.ports import free_port
from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.operations_support import scrape

MESSAGES = 40


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
        _, url = stack.start_serve()
        url_metrics = f"http://127.0.0.1:{port}/metrics"
        with httpx.Client(base_url=url, timeout=10) as http:
            for i in range(MESSAGES):
                assert http.post("/v1/entities/orders/messages", json={"body": str(i)}).status_code == 202
                if i % 10 == 9:  # in several rounds, so that several children deliver
                    wait_until(
                        lambda n=i + 1: (
                            scrape(url_metrics).value(
                                "bridge_send_messages_total", entity="orders", result="accepted"
                            )
                            == n
                        ),
                        60,
                        0.3,
                        f"{i + 1} accepted",
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
