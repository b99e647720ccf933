"""Fuzzing the ingress doors: the HTTP API from its own OpenAPI document, the Redis door with random layouts.

What must hold for every generated input, against the real ingress (uvicorn) and a private Redis:

- no 5xx: a client's mistake is never a server error, and nothing crashes;
- every refusal is the JSON error shape with a ``code`` (Redis door: a quarantine entry with its ``code``);
- a refused input stores nothing: every key's ``DUMP`` is as before (outbox streams, stats, idempotency
  markers), and a ``GET`` never changes anything;
- an accepted request touches only its own entity's keys (``bridge:{<entity>}:...``) and the totals;
- the answers match the document (statuses, content types, bodies); data the document allows is accepted
  except for the few rules no JSON Schema can state (``RULES_NO_SCHEMA_STATES``); data it forbids is
  refused.

The default run is bounded (``EXAMPLES`` per operation and generation mode); ``-m slow`` runs the same
properties with many more examples.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from bridge.core.envelope import Envelope
from bridge.embedded.redis_server import RedisServer
from bridge.outbox import keys
from bridge.outbox.redis_door import ensure_ingress_group, move_ingress
from bridge.outbox.store import SyncOutbox
from bridge.redis.connection import sync_client
from bridge.redis.keys import tag
from bridge.settings import Settings
from tests.integration.ingress_support import running_ingress

API_KEY = "fuzz-key-0123456789"
EXAMPLES = 40
SLOW_EXAMPLES = 500
CODE = re.compile(r"[a-z][a-z0-9_]*")
GLOBAL_TAG = "bridge:{bridge}:"


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key's ``DUMP`` (one round trip): equal snapshots mean nothing was stored or changed."""
    names = sorted(client.keys("*"))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.dump(name)
    return dict(zip(names, pipe.execute(), strict=True))


# Refusals of schema-valid data that are right: rules between fields, sizes, and the entity's settings.
RULES_NO_SCHEMA_STATES = frozenset(
    (
        "session_partition_mismatch",
        "transaction_partition_keys",
        "session_id_required",
        "headers_too_large",
        "message_too_large",
        "body_too_large",
        "application_property_out_of_range",  # 2**64 and 1.8446744073709552e19 are one JSON Schema number
    )
)


def _settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        entities={"orders": {}, "app/events": {}, "sessions": {"requires_session": True}},
        # Any valid entity path is accepted (the default), so generated names reach validation and Redis.
        ingress={
            # Idempotency markers must not expire during the run: the DUMP comparisons would see it.
            "idempotency_window": 24 * 3600,
            "max_batch_messages": 100,
            "api_keys": [{"name": "fuzz", "sha256": hashlib.sha256(API_KEY.encode()).hexdigest()}],
        },
    )


@dataclass
class Ingress:
    url: str
    client: redis.Redis
    schema: Any
    session: requests.Session


@pytest.fixture(scope="module")
def ingress() -> Iterator[Ingress]:
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        with running_ingress(_settings(server.url), require_auth=True) as url:
            schema = schemathesis.openapi.from_url(f"{url}/v1/openapi.json")
            with requests.Session() as session:
                yield Ingress(url, client, schema, session)
        client.close()


# (method, path, generation mode, fixed entity or None for a generated one)
VARIANTS: list[tuple[str, str, GenerationMode, str | None]] = [
    (method, path, mode, entity)
    for method, path in (
        ("POST", "/v1/entities/{entity}/messages"),
        ("POST", "/v1/entities/{entity}/messages:batch"),
        ("GET", "/v1/entities/{entity}/quarantine"),
        ("GET", "/v1/entities/{entity}/deadletter"),
    )
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for entity in (None, "orders")
] + [
    ("GET", "/v1/entities/{entity}/outbox", GenerationMode.POSITIVE, None),
    ("GET", "/v1/entities/{entity}/outbox", GenerationMode.NEGATIVE, None),
    ("POST", "/{entity}/messages", GenerationMode.POSITIVE, None),
    ("POST", "/{entity}/messages", GenerationMode.POSITIVE, "orders"),
    ("POST", "/{entity}/messages", GenerationMode.NEGATIVE, None),
    ("GET", "/healthz", GenerationMode.POSITIVE, None),
    ("GET", "/readyz", GenerationMode.POSITIVE, None),
]


def _variant_id(variant: tuple[str, str, GenerationMode, str | None]) -> str:
    method, path, mode, entity = variant
    return f"{method} {path} {mode.value}{' ' + entity if entity else ''}"


def _entity_of(case: Case) -> str | None:
    """The entity the server saw: the path parameter as the router decodes it."""
    value = (case.path_parameters or {}).get("entity")
    return None if value is None else requests.utils.unquote(str(value))


def _check_answer(ingress: Ingress, case: Case, mode: GenerationMode, response: Any, before: dict[Any, Any]):
    """The properties every answer must have, beyond what schemathesis checks against the document."""
    status = response.status_code
    assert status < 500, f"{status} for a client's input: {response.text[:300]}"
    after = snapshot(ingress.client)
    if status >= 400:
        error = response.json()["error"]
        assert CODE.fullmatch(error["code"]), error
        assert isinstance(error["message"], str) and error["message"]
        assert after == before, f"refused with {error['code']} but Redis changed"
        if mode is GenerationMode.POSITIVE and status not in (401, 403):
            assert error["code"] in RULES_NO_SCHEMA_STATES or _beyond_utc(case), (
                f"schema-valid, refused: {error}"
            )
    elif case.method == "GET":
        assert after == before, "a GET changed Redis"
    else:
        entity = _entity_of(case)
        assert entity is not None
        changed = {key.decode() for key in set(before) | set(after) if before.get(key) != after.get(key)}
        if not changed:  # a re-posted message_id (hypothesis replays examples): acknowledged, not stored
            answer = response.json()
            assert answer.get("duplicate") or answer.get("duplicates") == len(
                answer.get("message_ids", ())
            ), answer
        foreign = {key for key in changed if not key.startswith((tag(entity), GLOBAL_TAG))}
        assert not foreign, f"writing to {entity!r} touched other keys: {sorted(foreign)}"


def _beyond_utc(case: Case) -> bool:
    """A date-time in year 1 or 9999 whose offset moves it outside the years Python (and Azure) can hold in
    UTC: valid RFC 3339, rightly refused (``scheduled_enqueue_time_invalid``); no schema can say so."""
    if not isinstance(case.body, dict):
        return False
    text = json.dumps(case.body)
    return re.search(r'"scheduled_enqueue_time_utc": "(0001|9999)-', text) is not None


def _slow(request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("long variant: run with -m slow")


def _fuzz(ingress: Ingress, variant: tuple[str, str, GenerationMode, str | None], examples: int) -> int:
    method, path, mode, entity = variant
    operation = ingress.schema[path][method]
    strategy = operation.as_strategy(
        generation_mode=mode, path_parameters={"entity": entity} if entity else None
    )
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    if mode is GenerationMode.NEGATIVE:
        checks.append(negative_data_rejection)
    count = 0

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Case) -> None:
        nonlocal count
        count += 1
        before = snapshot(ingress.client)
        response = case.call(base_url=ingress.url, session=ingress.session, headers={"x-api-key": API_KEY})
        _check_answer(ingress, case, mode, response, before)
        case.validate_response(response, checks=checks)

    run()
    return count


@pytest.mark.parametrize("variant", VARIANTS, ids=[_variant_id(v) for v in VARIANTS])
def test_http_api_fuzzed_from_its_openapi_document(ingress: Ingress, variant: Any):
    assert _fuzz(ingress, variant, EXAMPLES) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS, ids=[_variant_id(v) for v in VARIANTS])
def test_http_api_fuzzed_longer(ingress: Ingress, variant: Any, request: pytest.FixtureRequest):
    _slow(request)
    assert _fuzz(ingress, variant, SLOW_EXAMPLES) >= 1


def test_the_document_is_what_the_fuzzer_reads(ingress: Ingress):
    # Every operation the app routes for a producer is in the document, so the fuzz covers it.
    operations = {(method, path) for method, path, *_ in VARIANTS}
    documented = {
        (method.upper(), path)
        for path, item in requests.get(f"{ingress.url}/v1/openapi.json", timeout=10).json()["paths"].items()
        for method in item
    }
    assert documented == operations


# --- the Redis door ---------------------------------------------------------------------------------------

DOOR = "doorfuzz"
KNOWN_FIELDS = (
    "body",
    "body_encoding",
    "message_id",
    "content_type",
    "correlation_id",
    "subject",
    "reply_to",
    "to",
    "session_id",
    "partition_key",
    "time_to_live",
    "scheduled_enqueue_time_utc",
    "application_properties",
)
_text = st.text(max_size=12)
_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text)
_json = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
# Values near what each field expects, and anything at all.
_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "body_encoding": st.sampled_from(["text", "base64", "hex", ""]),
    "time_to_live": st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers().map(str),
        st.sampled_from(["1e400", "-0", "1_0"]),
    ),
    "scheduled_enqueue_time_utc": st.one_of(
        st.datetimes(timezones=st.none() | st.timezones()).map(lambda d: d.isoformat()),
        st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "soon"]),
    ),
    "application_properties": st.one_of(_json.map(json.dumps), st.just("[" * 5000 + "]" * 5000), _text),
    "body": st.one_of(st.binary(max_size=40), st.binary(max_size=40).map(base64.b64encode)),
}
_name = st.one_of(st.sampled_from(KNOWN_FIELDS), st.binary(min_size=1, max_size=10))


@st.composite
def door_layouts(draw: Callable[..., Any]) -> dict[bytes, bytes]:
    """A random Redis-door entry: known and unknown field names, near-valid and arbitrary values."""
    fields: dict[bytes, bytes] = {}
    names = draw(st.lists(_name, min_size=1, max_size=8))
    if draw(st.booleans()):
        names.append("body")
    for name in names:
        raw_name = name.encode() if isinstance(name, str) else name
        strategy = _VALUES.get(name if isinstance(name, str) else "")
        value = draw(
            st.one_of(strategy, st.binary(max_size=20))
            if strategy is not None
            else st.one_of(_text.map(str.encode), st.binary(max_size=20))
        )
        fields[raw_name] = value if isinstance(value, bytes) else str(value).encode()
    return fields


@dataclass
class Door:
    client: redis.Redis
    outbox: SyncOutbox


@pytest.fixture(scope="module")
def door() -> Iterator[Door]:
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        settings = Settings(redis_url=server.url, ingress={"idempotency_window": 24 * 3600})
        outbox = SyncOutbox(sync_client(server.url), settings)
        ensure_ingress_group(client, DOOR)
        yield Door(client, outbox)
        client.close()


def _outbox_length(client: redis.Redis) -> int:
    return int(client.xlen(keys.outbox(DOOR, 0)))


def _not_door_streams(snap: dict[Any, Any]) -> dict[Any, Any]:
    skip = {keys.ingress(DOOR).encode(), keys.quarantine(DOOR).encode()}
    return {key: value for key, value in snap.items() if key not in skip}


def _move_one(door: Door, fields: dict[bytes, bytes]) -> tuple[str, Any]:
    """XADD one entry, run the door's mover; return ('moved', envelope) or ('quarantined', entry fields)."""
    client = door.client
    entry_id = client.xadd(keys.ingress(DOOR), fields).decode()
    before = snapshot(client)
    quarantined_before = client.xlen(keys.quarantine(DOOR))
    report = move_ingress(door.outbox, DOOR, consumer="fuzz", now=time.time())
    # Every entry is handled once: moved (or recognised as a duplicate) or quarantined, never left behind.
    assert report.moved + report.duplicates + report.quarantined == 1
    assert client.xlen(keys.ingress(DOOR)) == 0
    assert client.xpending(keys.ingress(DOOR), keys.INGRESS_GROUP)["pending"] == 0
    if report.quarantined:
        assert _not_door_streams(snapshot(client)) == _not_door_streams(before), "refused, yet stored"
        assert client.xlen(keys.quarantine(DOOR)) == quarantined_before + 1
        ((_, problem),) = client.xrevrange(keys.quarantine(DOOR), count=1)
        assert CODE.fullmatch(problem[b"code"].decode()), problem
        assert problem[b"reason"]
        assert (problem[b"source"], problem[b"source_id"].decode()) == (b"redis-door", entry_id)
        assert {
            name[len(b"orig.") :]: value for name, value in problem.items() if name.startswith(b"orig.")
        } == fields
        return "quarantined", problem
    assert client.xlen(keys.quarantine(DOOR)) == quarantined_before
    if report.duplicates:
        return "duplicate", None
    ((_, stored),) = client.xrevrange(keys.outbox(DOOR, 0), count=1)
    return "moved", Envelope.decode(stored)


def _fuzz_door(door: Door, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(fields=door_layouts())
    def run(fields: dict[bytes, bytes]) -> None:
        outcome, detail = _move_one(door, fields)
        if outcome == "moved":
            body = fields[b"body"]
            if fields.get(b"body_encoding") == b"base64":
                body = base64.b64decode(body)
            assert detail.body == body
            if b"message_id" in fields:
                assert detail.message_id == fields[b"message_id"].decode()
        elif outcome == "quarantined" and b"body" not in fields:
            assert detail[b"code"] == b"field_required"

    run()


def test_redis_door_random_layouts_are_moved_or_quarantined_with_a_code(door: Door):
    _fuzz_door(door, 200)


@pytest.mark.slow
def test_redis_door_random_layouts_longer(door: Door, request: pytest.FixtureRequest):
    _slow(request)
    _fuzz_door(door, 3000)


GOOD = {b"body": b"hello", b"message_id": b"m", b"session_id": b"s", b"time_to_live": b"60"}
# One known mistake each, made to an entry that is otherwise valid, and the code it must be quarantined with.
MISTAKES: list[tuple[str, dict[bytes, bytes | None], str]] = [
    ("no body", {b"body": None}, "field_required"),
    ("unknown field", {b"colour": b"red"}, "unknown_field"),
    ("field name not utf-8", {b"\xff\xfe": b"x"}, "invalid_utf8"),
    ("value not utf-8", {b"subject": b"\xff"}, "invalid_utf8"),
    ("bad base64", {b"body_encoding": b"base64", b"body": b"***"}, "body_invalid_base64"),
    ("unknown encoding", {b"body_encoding": b"hex"}, "body_encoding_invalid"),
    ("ttl not a number", {b"time_to_live": b"soon"}, "time_to_live_invalid"),
    ("ttl zero", {b"time_to_live": b"0"}, "time_to_live_not_positive"),
    ("ttl infinite", {b"time_to_live": b"1e400"}, "time_to_live_invalid"),
    ("ttl nan", {b"time_to_live": b"nan"}, "time_to_live_invalid"),
    ("properties not json", {b"application_properties": b"{"}, "invalid_type"),
    ("properties nested too deep", {b"application_properties": b"[" * 5000 + b"]" * 5000}, "invalid_type"),
    ("properties a list", {b"application_properties": b"[1]"}, "invalid_type"),
    ("property an object", {b"application_properties": b'{"a": {}}'}, "application_property_type"),
    ("property with a lone surrogate", {b"application_properties": b'{"a": "\\ud800"}'}, "invalid_utf8"),
    (
        "property integer too big",
        {b"application_properties": b'{"a": 18446744073709551616}'},
        "application_property_out_of_range",
    ),
    ("session and partition differ", {b"partition_key": b"other"}, "session_partition_mismatch"),
    ("message id too long", {b"message_id": b"m" * 129}, "message_id_too_long"),
    ("message id empty", {b"message_id": b""}, "message_id_empty"),
    ("schedule not iso", {b"scheduled_enqueue_time_utc": b"tomorrow"}, "scheduled_enqueue_time_invalid"),
    (
        "schedule naive",
        {b"scheduled_enqueue_time_utc": b"2030-01-01T00:00:00"},
        "scheduled_enqueue_time_naive",
    ),
    (
        "schedule out of range",
        {b"scheduled_enqueue_time_utc": b"0001-01-01T00:00:00+01:00"},
        "scheduled_enqueue_time_invalid",
    ),
    ("body over the entity limit", {b"body": b"x" * (256 * 1024 + 1)}, "body_too_large"),
]


@pytest.mark.parametrize(("name", "change", "code"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_redis_door_mistakes_are_quarantined_with_their_code(
    door: Door, name: str, change: dict[bytes, bytes | None], code: str
):
    fields = {**GOOD, **change}
    outcome, problem = _move_one(door, {k: v for k, v in fields.items() if v is not None})
    assert outcome == "quarantined"
    assert problem[b"code"].decode() == code


@given(st.lists(st.tuples(st.booleans(), st.binary(min_size=1, max_size=20)), min_size=1, max_size=20))
@settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_redis_door_mixed_entries_keep_the_valid_ones_in_order(door: Door, entries: list[tuple[bool, bytes]]):
    client = door.client
    stream = keys.ingress(DOOR)
    for valid, body in entries:
        client.xadd(stream, {b"body": body} if valid else {b"body": body, b"time_to_live": b"-1"})
    length, quarantined = _outbox_length(client), client.xlen(keys.quarantine(DOOR))
    report = move_ingress(door.outbox, DOOR, consumer="fuzz", now=time.time())
    good = [body for valid, body in entries if valid]
    assert (report.moved, report.quarantined) == (len(good), len(entries) - len(good))
    assert client.xlen(keys.quarantine(DOOR)) == quarantined + len(entries) - len(good)
    stored = [Envelope.decode(fields).body for _, fields in client.xrange(keys.outbox(DOOR, 0))][length:]
    assert stored == good
