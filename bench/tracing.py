"""What tracing costs on the hot paths, in CPU per message, off against on, measured in the same run.

    python -m bench.tracing [--messages 100] [--rounds 400] [--runs 7]

No I/O: the door's work for a request of ``--messages`` messages (``Ingress``'s validation with its
creation contexts, then the outbox group's encoding, as ``bridge.http`` does it), the drainer's span per
batched send, and the receiver's span around a handler that does nothing. Each is run with tracing off
(no tracer provider: what every process does unless ``OTEL_*`` asks for traces), with the request
carrying a ``traceparent`` and tracing off (passed through), and with the SDK's ``TracerProvider`` at 100 %
sampling behind a ``BatchSpanProcessor`` whose exporter drops the spans (the cost of making them, not of a
network). Prints the median CPU microseconds per message over ``--runs`` runs, the spread, and on ÷ off.
The wall-clock figures of a whole process are ``bench.ingress`` and ``bench.workers`` (``docs/benchmarks.md``,
"Tracing").
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bridge.core.received import ReceivedMessage
from bridge.core.validation import build_envelope
from bridge.http.ingress import message_id_source
from bridge.observability import receiver_spans, send_spans, tracing
from bridge.outbox.writer import OutboxWriter
from bridge.settings import Settings

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
BODY = b"x" * 1024


class _Dropped(SpanExporter):
    """Takes every span and keeps none."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _door(writer: OutboxWriter, count: int, traceparent: str | None) -> Callable[[], None]:
    rules = writer.policy("bench").rules
    items: list[tuple[bytes, dict[str, Any]]] = [(BODY, {}) for _ in range(count)]

    def request() -> None:
        trace = (
            tracing.door_trace("bench", "http", traceparent, None)
            if traceparent or tracing.enabled()
            else None
        )
        new_id = message_id_source(count)
        envelopes = []
        for index, (body, given) in enumerate(items):
            props = given
            if trace is not None:
                parent, state = trace.context()
                props = {**given, "traceparent": parent, "tracestate": state}
            envelopes.append(
                build_envelope("bench", body, props, rules=rules, now=1.0, new_id=new_id, index=index)
            )
        writer.group("bench", envelopes, fresh=[True] * count, door="http")
        if trace is not None:
            trace.stored([e.message_id for e in envelopes])

    return request


def _send(count: int) -> Callable[[], None]:
    contexts = [(TRACEPARENT, None)] * count
    ids = [f"m{i}" for i in range(count)]

    def batch() -> None:
        if tracing.enabled():
            span = send_spans.start_send("send", "bench", contexts, ids, {"bridge.namespace.role": "primary"})
            send_spans.end_send(span, count, None)

    return batch


def _process(count: int) -> Callable[[], None]:
    message = ReceivedMessage(
        "m1", BODY, "bench", "primary", application_properties={"traceparent": TRACEPARENT}
    )

    def handler(_: ReceivedMessage) -> None:
        return None

    def copies() -> None:
        for _ in range(count):
            if tracing.enabled():
                receiver_spans.process("bench", message, handler, {"bridge.namespace.role": "primary"})
            else:
                handler(message)

    return copies


def _measure(work: Callable[[], None], messages: int, rounds: int, runs: int) -> list[float]:
    for _ in range(max(1, rounds // 10)):
        work()
    out = []
    for _ in range(runs):
        started = time.process_time()
        for _ in range(rounds):
            work()
        out.append((time.process_time() - started) / (rounds * messages) * 1e6)
    return out


def _line(label: str, figures: list[float], base: float | None = None) -> float:
    median = statistics.median(figures)
    ratio = f"   x{median / base:.2f} of off" if base else ""
    print(
        f"{label:<44} {median:8.2f} us/msg   (runs {min(figures):.2f}-{max(figures):.2f}){ratio}", flush=True
    )
    return median


def main() -> None:
    """Run each path off, passed through and on; print CPU per message and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100, help="messages per request, batch and pass")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    n, rounds, runs = args.messages, args.rounds, args.runs
    writer = OutboxWriter(Settings(redis_url="redis://127.0.0.1:1/0"))  # type: ignore[arg-type]
    tracing.use_provider(None)
    door_off = _line("door, tracing off", _measure(_door(writer, n, None), n, rounds, runs))
    _line(
        "door, off, request traceparent passed on",
        _measure(_door(writer, n, TRACEPARENT), n, rounds, runs),
        door_off,
    )
    send_off = _line("drainer span per batch, off", _measure(_send(n), n, rounds, runs))
    process_off = _line("receiver around a handler, off", _measure(_process(n), n, rounds, runs))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Dropped(), max_queue_size=1_000_000))
    tracing.use_provider(provider)
    try:
        _line(
            "door, on (100 %), create span per message",
            _measure(_door(writer, n, TRACEPARENT), n, rounds, runs),
            door_off,
        )
        send_on = _line("drainer span per batch, on", _measure(_send(n), n, rounds, runs))
        print(f"{'':<44} {send_on - send_off:8.2f} us/msg more than off")
        _line(
            "receiver, on: a process span per handler call",
            _measure(_process(n), n, rounds, runs),
            process_off,
        )
    finally:
        tracing.use_provider(None)
        provider.shutdown()


if __name__ == "__main__":
    main()
