"""The live ledger's publication in Redis, as ``bridge status`` prints it, the status JSON carries it and
Prometheus exports it."""

from __future__ import annotations

import json
import time

import redis

from bridge.core.live_ledger import LedgerInput, OpenMessage, verdict
from bridge.state.live_ledger import LiveLedgerStore
from bridge.status.collect import collect_status
from bridge.status.collector import families_from_snapshot
from tests.integration.test_state_status import bridge, clean_env, make_settings

__all__ = ["clean_env"]


def published(now: float) -> dict[str, object]:
    data = LedgerInput(
        counts={"orders": {"accepted": 3, "open": 2}, "payments": {"accepted": 1, "open": 0}},
        open_messages=[OpenMessage("orders", "m-held", now - 600), OpenMessage("orders", "m-new", now - 1)],
        events=12,
    )
    ledger = verdict(data, now, 300)
    ledger["published_at"] = now
    return ledger


def test_status_json_metrics_and_table_show_the_verdict_and_overdue_list(
    redis_client: redis.Redis, redis_url: str
) -> None:
    # Given a live ledger that published one overdue message of orders
    now = time.time()
    LiveLedgerStore(redis_client).publish(published(now), ttl=60)

    # Then the status JSON carries it
    report = collect_status(make_settings(redis_url, orders="passive"), redis_client, now)
    ledger = report["ledger"]
    assert (ledger["verdict"], ledger["overdue"]) == ("overdue", 1)
    assert [m["message_id"] for m in ledger["entities"]["orders"]["overdue_ids"]] == ["m-held"]
    assert ledger["entities"]["payments"]["overdue"] == 0

    # ... Prometheus exports the overdue count per entity
    report["generated_at"] = now + 5
    report["redis"] = None
    for entity in report["entities"]:
        entity.update(outbox_oldest_age=0.0, receiver={})
    families = {f.name: f for f in families_from_snapshot(report)}
    overdue = {s.labels["entity"]: s.value for s in families["bridge_ledger_overdue_messages"].samples}
    assert overdue == {"orders": 1.0, "payments": 0.0}
    assert families["bridge_ledger_publication_age_seconds"].samples[0].value == 5.0

    # ... and `bridge status` prints the verdict and the held message
    table = bridge(redis_url=redis_url, entities={"orders": {"replication": "passive"}})
    assert table.returncode == 0, table.stderr
    assert "live ledger: OVERDUE (1 overdue" in table.stdout
    assert "orders: 1 overdue: m-held (600s)" in table.stdout


def test_without_a_live_ledger_status_says_so(redis_client: redis.Redis, redis_url: str) -> None:
    report = collect_status(make_settings(redis_url), redis_client)
    assert report["ledger"] is None
    families = {f.name: f for f in families_from_snapshot({**report, "redis": None})}
    assert families["bridge_ledger_overdue_messages"].samples == []

    proc = bridge("--json", redis_url=redis_url, entities={})
    assert json.loads(proc.stdout)["ledger"] is None
    table = bridge(redis_url=redis_url, entities={})
    assert "live ledger: not running" in table.stdout
