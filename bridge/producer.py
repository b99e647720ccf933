"""The Python door: ``Producer`` and ``AsyncProducer`` write straight to the outbox in Redis.

Same rules as the HTTP door (``bridge.core.validation``), same atomic script, no HTTP hop::

    from bridge import Producer

    with Producer("redis://127.0.0.1:6379/0") as producer:
        message_id = producer.send("orders", b'{"id": 1}', content_type="application/json",
                                   session_id="customer-7", application_properties={"kind": "new"})
        ids = producer.send_batch("orders", [b"a", {"body": b"b", "partition_key": "k"}])

``send`` returns the MessageId (assigned when not given) once Redis has accepted the write. Errors:
``InvalidMessageError`` (nothing stored), ``BackpressureError`` (retry after ``retry_after`` seconds),
``OutboxUnavailableError`` (Redis down; nothing acknowledged, so retry with the same ``message_id``), and its
subclass ``DurabilityNotReachedError`` when ``ingress.durability`` asked for more replicas than confirmed.

Tracing (``docs/tracing.md``): each message's creation context is a ``create`` span, child of the caller's
current OpenTelemetry context (the application's own tracer provider, if it set one up), or the current
context itself when nothing traces; a message given ``traceparent`` (and ``tracestate``) keeps that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from bridge.core.envelope import Envelope
from bridge.core.validation import build_envelope, check_batch, validate_entity
from bridge.errors import BridgeError, UnknownEntityError
from bridge.observability.tracing import DoorTrace, producer_trace
from bridge.outbox.opener import AsyncRedis, SyncRedis, open_async, open_sync
from bridge.outbox.store import AsyncOutbox, SyncOutbox
from bridge.outbox.writer import Ack, Group, OutboxWriter
from bridge.settings import Settings, load_settings

Message = bytes | str | Mapping[str, Any]


def new_message_id() -> str:
    """A random 128-bit MessageId as 32 hex digits (the form Service Bus itself assigns)."""
    return os.urandom(16).hex()


def _body(value: bytes | str) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError("body must be bytes or str")


def _prepare(
    writer: OutboxWriter,
    entity: str,
    messages: Iterable[Message],
    transactional: bool,
    now: float,
    *,
    trace: DoorTrace | None,
) -> Group:
    """Validate every message (raising with its index) and encode the batch as one atomic group."""
    validate_entity(entity)
    settings = writer.settings
    if settings.ingress.only_configured_entities and entity not in settings.entities:
        raise UnknownEntityError(f"entity {entity!r} is not configured")
    rules = writer.policy(entity).rules
    envelopes: list[Envelope] = []
    fresh: list[bool] = []
    empty: dict[str, Any] = {}
    for index, message in enumerate(messages):
        if type(message) is bytes:
            props, body = empty, message
        elif isinstance(message, Mapping):
            props = dict(message)
            body = _body(props.pop("body", b""))
        else:
            props, body = empty, _body(message)
        fresh.append(props.get("message_id") is None)
        if trace is not None and props.get("traceparent") is None:
            # A message that brings its own creation context keeps it and gets no create span.
            traceparent, tracestate = trace.context()
            props = {**props, "traceparent": traceparent, "tracestate": tracestate}
        envelopes.append(
            build_envelope(entity, body, props, rules=rules, now=now, new_id=new_message_id, index=index)
        )
    check_batch(envelopes, transactional=transactional, max_messages=settings.ingress.max_batch_messages)
    return writer.group(entity, envelopes, transactional=transactional, fresh=fresh, door="producer")


def _ids(result: list[Ack] | BridgeError) -> list[str]:
    if isinstance(result, BridgeError):
        raise result
    return [ack.message_id for ack in result]


def _traced(ids: list[str], result: list[Ack] | BridgeError, trace: DoorTrace | None) -> list[str]:
    if trace is not None and isinstance(result, list):
        trace.stored(ids, [ack.duplicate for ack in result])
    return ids


class Producer:
    """Blocking producer; one Redis connection pool, safe to share between threads."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        settings: Settings | None = None,
        client: SyncRedis | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        url = redis_url or self.settings.redis_url.get_secret_value()
        self._outbox = SyncOutbox(client if client is not None else open_sync(url), self.settings)

    @property
    def durability(self) -> str:
        """What every send that returns reached (``ingress.durability``: ``local`` or ``replicated``); a
        send that cannot reach it raises ``DurabilityNotReachedError``."""
        return self._outbox.writer.durability.mode

    def send(self, entity: str, body: bytes | str, **props: Any) -> str:
        """Store one message; return its MessageId. Properties as in the envelope (``docs/doors/http.md``)."""
        return self.send_batch(entity, [{"body": body, **props}])[0]

    def send_batch(
        self, entity: str, messages: Iterable[Message], *, transactional: bool = False
    ) -> list[str]:
        """Store all messages or none; ``transactional`` requires a single partition key."""
        trace = producer_trace(entity)
        try:
            group = _prepare(self._outbox.writer, entity, messages, transactional, time.time(), trace=trace)
            (result,) = self._outbox.write([group])
            return _traced(_ids(result), result, trace)
        except BaseException as exc:
            if trace is not None:
                trace.failed(exc)
            raise

    def close(self) -> None:
        """Release the connections."""
        self._outbox.client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncProducer:
    """asyncio producer; ``await producer.send(...)``."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        settings: Settings | None = None,
        client: AsyncRedis | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        url = redis_url or self.settings.redis_url.get_secret_value()
        self._outbox = AsyncOutbox(client if client is not None else open_async(url), self.settings)

    async def send(self, entity: str, body: bytes | str, **props: Any) -> str:
        """Store one message; return its MessageId."""
        return (await self.send_batch(entity, [{"body": body, **props}]))[0]

    async def send_batch(
        self, entity: str, messages: Iterable[Message], *, transactional: bool = False
    ) -> list[str]:
        """Store all messages or none; ``transactional`` requires a single partition key."""
        trace = producer_trace(entity)
        try:
            group = _prepare(self._outbox.writer, entity, messages, transactional, time.time(), trace=trace)
            (result,) = await self._outbox.write([group])
            return _traced(_ids(result), result, trace)
        except BaseException as exc:
            if trace is not None:
                trace.failed(exc)
            raise

    async def close(self) -> None:
        """Release the connections."""
        await self._outbox.client.aclose()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
