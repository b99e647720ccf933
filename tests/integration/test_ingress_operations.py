"""Running the ingress: the CLI, durability settings (WAIT, fsync expectations), secrets out of errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import redis

from bridge import Producer
from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.redis_server import RedisServer
from bridge.errors import ConfigurationError, OutboxUnavailableError
from bridge.http.app import create_app, is_loopback
from bridge.outbox import keys
from bridge.outbox.view import AsyncOutboxView
from bridge.redis.connection import async_client
from bridge.settings import Settings
from tests.integration.ingress_support import running_ingress


def _bridge(*args: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    return {**env, "BRIDGE_REDIS_URL": redis_url, **extra}


def test_serve_refuses_a_public_address_without_api_keys(redis_url: str):
    result = _bridge("serve", "--host", "0.0.0.0", "--port", str(free_port()), env=_env(redis_url))
    assert result.returncode == 2
    assert "api_keys" in result.stderr


def test_loopback_detection():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "::", "example.com"))


def test_serve_on_a_public_address_with_keys_requires_them(redis_url: str):
    port = free_port()
    keys_json = json.dumps([{"name": "ops", "sha256": hashlib.sha256(b"k").hexdigest()}])
    env = _env(redis_url, BRIDGE_INGRESS__API_KEYS=keys_json)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli.main", "serve", "--host", "0.0.0.0", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert wait_listening("127.0.0.1", port, 20)
        url = f"http://127.0.0.1:{port}/v1/entities/orders/messages"
        assert httpx.post(url, json={"body": "x"}).status_code == 401
        assert httpx.post(url, json={"body": "x"}, headers={"x-api-key": "k"}).status_code == 202
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_send_and_status_commands(redis_url: str, redis_client: redis.Redis):
    env = _env(redis_url)
    sent = _bridge("send", "orders", "hello", "--session-id", "s", "--properties", '{"a": 1}', env=env)
    assert sent.returncode == 0, sent.stderr
    message_id = sent.stdout.strip()
    assert len(message_id) == 32
    refused = _bridge("send", "orders", "x", "--time-to-live", "-1", env=env)
    assert refused.returncode == 1
    assert "time_to_live_not_positive" in refused.stderr
    redis_client.xadd(keys.quarantine("orders"), {"code": "unknown_field", "reason": "r"})
    status = _bridge("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    (orders,) = [e for e in json.loads(status.stdout)["entities"] if e["name"] == "orders"]
    assert orders["outbox_depth"] == 1
    assert orders["quarantine_depth"] == 1
    listed = _bridge("status", "--quarantine", "orders", env=env)
    assert json.loads(listed.stdout)[0]["code"] == "unknown_field"


def test_wait_for_replicas(tmp_path):
    with (
        RedisServer(data_dir=tmp_path / "p") as primary,
        RedisServer(data_dir=tmp_path / "r", extra_args=("--replicaof", "127.0.0.1", "0")) as replica,
    ):
        replica_client = redis.Redis(port=replica.port)
        # No 5 s diskless-sync delay, and the first full sync must be over: else WAIT may time out first.
        with redis.Redis(port=primary.port) as primary_client:
            primary_client.config_set("repl-diskless-sync-delay", 0)
        replica_client.replicaof("127.0.0.1", primary.port)
        deadline = time.monotonic() + 30
        while replica_client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica never finished its first sync"
            time.sleep(0.05)
        one = Settings(redis_url=primary.url, ingress={"wait_replicas": 1, "wait_timeout": 3})
        with Producer(settings=one) as producer:
            message_id = producer.send("orders", "replicated")
        # acknowledged only once the replica had it
        assert replica_client.xrange(keys.outbox("orders", 0))[0][1][b"id"] == message_id.encode()
        two = Settings(redis_url=primary.url, ingress={"wait_replicas": 2, "wait_timeout": 0.2})
        with Producer(settings=two) as producer, pytest.raises(OutboxUnavailableError) as caught:
            producer.send("orders", "not enough replicas", message_id="m2")
        assert "1 of 2 replicas" in str(caught.value)
        replica_client.close()


def test_fsync_expectation_is_checked_at_start_up(tmp_path):
    with RedisServer(data_dir=tmp_path / "r", appendfsync="everysec") as server:

        async def check(policy: str) -> None:
            client = async_client(server.url)
            try:
                settings = Settings(redis_url=server.url, ingress={"require_appendfsync": policy})
                await AsyncOutboxView(client, settings).check_start_up()
            finally:
                await client.aclose()

        asyncio.run(check("everysec"))
        with pytest.raises(ConfigurationError) as caught:
            asyncio.run(check("always"))
        assert "appendfsync=everysec" in str(caught.value)


def test_an_app_that_must_authenticate_needs_keys(redis_url: str):
    with pytest.raises(ConfigurationError):
        create_app(Settings(redis_url=redis_url), require_auth=True)


def test_redis_password_never_appears_in_errors():
    secret = "s3cret-pa55word"
    url = f"redis://:{secret}@127.0.0.1:{free_port()}/0"
    settings = Settings(redis_url=url)
    with Producer(settings=settings) as producer, pytest.raises(OutboxUnavailableError) as caught:
        producer.send("orders", "x")
    assert secret not in str(caught.value)
    assert caught.value.__suppress_context__  # the driver's exception (which may hold the URL) is not chained
    with running_ingress(settings) as base:
        answer = httpx.post(f"{base}/v1/entities/orders/messages", json={"body": "x"}, timeout=15)
        assert answer.status_code == 503
        assert secret not in answer.text
