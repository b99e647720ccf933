"""The HTTP door against a real uvicorn server and a private Redis: what is stored, what is refused."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import redis

from bridge.core.auth import sas_signature
from bridge.core.door_formats import V1_FIELDS
from bridge.outbox import keys
from bridge.outbox.reader import OutboxReader
from bridge.settings import Settings
from tests.integration.ingress_support import read_all, running_ingress, snapshot

KEY_ALL = "all-entities-key"
KEY_LIMITED = "orders-only-key"
SAS_NAME, SAS_KEY = "RootManageSharedAccessKey", "c2FzLWtleS1mb3ItdGVzdHM="


def _settings(redis_url: str, **ingress: Any) -> Settings:
    return Settings(
        redis_url=redis_url,
        entities={
            "orders": {},
            "small": {"max_message_size": 1000},
            "sessions": {"requires_session": True},
            "sharded": {"outbox_shards": 4},
            "tiny": {"max_pending_messages": 2},
            "app/events": {},
        },
        ingress={
            "only_configured_entities": True,
            "max_batch_messages": 100,
            "max_request_bytes": 2 * 1024 * 1024,
            "api_keys": [
                {"name": "all", "sha256": hashlib.sha256(KEY_ALL.encode()).hexdigest()},
                {
                    "name": "limited",
                    "sha256": hashlib.sha256(KEY_LIMITED.encode()).hexdigest(),
                    "entities": ["orders"],
                },
            ],
            "sas_key_name": SAS_NAME,
            "sas_key": SAS_KEY,
            **ingress,
        },
    )


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return _settings(redis_url)


@pytest.fixture
def base_url(settings: Settings) -> Iterator[str]:
    with running_ingress(settings, require_auth=True) as url:
        yield url


@pytest.fixture
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {KEY_ALL}"}, timeout=10
    ) as client:
        yield client


def _read_all(redis_url: str, settings: Settings, entity: str) -> list[Any]:
    reader = OutboxReader(redis.Redis.from_url(redis_url), settings)
    reader.ensure_groups(entity)
    return read_all(reader, entity, "test-reader", count=1000)


def test_single_envelope_round_trips_through_the_outbox(
    http: httpx.Client, redis_url: str, settings: Settings
):
    # Given an envelope with every field set
    envelope = {
        "body": "héllo",
        "content_type": "text/plain",
        "message_id": "m-1",
        "session_id": "s-1",
        "partition_key": "s-1",
        "time_to_live": 30.5,
        "scheduled_enqueue_time_utc": "2030-01-02T03:04:05+02:00",
        "correlation_id": "c-1",
        "subject": "greeting",
        "reply_to": "replies",
        "to": "someone",
        "application_properties": {"n": 7, "f": 1.5, "flag": True, "s": "x"},
    }
    # When it is posted
    answer = http.post("/v1/entities/orders/messages", json=envelope)
    # Then it is acknowledged with its id, and the outbox holds exactly what was sent
    assert answer.status_code == 202
    expected = {"message_id": "m-1", "entity": "orders", "duplicate": False, "durability": "local"}
    assert answer.json() == expected
    (entry,) = _read_all(redis_url, settings, "orders")
    stored = entry.envelope
    assert stored.body == "héllo".encode()
    assert (stored.message_id, stored.session_id, stored.partition_key) == ("m-1", "s-1", "s-1")
    assert stored.time_to_live == 30.5
    assert stored.scheduled_enqueue_time_utc == datetime(2030, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert (stored.correlation_id, stored.subject, stored.reply_to, stored.to) == (
        "c-1",
        "greeting",
        "replies",
        "someone",
    )
    assert stored.content_type == "text/plain"
    assert stored.application_properties == {"n": 7, "f": 1.5, "flag": True, "s": "x"}


def test_message_id_is_assigned_when_absent_and_reposting_it_is_idempotent(
    http: httpx.Client, redis_client: redis.Redis
):
    first = http.post("/v1/entities/orders/messages", json={"body": "a"}).json()
    assert len(first["message_id"]) == 32
    again = http.post("/v1/entities/orders/messages", json={"body": "a", "message_id": first["message_id"]})
    assert again.status_code == 202
    assert again.json()["duplicate"] is True
    assert redis_client.xlen(keys.outbox("orders", 0)) == 1
    assert redis_client.hget(keys.stats("orders"), "messages") == b"1"


def test_body_encodings(http: httpx.Client, redis_url: str, settings: Settings):
    raw = bytes(range(256))
    assert (
        http.post(
            "/v1/entities/orders/messages",
            json={"body": base64.b64encode(raw).decode(), "body_encoding": "base64"},
        ).status_code
        == 202
    )
    assert (
        http.post(
            "/v1/entities/orders/messages", json={"body": {"a": [1, 2]}, "body_encoding": "json"}
        ).status_code
        == 202
    )
    first, second = _read_all(redis_url, settings, "orders")
    assert first.envelope.body == raw
    assert json.loads(second.envelope.body) == {"a": [1, 2]}
    assert second.envelope.content_type == "application/json"


def test_batch_is_stored_in_order_on_one_shard_per_key(
    http: httpx.Client, redis_url: str, settings: Settings
):
    messages = [{"body": f"m{i}", "partition_key": "k"} for i in range(20)]
    answer = http.post("/v1/entities/sharded/messages:batch", json={"messages": messages})
    assert answer.status_code == 202
    ids = answer.json()["message_ids"]
    entries = _read_all(redis_url, settings, "sharded")
    assert [e.envelope.message_id for e in entries] == ids
    assert {e.shard for e in entries} == {entries[0].shard}
    assert [e.envelope.body for e in entries] == [f"m{i}".encode() for i in range(20)]


def test_keyless_messages_spread_round_robin_over_shards(
    http: httpx.Client, redis_url: str, settings: Settings
):
    answer = http.post("/v1/entities/sharded/messages:batch", json={"messages": [{"body": "x"}] * 8})
    assert answer.status_code == 202
    shards = sorted(e.shard for e in _read_all(redis_url, settings, "sharded"))
    assert shards == [0, 0, 1, 1, 2, 2, 3, 3]


def test_transactional_batch_with_one_key_is_accepted(http: httpx.Client, redis_client: redis.Redis):
    messages = [{"body": "x", "session_id": "s", "partition_key": "s"}, {"body": "y", "session_id": "s"}]
    answer = http.post("/v1/entities/orders/messages:batch?transactional=true", json={"messages": messages})
    assert answer.status_code == 202
    assert redis_client.xlen(keys.outbox("orders", 0)) == 2


def test_batch_with_a_bad_50th_message_stores_none_of_100(http: httpx.Client, redis_client: redis.Redis):
    messages: list[dict[str, Any]] = [{"body": f"m{i}"} for i in range(100)]
    messages[49]["time_to_live"] = -1
    before = snapshot(redis_client)
    answer = http.post("/v1/entities/orders/messages:batch", json={"messages": messages})
    assert answer.status_code == 422
    assert answer.json()["error"] == {
        "code": "time_to_live_not_positive",
        "field": "time_to_live",
        "index": 49,
        "message": "time_to_live must be greater than 0",
    }
    assert snapshot(redis_client) == before


def test_service_bus_rest_single_message(base_url: str, redis_url: str, settings: Settings):
    # Given a REST client as it talks to Service Bus: SAS header, BrokerProperties, custom property headers
    expiry = 4_000_000_000
    resource = f"{base_url}/orders"
    token = (
        f"SharedAccessSignature sr={resource}&sig={sas_signature(resource, expiry, SAS_KEY)}"
        f"&se={expiry}&skn={SAS_NAME}"
    )
    token = token.replace("+", "%2B")
    broker = {
        "MessageId": "rest-1",
        "Label": "lbl",
        "TimeToLive": 60,
        "SessionId": "s",
        "ScheduledEnqueueTimeUtc": "Sun, 06 Nov 2033 08:49:37 GMT",
        "CorrelationId": "c",
    }
    headers = {
        "Authorization": token,
        "BrokerProperties": json.dumps(broker),
        "Content-Type": "application/xml",
        "Priority": "High",
        "Count": "3",
        "Ratio": "0.5",
        "Flag": "true",
        "Quoted": '"12"',
    }
    # When it posts
    answer = httpx.post(f"{base_url}/orders/messages", content=b"<x/>", headers=headers)
    # Then Service Bus's 201, and the message with its properties in the outbox
    assert answer.status_code == 201, answer.text
    (entry,) = _read_all(redis_url, settings, "orders")
    stored = entry.envelope
    assert (stored.message_id, stored.subject, stored.time_to_live, stored.session_id) == (
        "rest-1",
        "lbl",
        60,
        "s",
    )
    assert stored.scheduled_enqueue_time_utc == datetime(2033, 11, 6, 8, 49, 37, tzinfo=UTC)
    assert stored.content_type == "application/xml"
    assert stored.body == b"<x/>"
    # named as the client wrote them, as Azure keeps them
    assert stored.application_properties == {
        "Priority": "High",
        "Count": 3,
        "Ratio": 0.5,
        "Flag": True,
        "Quoted": "12",
    }


def test_service_bus_rest_batch(http: httpx.Client, redis_url: str, settings: Settings):
    batch = [
        {"Body": "one", "BrokerProperties": {"MessageId": "b1", "Label": "x"}, "UserProperties": {"k": 1}},
        {"Body": "two"},
    ]
    answer = http.post(
        "/orders/messages",
        content=json.dumps(batch),
        headers={"Content-Type": "application/vnd.microsoft.servicebus.json"},
    )
    assert answer.status_code == 201, answer.text
    first, second = _read_all(redis_url, settings, "orders")
    assert (first.envelope.message_id, first.envelope.subject, first.envelope.body) == ("b1", "x", b"one")
    assert first.envelope.application_properties == {"k": 1}
    assert second.envelope.body == b"two"


def test_entity_paths_with_slashes(http: httpx.Client, redis_client: redis.Redis):
    assert http.post("/v1/entities/app/events/messages", json={"body": "x"}).status_code == 202
    assert http.post("/app/events/messages", content=b"y").status_code == 201
    assert redis_client.xlen(keys.outbox("app/events", 0)) == 2


def test_limited_key_may_use_its_entity(base_url: str):
    answer = httpx.post(
        f"{base_url}/v1/entities/orders/messages", json={"body": "x"}, headers={"x-api-key": KEY_LIMITED}
    )
    assert answer.status_code == 202


def test_backpressure_answers_503_with_retry_after_and_recovers(
    http: httpx.Client, redis_url: str, settings: Settings, redis_client: redis.Redis
):
    for _ in range(2):
        assert http.post("/v1/entities/tiny/messages", json={"body": "x"}).status_code == 202
    before = snapshot(redis_client)
    full = http.post("/v1/entities/tiny/messages", json={"body": "x"})
    assert full.status_code == 503
    assert full.headers["Retry-After"] == "1"
    assert full.json()["error"]["code"] == "outbox_full"
    assert snapshot(redis_client) == before
    # A worker acknowledges one entry: there is room again.
    reader = OutboxReader(redis_client, settings)
    entries = _read_all(redis_url, settings, "tiny")
    assert reader.ack("tiny", 0, [entries[0].entry_id])[0] == 1
    assert http.post("/v1/entities/tiny/messages", json={"body": "x"}).status_code == 202


def test_total_bound_over_all_entities(redis_url: str, redis_client: redis.Redis):
    settings = _settings(redis_url, max_total_messages=3)
    with running_ingress(settings) as url, httpx.Client(base_url=url, headers={"x-api-key": KEY_ALL}) as http:
        assert (
            http.post(
                "/v1/entities/orders/messages:batch", json={"messages": [{"body": "a"}, {"body": "b"}]}
            ).status_code
            == 202
        )
        assert http.post("/v1/entities/sharded/messages", json={"body": "c"}).status_code == 202
        before = snapshot(redis_client)
        refused = http.post("/v1/entities/small/messages", json={"body": "d"})
        assert refused.status_code == 503
        assert "bridge" in refused.json()["error"]["message"]
        assert snapshot(redis_client) == before


def test_openapi_document_lists_exactly_the_accepted_fields(http: httpx.Client):
    document = http.get("/v1/openapi.json").json()
    envelope = document["components"]["schemas"]["Envelope"]
    assert set(envelope["properties"]) == set(V1_FIELDS)
    assert envelope["additionalProperties"] is False
    assert "/v1/entities/{entity}/messages:batch" in document["paths"]


def test_health_and_readiness(http: httpx.Client):
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}


def test_outbox_depth_endpoint(http: httpx.Client):
    http.post("/v1/entities/orders/messages", json={"body": "abc"})
    depth = http.get("/v1/entities/orders/outbox").json()
    assert depth["pending_messages"] == 1
    assert depth["pending_bytes"] > 3
    assert set(depth) == {"entity", "pending_messages", "pending_bytes", "quarantine", "deadletter"}


def test_problem_entries_endpoints(http: httpx.Client, redis_url: str, settings: Settings):
    # Given two messages moved to the local dead-letter stream by a worker
    http.post("/v1/entities/orders/messages:batch", json={"messages": [{"body": "m1"}, {"body": "m2"}]})
    reader = OutboxReader(redis.Redis.from_url(redis_url), settings)
    reader.ensure_groups("orders")
    for entry in read_all(reader, "orders", "w"):
        reader.move(entry, to="deadletter", code="message_permanent", reason="refused", now=1.0)
    # When they are listed over HTTP, page by page
    first = http.get("/v1/entities/orders/deadletter?count=1").json()
    (dead,) = first["entries"]
    rest = http.get(f"/v1/entities/orders/deadletter?after={dead['id']}").json()["entries"]
    # Then each carries its reason and original fields, once
    assert (dead["code"], dead["original"]["b"]) == ("message_permanent", "m1")
    assert [e["original"]["b"] for e in rest] == ["m2"]
    assert http.get("/v1/entities/orders/quarantine").json() == {"entity": "orders", "entries": []}
    depth = http.get("/v1/entities/orders/outbox").json()
    assert (depth["pending_messages"], depth["deadletter"]) == (0, 2)
    bad = http.get("/v1/entities/orders/deadletter?after=not-an-id")
    assert (bad.status_code, bad.json()["error"]["field"]) == (422, "after")
