"""The send side's spans: ``send <path>`` per batched send of a drainer, ``syphon <entity>`` per batch the
syphon moves (``docs/tracing.md``).

Each is a CLIENT span linked to every message's creation context; its parent is that context when all the
batch's messages share one trace (a single message always does), else it starts a trace of its own. A
failed send ends with ``error.type``, the bridge's error class (``outage``, ``transient``, ...). The syphon's
sends are counted in the messaging metrics here too (the drainer counts its own,
``bridge.delivery.shard_sending``). Callers test ``bridge.observability.tracing.enabled()`` first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

from opentelemetry.trace import Link, Span, SpanContext, SpanKind

from bridge.core.outcomes import Outcome
from bridge.observability import messaging_metrics, tracing
from bridge.observability.tracing import (
    SYSTEM,
    error_type,
    mark_failed,
    message_contexts,
    parent_context,
    span_context,
)


class Sent(Protocol):
    """What a batched send answers (``bridge.servicebus.sending.SendResult``)."""

    @property
    def accepted(self) -> Sequence[int]:
        """Positions the namespace accepted."""

    @property
    def failed(self) -> Mapping[int, BaseException]:
        """Positions that failed, with their error."""


R = TypeVar("R", bound=Sent)
SendSpan: TypeAlias = Span
"""A started ``send``/``syphon`` span, as its callers name it."""


def start_send(
    operation: str,
    destination: str,
    contexts: Sequence[tuple[str | None, str | None]],
    message_ids: Sequence[str | None],
    attributes: Mapping[str, str | int | bool],
) -> SendSpan | None:
    """A ``send``/``syphon`` span over one batch, linked to each message's creation context."""
    tracer = tracing.tracer()
    if tracer is None:
        return None
    links: list[Link] = []
    trace_ids: set[int] = set()
    first: SpanContext | None = None
    for traceparent, tracestate in contexts:
        linked = span_context(traceparent, tracestate)
        if linked is not None:
            first = first or linked
            trace_ids.add(linked.trace_id)
            links.append(Link(linked))
    attrs: dict[str, str | int | bool] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": "send",
        "messaging.destination.name": destination,
        **attributes,
    }
    if len(message_ids) == 1 and message_ids[0] is not None:
        attrs["messaging.message.id"] = message_ids[0]
    elif len(message_ids) > 1:
        attrs["messaging.batch.message_count"] = len(message_ids)
    parent = first if len(trace_ids) == 1 else None
    return tracer.start_span(
        f"{operation} {destination}",
        context=parent_context(parent),
        kind=SpanKind.CLIENT,
        attributes=attrs,
        links=links,
    )


def end_send(span: SendSpan | None, accepted: int, error_type: str | None) -> None:
    """End a send span: ``error.type`` when some message was not accepted."""
    if span is None:
        return
    span.set_attribute("bridge.accepted", accepted)
    if error_type is not None:
        mark_failed(span, error_type)
    span.end()


def syphon_send(
    send: Callable[[Any, str, Sequence[Any]], R],
    primary: Any,
    queue: str,
    destination: str,
    messages: Sequence[Any],
    *,
    message_ids: Sequence[str | None],
) -> R:
    """``send("primary", destination, messages)`` inside a ``syphon <destination>`` span when tracing, and
    counted in the messaging metrics (operation ``syphon``) when they are on. ``message_ids`` are the
    messages' MessageIds, for the span's links."""
    traced = tracing.enabled()
    if not traced and not messaging_metrics.enabled():
        return send("primary", destination, messages)
    address = primary.endpoint_host.rsplit(":", 1)[0] if primary is not None else None
    span = _syphon_span(queue, destination, messages, message_ids, address) if traced else None
    started = time.perf_counter()
    try:
        result = send("primary", destination, messages)
    except BaseException as exc:
        raised = error_type(exc)
        end_send(span, 0, raised)
        messaging_metrics.record_send(
            "syphon", destination, address, accepted=0, refused=len(messages), error_type=raised,
            seconds=time.perf_counter() - started,
        )  # fmt: skip
        raise
    elapsed = time.perf_counter() - started
    kind = failure_type(result.failed)
    end_send(span, len(result.accepted), kind)
    messaging_metrics.record_send(
        "syphon", destination, address, accepted=len(result.accepted), refused=len(result.failed),
        error_type=kind, seconds=elapsed,
    )  # fmt: skip
    return result


def _syphon_span(
    queue: str,
    destination: str,
    messages: Sequence[Any],
    message_ids: Sequence[str | None],
    address: str | None,
) -> SendSpan | None:
    attributes: dict[str, str | int | bool] = {
        "bridge.namespace.role": "primary",
        "bridge.replication.mode": "paired",
        "bridge.backlog_queue": queue,
    }
    if address is not None:
        attributes["server.address"] = address
    return start_send(
        "syphon",
        destination,
        message_contexts([m.application_properties for m in messages]),
        message_ids,
        attributes,
    )


def failure_type(failed: Mapping[int, BaseException]) -> str | None:
    """``error.type`` of a batch send: the error class (``bridge.core.error_classes``) of a failure."""
    if not failed:
        return None
    return error_type(next(iter(failed.values())))


def outcome_type(outcomes: Sequence[Outcome]) -> str | None:
    """``error.type`` of a drainer's send: the effective error class of its first failure (None: all ok)."""
    failure = next((outcome for outcome in outcomes if not outcome.ok), None)
    if failure is None:
        return None
    return failure.error_class.value if failure.error_class is not None else "_OTHER"
