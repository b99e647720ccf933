"""Helpers for the ingress tests: a real uvicorn server in a thread, and Redis snapshots."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import uvicorn

from bridge.embedded.ports import free_port
from bridge.http.app import create_app
from bridge.outbox.reader import OutboxEntry, OutboxReader
from bridge.settings import Settings


@contextmanager
def running_ingress(settings: Settings, *, require_auth: bool = False) -> Iterator[str]:
    """Serve the real app with uvicorn on a free loopback port; yield its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, require_auth=require_auth),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("ingress server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def snapshot(client: redis.Redis) -> dict[Any, Any]:
    """Every key's serialized value (DUMP): equal snapshots mean Redis is unchanged."""
    return {key: client.dump(key) for key in sorted(client.keys("*"))}


def read_all(reader: OutboxReader, entity: str, consumer: str, count: int = 100) -> list[OutboxEntry]:
    """New entries of every shard of ``entity`` for ``consumer`` (what the drainers read, shard by shard)."""
    return [
        entry
        for shard in range(reader.shards(entity))
        for entry in reader.read_shard(entity, shard, consumer, count=count)
    ]
