"""One trace from the door to the handler, with the real OpenTelemetry SDK and its in-memory exporter.

Real parts in this process: the HTTP app under uvicorn, the ``Producer``, a drain service, the ``Receiver``,
the session's private Redis and the shared local namespace through the unmodified azure-servicebus SDK; the
SDK's ``TracerProvider`` with a synchronous in-memory exporter is installed with ``tracing.use_provider``.
The multi-process version (real processes exporting OTLP/HTTP) is ``test_tracing_processes.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from bridge.core.journal import EventKind, JournalEvent
from bridge.core.received import ReceivedMessage
from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.journal import keys as journal_keys
from bridge.observability import tracing
from bridge.outbox.reader import OutboxReader
from bridge.producer import Producer
from bridge.receiving.receiver import AsyncReceiver, Receiver
from bridge.settings import Settings
from tests.integration.ingress_support import read_all, running_ingress
from tests.integration.paired_support import namespace_settings
from tests.integration.tracing_support import spans
from tests.integration.worker_support import receive_all

__all__ = ["spans"]

pytestmark = pytest.mark.timeout(120)

INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
"""The traceparent the application sends with its HTTP request (W3C Trace Context's example)."""
INCOMING_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _settings(redis_url: str, ns: LocalNamespace, entity: str) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
            "receiver": {"max_wait": 0.5},
        }
    )


def _journal(redis_url: str, entity: str) -> list[JournalEvent]:
    client = redis.Redis.from_url(redis_url)
    try:
        entries = client.xrange(journal_keys.journal(entity))
    finally:
        client.close()
    return [event for _, fields in entries for event in JournalEvent.decode_entry(fields)]


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def _named(exported: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in exported if span.name == name]


class _Handled:
    """A handler that records each message and the span it ran in."""

    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []
        self.contexts: list[Any] = []

    def __call__(self, message: ReceivedMessage) -> None:
        self.contexts.append(trace.get_current_span().get_span_context())
        self.messages.append(message)


def _deliver(settings: Settings, entity: str, expected: int, send: Any) -> _Handled:
    """Run ``send()``, a drain service and a ``Receiver`` until ``expected`` messages were handled."""
    handled = _Handled()
    ctx = DeliveryContext.build(settings)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    receiver = Receiver(entity, handled, settings=settings)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        send()
        wait_until(lambda: len(handled.messages) >= expected, 40, what="messages handled")
    finally:
        receiver.stop()
        thread.join(20)
        service.stop()
        ctx.close()
    return handled


def test_an_http_request_is_one_trace_from_the_door_to_the_handler(
    spans: InMemorySpanExporter, redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    ids: list[str] = []

    def post() -> None:
        with running_ingress(settings) as base:
            answer = httpx.post(
                f"{base}/v1/entities/{entity}/messages",
                json={"body": "hello"},
                headers={"traceparent": INCOMING, "tracestate": "app=1"},
            )
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["message_id"])

    # Given a request that carries the application's trace context
    handled = _deliver(settings, entity, 1, post)
    exported = spans.get_finished_spans()
    (create,) = _named(exported, f"create {entity}")
    (send,) = _named(exported, f"send {entity}")
    (process,) = _named(exported, f"process {entity}")
    assert create.context is not None and send.context is not None and process.context is not None
    # Then the door's create span continues the request's trace and is the message's creation context
    assert _hex(create.context.trace_id, 32) == INCOMING_TRACE
    assert create.parent is not None and _hex(create.parent.span_id, 16) == INCOMING[36:52]
    assert create.kind is SpanKind.PRODUCER
    assert dict(create.attributes or {}) == {
        "messaging.system": "servicebus",
        "messaging.operation.name": "create",
        "messaging.operation.type": "create",
        "messaging.destination.name": entity,
        "bridge.door": "http",
        "messaging.message.id": ids[0],
    }
    # And the drainer's send span is its child, linked to it, with the namespace's role and the attempt
    assert send.parent is not None and send.parent.span_id == create.context.span_id
    assert [link.context.span_id for link in send.links] == [create.context.span_id]
    assert send.kind is SpanKind.CLIENT
    attributes = dict(send.attributes or {})
    assert attributes["messaging.system"] == "servicebus"
    assert attributes["messaging.operation.name"] == "send"
    assert attributes["messaging.operation.type"] == "send"
    assert attributes["messaging.destination.name"] == entity
    assert attributes["messaging.message.id"] == ids[0]
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["bridge.namespace.role"] == "primary"
    assert attributes["bridge.replication.mode"] == "none"
    assert attributes["bridge.attempt"] == 1
    assert attributes["bridge.failover"] is False
    assert "error.type" not in attributes
    # And the handler ran inside the receiver's process span, child of the creation context and linked to it
    assert process.parent is not None and process.parent.span_id == create.context.span_id
    assert [link.context.span_id for link in process.links] == [create.context.span_id]
    assert process.kind is SpanKind.CONSUMER
    assert dict(process.attributes or {})["messaging.message.id"] == ids[0]
    assert handled.contexts[0].span_id == process.context.span_id
    # And all three are one trace: the application's
    assert {_hex(s.context.trace_id, 32) for s in (create, send, process) if s.context} == {INCOMING_TRACE}
    # And the message carries the creation context as the SDK writes it
    properties = handled.messages[0].application_properties
    creation = f"00-{INCOMING_TRACE}-{_hex(create.context.span_id, 16)}-01"
    assert properties["traceparent"] == properties["Diagnostic-Id"] == creation
    assert properties["tracestate"] == "app=1"
    # And the journal's accepted event carries the trace id, for the ledger's tables
    (accepted,) = [e for e in _journal(redis_url, entity) if e.kind == EventKind.ACCEPTED]
    assert (accepted.message_id, accepted.trace_id) == (ids[0], INCOMING_TRACE)


def test_a_producer_batch_gets_one_create_span_per_message_and_one_linked_send(
    spans: InMemorySpanExporter, redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    ids: list[str] = []

    def produce() -> None:
        with Producer(settings=settings) as producer:
            ids.extend(producer.send_batch(entity, [b"a", b"b", b"c"]))

    # Given three messages sent by the Producer with no current span (each create span is a root)
    _deliver(settings, entity, 3, produce)
    exported = spans.get_finished_spans()
    creates = _named(exported, f"create {entity}")
    processes = _named(exported, f"process {entity}")
    sends = _named(exported, f"send {entity}")
    # Then each message has a trace of its own, from its create span to its process span
    assert [dict(s.attributes or {})["messaging.message.id"] for s in creates] == ids
    # And the journal's batch entry has one trace id per message
    journaled = {
        e.message_id: e.trace_id for e in _journal(redis_url, entity) if e.kind == EventKind.ACCEPTED
    }
    assert journaled == {s.attributes["messaging.message.id"]: _hex(s.context.trace_id, 32) for s in creates}  # type: ignore[index,union-attr]
    by_trace = {s.context.trace_id: s for s in creates if s.context}
    assert len(by_trace) == 3
    for span in processes:
        assert span.context is not None and span.parent is not None
        assert by_trace[span.context.trace_id].context.span_id == span.parent.span_id  # type: ignore[union-attr]
    # And the batch's send span links to all three creation contexts, in a trace of its own
    linked = {link.context.span_id for send in sends for link in send.links}
    assert linked == {s.context.span_id for s in creates if s.context}
    assert all(send.parent is None for send in sends if len(send.links) > 1)


def test_a_plain_sdk_consumer_sees_the_creation_context_and_nothing_is_traced_when_off(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    assert not tracing.enabled()
    # Given tracing off in this process, a message sent by the application inside its own span context
    parent = trace.NonRecordingSpan(
        trace.SpanContext(int(INCOMING_TRACE, 16), 0x00F067AA0BA902B7, is_remote=True, trace_flags=1)
    )
    with trace.use_span(parent), Producer(settings=settings) as producer:
        (message_id,) = producer.send_batch(entity, [b"x"])
    ctx = DeliveryContext.build(settings)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        # When a consumer that is not the bridge receives it with the plain SDK
        (got,) = receive_all(shared_namespace, entity, 1)
    finally:
        service.stop()
        ctx.close()
    # Then it reads the application's context, passed through unchanged, as the SDK itself would write it
    assert got.message_id == message_id
    properties = got.application_properties or {}
    assert properties[b"traceparent"] == properties[b"Diagnostic-Id"] == INCOMING.encode()


def test_without_tracing_both_http_doors_pass_the_request_context_on_and_drop_a_malformed_one(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    assert not tracing.enabled()
    # Given requests to the /v1 door and the REST door, with a valid and with a malformed traceparent
    with running_ingress(settings) as base:
        for path, headers in (
            (f"/v1/entities/{entity}/messages", {"traceparent": INCOMING, "tracestate": "app=1"}),
            (f"/{entity}/messages", {"traceparent": INCOMING, "tracestate": "app=1"}),
            (f"/v1/entities/{entity}/messages", {"traceparent": "00-nothex-01", "tracestate": "app=1"}),
        ):
            body: dict[str, Any] = {"json": {"body": "x"}} if path.startswith("/v1") else {"content": b"x"}
            answer = httpx.post(f"{base}{path}", headers=headers, **body)
            assert answer.status_code in (201, 202), answer.text
    reader = OutboxReader(redis.Redis.from_url(redis_url), settings)
    reader.ensure_groups(entity)
    stored = [entry.envelope for entry in read_all(reader, entity, "test")]
    # Then the outbox holds the request's context unchanged, and none for the malformed one
    contexts = [(e.traceparent, e.tracestate) for e in stored if e is not None]
    assert sorted(contexts, key=str) == sorted(
        [(INCOMING, "app=1"), (INCOMING, "app=1"), (None, None)], key=str
    )
    # And the REST door did not make them custom properties
    assert all("traceparent" not in e.application_properties for e in stored if e is not None)


def test_an_async_handler_runs_inside_its_process_span(
    spans: InMemorySpanExporter, redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    seen: list[int] = []

    async def handler(message: ReceivedMessage) -> None:
        seen.append(trace.get_current_span().get_span_context().span_id)

    async def run() -> None:
        receiver = AsyncReceiver(entity, handler, settings=settings)
        task = asyncio.ensure_future(receiver.run())
        deadline = time.monotonic() + 40
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        receiver.stop()
        await task

    # Given a message sent with a creation context, and an asyncio handler
    with Producer(settings=settings) as producer:
        producer.send_batch(entity, [{"body": b"x", "traceparent": INCOMING}])
    ctx = DeliveryContext.build(settings)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        asyncio.run(run())
    finally:
        service.stop()
        ctx.close()
    # Then the coroutine ran with the receiver's process span current, in the message's trace
    (process,) = _named(spans.get_finished_spans(), f"process {entity}")
    assert process.context is not None and seen == [process.context.span_id]
    assert _hex(process.context.trace_id, 32) == INCOMING_TRACE
    # And the message's own context was kept: no create span for it
    assert not _named(spans.get_finished_spans(), f"create {entity}")


def test_a_refused_batch_ends_its_create_spans_as_failed_and_stores_nothing(
    spans: InMemorySpanExporter, redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    # Given a transactional batch whose messages name two partition keys (built, then refused as a whole)
    batch = {"messages": [{"body": "a", "partition_key": "k1"}, {"body": "b", "partition_key": "k2"}]}
    with running_ingress(settings) as base:
        answer = httpx.post(
            f"{base}/v1/entities/{entity}/messages:batch?transactional=true",
            json=batch,
            headers={"traceparent": INCOMING},
        )
    # Then it is refused, nothing reached the outbox, and both create spans were ended as failed
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "transaction_partition_keys"
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys(f"bridge:{{{entity}}}:*") == []
    finally:
        client.close()
    created = _named(list(spans.get_finished_spans()), f"create {entity}")
    assert len(created) == 2
    for span in created:
        assert span.context.trace_id == int(INCOMING_TRACE, 16)
        assert span.attributes is not None and span.attributes["error.type"] == "InvalidMessageError"
        assert span.status.status_code.name == "ERROR"
