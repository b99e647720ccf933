"""The broker message the bridge builds is, on the wire, the one the ``ServiceBusMessage`` setters build.

The bridge writes the ``AmqpAnnotatedMessage`` sections itself (the setters cost about as much again as the
rest of building a message); here, for generated envelopes, both are encoded as the SDK encodes a message
for sending, and the bytes must be equal. The reference is the SDK's public constructor with every
field passed, and the header's millisecond TTL the bridge has always written.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.envelope import Envelope
from bridge.core.trace_context import message_properties
from bridge.servicebus.messages import (
    barrier_message,
    envelope_fields,
    message_id_of,
    ping_message,
    scheduled_time_of,
    sdk_property_value,
    to_backlog_message,
    to_message,
)

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
IDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=128)
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    TEXT,
    st.binary(max_size=8),
    st.uuids(),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
    st.timedeltas(min_value=timedelta(days=-999), max_value=timedelta(days=999)),
)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    session = draw(st.none() | IDS)
    key = draw(st.sampled_from([None, session])) if session is not None else draw(st.none() | IDS)
    optional = st.none() | TEXT
    return Envelope(
        entity="orders",
        message_id=draw(IDS),
        body=draw(st.binary(max_size=64)),
        accepted_at=1.0,
        content_type=draw(optional),
        correlation_id=draw(optional),
        subject=draw(optional),
        reply_to=draw(optional),
        to=draw(optional),
        session_id=session,
        partition_key=key,
        reply_to_session_id=draw(st.none() | IDS),
        via_partition_key=draw(st.none() | IDS),
        # the header's TTL is an AMQP uint of milliseconds: the SDK encodes at most about 49.7 days
        time_to_live=draw(st.none() | st.floats(min_value=0.001, max_value=4_294_967.0)),
        scheduled_enqueue_time_utc=draw(
            st.none() | st.datetimes(min_value=datetime(2000, 1, 1), timezones=st.just(UTC))
        ),
        application_properties=draw(st.dictionaries(TEXT.filter(bool), VALUES, max_size=4)),
        traceparent=draw(st.none() | st.just("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")),
        tracestate=draw(st.none() | st.just("k=v")),
    )


def with_setters(envelope: Envelope) -> ServiceBusMessage:
    """The reference: the SDK's constructor and setters, the TTL header in milliseconds."""
    fields = envelope_fields(envelope)
    properties: dict[str | bytes, Any] = {
        name: sdk_property_value(value) for name, value in fields.application_properties.items()
    }
    if envelope.traceparent is not None and not (properties.keys() & {"traceparent", "Diagnostic-Id"}):
        properties.update(message_properties(envelope.traceparent, envelope.tracestate))
    message = ServiceBusMessage(
        envelope.body,
        application_properties=properties or None,
        session_id=fields.session_id,
        message_id=fields.message_id,
        scheduled_enqueue_time_utc=fields.scheduled_enqueue_time_utc,
        time_to_live=None if fields.time_to_live is None else timedelta(seconds=fields.time_to_live),
        content_type=envelope.content_type,
        correlation_id=envelope.correlation_id,
        subject=envelope.subject,
        partition_key=fields.partition_key,
        to=envelope.to,
        reply_to=envelope.reply_to,
        reply_to_session_id=envelope.reply_to_session_id,
    )
    raw = message.raw_amqp_message
    if fields.time_to_live is not None and raw.header is not None:
        raw.header.time_to_live = max(1, round(fields.time_to_live * 1000))
    if envelope.via_partition_key is not None:
        raw.annotations = {**(raw.annotations or {}), b"x-opt-via-partition-key": envelope.via_partition_key}
    return message


def wire(raw: Any) -> tuple[bytes, int | None]:
    """The encoded message with its send-time clock fields blanked, and their difference (the TTL)."""
    message = PyamqpTransport.to_outgoing_amqp_message(raw)
    properties = message.properties
    span = None
    if properties is not None and properties.absolute_expiry_time is not None:
        span = properties.absolute_expiry_time - properties.creation_time
        message = message._replace(
            properties=properties._replace(creation_time=None, absolute_expiry_time=None)
        )
    out = bytearray()
    encode_payload(out, message)
    return bytes(out), span


@settings(max_examples=300, deadline=None)
@given(envelopes())
def test_a_direct_send_encodes_as_the_sdk_setters_encode_it(envelope: Envelope) -> None:
    assert wire(to_message(envelope)) == wire(with_setters(envelope).raw_amqp_message)


def test_its_ids_and_schedule_are_read_back() -> None:
    when = datetime(2031, 1, 1, tzinfo=UTC)
    envelope = Envelope("q", "m-1", b"x", 1.0, scheduled_enqueue_time_utc=when)
    assert message_id_of(to_message(envelope)) == "m-1"
    assert scheduled_time_of(to_message(envelope)) == when
    assert scheduled_time_of(to_message(Envelope("q", "m-1", b"x", 1.0))) is None
    assert message_id_of(barrier_message("orders", 3, "tok")) == "barrier-tok"
    ping = ping_message("schedule", "sess", 1_000.0)
    assert message_id_of(ping).startswith("ping-") and scheduled_time_of(ping) is not None
    backlog = to_backlog_message(envelope)
    assert message_id_of(backlog.message) == "m-1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"session_id": "s" * 129}, "session_id cannot be longer than 128"),
        ({"message_id": "m" * 129}, "message_id cannot be longer than 128"),
        ({"partition_key": "p" * 129}, "partition_key cannot be longer than 128"),
        ({"reply_to_session_id": "r" * 129}, "reply_to_session_id cannot be longer than 128"),
        ({"session_id": "a", "partition_key": "b"}, "cannot be set to a different value than session_id"),
    ],
)
def test_what_the_setters_refuse_is_refused(changes: dict[str, str], error: str) -> None:
    envelope = Envelope(**{"entity": "q", "message_id": "m", "body": b"", "accepted_at": 1.0, **changes})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=error):
        with_setters(envelope)
    with pytest.raises(ValueError, match=error):
        to_message(envelope)
