"""Every bad request gets the right 4xx with a precise code, and Redis is left exactly as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis

from bridge.embedded.redis_server import RedisServer
from bridge.outbox import keys
from bridge.settings import Settings
from tests.integration.ingress_support import running_ingress, snapshot
from tests.integration.test_ingress_http import KEY_ALL, KEY_LIMITED, _settings


@dataclass
class Bad:
    name: str
    path: str
    status: int
    code: str | None
    json_body: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    field: str | None = "unset"
    index: int | None = None


def v1(name: str, body: Any, status: int, code: str, entity: str = "orders", **extra: Any) -> Bad:
    return Bad(name, f"/v1/entities/{entity}/messages", status, code, json_body=body, **extra)


def batch(name: str, body: Any, status: int, code: str, query: str = "", **extra: Any) -> Bad:
    return Bad(name, f"/v1/entities/orders/messages:batch{query}", status, code, json_body=body, **extra)


def rest(name: str, status: int, code: str | None, content: bytes = b"x", **extra: Any) -> Bad:
    return Bad(name, "/orders/messages", status, code, content=content, **extra)


_hundred = [{"body": f"m{i}"} for i in range(100)]
_bad_50th = [*_hundred[:49], {"body": "m49", "message_id": ""}, *_hundred[50:]]

CASES = [
    Bad("malformed json", "/v1/entities/orders/messages", 400, "invalid_json", content=b'{"body": '),
    Bad(
        "bad utf-8 json", "/v1/entities/orders/messages", 400, "invalid_json", content=b'{"body": "\xff\xfe"}'
    ),
    v1("array instead of object", ["x"], 422, "invalid_type"),
    v1("unknown field", {"body": "x", "priority": 1}, 422, "unknown_field", field="priority"),
    v1("missing body", {"message_id": "m"}, 422, "field_required", field="body"),
    v1("number body as text", {"body": 5}, 422, "invalid_type", field="body"),
    v1("unknown body encoding", {"body": "x", "body_encoding": "hex"}, 422, "body_encoding_invalid"),
    v1("bad base64", {"body": "***", "body_encoding": "base64"}, 422, "body_invalid_base64"),
    v1("message id too long", {"body": "x", "message_id": "m" * 129}, 422, "message_id_too_long"),
    v1("message id empty", {"body": "x", "message_id": ""}, 422, "message_id_empty"),
    v1("message id a number", {"body": "x", "message_id": 7}, 422, "invalid_type", field="message_id"),
    v1("partition key too long", {"body": "x", "partition_key": "p" * 129}, 422, "partition_key_too_long"),
    v1("session id too long", {"body": "x", "session_id": "s" * 129}, 422, "session_id_too_long"),
    v1(
        "session and partition differ",
        {"body": "x", "session_id": "a", "partition_key": "b"},
        422,
        "session_partition_mismatch",
        field="partition_key",
    ),
    v1("ttl zero", {"body": "x", "time_to_live": 0}, 422, "time_to_live_not_positive"),
    v1("ttl negative", {"body": "x", "time_to_live": -5}, 422, "time_to_live_not_positive"),
    v1("ttl as text", {"body": "x", "time_to_live": "10"}, 422, "invalid_type", field="time_to_live"),
    v1("ttl beyond TimeSpan", {"body": "x", "time_to_live": 1e300}, 422, "time_to_live_invalid"),
    v1(
        "schedule not iso",
        {"body": "x", "scheduled_enqueue_time_utc": "tomorrow"},
        422,
        "scheduled_enqueue_time_invalid",
    ),
    v1(
        "schedule without offset",
        {"body": "x", "scheduled_enqueue_time_utc": "2030-01-01T00:00:00"},
        422,
        "scheduled_enqueue_time_naive",
    ),
    v1("schedule a number", {"body": "x", "scheduled_enqueue_time_utc": 1}, 422, "invalid_type"),
    v1("properties not an object", {"body": "x", "application_properties": [1]}, 422, "invalid_type"),
    v1(
        "property an object",
        {"body": "x", "application_properties": {"a": {"b": 1}}},
        422,
        "application_property_type",
        field="application_properties.a",
    ),
    v1(
        "property an array",
        {"body": "x", "application_properties": {"a": [1]}},
        422,
        "application_property_type",
    ),
    v1(
        "property null",
        {"body": "x", "application_properties": {"a": None}},
        422,
        "application_property_type",
    ),
    v1(
        "property integer too big",
        {"body": "x", "application_properties": {"a": 2**64}},
        422,
        "application_property_out_of_range",
    ),
    v1(
        "property name empty",
        {"body": "x", "application_properties": {"": 1}},
        422,
        "application_property_name_invalid",
    ),
    v1(
        "properties beyond 64 KB",
        {"body": "x", "application_properties": {"a": "v" * 70_000}},
        422,
        "headers_too_large",
        entity="orders",
    ),
    v1("body over entity limit", {"body": "b" * 1001}, 413, "body_too_large", entity="small"),
    v1(
        "body and properties over limit",
        {"body": "b" * 900, "subject": "s" * 200},
        413,
        "message_too_large",
        entity="small",
    ),
    v1("session required", {"body": "x"}, 422, "session_id_required", entity="sessions"),
    v1("entity starts with dash", {"body": "x"}, 422, "entity_name_invalid", entity="-bad"),
    v1("entity with bad character", {"body": "x"}, 422, "entity_name_invalid", entity="a%20b"),
    v1("entity too long", {"body": "x"}, 422, "entity_name_too_long", entity="e" * 261),
    v1("entity is a subscription", {"body": "x"}, 422, "entity_not_sendable", entity="t/Subscriptions/s"),
    v1("entity not configured", {"body": "x"}, 404, "unknown_entity", entity="nope"),
    v1("no credentials", {"body": "x"}, 401, "unauthorized", headers={"Authorization": ""}),
    v1("wrong api key", {"body": "x"}, 401, "unauthorized", headers={"Authorization": "Bearer wrong"}),
    v1(
        "wrong x-api-key",
        {"body": "x"},
        401,
        "unauthorized",
        headers={"Authorization": "", "x-api-key": "no"},
    ),
    v1(
        "key limited to another entity",
        {"body": "x"},
        403,
        "entity_not_allowed",
        entity="small",
        headers={"Authorization": f"Bearer {KEY_LIMITED}"},
    ),
    v1("request over max_request_bytes", {"body": "x" * (2 * 1024 * 1024)}, 413, "request_too_large"),
    batch("bad 50th of 100", {"messages": _bad_50th}, 422, "message_id_empty", index=49),
    batch("empty batch", {"messages": []}, 422, "batch_empty"),
    batch("batch over maximum", {"messages": [{"body": "x"}] * 101}, 422, "batch_too_large"),
    batch("batch without messages", {"items": []}, 422, "invalid_type"),
    batch("messages not an array", {"messages": {"body": "x"}}, 422, "invalid_type"),
    batch(
        "transactional with two keys",
        {"messages": [{"body": "x", "partition_key": "a"}, {"body": "y", "partition_key": "b"}]},
        422,
        "transaction_partition_keys",
        query="?transactional=true",
        index=1,
    ),
    batch(
        "transactional flag not boolean",
        {"messages": [{"body": "x"}]},
        422,
        "invalid_type",
        query="?transactional=maybe",
    ),
    rest("broker properties not json", 400, "invalid_broker_properties", headers={"BrokerProperties": "{"}),
    rest(
        "broker ttl text not a number",
        400,
        "time_to_live_invalid",
        headers={"BrokerProperties": '{"TimeToLive": "x"}'},
    ),
    rest(
        "broker ttl timespan malformed",
        400,
        "time_to_live_invalid",
        headers={"BrokerProperties": '{"TimeToLiveTimeSpan": "soon"}'},
    ),
    rest(
        "broker schedule garbage",
        400,
        "scheduled_enqueue_time_invalid",
        headers={"BrokerProperties": '{"ScheduledEnqueueTimeUtc": "soon"}'},
    ),
    rest(
        "rest session mismatch",
        400,
        "session_partition_mismatch",
        headers={"BrokerProperties": '{"SessionId": "a", "PartitionKey": "b"}'},
    ),
    rest(
        "bad shared access signature",
        401,
        "unauthorized",
        headers={
            "Authorization": "SharedAccessSignature sr=x&sig=bad&se=4000000000&skn=RootManageSharedAccessKey"
        },
    ),
    rest(
        "expired shared access signature",
        401,
        "unauthorized",
        headers={"Authorization": "SharedAccessSignature sr=x&sig=bad&se=1&skn=RootManageSharedAccessKey"},
    ),
    rest("huge header", 400, None, headers={"X-Big": "v" * 200_000}, field=None),
    rest(
        "rest batch item without Body",
        400,
        "invalid_type",
        content=json.dumps([{"body": "x"}]).encode(),
        headers={"Content-Type": "application/vnd.microsoft.servicebus.json"},
    ),
    rest(
        "rest batch not json",
        400,
        "invalid_json",
        content=b"[{",
        headers={"Content-Type": "application/vnd.microsoft.servicebus.json"},
    ),
    # Microsoft's Send Message reference: "403 Quota exceeded or message too large".
    rest("rest body over entity limit", 403, "body_too_large", content=b"x" * (256 * 1024 + 1)),
]


def test_the_table_is_big_enough():
    assert len(CASES) >= 30
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, redis.Redis]]:
    with RedisServer() as redis_server:
        settings: Settings = _settings(redis_server.url)
        client = redis.Redis(port=redis_server.port)
        with running_ingress(settings, require_auth=True) as url:
            # Some state exists already, so "unchanged" is not trivially "empty".
            assert (
                httpx.post(
                    f"{url}/v1/entities/orders/messages",
                    json={"body": "seed"},
                    headers={"x-api-key": KEY_ALL},
                ).status_code
                == 202
            )
            yield url, client
        client.close()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_request_is_refused_and_changes_nothing(case: Bad, server: tuple[str, redis.Redis]):
    url, client = server
    before = snapshot(client)
    assert before, "the seed message should be there"
    headers = {"Authorization": f"Bearer {KEY_ALL}", **case.headers}
    headers = {name: value for name, value in headers.items() if value}
    if case.content is not None:
        answer = httpx.post(url + case.path, content=case.content, headers=headers, timeout=10)
    else:
        answer = httpx.post(
            url + case.path,
            content=json.dumps(case.json_body).encode(),
            headers={"Content-Type": "application/json", **headers},
            timeout=10,
        )
    assert answer.status_code == case.status, answer.text
    if case.code is not None:
        error = answer.json()["error"]
        assert error["code"] == case.code
        assert error["message"]
        if case.field != "unset":
            assert error["field"] == case.field
        if case.index is not None:
            assert error["index"] == case.index
    assert snapshot(client) == before
    assert client.xlen(keys.outbox("orders", 0)) == 1


def test_redis_down_answers_503_and_nothing_is_half_written():
    with RedisServer() as redis_server:
        settings = _settings(redis_server.url)
        client = redis.Redis(port=redis_server.port)
        with running_ingress(settings, require_auth=True) as url:
            auth = {"x-api-key": KEY_ALL}
            assert (
                httpx.post(f"{url}/v1/entities/orders/messages", json={"body": "1"}, headers=auth).status_code
                == 202
            )
            # Given Redis crashes
            redis_server.kill()
            # When a batch is posted
            answer = httpx.post(
                f"{url}/v1/entities/orders/messages:batch",
                json={"messages": [{"body": "2"}, {"body": "3"}]},
                headers=auth,
                timeout=15,
            )
            # Then 503 with Retry-After, and after a restart only the acknowledged message is there
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "outbox_unavailable"
            assert "Retry-After" in answer.headers
            assert httpx.get(f"{url}/readyz").status_code == 503
            redis_server.start()
            assert client.xlen(keys.outbox("orders", 0)) == 1
            # And the door works again without a restart of the ingress
            assert (
                httpx.post(f"{url}/v1/entities/orders/messages", json={"body": "4"}, headers=auth).status_code
                == 202
            )
            assert client.xlen(keys.outbox("orders", 0)) == 2
        client.close()
