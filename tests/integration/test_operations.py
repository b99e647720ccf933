"""Operations end to end: metrics, the status page, JSON logs and secrets, on one real stack and one story.

One module-scoped run (everything real: a password-protected redis-server, two local namespaces, the
ingress with API keys, a prefork worker with metrics, two beats with metrics):

1. healthy traffic to a passive entity (``orders``) and a paired one (``payments``), a duplicate, refused
   requests, a Redis-door entry that breaks a rule and a message too large for the namespace;
2. the primary namespace goes down: ``orders`` swaps to the secondary, ``payments`` fails over to the
   backlog queues; the status page is loaded in headless Chromium and screenshotted during the outage;
3. the primary comes back: the ping restores ``payments`` and the syphon moves its backlog.

The tests then read what the run left: every endpoint's scrape (counts must match what the story did),
the Grafana dashboard's queries against those scrapes, every process's log (JSON, transitions at WARNING)
and every output for the SAS key, the API key, the ingress SAS key and the Redis password.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from bridge.embedded.ports import free_port
from bridge.embedded.stack import LocalStack, wait_until
from bridge.settings import parse_connection_string
from tests.integration.operations_support import (
    Scrape,
    chromium,
    chromium_binary,
    exposed_names,
    scrape,
    start_serve,
)

ROOT = Path(__file__).resolve().parents[2]
ORDERS, PAYMENTS = "orders", "payments"
HEALTHY_ORDERS, HEALTHY_PAYMENTS = 20, 10
OUTAGE_ORDERS, OUTAGE_PAYMENTS = 10, 5
BACKLOG_QUEUES = 2
OUTAGE_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
"""The application's trace context on the outage's ``orders`` requests: its failed sends lead to it."""
TRACE_VIEWER = "http://jaeger.example:16686/trace/{trace_id}"


@dataclass
class Run:
    """What the story did and what it left behind."""

    base: Path
    api_key: str
    secrets: dict[str, str]
    scrapes: dict[str, Scrape] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    outage_dom: str = ""
    outage_status: dict[str, Any] = field(default_factory=dict)
    screenshot: Path | None = None
    logs: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)


def _post(
    http: httpx.Client, entity: str, count: int, phase: str, headers: dict[str, str] | None = None
) -> list[str]:
    ids = []
    for i in range(count):
        answer = http.post(f"/v1/entities/{entity}/messages", json={"body": f"{phase} {i}"}, headers=headers)
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["message_id"])
    return ids


def _entity(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in status["entities"] if e["name"] == name)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    base = tmp_path_factory.mktemp("operations")
    api_key = secrets.token_urlsafe(24)
    sas_key = secrets.token_urlsafe(32)
    redis_password = "pw-" + secrets.token_hex(12)
    stack = LocalStack(
        base,
        entities={
            ORDERS: {"replication": "passive", "outbox_shards": 2, "max_message_size": 1024 * 1024},
            PAYMENTS: {"replication": "paired"},
        },
        settings={
            "BRIDGE_LOG_JSON": "true",
            "BRIDGE_LOG_LEVEL": "DEBUG",
            "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
            "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
            "BRIDGE_PAIRED__FAILOVER_INTERVAL": "0",
            "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
            "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": str(BACKLOG_QUEUES),
            "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
            "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "2",
            # The status page's backlog depths are measured at most once per TTL (10 s by default).
            "BRIDGE_PAIRED__BACKLOG_DEPTH_TTL": "1",
            "BRIDGE_INGRESS__REQUIRE_API_KEY": "true",
            "BRIDGE_INGRESS__API_KEYS": json.dumps(
                [{"name": "ops-test", "sha256": hashlib.sha256(api_key.encode()).hexdigest()}]
            ),
            "BRIDGE_INGRESS__SAS_KEY_NAME": "send",
            "BRIDGE_INGRESS__SAS_KEY": sas_key,
            "BRIDGE_TRACE_URL": TRACE_VIEWER,
            # The status page's last error must stay the failed send's (with its trace) during the outage,
            # not become a probe's of the backup namespace.
            "BRIDGE_WORKERS__PROBE_INTERVAL": "3600",
        },
        redis_password=redis_password,
    )
    stack.start()
    namespace_key = parse_connection_string(stack.primary.connection_string)["sharedaccesskey"]
    result = Run(
        base,
        api_key,
        {
            "namespace SAS key": namespace_key,
            "API key": api_key,
            "ingress SAS key": sas_key,
            "Redis password": redis_password,
        },
    )
    ports = {"worker": free_port(), "beat": free_port(), "beat2": free_port()}
    headers = {"x-api-key": api_key}
    try:
        stack.start_worker(BRIDGE_METRICS_PORT=str(ports["worker"]))
        stack.start_beat("beat", BRIDGE_METRICS_PORT=str(ports["beat"]))
        stack.start_beat("beat2", BRIDGE_METRICS_PORT=str(ports["beat2"]))
        url = start_serve(stack)
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:

            def status() -> dict[str, Any]:
                answer = http.get("/status.json")
                answer.raise_for_status()
                data: dict[str, Any] = answer.json()
                result.outputs.append(answer.text)
                return data

            # 1. healthy traffic, a duplicate, refusals, a bad Redis-door entry, an oversized message
            orders = _post(http, ORDERS, HEALTHY_ORDERS, "healthy")
            _post(http, PAYMENTS, HEALTHY_PAYMENTS, "healthy")
            again = http.post(f"/v1/entities/{ORDERS}/messages", json={"body": "x", "message_id": orders[0]})
            assert again.json()["duplicate"] is True
            for _ in range(2):
                refused = http.post(f"/v1/entities/{ORDERS}/messages", json={"body": "x", "time_to_live": -1})
                assert refused.status_code == 422
            assert httpx.post(f"{url}/v1/entities/{ORDERS}/messages", json={"body": "x"}).status_code == 401
            door = redis.Redis.from_url(stack.redis.url)
            door.xadd("bridge:{orders}:in", {"body": "fine"})
            door.xadd("bridge:{orders}:in", {"body": "bad", "time_to_live": "-1"})
            door.close()
            wait_until(
                lambda: (
                    _entity(status(), ORDERS)["cost"]["primary_sends"] == HEALTHY_ORDERS + 1
                    and _entity(status(), PAYMENTS)["cost"]["primary_sends"] == HEALTHY_PAYMENTS
                ),
                60,
                0.5,
                "healthy traffic delivered to the primary",
            )
            big = http.post(f"/v1/entities/{ORDERS}/messages", json={"body": "x" * 300_000})
            assert big.status_code == 202
            wait_until(lambda: _entity(status(), ORDERS)["dead_letter_depth"] == 1, 60, 0.5, "dead-letter")

            # 2. primary outage: swap, paired failover, the status page during it
            stack.primary.control.outage()
            _post(http, ORDERS, OUTAGE_ORDERS, "outage", {"traceparent": OUTAGE_TRACEPARENT})
            _post(http, PAYMENTS, OUTAGE_PAYMENTS, "outage")
            wait_until(
                lambda: (
                    _entity(status(), ORDERS)["cost"]["backup_sends"] == OUTAGE_ORDERS
                    and _entity(status(), PAYMENTS)["cost"]["backlog_sends"] == OUTAGE_PAYMENTS
                ),
                90,
                0.5,
                "outage traffic on the secondary and in the backlog",
            )
            # The backlog depths are measured through the management endpoint and cached for seconds.
            result.outage_status = wait_until(
                lambda: (
                    (s := status())
                    and sum(d["messages"] or 0 for d in s["backlog"]["depths"].values()) == OUTAGE_PAYMENTS
                    and s
                ),
                30,
                1,
                "backlog depths measured",
            )
            if chromium_binary() is not None:
                result.screenshot = base / "status-during-outage.png"
                result.outage_dom = chromium(f"{url}/status#key={api_key}", screenshot=result.screenshot)

            # 3. primary back: ping, restore, syphon
            stack.primary.control.restore()
            seen: dict[str, Any] = {}

            def restored() -> Any:
                s = status()
                seen.update(  # what a timeout reports: which of the three never came
                    syphon_sends=_entity(s, PAYMENTS)["cost"]["syphon_sends"],
                    failed_over=_entity(s, PAYMENTS)["paired"]["failed_over"],
                    depths={q: d["messages"] for q, d in s["backlog"]["depths"].items()},
                )
                done = (
                    seen["syphon_sends"] == OUTAGE_PAYMENTS
                    and not seen["failed_over"]
                    and sum(n or 0 for n in seen["depths"].values()) == 0
                )
                return s if done else None

            try:
                result.status = wait_until(
                    restored,
                    # Ping, restore and the syphon's runs, plus, when a run found deferred messages it had
                    # no record of, one LockDuration (60 s here) before the next takes them: more than 90 s.
                    180,
                    0.5,
                    "payments restored, its backlog syphoned and measured empty",
                )
            except TimeoutError as exc:
                expected = f"expected {OUTAGE_PAYMENTS} syphon sends"
                raise TimeoutError(f"{exc}; last seen: {seen} ({expected})") from None
            # A syphon run records its counts when it ends (its budget after the last move): scrape after.
            worker_metrics = f"http://127.0.0.1:{ports['worker']}/metrics"
            wait_until(
                lambda: (
                    scrape(worker_metrics).value("bridge_syphon_messages_total", result="sent")
                    >= OUTAGE_PAYMENTS
                ),
                30,
                0.5,
                "the syphon run's counts in the worker's metrics",
            )
            result.scrapes["ingress"] = scrape(f"{url}/metrics", headers)
            assert http.get("/metrics", headers={"x-api-key": "wrong"}).status_code == 401
        for name, port in ports.items():
            result.scrapes[name] = scrape(f"http://127.0.0.1:{port}/metrics")
        result.outputs += [s.text for s in result.scrapes.values()]
    finally:
        stack.stop()
    for log in sorted(base.glob("*.log")):
        result.logs[log.stem] = log.read_text(errors="replace")
    yield result


# ---- metrics: counts that match the story -------------------------------------------------------------


def test_ingress_counts_what_it_accepted_and_refused(run: Run) -> None:
    ingress = run.scrapes["ingress"]
    accepted = "bridge_ingress_accepted_messages_total"
    assert ingress.value(accepted, door="http", entity=ORDERS) == HEALTHY_ORDERS + 1 + OUTAGE_ORDERS
    assert ingress.value(accepted, door="http", entity=PAYMENTS) == HEALTHY_PAYMENTS + OUTAGE_PAYMENTS
    assert ingress.value("bridge_ingress_duplicate_messages_total", door="http", entity=ORDERS) == 1
    rejected = "bridge_ingress_rejected_total"
    assert ingress.value(rejected, door="http", reason="time_to_live_not_positive") == 2
    assert ingress.value(rejected, door="http", reason="unauthorized") == 1


def test_worker_counts_sum_over_its_prefork_children(run: Run) -> None:
    worker = run.scrapes["worker"]
    sends = "bridge_send_messages_total"
    # The Redis door's valid entry is the 21st message of the healthy phase.
    assert worker.value(sends, entity=ORDERS, namespace="primary", role="direct", result="accepted") == 21
    assert worker.value(sends, entity=ORDERS, namespace="primary", result="message_permanent") == 1
    assert worker.value(sends, entity=ORDERS, namespace="secondary", role="direct", result="accepted") == 10
    assert worker.value(sends, entity=ORDERS, namespace="primary", result="outage") >= 1
    assert worker.value(sends, entity=PAYMENTS, namespace="primary", result="accepted") == HEALTHY_PAYMENTS
    assert worker.value(sends, entity=PAYMENTS, namespace="secondary", role="backlog", result="accepted") == 5
    assert worker.value("bridge_delivery_latency_seconds_count", entity=ORDERS) == 31
    assert worker.value("bridge_delivery_latency_seconds_count", entity=PAYMENTS) == 15
    assert worker.value("bridge_send_duration_seconds_count", namespace="secondary", role="backlog") >= 1
    assert worker.value("bridge_failovers_total", entity=ORDERS, kind="swap") == 1
    assert worker.value("bridge_failovers_total", entity=PAYMENTS, kind="paired") == 1
    assert worker.value("bridge_restores_total", entity=PAYMENTS) == 1
    # Two drains (two shards) may both see the primary fail first: each records the change it saw.
    assert (
        worker.value("bridge_namespace_transitions_total", entity=ORDERS, namespace="primary", available="0")
        >= 1
    )
    assert worker.value("bridge_pings_total", entity=PAYMENTS, result="accepted") == 1
    assert worker.value("bridge_syphon_messages_total", result="sent") == OUTAGE_PAYMENTS
    assert worker.value("bridge_dead_lettered_messages_total", entity=ORDERS) == 1
    assert worker.value("bridge_quarantined_messages_total", entity=ORDERS, source="redis-door") == 1
    assert worker.value("bridge_ingress_accepted_messages_total", door="redis", entity=ORDERS) == 1
    assert (
        worker.value("bridge_ingress_rejected_total", door="redis", reason="time_to_live_not_positive") == 1
    )


LIVE_LEDGER_SERIES = (
    "bridge_ledger_complete",
    "bridge_ledger_overdue_messages",
    "bridge_ledger_publication_age_seconds",
)
"""Read from the live ledger's publication (``tests/integration/test_live_ledger_status.py``)."""

REPLICA_LAG_SERIES = ("bridge_redis_replica_lag_bytes", "bridge_redis_replica_lag_seconds")
"""One sample per replica: this story's Redis has none (``tests/integration/test_redis_server_info.py``)."""


def test_every_endpoint_reports_the_same_shared_state(run: Run) -> None:
    for name, found in run.scrapes.items():
        assert found.value("bridge_state_up") == 1, name
        billable = "bridge_billable_operations_total"
        assert found.value(billable, entity=ORDERS, operation="primary_sends") == 21, name
        assert found.value(billable, entity=ORDERS, operation="backup_sends") == 10, name
        assert found.value(billable, entity=PAYMENTS, operation="backlog_sends") == 5, name
        assert found.value(billable, entity=PAYMENTS, operation="syphon_sends") == 5, name
        assert found.value(billable, entity=PAYMENTS, operation="pings") >= 1, name
        assert found.value("bridge_role_active", entity=ORDERS, namespace="secondary") == 1, name
        assert found.value("bridge_role_epoch", entity=ORDERS) == 1, name
        assert found.value("bridge_paired_failed_over", entity=PAYMENTS) == 0, name
        assert found.value("bridge_outbox_messages", entity=ORDERS) == 0, name
        assert found.value("bridge_outbox_oldest_age_seconds", entity=ORDERS) == 0, name
        assert found.value("bridge_deadletter_messages", entity=ORDERS) == 1, name
        assert found.value("bridge_quarantine_messages", entity=ORDERS) == 1, name
        assert found.value("bridge_backlog_in_rotation") == BACKLOG_QUEUES, name
        assert len(found.samples["bridge_backlog_messages"]) == BACKLOG_QUEUES, name
        assert found.value("bridge_backlog_messages") == 0, name
        assert "bridge_receiver_messages_total" in found.names(), name


def test_a_scrape_contains_every_series(run: Run) -> None:
    present = set().union(*(s.names() for s in run.scrapes.values()))
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in present}
    missing = [name for name in exposed_names() if name not in present and name not in bases]
    # A rotation removal needs a backlog queue that fails while the primary is down, a full problem stream
    # needs max_problem_entries problem messages, the live ledger's series need a running `bridge ledger`,
    # the replica lag a replica: none is in this story.
    assert sorted(missing) == sorted(
        [
            "bridge_backlog_rotation_removals_total",
            *LIVE_LEDGER_SERIES,
            "bridge_problem_stream_full_total",
            *REPLICA_LAG_SERIES,
        ]
    )


def test_no_series_is_labelled_per_message(run: Run) -> None:
    for found in run.scrapes.values():
        for samples in found.samples.values():
            for labels, _ in samples:
                assert not {"message_id", "messageid", "id"} & set(labels)


def test_every_grafana_query_names_a_scraped_series(run: Run) -> None:
    dashboard = json.loads((ROOT / "docker" / "grafana-dashboard.json").read_text())
    present = set().union(*(s.names() for s in run.scrapes.values()))
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(queries) >= 15
    used = {name for q in queries for name in re.findall(r"\bbridge_[a-z0-9_]+", q)}
    assert used - present == set()
    # and the dashboard shows every series the bridge has, but those this story cannot produce
    assert set(exposed_names()) - {re.sub(r"_(bucket|sum|count)$", "", n) for n in used} == {
        "bridge_backlog_rotation_removals_total",
        "bridge_problem_stream_full_total",
        *LIVE_LEDGER_SERIES,
        *REPLICA_LAG_SERIES,
    }


# ---- status page ---------------------------------------------------------------------------------------


def test_status_json_during_the_outage(run: Run) -> None:
    orders = _entity(run.outage_status, ORDERS)
    assert orders["active"] == "secondary"
    assert orders["namespaces"]["primary"]["available"] is False
    assert orders["namespaces"]["primary"]["since"] is not None
    assert orders["last_failover"]["kind"] == "swap"
    assert orders["last_error"]["namespace"] == "primary"
    # The bridge does not trace here: the failed send's trace is its message's, the request's
    trace_id = OUTAGE_TRACEPARENT[3:35]
    assert orders["namespaces"]["primary"]["last_error_trace_id"] == trace_id
    assert orders["last_error"]["trace_id"] == trace_id
    assert orders["last_error"]["trace_url"] == TRACE_VIEWER.replace("{trace_id}", trace_id)
    payments = _entity(run.outage_status, PAYMENTS)
    assert payments["paired"]["failed_over"] is True
    assert set(payments["receiver"]) >= {"handled", "duplicates_suppressed"}
    backlog = run.outage_status["backlog"]
    assert len(backlog["queues"]) == BACKLOG_QUEUES
    assert sum(d["messages"] for d in backlog["depths"].values()) == OUTAGE_PAYMENTS
    assert all(d["measured_at"] for d in backlog["depths"].values())
    assert "running" in run.outage_status["syphon"]


@pytest.mark.skipif(
    chromium_binary() is None, reason="chromium not installed (scripts/bootstrap installs it)"
)
def test_status_page_in_chromium_shows_the_primary_down(run: Run) -> None:
    dom = run.outage_dom
    row = re.search(r'<tr data-entity="orders">(.*?)</tr>', dom, re.S)
    assert row is not None, dom[-2000:]
    primary = re.search(r'<td data-field="primary"[^>]*class="down"[^>]*>([^<]*)</td>', row.group(1))
    assert primary is not None and primary.group(1).startswith("UNAVAILABLE since"), row.group(1)
    assert '<td data-field="active">secondary</td>' in row.group(1)
    secondary = re.search(r'<td data-field="secondary"[^>]*class="up"', row.group(1))
    assert secondary is not None
    trace_id = OUTAGE_TRACEPARENT[3:35]
    link = re.search(rf'<a [^>]*data-trace-id="{trace_id}"[^>]*>trace {trace_id}</a>', row.group(1))
    assert link is not None and f'href="{TRACE_VIEWER.replace("{trace_id}", trace_id)}"' in link.group(0)
    paired = re.search(r'<tr data-entity="payments">(.*?)</tr>', dom, re.S)
    assert paired is not None and "secondary (backlog)" in paired.group(1)
    assert 'data-queue="' in dom  # the backlog table was drawn
    assert run.screenshot is not None and run.screenshot.stat().st_size > 10_000


# ---- logs and secrets ----------------------------------------------------------------------------------


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_logs_are_json_and_transitions_are_warnings_with_reasons(run: Run) -> None:
    assert {"worker", "beat", "beat2", "serve"} <= set(run.logs)
    for name in ("worker", "serve"):
        lines = _json_lines(run.logs[name])
        assert lines and all({"ts", "level", "logger", "message", "component"} <= set(line) for line in lines)
    warnings = [line["message"] for line in _json_lines(run.logs["worker"]) if line["level"] == "WARNING"]
    expected = [
        r"entity orders: roles swapped primary -> secondary \(epoch 1\): .+",
        r"paired failover engaged for payments: primary -> backlog: .+",
        r"paired failover ended for payments: backlog -> primary: .+",
        r"namespace primary is UNAVAILABLE for entity orders: .+",
        r"entity orders: message \w+ dead-lettered locally: .+",
        r"entity orders: Redis-door entry quarantined \(time_to_live_not_positive\): .+",
    ]
    for pattern in expected:
        assert any(re.fullmatch(pattern, w) for w in warnings), (pattern, warnings)


def test_no_secret_in_any_log_metric_or_status(run: Run) -> None:
    texts = {**{f"log {k}": v for k, v in run.logs.items() if not k.startswith(("primary", "secondary"))}}
    texts.update({f"output {i}": text for i, text in enumerate(run.outputs)})
    assert len(texts) > 10
    for what, secret in run.secrets.items():
        assert len(secret) >= 16
        for where, text in texts.items():
            assert secret not in text, f"{what} found in {where}"
