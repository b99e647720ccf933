"""The creation context as text: W3C checks, the envelope's ``tp``/``ts`` fields, the doors' fields, the
broker message's properties, and when the ``OTEL_*`` environment turns tracing on."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.core.door_formats import redis_door_message
from bridge.core.envelope import Envelope
from bridge.core.trace_context import (
    MAX_TRACESTATE,
    from_properties,
    incoming,
    message_properties,
    property_bytes,
    trace_id,
    valid_traceparent,
    valid_tracestate,
    viewer_url,
    within,
)
from bridge.core.validation import EntityRules, build_envelope
from bridge.errors import InvalidMessageError
from bridge.observability.tracing import as_text, span_context, wanted
from bridge.servicebus.messages import to_backlog_message, to_message

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (TP, True),
        (TP.encode(), True),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", True),  # a later version may grow
        (TP + "-x", False),  # version 00 is exactly 55 characters
        (TP.upper(), False),
        ("ff" + TP[2:], False),
        ("00-" + "0" * 32 + TP[35:], False),
        (TP[:36] + "0" * 16 + TP[52:], False),
        (TP[:-1], False),
        ("", False),
        (None, False),
        (42, False),
        (b"\xff" * 55, False),
    ],
)
def test_only_a_well_formed_traceparent_is_kept(value: object, kept: bool) -> None:
    assert (valid_traceparent(value) is not None) is kept


def test_tracestate_goes_only_with_a_valid_traceparent_and_is_bounded() -> None:
    assert incoming(TP, "a=1,b=2") == (TP, "a=1,b=2")
    assert incoming("junk", "a=1") == (None, None)
    assert incoming(TP, "x" * 513) == (TP, None)
    assert incoming(TP, "a=\n") == (TP, None)
    assert trace_id(TP) == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_broker_properties_are_the_sdks_and_are_read_back_in_its_order() -> None:
    written = message_properties(TP, "a=1")
    assert written == {"Diagnostic-Id": TP, "traceparent": TP, "tracestate": "a=1"}
    assert property_bytes(TP, "a=1") == sum(len(k) + len(v) for k, v in written.items())
    assert from_properties(written) == (TP, "a=1")
    # A receiver sees bytes; Diagnostic-Id alone (an older SDK's message) is read too
    assert from_properties({"Diagnostic-Id": TP.encode()}) == (TP, None)
    assert from_properties({}) == (None, None)


def test_the_envelope_stores_the_context_and_reads_entries_without_it() -> None:
    envelope = Envelope("orders", "m1", b"x", 1.0, traceparent=TP, tracestate="a=1")
    fields = envelope.encode()
    assert fields[b"tp"] == TP.encode() and fields[b"ts"] == b"a=1"
    assert Envelope.decode(fields) == envelope
    # An entry written before the fields existed, and one whose context was damaged, read as having none
    plain = Envelope("orders", "m1", b"x", 1.0)
    assert b"tp" not in plain.encode() and Envelope.decode(plain.encode()).traceparent is None
    damaged = {**fields, b"tp": b"not-a-traceparent"}
    assert Envelope.decode(damaged) == plain


def _build(props: dict[str, Any], body: bytes = b"x", rules: EntityRules | None = None) -> Envelope:
    return build_envelope("orders", body, props, rules=rules or EntityRules(), now=1.0, new_id=lambda: "m1")


def test_validation_keeps_a_valid_context_drops_a_bad_one_and_refuses_a_wrong_type() -> None:
    assert _build({"traceparent": TP, "tracestate": "a=1"}).traceparent == TP
    assert _build({"traceparent": "garbage", "tracestate": "a=1"}).tracestate is None
    assert _build({"tracestate": "a=1"}).tracestate is None
    with pytest.raises(InvalidMessageError) as refused:
        _build({"traceparent": 7})
    assert refused.value.field == "traceparent"


def test_a_context_that_would_not_fit_is_dropped_and_the_message_kept() -> None:
    rules = EntityRules(max_message_size=100)
    room = 100 - 40
    assert within(TP, None, room) == {}  # 2 x 55 + names: more than 60 bytes
    envelope = _build({"traceparent": TP}, body=b"b" * 40, rules=rules)
    assert envelope.traceparent is None and envelope.body == b"b" * 40
    roomy = EntityRules(max_message_size=300)
    assert _build({"traceparent": TP}, body=b"b" * 10, rules=roomy).traceparent == TP


def test_the_redis_door_takes_the_documented_fields() -> None:
    entry = {b"body": b"x", b"traceparent": TP.encode(), b"tracestate": b"a=1"}
    body, props = redis_door_message(entry, "id")
    assert (body, props["traceparent"], props["tracestate"]) == (b"x", TP, "a=1")


def test_the_broker_message_carries_the_context_unless_the_application_set_one() -> None:
    envelope = Envelope("orders", "m1", b"x", 1.0, traceparent=TP, tracestate="a=1")
    assert to_message(envelope).application_properties == message_properties(TP, "a=1")
    own = "00-11111111111111111111111111111111-2222222222222222-01"
    mine = Envelope("orders", "m1", b"x", 1.0, application_properties={"traceparent": own}, traceparent=TP)
    assert to_message(mine).application_properties == {"traceparent": own}
    backlog = to_backlog_message(envelope)
    assert not isinstance(backlog, Exception)
    properties = backlog.message.application_properties  # type: ignore[union-attr]
    assert properties is not None and properties["traceparent"] == TP


def test_span_context_round_trips_the_text() -> None:
    context = span_context(TP, "a=1")
    assert context is not None and context.is_remote
    assert as_text(context) == (TP, "a=1")


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, True),
    ],
)
def test_tracing_is_off_unless_the_environment_asks_for_it(environ: dict[str, str], on: bool) -> None:
    assert wanted(environ) is on


VIEWER = "http://jaeger:16686/trace/{trace_id}"


@pytest.mark.parametrize(
    ("template", "trace", "url"),
    [
        (VIEWER, TP[3:35], f"http://jaeger:16686/trace/{TP[3:35]}"),
        (
            "https://g.example/explore?q={trace_id}&o={trace_id}",
            "ab" * 16,
            f"https://g.example/explore?q={'ab' * 16}&o={'ab' * 16}",
        ),
        (None, TP[3:35], None),  # no viewer configured: the id is shown, not linked
        (VIEWER, None, None),
        (VIEWER, "0" * 32, None),
        (VIEWER, TP[3:35].upper(), None),
        (VIEWER, TP[3:34], None),
        (VIEWER, TP[3:35] + '"><script>', None),
    ],
)
def test_a_trace_viewer_url_is_made_only_of_a_valid_trace_id(
    template: str | None, trace: str | None, url: str | None
) -> None:
    assert viewer_url(template, trace) == url


PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_tracestate_of_exactly_the_limit_is_kept() -> None:
    assert valid_tracestate("a=" + "b" * (MAX_TRACESTATE - 2)) == "a=" + "b" * (MAX_TRACESTATE - 2)
    assert valid_tracestate("a=" + "b" * (MAX_TRACESTATE - 1)) is None


def test_the_trace_id_is_read_from_the_traceparent_and_nothing_from_nothing() -> None:
    assert trace_id(PARENT) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id(None) is None
    assert trace_id("") is None


def test_a_traceparent_property_wins_over_the_diagnostic_id() -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-01"

    assert from_properties({"traceparent": PARENT, "Diagnostic-Id": other}) == (PARENT, None)
    assert from_properties({"Diagnostic-Id": other}) == (other, None)


def test_the_context_fits_a_room_of_exactly_its_size() -> None:
    size = property_bytes(PARENT, "a=b")

    assert size == len("Diagnostic-Id") + len("traceparent") + 2 * len(PARENT) + len("tracestate") + len(
        "a=b"
    )
    assert within(PARENT, "a=b", size) == {"traceparent": PARENT, "tracestate": "a=b"}
    assert within(PARENT, "a=b", size - 1) == {}
