"""Helpers for the receiver tests: ``bridge receive`` processes, raw SDK sends, reading calls and counters."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import redis
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from bridge.core.receiving import ReceiverCounts
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import BridgeProcess
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.keys import ReceiverKeys
from bridge.settings import NamespaceSettings, Settings
from tests.integration.receiver_handlers import calls

HANDLERS = "tests.integration.receiver_handlers"
# Short long-polls so a stopped receiver exits quickly; the defaults are the contract, tested in unit tests.
FAST_RECEIVER = {"BRIDGE_RECEIVER__MAX_WAIT": "1", "BRIDGE_RETRY__ATTEMPT_DEADLINE": "4"}


def namespace_pair(base: Path) -> Iterator[tuple[LocalNamespace, LocalNamespace]]:
    """A primary and a secondary namespace under ``base`` (queues created on first use), for a module."""
    primary = LocalNamespace("primary", data_dir=base / "p", auto_create=True)
    secondary = LocalNamespace("secondary", data_dir=base / "s", auto_create=True)
    try:
        primary.start()
        secondary.start()
        yield primary, secondary
    finally:
        primary.close()
        secondary.close()


def namespace(ns: LocalNamespace) -> NamespaceSettings:
    """Settings naming one local namespace (with its certificate, for the administration client)."""
    return NamespaceSettings(
        connection_string=ns.connection_string,  # type: ignore[arg-type]
        certificate=ns.certificate,  # type: ignore[arg-type]
    )


def settings(
    redis_url: str, primary: LocalNamespace, secondary: LocalNamespace | None, **more: Any
) -> Settings:
    """In-process settings for a receiver on these namespaces."""
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace(primary),
            "secondary": None if secondary is None else namespace(secondary),
            **more,
        }
    )


def environment(
    redis_url: str, primary: LocalNamespace, secondary: LocalNamespace, **more: str
) -> dict[str, str]:
    """The ``BRIDGE_*`` environment of a ``bridge receive`` process on these namespaces."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env.update(
        {
            "BRIDGE_REDIS_URL": redis_url,
            "BRIDGE_PRIMARY__CONNECTION_STRING": primary.connection_string,
            "BRIDGE_PRIMARY__CERTIFICATE": primary.certificate,
            "BRIDGE_SECONDARY__CONNECTION_STRING": secondary.connection_string,
            "BRIDGE_SECONDARY__CERTIFICATE": secondary.certificate,
            "BRIDGE_LOG_JSON": "false",
            "PYTHONUNBUFFERED": "1",
            **FAST_RECEIVER,
        }
    )
    env.update(more)
    return env


def start_receiver(
    log_dir: Path, env: Mapping[str, str], entity: str, handler: str = "record", *args: str, name: str = ""
) -> BridgeProcess:
    """``bridge receive <entity> --handler tests.integration.receiver_handlers:<handler> <args>``."""
    label = name or f"receive-{entity}"
    return BridgeProcess(
        label, ["receive", entity, "--handler", f"{HANDLERS}:{handler}", *args], env, log_dir / f"{label}.log"
    )


def send(
    ns: LocalNamespace,
    queue: str,
    ids: Iterable[str],
    *,
    session: str | None = None,
    bodies: Mapping[str, str] | None = None,
    content_type: str | None = None,
) -> None:
    """Send one message per id to ``queue`` with the raw SDK (batches of 100, in order)."""
    ids = list(ids)
    with ServiceBusClient.from_connection_string(ns.connection_string) as client, \
            client.get_queue_sender(queue) as sender:  # fmt: skip
        for start in range(0, len(ids), 100):
            batch = sender.create_message_batch()
            for message_id in ids[start : start + 100]:
                body = (bodies or {}).get(message_id, message_id)
                batch.add_message(
                    ServiceBusMessage(
                        body, message_id=message_id, session_id=session, content_type=content_type
                    )
                )
            sender.send_messages(batch)


def counts(redis_url: str, entity: str) -> ReceiverCounts:
    """The entity's receiver counters."""
    client = redis.Redis.from_url(redis_url)
    try:
        return ReceiverCounterStore(client, ReceiverKeys(entity)).read()  # type: ignore[arg-type]
    finally:
        client.close()


def recorded(redis_url: str, entity: str | None = None) -> list[dict[str, Any]]:
    """Every handler call recorded (of ``entity`` only, if given)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return [c for c in calls(client) if entity is None or c["entity"] == entity]
    finally:
        client.close()


def per_id(entries: Iterable[dict[str, Any]]) -> Counter[str]:
    """How many handler calls each MessageId got."""
    return Counter(entry["id"] for entry in entries)


def log_of(proc: BridgeProcess) -> str:
    """The process's output (for assertion messages)."""
    return proc.log_tail(3000)


def jsonl(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines output."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
