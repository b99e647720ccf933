"""Envelope → ServiceBusMessage conversion, without a network: every field, property types, aliasing."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

from bridge.core.aliasing import (
    ALIAS_PARTITION_KEY,
    ALIAS_PATH,
    ALIAS_SCHEDULED_ENQUEUE_TIME,
    ALIAS_SESSION_ID,
    ALIAS_TIME_TO_LIVE,
    ReservedPropertyConflict,
    TooLargeForBacklog,
)
from bridge.core.envelope import Envelope
from bridge.core.paired import PING_CONTENT_TYPE, PING_SCHEDULE_AHEAD
from bridge.servicebus.messages import (
    TYPES_PROPERTY,
    BacklogMessage,
    ping_message,
    sdk_property_value,
    to_backlog_message,
    to_message,
)
from tests.sdk_view import as_sent

WHEN = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PROPS = {
    "s": "text",
    "n": 1,
    "big": -(2**33),
    "f": 0.5,
    "b": False,
    "raw": b"\x01",
    "u": uuid.UUID(int=1),
    "t": datetime(2024, 1, 1, tzinfo=UTC),
    "d": timedelta(seconds=1),
}


def full_envelope(**changes: object) -> Envelope:
    fields: dict[str, object] = dict(
        entity="orders",
        message_id="m-1",
        body=b"\x00body",
        accepted_at=time.time(),
        content_type="ct",
        correlation_id="cid",
        subject="subj",
        reply_to="rt",
        to="to",
        session_id="s-1",
        partition_key="s-1",
        time_to_live=90.0,
        scheduled_enqueue_time_utc=WHEN,
        application_properties=dict(PROPS),
    )
    fields.update(changes)
    return Envelope(**fields)  # type: ignore[arg-type]


def test_to_message_preserves_every_field() -> None:
    message = as_sent(to_message(full_envelope()))
    assert b"".join(message.body) == b"\x00body"
    assert (message.message_id, message.session_id, message.partition_key) == ("m-1", "s-1", "s-1")
    assert message.time_to_live == timedelta(seconds=90)
    assert message.scheduled_enqueue_time_utc == WHEN
    assert (message.content_type, message.correlation_id, message.subject) == ("ct", "cid", "subj")
    assert (message.reply_to, message.to) == ("rt", "to")
    assert message.application_properties == {name: sdk_property_value(v) for name, v in PROPS.items()}


def test_to_message_leaves_absent_fields_absent() -> None:
    message = as_sent(to_message(Envelope(entity="q", message_id="m", body=b"", accepted_at=0.0)))
    assert message.session_id is None and message.partition_key is None and message.time_to_live is None
    assert message.scheduled_enqueue_time_utc is None and not message.application_properties


def test_property_values_the_sdk_would_mangle_are_typed() -> None:
    assert sdk_property_value(2**31) == {"TYPE": "LONG", "VALUE": 2**31}
    assert sdk_property_value(2**31 - 1) == 2**31 - 1
    assert sdk_property_value(True) is True
    assert sdk_property_value(b"\xff") == {"TYPE": "BINARY", "VALUE": b"\xff"}
    span = sdk_property_value(timedelta(milliseconds=1))
    assert span["VALUE"][0] == {"TYPE": "SYMBOL", "VALUE": b"com.microsoft:timespan"}
    assert span["VALUE"][1] == {"TYPE": "LONG", "VALUE": 10_000}
    assert sdk_property_value(datetime(2024, 1, 1)).tzinfo is UTC  # naive means UTC
    assert sdk_property_value("x") == "x"


def test_backlog_message_has_no_broker_fields_only_aliases() -> None:
    decision = to_backlog_message(full_envelope())
    assert isinstance(decision, BacklogMessage) and decision.destination == "orders"
    message = as_sent(decision.message)
    assert message.session_id is None and message.partition_key is None
    assert message.time_to_live is None and message.scheduled_enqueue_time_utc is None
    assert message.message_id == "m-1" and b"".join(message.body) == b"\x00body"
    props = message.application_properties or {}
    assert props[ALIAS_PATH] == "orders" and props[ALIAS_SESSION_ID] == "s-1"
    assert props[ALIAS_PARTITION_KEY] == "s-1" and props[ALIAS_TIME_TO_LIVE] == 90.0
    assert props[ALIAS_SCHEDULED_ENQUEUE_TIME] == WHEN
    assert json.loads(str(props[TYPES_PROPERTY])) == {"raw": "b", "t": "t", ALIAS_SCHEDULED_ENQUEUE_TIME: "t"}
    for name, value in PROPS.items():
        assert props[name] == sdk_property_value(value)


def test_backlog_message_without_ambiguous_types_has_no_type_marks() -> None:
    plain = full_envelope(application_properties={"s": "x"}, scheduled_enqueue_time_utc=None)
    decision = to_backlog_message(plain)
    assert isinstance(decision, BacklogMessage)
    assert TYPES_PROPERTY not in (decision.message.application_properties or {})


def test_backlog_destination_can_be_given() -> None:
    decision = to_backlog_message(full_envelope(), "topic-a")
    assert isinstance(decision, BacklogMessage)
    assert (decision.message.application_properties or {})[ALIAS_PATH] == "topic-a"


def test_near_limit_message_stays_for_the_primary() -> None:
    # Given a body that fits 256 KB un-aliased but not with the alias properties and type marks
    body = b"x" * (256 * 1024 - 600)
    decision = to_backlog_message(full_envelope(body=body))
    assert isinstance(decision, TooLargeForBacklog)
    assert decision.limit == 256 * 1024 and decision.size > decision.limit
    assert "too_large_for_backlog" in decision.reason
    # The same body under a larger (Premium) limit is aliased
    premium = to_backlog_message(full_envelope(body=body), max_message_size=1024 * 1024)
    assert isinstance(premium, BacklogMessage)


def test_application_alias_names_are_a_conflict() -> None:
    decision = to_backlog_message(full_envelope(application_properties={ALIAS_PATH: "mine"}))
    assert isinstance(decision, ReservedPropertyConflict) and decision.names == (ALIAS_PATH,)


def test_ping_messages() -> None:
    plain = as_sent(ping_message("message", "sess", 1_000.0))
    assert (plain.content_type, plain.session_id, plain.time_to_live) == (
        PING_CONTENT_TYPE,
        "sess",
        timedelta(seconds=1),
    )
    assert b"".join(plain.body) == b"" and plain.scheduled_enqueue_time_utc is None
    scheduled = as_sent(ping_message("schedule", "sess", 1_000.0))
    assert scheduled.scheduled_enqueue_time_utc == datetime.fromtimestamp(1_000.0, UTC) + PING_SCHEDULE_AHEAD
    assert plain.message_id != scheduled.message_id


def test_reply_to_session_via_partition_key_and_a_fractional_ttl_are_carried():
    envelope = Envelope(
        entity="q",
        message_id="m",
        body=b"x",
        accepted_at=1.0,
        time_to_live=90.5,
        reply_to_session_id="rs",
        via_partition_key="via",
    )
    message = as_sent(to_message(envelope))
    raw = message.raw_amqp_message
    # The SDK's setter keeps whole seconds (90 000 ms); the header carries 90 500
    assert raw.header.time_to_live == 90_500
    assert raw.properties.absolute_expiry_time - raw.properties.creation_time == 90_500
    assert message.reply_to_session_id == "rs"
    assert raw.annotations[b"x-opt-via-partition-key"] == "via"
    assert Envelope.decode(envelope.encode()) == envelope
    backlog = to_backlog_message(envelope)
    assert isinstance(backlog, BacklogMessage)
    assert as_sent(backlog.message).reply_to_session_id == "rs"
