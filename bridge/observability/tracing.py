"""OpenTelemetry tracing: one trace per message from the door to the handler (``docs/tracing.md``).

Off unless the standard environment asks for it: ``configure`` (called by every process entry point) sets
up the SDK with the OTLP/HTTP exporter only when ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` is set and ``OTEL_SDK_DISABLED`` is not
``true``; the SDK itself reads the rest (``OTEL_TRACES_SAMPLER``/``_ARG``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_BSP_*``). When off, no tracer provider
is set up and callers test ``enabled()`` (one global read) before anything else; the doors then only pass an
incoming ``traceparent`` through to the message, as W3C Trace Context asks of a component that does not
trace.

Spans follow the OpenTelemetry messaging conventions for Service Bus (``messaging.system = "servicebus"``,
names ``"{operation} {destination}"``; ``docs/references.md``):

- ``create <entity>`` (PRODUCER), one per message at the HTTP doors and the ``Producer``, child of the
  request's or the caller's context; its context is the message's *creation context*, stored with the
  outbox entry. A message that brings its own context (the Redis door's ``traceparent`` field, a
  ``Producer`` message with ``traceparent``) keeps it and gets no create span, as the conventions say.
- the send side's spans (``send``, ``syphon``) are in ``send_spans``, the receiver's (``receive``,
  ``process``, ``complete``/``abandon``/``dead_letter``) in ``receiver_spans``, the messaging metrics in
  ``messaging_metrics`` (all three in ``bridge.observability``).
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags, Tracer
from opentelemetry.trace.span import TraceState
from opentelemetry.trace.status import Status, StatusCode

from bridge.core.error_classes import classify
from bridge.core.trace_context import from_properties, incoming
from bridge.errors import NamespaceError

log = logging.getLogger(__name__)

SCOPE = "servicebus-bridge"
SYSTEM = "servicebus"


class _State:
    tracer: Tracer | None = None
    provider: Any = None
    app_tracer: Tracer | None = None


def tracer() -> Tracer | None:
    """The bridge's tracer, None when this process does not trace."""
    return _State.tracer


def enabled() -> bool:
    """This process traces (``configure`` found an exporter, or a test installed a provider)."""
    return _State.tracer is not None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` environment asks for traces (off by default, unlike the SDK's own default)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Set up the SDK for this process when the environment asks for it; True when it traces.

    ``service_name`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` wins). Exporters by
    ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default, OTLP/HTTP) and ``console``.
    """
    env = os.environ if environ is None else environ
    if _State.tracer is not None or not wanted(env):
        return _State.tracer is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in (part.strip() for part in env.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")):
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        elif name == "console":
            exporter = ConsoleSpanExporter()
        else:
            log.warning("OTEL_TRACES_EXPORTER %r is not supported here (otlp, console): ignored", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    use_provider(provider)
    atexit.register(provider.shutdown)
    return True


def use_provider(provider: Any) -> None:
    """Trace with ``provider`` (an SDK ``TracerProvider``; tests pass one with an in-memory exporter), or
    stop tracing with None."""
    _State.provider = provider
    _State.tracer = provider.get_tracer(SCOPE) if provider is not None else None


def flush() -> None:
    """Export what this process's spans buffer now (a Celery pool process exits without ``atexit``)."""
    if _State.provider is not None:
        _State.provider.force_flush()


def _application_tracer() -> Tracer | None:
    """The tracer of a provider the application set up itself (the ``Producer`` runs in its process)."""
    if _State.app_tracer is None and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _State.app_tracer = trace.get_tracer(SCOPE)
    return _State.app_tracer


# ---- contexts as text ----------------------------------------------------------------------------------
def span_context(traceparent: str | None, tracestate: str | None = None) -> SpanContext | None:
    """A remote ``SpanContext`` from valid W3C text (``bridge.core.trace_context`` checked it)."""
    if traceparent is None:
        return None
    state = TraceState.from_header([tracestate]) if tracestate else None
    return SpanContext(
        trace_id=int(traceparent[3:35], 16),
        span_id=int(traceparent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(traceparent[53:55], 16)),
        trace_state=state,
    )


def as_text(context: SpanContext) -> tuple[str | None, str | None]:
    """``traceparent`` and ``tracestate`` of ``context`` (None, None when it is invalid)."""
    if not context.is_valid:
        return None, None
    parent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    state = context.trace_state.to_header() if context.trace_state else None
    return parent, state or None


def parent_context(context: SpanContext | None) -> Context:
    """A context whose span is ``context`` (remote), else an empty one: a new span's parent."""
    return trace.set_span_in_context(NonRecordingSpan(context)) if context is not None else Context()


def mark_failed(span: Span, error: BaseException | str) -> None:
    """``error.type`` (an exception's class name, or the text given) and an ERROR status on ``span``."""
    kind = error if isinstance(error, str) else type(error).__name__
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))


# ---- the doors ---------------------------------------------------------------------------------------------
class DoorTrace:
    """The creation contexts of one door call: a ``create`` span per message, or the incoming context."""

    __slots__ = ("door", "entity", "parent", "spans", "traceparent", "tracer", "tracestate")

    def __init__(
        self,
        tracer: Tracer | None,
        *,
        entity: str,
        door: str,
        parent: Context | None,
        traceparent: str | None,
        tracestate: str | None,
    ) -> None:
        self.tracer = tracer
        self.entity = entity
        self.door = door
        self.parent = parent
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.spans: list[Span] = []

    def context(self) -> tuple[str | None, str | None]:
        """The creation context for the door's next message."""
        if self.tracer is None:
            return self.traceparent, self.tracestate
        span = self.tracer.start_span(
            f"create {self.entity}",
            context=self.parent,
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.name": "create",
                "messaging.operation.type": "create",
                "messaging.destination.name": self.entity,
                "bridge.door": self.door,
            },
        )
        self.spans.append(span)
        made = as_text(span.get_span_context())
        return made if made[0] is not None else (self.traceparent, self.tracestate)

    def stored(self, message_ids: Sequence[str], duplicates: Sequence[bool] = ()) -> None:
        """End the spans of messages the outbox accepted."""
        for index, span in enumerate(self.spans):
            if index < len(message_ids):
                span.set_attribute("messaging.message.id", message_ids[index])
            if index < len(duplicates) and duplicates[index]:
                span.set_attribute("bridge.duplicate", True)
            span.end()
        self.spans.clear()

    def failed(self, error: BaseException) -> None:
        """End the spans of a call the outbox refused (``error.type``: the error's class)."""
        for span in self.spans:
            mark_failed(span, error)
            span.end()
        self.spans.clear()


def door_trace(entity: str, door: str, traceparent: str | None, tracestate: str | None) -> DoorTrace | None:
    """For an HTTP door: the request's ``traceparent``/``tracestate`` headers become the parent of the
    create spans, or, when this process does not trace, every message's creation context as they are."""
    parent, state = incoming(traceparent, tracestate) if traceparent is not None else (None, None)
    tracer = _State.tracer
    if tracer is None:
        if parent is None:
            return None
        return DoorTrace(None, entity=entity, door=door, parent=None, traceparent=parent, tracestate=state)
    context = parent_context(span_context(parent, state))
    return DoorTrace(tracer, entity=entity, door=door, parent=context, traceparent=parent, tracestate=state)


def producer_trace(entity: str) -> DoorTrace | None:
    """For the ``Producer``: the caller's current context is the parent; the bridge's tracer if this process
    traces, else the application's own provider's, else the current context passed through."""
    tracer = _State.tracer or _application_tracer()
    if tracer is not None:
        return DoorTrace(
            tracer, entity=entity, door="producer", parent=None, traceparent=None, tracestate=None
        )
    current = trace.get_current_span().get_span_context()
    if not current.is_valid:
        return None
    parent, state = as_text(current)
    return DoorTrace(None, entity=entity, door="producer", parent=None, traceparent=parent, tracestate=state)


def error_type(error: BaseException) -> str:
    """``error.type`` of a failed Service Bus call: its error class (``outage``, ``transient``, ...) for the
    bridge's namespace errors, else the exception's class name."""
    return classify(error).error_class.value if isinstance(error, NamespaceError) else type(error).__name__


def message_contexts(properties: Sequence[Mapping[Any, Any] | None]) -> list[tuple[str | None, str | None]]:
    """The creation contexts written on broker messages (their application properties)."""
    return [from_properties(props) if props else (None, None) for props in properties]
