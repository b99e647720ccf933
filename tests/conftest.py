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


# ---- local Service Bus namespaces -------------------------------------------------------------------
# ``shared_namespace`` is one emulator process for the whole session: tests that only send and receive use
# it with entity names of their own (``unique_name``). Tests that inject faults, kill or restart a
# namespace take ``namespace_factory`` and get processes of their own, stopped even when the test fails.

import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

from bridge.embedded.namespaces import LocalNamespace  # noqa: E402


@pytest.fixture(scope="session")
def shared_namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNamespace]:
    """A session-wide local namespace that auto-creates queues on first use."""
    ns = LocalNamespace("shared", data_dir=tmp_path_factory.mktemp("shared-ns"), auto_create=True)
    try:
        ns.start()
        yield ns
    finally:
        ns.close()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """An entity name no other test uses (readable: it starts with the test's name)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-").lower()
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace_factory(tmp_path: Path) -> Iterator[Callable[..., LocalNamespace]]:
    """Start private local namespaces: ``namespace_factory("primary", entities_file=..., ...)``."""
    started: list[LocalNamespace] = []

    def start(name: str = "primary", **options: object) -> LocalNamespace:
        options.setdefault("data_dir", tmp_path / f"ns-{name}-{len(started)}")
        ns = LocalNamespace(name, **options)  # type: ignore[arg-type]
        started.append(ns)
        return ns.start()

    try:
        yield start
    finally:
        for ns in started:
            ns.stop()


@pytest.fixture
def namespace_pair(namespace_factory: Callable[..., LocalNamespace]) -> tuple[LocalNamespace, LocalNamespace]:
    """A primary and a secondary namespace, each its own process (auto-creating queues)."""
    return (namespace_factory("primary", auto_create=True), namespace_factory("secondary", auto_create=True))
