"""Security probes against the real ingress and a private Redis: each refused cleanly, none reaching Redis.

Credentials (none, wrong, out of scope), entity paths that try to escape a key or a path, bodies and
headers too large, bodies too slow, values no JSON parser or encoder should be trusted with. Each answer is
a 4xx with the JSON error ``code``; Redis is compared key by key (``DUMP``) and by a ``SCAN`` of its key
names before and after, so nothing stored, no counter moved and no key was made. Requests are sent with
``http.client`` or a raw socket where the exact bytes matter (``..`` segments, a trickled body), since
higher-level clients normalise or complete them.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import redis

from bridge.core.auth import sas_signature
from bridge.embedded.redis_server import RedisServer
from bridge.embedded.stack import wait_until
from bridge.errors import InvalidMessageError
from bridge.outbox import keys
from bridge.outbox.discovery import SCAN_MARK, door_entities
from bridge.outbox.redis_door import move_ingress
from bridge.outbox.store import SyncOutbox
from bridge.redis.connection import sync_client
from bridge.settings import Settings
from tests.integration.ingress_support import running_ingress

KEY_ALL = "probe-key-all-0123456789"
KEY_ORDERS = "probe-key-orders-0123456789"
SAS_NAME, SAS_KEY = "RootManageSharedAccessKey", "cHJvYmUtc2FzLWtleQ=="
BODY_TIMEOUT = 1.0
MAX_REQUEST = 64 * 1024
ENTITY_CODES = {
    "entity_name_invalid",
    "entity_name_too_long",
    "entity_name_empty",
    "entity_name_reserved",
    "entity_not_sendable",
    "not_found",  # the router's own: a path no route matches
}


def _settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        entities={"orders": {}},
        # only_configured_entities stays off (the default): names are stopped by the rules, not by a list.
        ingress={
            "max_request_bytes": MAX_REQUEST,
            "body_read_timeout": BODY_TIMEOUT,
            "api_keys": [
                {"name": "all", "sha256": hashlib.sha256(KEY_ALL.encode()).hexdigest()},
                {
                    "name": "orders",
                    "sha256": hashlib.sha256(KEY_ORDERS.encode()).hexdigest(),
                    "entities": ["orders"],
                },
            ],
            "sas_key_name": SAS_NAME,
            "sas_key": SAS_KEY,
        },
    )


@dataclass
class Server:
    url: str
    host: str
    port: int
    client: redis.Redis
    redis_url: str


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with RedisServer() as redis_server:
        client = redis.Redis(port=redis_server.port)
        with running_ingress(_settings(redis_server.url), require_auth=True) as url:
            parts = urlsplit(url)
            assert parts.hostname is not None and parts.port is not None
            probe = Server(url, parts.hostname, parts.port, client, redis_server.url)
            # Some state exists already, so "unchanged" is not trivially "empty".
            status, _, _ = request(probe, "POST", "/v1/entities/orders/messages", b'{"body": "seed"}', AUTH)
            assert status == 202
            yield probe
        client.close()


AUTH = {"x-api-key": KEY_ALL, "Content-Type": "application/json"}


def request(
    server: Server,
    method: str,
    target: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request with the target sent exactly as given (no normalisation of ``..`` or escapes)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=15)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def key_names(client: redis.Redis) -> set[bytes]:
    return set(client.scan_iter(match="*", count=1000))


def dump_all(client: redis.Redis) -> dict[bytes, bytes | None]:
    names = sorted(key_names(client))
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.dump(name)
    return dict(zip(names, pipe.execute(), strict=True))


@contextmanager
def nothing_reaches_redis(client: redis.Redis) -> Iterator[None]:
    """The block changes no key name (SCAN), no value (DUMP) and no counter (the stats hashes)."""
    names, values = key_names(client), dump_all(client)
    totals = client.hgetall(keys.TOTALS)
    yield
    assert key_names(client) == names, f"new keys: {key_names(client) - names}"
    assert client.hgetall(keys.TOTALS) == totals
    assert dump_all(client) == values


def error_of(status: int, body: bytes) -> dict[str, Any]:
    assert 400 <= status < 500, (status, body[:300])
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["code"] and error["message"]
    return error


# --- credentials ------------------------------------------------------------------------------------------


def sas_token(resource: str, *, key: str = SAS_KEY, name: str = SAS_NAME, expiry: int = 4_000_000_000) -> str:
    signature = sas_signature(resource, expiry, key)
    resource, signature = quote(resource, safe=""), quote(signature, safe="")
    return f"SharedAccessSignature sr={resource}&sig={signature}&se={expiry}&skn={name}"


@dataclass
class Probe:
    name: str
    method: str
    path: str
    headers: dict[str, str]
    status: int
    code: str
    body: bytes = b'{"body": "x"}'
    secret: str | None = field(default=None)


_REST = "/orders/messages"
_V1 = "/v1/entities/orders/messages"
_JSON = {"Content-Type": "application/json"}
CREDENTIAL_PROBES = [
    Probe("no credentials", "POST", _V1, _JSON, 401, "unauthorized"),
    Probe(
        "no credentials, batch",
        "POST",
        _V1 + ":batch",
        _JSON,
        401,
        "unauthorized",
        b'{"messages": [{"body": "x"}]}',
    ),
    Probe("no credentials, listing", "GET", "/v1/entities/orders/quarantine", {}, 401, "unauthorized", b""),
    Probe("no credentials, depth", "GET", "/v1/entities/orders/outbox", {}, 401, "unauthorized", b""),
    Probe("no credentials, metrics", "GET", "/metrics", {}, 401, "unauthorized", b""),
    Probe("no credentials, status", "GET", "/status.json", {}, 401, "unauthorized", b""),
    Probe("no credentials, REST", "POST", _REST, {}, 401, "unauthorized", b"x"),
    Probe(
        "wrong bearer key",
        "POST",
        _V1,
        {**_JSON, "Authorization": "Bearer guess-0123456789"},
        401,
        "unauthorized",
        secret="guess-0123456789",
    ),
    Probe(
        "wrong x-api-key",
        "POST",
        _V1,
        {**_JSON, "x-api-key": "guess-0123456789"},
        401,
        "unauthorized",
        secret="guess-0123456789",
    ),
    Probe("empty bearer", "POST", _V1, {**_JSON, "Authorization": "Bearer "}, 401, "unauthorized"),
    Probe("key in another case", "POST", _V1, {**_JSON, "x-api-key": KEY_ALL.upper()}, 401, "unauthorized"),
    Probe("basic auth", "POST", _V1, {**_JSON, "Authorization": "Basic YWxsOmtleQ=="}, 401, "unauthorized"),
    Probe("non-ascii key", "POST", _V1, {**_JSON, "x-api-key": "cl\u00e9-0123456789"}, 401, "unauthorized"),
    Probe(
        "key limited to another entity",
        "POST",
        "/v1/entities/payments/messages",
        {**_JSON, "x-api-key": KEY_ORDERS},
        403,
        "entity_not_allowed",
    ),
    Probe(
        "SAS on the /v1 door",
        "POST",
        _V1,
        {**_JSON, "Authorization": sas_token("http://bridge/orders")},
        401,
        "unauthorized",
    ),
    Probe(
        "SAS signed with another key",
        "POST",
        _REST,
        {"Authorization": sas_token("http://bridge/orders", key="b3RoZXI=")},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS expired",
        "POST",
        _REST,
        {"Authorization": sas_token("http://bridge/orders", expiry=1)},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS unknown key name",
        "POST",
        _REST,
        {"Authorization": sas_token("http://bridge/orders", name="Other")},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS for another entity",
        "POST",
        _REST,
        {"Authorization": sas_token("http://bridge/payments")},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS for a longer name",
        "POST",
        _REST,
        {"Authorization": sas_token("http://bridge/orders-archive")},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS without fields",
        "POST",
        _REST,
        {"Authorization": "SharedAccessSignature "},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS with empty fields",
        "POST",
        _REST,
        {"Authorization": "SharedAccessSignature sr=&sig=&se=&skn="},
        401,
        "unauthorized",
        b"x",
    ),
    Probe(
        "SAS with a huge expiry",
        "POST",
        _REST,
        {"Authorization": f"SharedAccessSignature sr=x&sig=y&se={'9' * 5000}&skn={SAS_NAME}"},
        401,
        "unauthorized",
        b"x",
    ),
]


@pytest.mark.parametrize("probe", CREDENTIAL_PROBES, ids=[p.name for p in CREDENTIAL_PROBES])
def test_credentials_are_checked_before_anything_is_stored(server: Server, probe: Probe):
    headers = {name: value.encode("utf-8").decode("latin-1") for name, value in probe.headers.items()}
    with nothing_reaches_redis(server.client):
        status, answer_headers, body = request(server, probe.method, probe.path, probe.body or None, headers)
    error = error_of(status, body)
    assert (status, error["code"]) == (probe.status, probe.code)
    if status == 401:
        assert answer_headers["www-authenticate"].startswith("Bearer")
    for secret in (probe.secret, KEY_ALL, SAS_KEY):
        if secret:
            assert secret.encode() not in body


@pytest.mark.parametrize(
    "resource", ["http://bridge/orders", "https://bridge:8443/", "sb://bridge", "bridge/orders/"]
)
def test_a_sas_token_for_the_entity_or_the_namespace_is_accepted(server: Server, resource: str):
    # The control for the scope probes above: the same signature rules, a resource that covers /orders.
    status, _, body = request(server, "POST", _REST, b"x", {"Authorization": sas_token(resource)})
    assert status == 201, body


# --- entity paths -----------------------------------------------------------------------------------------

# Raw path segments as sent on the wire, and the name the router decodes them to.
ENTITY_PROBES = [
    "a%7Db",  # } ends a hash tag early
    "a%7Bb",  # { starts one
    "%7Borders%7D",
    "a:b",  # : separates key parts
    "orders:out:0",
    "orders%0A",  # a trailing newline ("$" in a regex lets it through)
    "orders%0D%0A",
    "a%0Ab",
    "a%00b",
    "..",
    "a/../b",
    "a/./b",
    "..%2Forders",
    "%2E%2E/orders",
    "a%2F..%2F..%2Fb",
    "./orders",
    "orders/..",
    "a//b",
    "a%20b",
    "*",
    "orders*",
    "a%3Fb",
    "%5Ba%5D",
    "a%5Cb",
    "%C3%A9",
    "-orders",
    "orders.",
    "bridge",  # its keys would be the shared {bridge} records
    "orders/Subscriptions/s",
    "e" * 261,
    "e" * 5000,
]
ENTITY_ROUTES = [
    ("POST", "/v1/entities/{}/messages", b'{"body": "x"}'),
    ("POST", "/v1/entities/{}/messages:batch", b'{"messages": [{"body": "x"}]}'),
    ("GET", "/v1/entities/{}/quarantine", None),
    ("GET", "/v1/entities/{}/outbox", None),
    ("POST", "/{}/messages", b"x"),
]


@pytest.mark.parametrize("method,route,body", ENTITY_ROUTES, ids=[f"{m} {r}" for m, r, _ in ENTITY_ROUTES])
def test_entity_paths_that_try_to_escape_are_refused(
    server: Server, method: str, route: str, body: bytes | None
):
    refused = []
    with nothing_reaches_redis(server.client):
        for raw in ENTITY_PROBES:
            status, _, answer = request(server, method, route.format(raw), body, AUTH)
            error = error_of(status, answer)
            assert error["code"] in ENTITY_CODES, (raw, error)
            refused.append(raw)
    assert refused == ENTITY_PROBES


def test_the_same_messages_to_a_plain_entity_are_stored(server: Server):
    # The control: the probes above fail for their names, not for their bodies or credentials.
    before = server.client.xlen(keys.outbox("probe-control", 0))
    for method, route, body in ENTITY_ROUTES:
        status, _, answer = request(server, method, route.format("probe-control"), body, AUTH)
        assert status in (200, 201, 202), answer
    assert server.client.xlen(keys.outbox("probe-control", 0)) == before + 3


def test_the_redis_door_ignores_streams_named_to_inject(server: Server):
    # Given streams an application could XADD to under names that are no entity path
    client = server.client
    names = ["orders\n", "a}b", "a:b", "..", "a/../b", "bridge", "*"]
    for name in names:
        client.xadd(f"bridge:{{{name}}}:in", {"body": "x"})
    try:
        # When the sweeper's discovery scans, and a mover is asked for such a name directly
        found = door_entities(client, interval=0.001)
        # (its scan mark expires within the millisecond: gone before the snapshot, not during the block)
        wait_until(lambda: not client.exists(SCAN_MARK), 5, 0.01, "the discovery's scan mark expiring")
        outbox = SyncOutbox(sync_client(server.redis_url), _settings(server.redis_url))
        with nothing_reaches_redis(client):
            for name in names:
                with pytest.raises(InvalidMessageError):
                    move_ingress(outbox, name, consumer="probe", now=time.time())
        # Then none of them is an entity the bridge would deliver
        assert not set(found) & set(names)
    finally:
        for name in names:
            client.delete(f"bridge:{{{name}}}:in")


# --- sizes ------------------------------------------------------------------------------------------------


def _raw_exchange(
    server: Server, head: bytes, body_parts: list[bytes], pause: float = 0.0
) -> tuple[bytes, int]:
    """Send ``head`` then ``body_parts`` (``pause`` between them) on one socket; return what came back and
    how many parts were sent before the server answered (stops sending once an answer arrives)."""
    with socket.create_connection((server.host, server.port), timeout=15) as sock:
        sock.sendall(head)
        sent = 0
        sock.setblocking(False)
        received = b""
        for part in body_parts:
            with suppress(BlockingIOError):
                received += sock.recv(65536)
            if received:
                break
            try:
                sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            time.sleep(pause)
        sock.setblocking(True)
        sock.settimeout(15)
        while True:  # until the server closes the connection
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received += chunk
        return received, sent


def _status_and_error(raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, json.loads(body)["error"]


def _head(path: str, extra: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: probe\r\nx-api-key: {KEY_ALL}\r\n{extra}\r\n").encode()


def test_a_declared_oversized_body_is_refused_before_it_is_read(server: Server):
    # Only the head is sent: the answer cannot have waited for the body.
    with nothing_reaches_redis(server.client):
        head = _head(_V1, f"Content-Type: application/json\r\nContent-Length: {10 * MAX_REQUEST}\r\n")
        raw, _ = _raw_exchange(server, head, [])
    status, headers, error = _status_and_error(raw)
    assert (status, error["code"]) == (413, "request_too_large")
    assert headers["connection"] == "close"  # and the server closed it: _raw_exchange read to EOF


def test_a_chunked_body_is_cut_off_at_the_limit(server: Server):
    # No Content-Length: the limit is enforced while reading; just past it (the last chunk never sent)
    chunk = b"x" * 8192
    parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * (MAX_REQUEST // len(chunk) + 1)
    with nothing_reaches_redis(server.client):
        raw, _ = _raw_exchange(server, _head(_V1, "Transfer-Encoding: chunked\r\n"), parts)
    status, headers, error = _status_and_error(raw)
    assert (status, error["code"]) == (413, "request_too_large")
    assert headers["connection"] == "close"


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Big": "v" * 200_000},
        {f"X-P{i}": "v" * 100 for i in range(1000)},
    ],
    ids=["one huge header", "a thousand headers"],
)
def test_oversized_headers_are_refused_and_the_server_stays_up(server: Server, headers: dict[str, str]):
    with nothing_reaches_redis(server.client):
        try:
            status, _, body = request(server, "POST", _REST, b"x", {"x-api-key": KEY_ALL, **headers})
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
            status, body = 0, b""
    # uvicorn refuses what its parser will not hold (a plain 400 or a reset, before the app); what reaches
    # the app is refused with a code (the REST door's custom properties over Service Bus's 64 KB).
    if status != 0 and body.startswith(b"{"):
        assert error_of(status, body)["code"] == "headers_too_large"
    else:
        assert status in (0, 400, 431)
    assert request(server, "GET", "/healthz")[0] == 200


# --- slow and broken bodies -------------------------------------------------------------------------------


def test_a_trickled_body_gets_408_and_the_connection_is_closed(server: Server):
    # Given a client that announces 200 bytes and sends one every 0.2 s (40 s in all)
    head = _head(_V1, "Content-Type: application/json\r\nContent-Length: 200\r\n")
    with nothing_reaches_redis(server.client):
        raw, sent = _raw_exchange(server, head, [b" "] * 200, pause=0.2)
    # Then the server gives up long before the body is complete: 408, the connection closed
    status, headers, error = _status_and_error(raw)
    assert (status, error["code"]) == (408, "request_timeout")
    assert headers["connection"] == "close"
    assert sent < 200


def test_a_slow_client_does_not_hold_up_the_others(server: Server):
    # Given a slow client in the middle of its body
    with socket.create_connection((server.host, server.port), timeout=15) as slow:
        slow.sendall(_head(_V1, "Content-Type: application/json\r\nContent-Length: 100\r\n") + b'{"body"')
        # When another client sends a message meanwhile
        status, _, body = request(server, "POST", _V1, b'{"body": "meanwhile"}', AUTH)
        # Then it is served while the slow one still waits
        assert status == 202, body
        slow.settimeout(15)
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
    assert _status_and_error(answer)[2]["code"] == "request_timeout"


def test_a_client_that_hangs_up_mid_body_leaves_nothing_and_no_error(
    server: Server, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.ERROR)
    with nothing_reaches_redis(server.client):
        with socket.create_connection((server.host, server.port), timeout=15) as sock:
            sock.sendall(_head(_V1, "Content-Type: application/json\r\nContent-Length: 100\r\n") + b'{"bo')
            time.sleep(0.2)
        time.sleep(0.3)
    assert request(server, "GET", "/healthz")[0] == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# --- values no parser or encoder should be trusted with ---------------------------------------------------

_DEEP = b"[" * 20_000 + b"]" * 20_000  # far deeper than the JSON parser's recursion limit, within the size
VALUE_PROBES: list[tuple[str, str, str, bytes, dict[str, str], int, str]] = [
    ("lone surrogate body", "POST", _V1, b'{"body": "\\ud800"}', {}, 400, "invalid_utf8"),
    (
        "lone surrogate json body",
        "POST",
        _V1,
        b'{"body": ["\\udfff"], "body_encoding": "json"}',
        {},
        400,
        "invalid_utf8",
    ),
    (
        "lone surrogate message id",
        "POST",
        _V1,
        b'{"body": "x", "message_id": "\\ud800"}',
        {},
        400,
        "invalid_utf8",
    ),
    ("lone surrogate subject", "POST", _V1, b'{"body": "x", "subject": "a\\ud800"}', {}, 400, "invalid_utf8"),
    (
        "lone surrogate property name",
        "POST",
        _V1,
        b'{"body": "x", "application_properties": {"\\ud800": 1}}',
        {},
        400,
        "invalid_utf8",
    ),
    (
        "lone surrogate property value",
        "POST",
        _V1,
        b'{"body": "x", "application_properties": {"a": "\\udfff"}}',
        {},
        400,
        "invalid_utf8",
    ),
    (
        "lone surrogate in a batch",
        "POST",
        _V1 + ":batch",
        b'{"messages": [{"body": "x"}, {"body": "\\ud800"}]}',
        {},
        400,
        "invalid_utf8",
    ),
    ("json nested too deep", "POST", _V1, _DEEP, {}, 400, "invalid_json"),
    (
        "batch nested too deep",
        "POST",
        _V1 + ":batch",
        b'{"messages": ' + _DEEP + b"}",
        {},
        400,
        "invalid_json",
    ),
    (
        "ttl beyond any float",
        "POST",
        _V1,
        b'{"body": "x", "time_to_live": 1' + b"0" * 400 + b"}",
        {},
        422,
        "time_to_live_invalid",
    ),
    (
        "schedule before year 1 in UTC",
        "POST",
        _V1,
        b'{"body": "x", "scheduled_enqueue_time_utc": "0001-01-01T00:00:00+01:00"}',
        {},
        422,
        "scheduled_enqueue_time_invalid",
    ),
    (
        "schedule after 9999 in UTC",
        "POST",
        _V1,
        b'{"body": "x", "scheduled_enqueue_time_utc": "9999-12-31T23:59:59-01:00"}',
        {},
        422,
        "scheduled_enqueue_time_invalid",
    ),
    (
        "count not an ascii digit",
        "GET",
        "/v1/entities/orders/quarantine?count=%C2%B2",
        b"",
        {},
        422,
        "invalid_type",
    ),
    (
        "after not an entry id",
        "GET",
        "/v1/entities/orders/quarantine?after=%28",
        b"",
        {},
        422,
        "invalid_type",
    ),
    (
        "after beyond 64 bits",
        "GET",
        "/v1/entities/orders/deadletter?after=99999999999999999999",
        b"",
        {},
        422,
        "invalid_type",
    ),
    (
        "REST batch nested too deep",
        "POST",
        _REST,
        _DEEP,
        {"Content-Type": "application/vnd.microsoft.servicebus.json"},
        400,
        "invalid_json",
    ),
    (
        "REST batch surrogate body",
        "POST",
        _REST,
        b'[{"Body": "\\ud800"}]',
        {"Content-Type": "application/vnd.microsoft.servicebus.json"},
        400,
        "invalid_utf8",
    ),
    (
        "REST broker properties too deep",
        "POST",
        _REST,
        b"x",
        {"BrokerProperties": "[" * 5000 + "]" * 5000},
        400,
        "invalid_broker_properties",
    ),
    (
        "REST ttl beyond any float",
        "POST",
        _REST,
        b"x",
        {"BrokerProperties": '{"TimeToLive": 1' + "0" * 400 + "}"},
        400,
        "time_to_live_invalid",
    ),
    (
        "REST broker surrogate",
        "POST",
        _REST,
        b"x",
        {"BrokerProperties": '{"Label": "\\ud800"}'},
        400,
        "invalid_utf8",
    ),
    ("unknown path", "GET", "/nothing/here", b"", {}, 404, "not_found"),
    ("method a route lacks", "DELETE", _V1, b"", {}, 405, "method_not_allowed"),
    # a newline reaches the entity rules (it used to fall through the router to 404)
    (
        "newline in a listing's entity",
        "GET",
        "/v1/entities/a%0Ab/quarantine",
        b"",
        {},
        422,
        "entity_name_invalid",
    ),
    ("newline in a REST entity", "POST", "/a%0Ab/messages", b"x", {}, 400, "entity_name_invalid"),
]


@pytest.mark.parametrize(
    "name,method,path,body,headers,status,code", VALUE_PROBES, ids=[p[0] for p in VALUE_PROBES]
)
def test_values_that_break_parsers_are_refused_with_a_code(
    server: Server,
    name: str,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
):
    with nothing_reaches_redis(server.client):
        answer_status, _, answer = request(server, method, path, body or None, {**AUTH, **headers})
    error = error_of(answer_status, answer)
    assert (answer_status, error["code"]) == (status, code), error
