"""Backlog aliasing: the property table, sizes near the limit, the syphon's inverse with remaining TTL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.aliasing import (
    ALIAS_NAMES,
    Aliased,
    ExpiredInBacklog,
    NotAliased,
    ReservedPropertyConflict,
    Restored,
    TooLargeForBacklog,
    alias_for_backlog,
    alias_properties,
    remaining_time_to_live,
    restore_properties,
    unalias,
)
from bridge.core.message_fields import MessageFields, encoded_size

WHEN = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
FULL = MessageFields(
    message_id="m-1",
    body_size=100,
    session_id="s-1",
    partition_key="s-1",
    time_to_live=60.0,
    scheduled_enqueue_time_utc=WHEN,
    application_properties={"kind": "order", "n": 3},
)


def test_every_broker_field_moves_to_its_alias() -> None:
    aliased = alias_properties(FULL, "orders")
    assert dict(aliased.application_properties) == {
        "kind": "order",
        "n": 3,
        "x-ms-path": "orders",
        "x-ms-sessionid": "s-1",
        "x-ms-partitionkey": "s-1",
        "x-ms-timetolive": 60.0,
        "x-ms-scheduledenqueuetimeutc": WHEN,
    }
    # the broker message carries none of them; body and id are untouched
    assert aliased.session_id is None
    assert aliased.partition_key is None
    assert aliased.time_to_live is None
    assert aliased.scheduled_enqueue_time_utc is None
    assert (aliased.message_id, aliased.body_size) == ("m-1", 100)


@pytest.mark.parametrize(
    ("fields", "expected_aliases"),
    [
        (MessageFields("a"), {"x-ms-path"}),
        (MessageFields("a", session_id="s"), {"x-ms-path", "x-ms-sessionid"}),
        (MessageFields("a", partition_key="p"), {"x-ms-path", "x-ms-partitionkey"}),
        (MessageFields("a", time_to_live=5), {"x-ms-path", "x-ms-timetolive"}),
        (MessageFields("a", scheduled_enqueue_time_utc=WHEN), {"x-ms-path", "x-ms-scheduledenqueuetimeutc"}),
    ],
)
def test_only_present_fields_are_aliased(fields: MessageFields, expected_aliases: set[str]) -> None:
    assert set(alias_properties(fields, "q").application_properties) == expected_aliases


def test_the_schedule_has_its_own_alias_and_x_ms_path_holds_only_the_destination() -> None:
    aliased = alias_properties(MessageFields("a", scheduled_enqueue_time_utc=WHEN), "q")
    assert aliased.application_properties["x-ms-path"] == "q"
    assert aliased.application_properties["x-ms-scheduledenqueuetimeutc"] == WHEN


def test_schedule_in_another_zone_is_stored_as_utc() -> None:
    local = WHEN.astimezone(timezone(timedelta(hours=2)))
    stored = alias_properties(
        MessageFields("a", scheduled_enqueue_time_utc=local), "q"
    ).application_properties
    value = stored["x-ms-scheduledenqueuetimeutc"]
    assert isinstance(value, datetime)
    assert value.utcoffset() == timedelta(0)
    assert value == WHEN


@pytest.mark.parametrize("name", sorted(ALIAS_NAMES))
def test_an_application_property_with_an_alias_name_is_a_decision_not_an_overwrite(name: str) -> None:
    fields = MessageFields("a", application_properties={name: "mine"})
    decision = alias_for_backlog(fields, "q", 256 * 1024)
    assert decision == ReservedPropertyConflict((name,))
    assert name in decision.reason
    with pytest.raises(ValueError, match="already use"):
        alias_properties(fields, "q")


LIMIT = 256 * 1024


def _added_bytes(fields: MessageFields, destination: str) -> int:
    """What aliasing adds to the estimate, as ``alias_for_backlog`` reports it for a message that fits."""
    decision = alias_for_backlog(fields, destination, 10 * LIMIT)
    assert isinstance(decision, Aliased)
    return decision.added_bytes


def _body_for(total: int, fields: MessageFields) -> MessageFields:
    """``fields`` with a body that makes the un-aliased estimate exactly ``total`` bytes."""
    without_body = encoded_size(MessageFields(**{**fields.__dict__, "body_size": 0}))
    return MessageFields(**{**fields.__dict__, "body_size": total - without_body})


@pytest.mark.parametrize(
    ("below_limit_after_aliasing", "fits"),
    [
        (10_000, True),  # far from the limit
        (0, True),  # exactly at the limit once aliased
        (-1, False),  # one byte over once aliased
    ],
)
def test_near_the_size_limit(below_limit_after_aliasing: int, fits: bool) -> None:
    # Given a message that fits un-aliased and whose aliased estimate is `below_limit_after_aliasing` under
    overhead = _added_bytes(FULL, "orders")
    assert overhead > 0
    message = _body_for(LIMIT - overhead - below_limit_after_aliasing, FULL)
    assert encoded_size(message) < LIMIT
    # When it is aliased for a backlog queue with that limit
    decision = alias_for_backlog(message, "orders", LIMIT)
    # Then it is either aliased within the limit, or refused explicitly with the sizes (never dropped)
    if fits:
        assert isinstance(decision, Aliased)
        assert decision.size == LIMIT - below_limit_after_aliasing
        assert decision.added_bytes == overhead
    else:
        assert decision == TooLargeForBacklog(size=LIMIT + 1, limit=LIMIT, added_bytes=overhead)
        assert "too_large_for_backlog" in decision.reason


def test_the_added_bytes_count_the_destination_length() -> None:
    short = _added_bytes(MessageFields("a"), "q")
    long = _added_bytes(MessageFields("a"), "q" * 200)
    assert long - short == 199


NOW = 2_000_000_000.0


@pytest.mark.parametrize(
    ("ttl", "enqueued", "scheduled", "now", "remaining"),
    [
        (60.0, NOW, None, NOW, 60.0),
        (60.0, NOW, None, NOW + 45, 15.0),
        (60.0, NOW, None, NOW + 60, 0.0),
        (60.0, NOW, NOW + 100, NOW + 50, 60.0),  # still before its schedule: the clock has not started
        (60.0, NOW, NOW + 100, NOW + 130, 30.0),  # 30 s after its scheduled enqueue
        (60.0, NOW, NOW - 100, NOW + 10, 50.0),  # scheduled in the past: clock from the backlog enqueue
    ],
)
def test_remaining_ttl_table(
    ttl: float, enqueued: float, scheduled: float | None, now: float, remaining: float
) -> None:
    assert remaining_time_to_live(ttl, enqueued, scheduled, now) == pytest.approx(remaining)


def test_syphon_restores_the_remaining_ttl() -> None:
    # Given a message with a 60 s TTL that spent 45 s in a backlog queue
    backlog = alias_properties(MessageFields("m", session_id="s", time_to_live=60.0), "orders")
    # When the syphon restores it
    decision = unalias(backlog, enqueued_at=NOW, now=NOW + 45)
    # Then it goes back to its entity with 15 s left and its session
    assert decision == Restored(MessageFields("m", session_id="s", time_to_live=15.0), "orders")


@pytest.mark.parametrize("waited", [60.0, 61.0, 59.9995])
def test_expired_in_backlog_is_a_dead_letter_decision(waited: float) -> None:
    backlog = alias_properties(MessageFields("m", time_to_live=60.0), "orders")
    decision = unalias(backlog, enqueued_at=NOW, now=NOW + waited)
    assert decision == ExpiredInBacklog(destination="orders", expired_at=NOW + 60.0)
    assert decision.reason.startswith("expired_in_backlog")


@pytest.mark.parametrize(
    ("properties", "reason"),
    [
        ({}, "no x-ms-path"),
        ({"x-ms-path": ""}, "x-ms-path is empty"),
        ({"x-ms-path": 5}, "x-ms-path is not a string"),
        ({"x-ms-path": "q", "x-ms-timetolive": "soon"}, "not a number"),
        ({"x-ms-path": "q", "x-ms-timetolive": True}, "not a number"),
        ({"x-ms-path": "q", "x-ms-sessionid": 7}, "x-ms-sessionid is not a string"),
        ({"x-ms-path": "q", "x-ms-scheduledenqueuetimeutc": 7}, "not a timestamp"),
    ],
)
def test_malformed_backlog_messages_are_not_aliased(properties: dict[str, object], reason: str) -> None:
    decision = unalias(MessageFields("m", application_properties=properties), NOW, NOW)  # type: ignore[arg-type]
    assert isinstance(decision, NotAliased)
    assert reason in decision.reason


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (timedelta(seconds=90), 90.0),
        (90, 90.0),
        (90.5, 90.5),
    ],
)
def test_ttl_alias_accepts_the_numeric_forms_a_client_may_decode(stored: object, expected: float) -> None:
    fields = MessageFields("m", application_properties={"x-ms-path": "q", "x-ms-timetolive": stored})  # type: ignore[dict-item]
    restored, _ = restore_properties(fields)
    assert restored.time_to_live == expected


def test_naive_or_text_schedule_is_read_as_utc() -> None:
    for stored in (WHEN.replace(tzinfo=None), WHEN.isoformat()):
        fields = MessageFields(
            "m", application_properties={"x-ms-path": "q", "x-ms-scheduledenqueuetimeutc": stored}
        )
        restored, _ = restore_properties(fields)
        assert restored.scheduled_enqueue_time_utc == WHEN


_text = st.text(min_size=1, max_size=40)
_values = st.one_of(
    st.text(max_size=20),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.binary(max_size=20),
    st.uuids(),
)
_messages = st.builds(
    MessageFields,
    message_id=_text,
    body_size=st.integers(min_value=0, max_value=1_000_000),
    session_id=st.none() | _text,
    partition_key=st.none() | _text,
    time_to_live=st.none() | st.floats(min_value=0.001, max_value=10**9, allow_nan=False),
    scheduled_enqueue_time_utc=st.none() | st.datetimes(timezones=st.just(UTC)),
    application_properties=st.dictionaries(_text.filter(lambda k: k not in ALIAS_NAMES), _values, max_size=6),
)


@given(message=_messages, destination=_text)
def test_alias_then_restore_is_the_identity(message: MessageFields, destination: str) -> None:
    restored, where = restore_properties(alias_properties(message, destination))
    assert restored == message
    assert where == destination


@given(message=_messages, destination=_text, enqueued=st.floats(min_value=0, max_value=4e9))
def test_unalias_at_the_enqueue_instant_gives_back_the_message(
    message: MessageFields, destination: str, enqueued: float
) -> None:
    # Given no time has passed since the backlog enqueue and no schedule in the future
    when = message.scheduled_enqueue_time_utc
    if when is not None and when.timestamp() > enqueued:
        message = MessageFields(**{**message.__dict__, "scheduled_enqueue_time_utc": None})
    decision = unalias(alias_properties(message, destination), enqueued_at=enqueued, now=enqueued)
    # Then the restored message is exactly the original (full TTL)
    assert decision == Restored(message, destination)


@given(message=_messages, destination=_text)
def test_aliased_messages_carry_no_broker_fields(message: MessageFields, destination: str) -> None:
    aliased = alias_properties(message, destination)
    assert (aliased.session_id, aliased.partition_key, aliased.time_to_live) == (None, None, None)
    assert aliased.scheduled_enqueue_time_utc is None
    for key, value in message.application_properties.items():
        assert aliased.application_properties[key] == value


def test_a_scheduled_message_lives_its_ttl_from_its_scheduled_time() -> None:
    # Given a message scheduled 100 s after its send, with a TTL of 60 s, aliased into a backlog queue
    sent = 1_000.0
    fields = MessageFields(
        "m-1",
        time_to_live=60.0,
        scheduled_enqueue_time_utc=datetime.fromtimestamp(sent + 100, tz=UTC),
    )
    aliased = alias_for_backlog(fields, "orders", LIMIT)
    assert isinstance(aliased, Aliased) and aliased.destination == "orders"

    # When the syphon restores it 120 s after the send, 40 s of its TTL are left
    restored = unalias(aliased.fields, enqueued_at=sent, now=sent + 120)
    assert isinstance(restored, Restored)
    assert restored.fields.time_to_live == pytest.approx(40.0)
    # and 170 s after the send it expired, 60 s after its scheduled time
    assert unalias(aliased.fields, enqueued_at=sent, now=sent + 170) == ExpiredInBacklog("orders", sent + 160)
