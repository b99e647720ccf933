"""The size estimate of ``bridge.core.message_fields`` against the SDK's own AMQP encoder.

The estimate must never be below what the SDK writes (a low one lets the broker reject a message the bridge
judged to fit); where the encoding has one size, it is that size, so the estimate is not needlessly high.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus._pyamqp._encode import encode_value

from bridge.core.message_fields import (
    FIXED_OVERHEAD,
    MessageFields,
    PropertyValue,
    encoded_size,
    properties_size,
    value_size,
)
from bridge.servicebus.messages import sdk_property_value


def _sdk_bytes(value: object) -> int:
    out = bytearray()
    encode_value(out, value)
    return len(out)


VALUES: dict[str, PropertyValue] = {
    "null": None,
    "true": True,
    "false": False,
    "str8-longest": "a" * 255,
    "str32-shortest": "a" * 256,
    "str32-utf8": "é" * 128,  # 256 bytes of UTF-8
    "vbin8-longest": b"x" * 255,
    "vbin32-shortest": b"x" * 256,
    "uuid": uuid.UUID(int=1),
    "double": 1.5,
    "long": 2**40,  # outside int32: AMQP long
    "long-min": -(2**63),
    "timestamp": datetime(2026, 5, 1, tzinfo=UTC),
    "timespan": timedelta(seconds=3),  # a described long (the timespan descriptor)
}


@pytest.mark.parametrize("value", list(VALUES.values()), ids=list(VALUES))
def test_a_property_value_is_estimated_at_its_encoded_size(value: PropertyValue) -> None:
    assert value_size(value) == _sdk_bytes(sdk_property_value(value))


@pytest.mark.parametrize("value", [0, 7, -(2**31), 2**31 - 1])
def test_an_int32_property_is_estimated_from_above(value: int) -> None:
    assert value_size(value) >= _sdk_bytes(sdk_property_value(value))


@pytest.mark.parametrize("count", [1, 100, 1000])
def test_an_application_properties_section_is_estimated_from_above(count: int) -> None:
    properties: dict[str, PropertyValue] = {f"flag-{i}": i % 2 == 0 for i in range(count)}
    properties |= {f"span-{i}": timedelta(seconds=i) for i in range(count)}

    encoded = {"TYPE": "MAP", "VALUE": [(key, sdk_property_value(v)) for key, v in properties.items()]}

    assert properties_size(properties) >= _sdk_bytes(encoded)
    assert properties_size({}) == 0


@pytest.mark.parametrize(
    ("fields", "added"),
    [
        (MessageFields("m"), 0),
        (MessageFields("m", session_id="s" * 10), 12),  # str8 of the SessionId
        (MessageFields("m", partition_key="p" * 10), 21 + 12),  # annotation key and value
        (MessageFields("m", time_to_live=30.0), 5),  # the header's ttl (uint)
        (MessageFields("m", scheduled_enqueue_time_utc=datetime(2026, 5, 1, tzinfo=UTC)), 30 + 9),
        (MessageFields("m", body_size=1000), 1000),
    ],
)
def test_each_broker_field_adds_its_encoding_to_the_estimate(fields: MessageFields, added: int) -> None:
    assert encoded_size(fields) == FIXED_OVERHEAD + 5 + added
