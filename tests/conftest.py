"""Shared fixtures.

Redis: one private ``redis-server`` per test session (free port, own temporary data dir, AOF with
``appendfsync always``), never the shared server on 6379. Each test that asks for ``redis_url`` or
``redis_client`` gets it flushed first, so tests do not see each other's keys. A test that needs to kill or
restart Redis starts its own ``RedisServer`` instead of using the session one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from bridge.embedded.redis_server import RedisServer

# pytester runs inner pytest sessions, e.g. to prove fixtures clean up after a failing test.
pytest_plugins = ["pytester"]

SHARED_REDIS_PORT = 6379


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The session's private redis-server; stopped and its data dir removed even when tests fail."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of an empty database on the private server (restarted first if a test stopped it)."""
    # FLUSHALL is only ever sent to a server this session started; the guard keeps it that way.
    assert redis_server.port != SHARED_REDIS_PORT
    if not redis_server.running:
        redis_server.start()
    client = redis.Redis(port=redis_server.port, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client (bytes responses) on the clean private database; closed after the test."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        yield client
    finally:
        client.close()
