"""The ingress rules (bridge.core.validation): tables of cases and hypothesis properties. No network."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.envelope import Envelope
from bridge.core.validation import (
    MAX_HEADER_BYTES,
    EntityRules,
    build_envelope,
    check_batch,
    validate_entity,
)
from bridge.errors import InvalidMessageError, MessageTooLargeError

RULES = EntityRules(max_message_size=1000)


def build(
    props: dict[str, Any], body: bytes = b"x", rules: EntityRules = RULES, index: int | None = None
) -> Envelope:
    return build_envelope(
        "orders", body, props, rules=rules, now=1.5, new_id=lambda: "generated", index=index
    )


def code_of(props: dict[str, Any], body: bytes = b"x", rules: EntityRules = RULES) -> str:
    with pytest.raises(InvalidMessageError) as caught:
        build(props, body, rules)
    return caught.value.code


@pytest.mark.parametrize(
    ("props", "code", "field"),
    [
        ({"nope": 1}, "unknown_field", "nope"),
        ({"message_id": 5}, "invalid_type", "message_id"),
        ({"message_id": ""}, "message_id_empty", "message_id"),
        ({"message_id": "m" * 129}, "message_id_too_long", "message_id"),
        ({"session_id": "s" * 129}, "session_id_too_long", "session_id"),
        ({"partition_key": "p" * 129}, "partition_key_too_long", "partition_key"),
        ({"session_id": "a", "partition_key": "b"}, "session_partition_mismatch", "partition_key"),
        ({"time_to_live": 0}, "time_to_live_not_positive", "time_to_live"),
        ({"time_to_live": timedelta(seconds=-1)}, "time_to_live_not_positive", "time_to_live"),
        ({"time_to_live": float("nan")}, "time_to_live_invalid", "time_to_live"),
        ({"time_to_live": float("inf")}, "time_to_live_invalid", "time_to_live"),
        ({"time_to_live": True}, "invalid_type", "time_to_live"),
        ({"scheduled_enqueue_time_utc": "2030-13-01T00:00:00Z"}, "scheduled_enqueue_time_invalid", None),
        ({"scheduled_enqueue_time_utc": datetime(2030, 1, 1)}, "scheduled_enqueue_time_naive", None),
        ({"scheduled_enqueue_time_utc": 5}, "invalid_type", None),
        ({"application_properties": "x"}, "invalid_type", "application_properties"),
        ({"application_properties": {1: "x"}}, "application_property_name_invalid", "application_properties"),
        ({"application_properties": {"a": None}}, "application_property_type", "application_properties.a"),
        ({"application_properties": {"a": [1]}}, "application_property_type", "application_properties.a"),
        ({"application_properties": {"a": -(2**63) - 1}}, "application_property_out_of_range", None),
        ({"application_properties": {"a": float("nan")}}, "application_property_invalid", None),
        ({"application_properties": {"a": datetime(2030, 1, 1)}}, "application_property_invalid", None),
        ({"application_properties": {"a": "v" * MAX_HEADER_BYTES}}, "headers_too_large", None),
    ],
)
def test_rule_table(props: dict[str, Any], code: str, field: str | None):
    with pytest.raises(InvalidMessageError) as caught:
        build(props, rules=EntityRules(max_message_size=10**6))
    assert caught.value.code == code
    if field is not None:
        assert caught.value.field == field or caught.value.field.startswith(field)
    assert caught.value.detail


def test_session_required_by_the_entity():
    assert code_of({}, rules=EntityRules(requires_session=True)) == "session_id_required"
    assert build({"session_id": "s"}, rules=EntityRules(requires_session=True)).session_id == "s"


def test_size_errors_are_message_too_large_errors():
    with pytest.raises(MessageTooLargeError) as caught:
        build({}, body=b"b" * 1001)
    assert caught.value.code == "body_too_large"
    with pytest.raises(MessageTooLargeError) as caught:
        build({"subject": "s" * 100}, body=b"b" * 950)
    assert caught.value.code == "message_too_large"


def test_accepted_values_are_normalised():
    envelope = build(
        {
            "time_to_live": timedelta(minutes=1),
            "scheduled_enqueue_time_utc": "2030-01-01T02:00:00+02:00",
            "application_properties": {
                "u": uuid.UUID(int=1),
                "b": b"\x00",
                "d": datetime(2030, 1, 1, tzinfo=UTC),
                "t": timedelta(seconds=3),
                "big": 2**64 - 1,
                "neg": -(2**63),
            },
        }
    )
    assert envelope.time_to_live == 60.0
    assert envelope.scheduled_enqueue_time_utc == datetime(2030, 1, 1, tzinfo=UTC)
    assert envelope.message_id == "generated"
    assert envelope.accepted_at == 1.5


def test_error_carries_the_batch_index():
    with pytest.raises(InvalidMessageError) as caught:
        build({"time_to_live": -1}, index=7)
    assert caught.value.index == 7


@pytest.mark.parametrize(
    ("entity", "code"),
    [
        ("", "entity_name_empty"),
        ("e" * 261, "entity_name_too_long"),
        ("-a", "entity_name_invalid"),
        ("a-", "entity_name_invalid"),
        ("a b", "entity_name_invalid"),
        ("a//b", "entity_name_invalid"),
        ("a/", "entity_name_invalid"),
        ("é", "entity_name_invalid"),
        ("topic/Subscriptions/sub", "entity_not_sendable"),
    ],
)
def test_bad_entity_paths(entity: str, code: str):
    with pytest.raises(InvalidMessageError) as caught:
        validate_entity(entity)
    assert caught.value.code == code


@pytest.mark.parametrize("entity", ["orders", "a", "app/events", "a.b-c_d", "x" * 260, "9"])
def test_good_entity_paths(entity: str):
    validate_entity(entity)


def _envelope(**props: Any) -> Envelope:
    return build(props)


def test_batch_rules():
    with pytest.raises(InvalidMessageError) as caught:
        check_batch([], transactional=False, max_messages=10)
    assert caught.value.code == "batch_empty"
    with pytest.raises(InvalidMessageError) as caught:
        check_batch([_envelope()] * 11, transactional=False, max_messages=10)
    assert caught.value.code == "batch_too_large"
    mixed = [_envelope(partition_key="a"), _envelope(session_id="a"), _envelope(partition_key="b")]
    with pytest.raises(InvalidMessageError) as caught:
        check_batch(mixed, transactional=True, max_messages=10)
    assert (caught.value.code, caught.value.index) == ("transaction_partition_keys", 2)
    check_batch(mixed, transactional=False, max_messages=10)
    check_batch(mixed[:2], transactional=True, max_messages=10)


# --- properties -------------------------------------------------------------------------------------------

ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=128)
too_long = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=129, max_size=300)
prop_values = st.one_of(
    st.text(max_size=20),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=20),
    st.uuids(),
    st.datetimes(timezones=st.just(UTC)),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=10_000)),
)
valid_props = st.fixed_dictionaries(
    {},
    optional={
        "message_id": ids,
        "content_type": st.text(max_size=30),
        "correlation_id": st.text(max_size=30),
        "subject": st.text(max_size=30),
        "reply_to": st.text(max_size=30),
        "to": st.text(max_size=30),
        "partition_key": ids,
        "time_to_live": st.floats(min_value=0.001, max_value=1e9),
        "scheduled_enqueue_time_utc": st.datetimes(timezones=st.just(UTC)),
        "application_properties": st.dictionaries(st.text(min_size=1, max_size=10), prop_values, max_size=5),
    },
)


@given(valid_props, st.binary(max_size=200))
def test_valid_messages_survive_the_outbox_encoding_unchanged(props: dict[str, Any], body: bytes):
    envelope = build_envelope("orders", body, props, rules=EntityRules(), now=2.0, new_id=lambda: "id")
    assert Envelope.decode(envelope.encode()) == envelope


@given(too_long)
def test_message_id_over_128_is_always_refused(message_id: str):
    assert code_of({"message_id": message_id}) == "message_id_too_long"


@given(too_long)
def test_partition_key_over_128_is_always_refused(key: str):
    assert code_of({"partition_key": key}) == "partition_key_too_long"


@given(ids, ids)
def test_session_and_partition_key_must_match(session_id: str, partition_key: str):
    props = {"session_id": session_id, "partition_key": partition_key}
    if session_id == partition_key:
        assert build(props).partition_key == partition_key
    else:
        assert code_of(props) == "session_partition_mismatch"


@given(st.floats(max_value=0.0, allow_nan=False, allow_infinity=False))
def test_non_positive_ttl_is_refused(ttl: float):
    assert code_of({"time_to_live": ttl}) == "time_to_live_not_positive"


@given(st.integers(min_value=0, max_value=2000))
def test_body_size_limit_is_exact(size: int):
    rules = EntityRules(max_message_size=1000)
    if size <= 1000:
        assert len(build({}, body=b"b" * size, rules=rules).body) == size
    else:
        assert code_of({}, body=b"b" * size, rules=rules) == "body_too_large"


@given(st.datetimes(timezones=st.just(timezone(timedelta(hours=5)))))
def test_scheduled_time_text_with_offset_is_normalised_to_utc(moment: datetime):
    envelope = build({"scheduled_enqueue_time_utc": moment.isoformat()})
    assert envelope.scheduled_enqueue_time_utc == moment
    assert envelope.scheduled_enqueue_time_utc is not None
    assert envelope.scheduled_enqueue_time_utc.utcoffset() == timedelta(0)


@given(st.datetimes())
def test_scheduled_time_without_offset_is_refused(moment: datetime):
    assert code_of({"scheduled_enqueue_time_utc": moment.isoformat()}) == "scheduled_enqueue_time_naive"


@given(
    st.one_of(
        st.none(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(), st.integers(), max_size=2)
    )
)
def test_structured_property_values_are_refused(value: Any):
    assert code_of({"application_properties": {"k": value}}) == "application_property_type"


@given(st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._\-]{0,50}[A-Za-z0-9])?", fullmatch=True))
def test_generated_good_entity_names_are_accepted(name: str):
    validate_entity(name)


@given(st.text(min_size=1, max_size=20).filter(lambda s: any(c in s for c in " #?%*:@\\")))
def test_names_with_forbidden_characters_are_refused(name: str):
    with pytest.raises(InvalidMessageError) as caught:
        validate_entity(name)
    assert caught.value.code in ("entity_name_invalid", "entity_not_sendable")


def test_a_batch_draws_a_distinct_random_message_id_per_message_from_one_read():
    from bridge.http.ingress import message_id_source

    draw = message_id_source(100)
    ids = [draw() for _ in range(100)]
    assert len(set(ids)) == 100
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    with pytest.raises(StopIteration):  # never more ids than it read bytes for
        draw()
