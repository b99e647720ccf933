"""Every refusal of the door wire formats, in full: the code, the message, the field and the batch index.

These are what a client reads in the error body (``docs/doors/http.md``, "Errors"): the code is the stable
rule name, the message says what to fix, the field and index point at the part of the request at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bridge.core.door_formats import (
    redis_door_message,
    rest_batch,
    rest_message,
    timespan_seconds,
    v1_message,
)
from bridge.errors import InvalidMessageError

Refusal = tuple[str, str, str | None, int | None]

REFUSALS: list[tuple[str, Callable[[], Any], Refusal]] = [
    # /v1 JSON envelope (index 4: the fifth message of a batch request)
    (
        "v1 not an object",
        lambda: v1_message([1], 4),
        ("invalid_type", "a message must be a JSON object", None, 4),
    ),
    (
        "v1 unknown field",
        lambda: v1_message({"body": "x", "colour": 1}, 4),
        ("unknown_field", "unknown field 'colour'", "colour", 4),
    ),
    (
        "v1 no body",
        lambda: v1_message({"subject": "s"}, 4),
        ("field_required", "body is required", "body", 4),
    ),
    (
        "v1 text body not a string",
        lambda: v1_message({"body": 1}, 4),
        ("invalid_type", "body must be a string when body_encoding is text", "body", 4),
    ),
    (
        "v1 text body with a lone surrogate",
        lambda: v1_message({"body": "a\ud800"}, 4),
        ("invalid_utf8", "body holds a lone surrogate, which has no UTF-8 form", "body", 4),
    ),
    (
        "v1 base64 body not a string",
        lambda: v1_message({"body": 1, "body_encoding": "base64"}, 4),
        ("invalid_type", "body must be base64 text", "body", 4),
    ),
    (
        "v1 base64 body with a character outside the alphabet",
        lambda: v1_message({"body": "AA==!", "body_encoding": "base64"}, 4),
        ("body_invalid_base64", "body is not valid base64", "body", 4),
    ),
    (
        "v1 json body with a lone surrogate",
        lambda: v1_message({"body": {"a": "\udc00"}, "body_encoding": "json"}, 4),
        ("invalid_utf8", "body holds a lone surrogate, which has no UTF-8 form", "body", 4),
    ),
    (
        "v1 unknown body encoding",
        lambda: v1_message({"body": "x", "body_encoding": "hex"}, 4),
        ("body_encoding_invalid", "body_encoding must be one of text, base64, json", "body_encoding", 4),
    ),
    # REST send: BrokerProperties header and TimeToLive forms (index 2)
    (
        "REST BrokerProperties not JSON",
        lambda: rest_message(b"", "{", {}, None, 2),
        ("invalid_broker_properties", "BrokerProperties is not JSON", "BrokerProperties", 2),
    ),
    (
        "REST BrokerProperties not an object",
        lambda: rest_message(b"", "[1]", {}, None, 2),
        ("invalid_broker_properties", "BrokerProperties must be a JSON object", "BrokerProperties", 2),
    ),
    (
        "REST TimeToLive text not a number",
        lambda: rest_message(b"", '{"TimeToLive": "soon"}', {}, None, 2),
        ("time_to_live_invalid", "TimeToLive is not a number of seconds", "time_to_live", 2),
    ),
    (
        "REST TimeToLive text NaN",
        lambda: rest_message(b"", '{"TimeToLive": "nan"}', {}, None, 2),
        ("time_to_live_invalid", "TimeToLive is not a number", "time_to_live", 2),
    ),
    (
        "REST TimeToLiveTimeSpan not a TimeSpan",
        lambda: rest_message(b"", '{"TimeToLiveTimeSpan": "soon"}', {}, None, 2),
        (
            "time_to_live_invalid",
            "TimeToLiveTimeSpan is not a TimeSpan ([d.]hh:mm:ss[.fffffff])",
            "time_to_live",
            2,
        ),
    ),
    (
        "REST TimeToLiveTimeSpan out of range",
        lambda: rest_message(b"", '{"TimeToLiveTimeSpan": "24:00:00"}', {}, None, 2),
        (
            "time_to_live_invalid",
            "TimeToLiveTimeSpan has an hour, minute or second out of range",
            "time_to_live",
            2,
        ),
    ),
    # REST batch (the third item is at fault)
    (
        "batch not a list",
        lambda: rest_batch({"Body": "a"}),
        ("invalid_type", "a batch must be a JSON array", "messages", None),
    ),
    (
        "batch item without a string Body",
        lambda: rest_batch([{"Body": "a"}, {"Body": "b"}, {"Body": 1}]),
        ("invalid_type", "each batch item needs a string Body", "Body", 2),
    ),
    (
        "batch item not an object",
        lambda: rest_batch([{"Body": "a"}, {"Body": "b"}, "c"]),
        ("invalid_type", "each batch item needs a string Body", "Body", 2),
    ),
    (
        "batch UserProperties not an object",
        lambda: rest_batch([{"Body": "a"}, {"Body": "b"}, {"Body": "c", "UserProperties": [1]}]),
        ("invalid_type", "UserProperties must be an object", "UserProperties", 2),
    ),
    (
        "batch Body with a lone surrogate",
        lambda: rest_batch([{"Body": "a"}, {"Body": "b"}, {"Body": "c\ud800"}]),
        ("invalid_utf8", "Body holds a lone surrogate, which has no UTF-8 form", "Body", 2),
    ),
    (
        "batch IsBodyBase64 neither true nor false",
        lambda: rest_batch(
            [{"Body": "a"}, {"Body": "b"}, {"Body": "AA==", "BrokerProperties": {"IsBodyBase64": "yes"}}]
        ),
        ("invalid_type", "IsBodyBase64 is true or false", "IsBodyBase64", 2),
    ),
    (
        "batch base64 Body not base64",
        lambda: rest_batch(
            [{"Body": "a"}, {"Body": "b"}, {"Body": "A*", "BrokerProperties": {"IsBodyBase64": True}}]
        ),
        ("body_invalid_base64", "Body is not valid base64", "Body", 2),
    ),
    (
        "batch BrokerProperties with a bad TimeToLive",
        lambda: rest_batch(
            [{"Body": "a"}, {"Body": "b"}, {"Body": "c", "BrokerProperties": {"TimeToLive": "x"}}]
        ),
        ("time_to_live_invalid", "TimeToLive is not a number of seconds", "time_to_live", 2),
    ),
    # Redis door entries (one entry: no index)
    (
        "redis entry without a body",
        lambda: redis_door_message({b"subject": b"s"}, "d"),
        ("field_required", "the entry has no body field", "body", None),
    ),
    (
        "redis field name not UTF-8",
        lambda: redis_door_message({b"body": b"x", b"\xff": b"v"}, "d"),
        ("invalid_utf8", "field names and non-body values must be UTF-8", "b'\\xff'", None),
    ),
    (
        "redis base64 body not base64",
        lambda: redis_door_message({b"body": b"A*", b"body_encoding": b"base64"}, "d"),
        ("body_invalid_base64", "body is not valid base64", "body", None),
    ),
    (
        "redis unknown body encoding",
        lambda: redis_door_message({b"body": b"x", b"body_encoding": b"hex"}, "d"),
        ("body_encoding_invalid", "body_encoding is text or base64", "body_encoding", None),
    ),
    (
        "redis time_to_live not a number",
        lambda: redis_door_message({b"body": b"x", b"time_to_live": b"soon"}, "d"),
        ("time_to_live_invalid", "time_to_live is not a number", "time_to_live", None),
    ),
    (
        "redis application_properties not JSON",
        lambda: redis_door_message({b"body": b"x", b"application_properties": b"{"}, "d"),
        ("invalid_type", "application_properties is not JSON", "application_properties", None),
    ),
    (
        "redis unknown field",
        lambda: redis_door_message({b"body": b"x", b"colour": b"red"}, "d"),
        ("unknown_field", "unknown field 'colour'", "colour", None),
    ),
]


@pytest.mark.parametrize(("case", "call", "refusal"), REFUSALS, ids=[case for case, _, _ in REFUSALS])
def test_each_refusal_names_its_rule_its_field_and_its_index(
    case: str, call: Callable[[], Any], refusal: Refusal
) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        call()

    error = caught.value
    assert (error.code, error.detail, error.field, error.index) == refusal


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("23:59:59", 86399),
        ("00:59:00", 3540),
        ("00:00:59", 59),
        ("00:00:00.25", 0.25),
        ("00:00:01.0000001", 1.0000001),
        ("2.00:00:00", 172800),
        ("00:02", 120),
    ],
)
def test_timespan_fields_up_to_their_bounds_are_taken(text: str, seconds: float) -> None:
    assert timespan_seconds(text) == seconds


@pytest.mark.parametrize("text", ["24:00:00", "00:60:00", "00:00:60"])
def test_timespan_fields_past_their_bounds_are_refused(text: str) -> None:
    with pytest.raises(InvalidMessageError, match="out of range"):
        timespan_seconds(text)


@pytest.mark.parametrize(
    ("flag", "body"),
    [
        (None, b"QUE="),
        (False, b"QUE="),
        ("false", b"QUE="),
        ("False", b"QUE="),
        (True, b"AA"),
        ("true", b"AA"),
        ("True", b"AA"),
    ],
)
def test_is_body_base64_takes_booleans_and_their_two_spellings(flag: object, body: bytes) -> None:
    broker = {} if flag is None else {"IsBodyBase64": flag}

    assert rest_batch([{"Body": "QUE=", "BrokerProperties": broker}])[0][0] == body


@pytest.mark.parametrize("flag", ["TRUE", "FALSE", "yes", "1"])
def test_other_is_body_base64_values_are_refused(flag: object) -> None:
    with pytest.raises(InvalidMessageError, match="IsBodyBase64 is true or false"):
        rest_batch([{"Body": "QUE=", "BrokerProperties": {"IsBodyBase64": flag}}])


def test_a_json_body_keeps_non_ascii_text_as_utf8() -> None:
    body, props = v1_message({"body": {"name": "Zoë"}, "body_encoding": "json"})

    assert body == '{"name":"Zoë"}'.encode()
    assert props == {"content_type": "application/json"}


def test_a_rest_ttl_in_text_or_timespan_becomes_seconds() -> None:
    assert rest_message(b"", '{"TimeToLive": " 1800 "}', {}, None)[1] == {"time_to_live": 1800.0}
    assert rest_message(b"", {"TimeToLiveTimeSpan": "00:00:40"}, {}, None)[1] == {"time_to_live": 40}
    assert rest_message(b"", {"TimeToLive": 30}, {}, None)[1] == {"time_to_live": 30}
