"""The receiver's spans, after the OpenTelemetry messaging conventions (``docs/tracing.md``):

- ``receive <entity>`` (CLIENT), one per receive call that brought messages or failed, linked to each
  received message's creation context, with ``messaging.batch.message_count``. An empty long poll has no
  span: an idle receiver would otherwise export one every ``receiver.max_wait`` per namespace, saying
  nothing. Made once the call returned (with the call's start as its start), so its links are known when
  the span starts and a sampler sees them.
- ``process <entity>`` (CONSUMER) around each handler call, child of the message's creation context and
  linked to it; the handler's own spans are its children.
- ``complete``/``abandon``/``dead_letter <entity>`` (CLIENT, operation type ``settle``), one per
  settlement, with ``messaging.servicebus.disposition_status``; child of the message's creation context
  and linked to it, like ``process``, so a message's trace ends with what became of it.

``receive`` and the settlements name the entity the call went to (a backlog queue when the receiver drains
one), ``process`` the entity the message is for. Callers test ``observing()`` or
``bridge.observability.tracing.enabled()`` first: with tracing and metrics off that is all they cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind

from bridge.core.trace_context import from_properties
from bridge.observability import messaging_metrics, tracing
from bridge.observability.tracing import SYSTEM, error_type, mark_failed, parent_context, span_context

Attributes = dict[str, str | int | bool]


class Received(Protocol):
    """One received copy as the spans read it (``bridge.servicebus.receiving.Delivery``)."""

    @property
    def message_id(self) -> str | None:
        """The copy's MessageId."""

    @property
    def delivery_count(self) -> int:
        """Deliveries of the message before this one."""

    def trace_context(self) -> tuple[str | None, str | None]:
        """The creation context the copy carries."""


class Source(Protocol):
    """Where copies are received and settled (``bridge.servicebus.receiving.EntityLink``)."""

    @property
    def role(self) -> str:
        """``primary`` or ``secondary``."""

    @property
    def entity(self) -> str:
        """The queue or topic received from."""

    @property
    def subscription(self) -> str | None:
        """The topic's subscription, if any."""

    @property
    def server_address(self) -> str:
        """The namespace's host."""


D = TypeVar("D", bound=Received)


def observing() -> bool:
    """Whether receive calls have anything to record (a span or the consumed-messages count)."""
    return tracing.enabled() or messaging_metrics.enabled()


def _attributes(source: Source, operation: str, kind: str, destination: str) -> Attributes:
    attributes: Attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
        "messaging.destination.name": destination,
        "server.address": source.server_address,
        "bridge.namespace.role": source.role,
    }
    if source.subscription:
        attributes["messaging.destination.subscription.name"] = source.subscription
    return attributes


# ---- receive -----------------------------------------------------------------------------------------------
def receive(source: Source, call: Callable[[], list[D]]) -> list[D]:
    """``call()``, one receive from ``source``: a ``receive`` span when tracing and something came (or the
    call failed), and the messages counted as consumed when the metrics are on."""
    started = time.time_ns()
    try:
        received = call()
    except BaseException as exc:
        _receive_span(source, started, (), exc)
        raise
    if received:
        _receive_span(source, started, received, None)
        messaging_metrics.record_consumed(
            source.entity, source.subscription, source.server_address, len(received)
        )
    return received


def _receive_span(source: Source, started: int, received: Sequence[D], error: BaseException | None) -> None:
    tracer = tracing.tracer()
    if tracer is None:
        return
    attributes = _attributes(source, "receive", "receive", source.entity)
    attributes["messaging.batch.message_count"] = len(received)
    links = [Link(linked) for linked in (span_context(*copy.trace_context()) for copy in received) if linked]
    span = tracer.start_span(
        f"receive {source.entity}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        links=links,
        start_time=started,
    )
    if error is not None:
        mark_failed(span, error_type(error))
    span.end()


# ---- process -----------------------------------------------------------------------------------------------
def process(
    entity: str,
    message: Any,
    handler: Callable[[Any], object],
    attributes: Mapping[str, str | int | bool],
) -> None:
    """Run ``handler(message)`` inside a ``process <entity>`` span whose parent is the message's creation
    context (and linked to it); a handler that raises ends it with ``error.type`` and raises on."""
    tracer = tracing.tracer()
    if tracer is None:
        handler(message)
        return
    created = span_context(*from_properties(message.application_properties))
    attrs: Attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": entity,
        **attributes,
    }
    if message.message_id is not None:
        attrs["messaging.message.id"] = message.message_id
    if message.delivery_count:
        attrs["messaging.servicebus.message.delivery_count"] = message.delivery_count
    span = tracer.start_span(
        f"process {entity}",
        context=parent_context(created),
        kind=SpanKind.CONSUMER,
        attributes=attrs,
        links=_links(created),
    )
    with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            handler(message)
        except BaseException as exc:
            mark_failed(span, exc)
            raise


# ---- settle ------------------------------------------------------------------------------------------------
def settle(source: Source, copy: Received, operation: str, call: Callable[[], object]) -> None:
    """``call()``, which settles ``copy`` on ``source`` (``operation``: ``complete``, ``abandon`` or
    ``dead_letter``), inside its settlement span when tracing; a failure ends it with ``error.type``."""
    tracer = tracing.tracer()
    if tracer is None:
        call()
        return
    created = span_context(*copy.trace_context())
    attributes = _attributes(source, operation, "settle", source.entity)
    attributes["messaging.servicebus.disposition_status"] = operation
    if copy.message_id is not None:
        attributes["messaging.message.id"] = copy.message_id
    if copy.delivery_count:
        attributes["messaging.servicebus.message.delivery_count"] = copy.delivery_count
    span = tracer.start_span(
        f"{operation} {source.entity}",
        context=parent_context(created),
        kind=SpanKind.CLIENT,
        attributes=attributes,
        links=_links(created),
    )
    try:
        call()
    except BaseException as exc:
        mark_failed(span, error_type(exc))
        raise
    finally:
        span.end()


def _links(created: SpanContext | None) -> list[Link] | None:
    return [Link(created)] if created is not None else None
