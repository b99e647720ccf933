"""Envelope encoding, partitioning, door wire formats, auth and Redis URLs (pure, no network)."""

from __future__ import annotations

import base64
import hashlib
import uuid
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.auth import ApiKey, authenticate_key, authenticate_sas, hash_api_key, sas_signature
from bridge.core.door_formats import door_message_id, redis_door_message, rest_batch, rest_message, v1_message
from bridge.core.envelope import Envelope, decode_properties, encode_properties
from bridge.core.partitioning import choose_shard, partition_key, shard_of_key
from bridge.errors import (
    AuthenticationError,
    ConfigurationError,
    CorruptEntryError,
    EntityNotAllowedError,
    InvalidMessageError,
    PartitionUnavailableError,
)
from bridge.outbox import keys
from bridge.redis.connection import parse_redis_url

GOOD = Envelope(entity="orders", message_id="m", body=b"b", accepted_at=1.0)


# --- envelope ---------------------------------------------------------------------------------------------


def test_encoding_is_compact_and_versioned():
    assert GOOD.encode() == {b"v": b"1", b"id": b"m", b"b": b"b", b"at": b"1.0", b"e": b"orders"}


@pytest.mark.parametrize(
    ("damage", "field"),
    [
        ({b"v": b"2"}, "v"),
        ({b"v": None}, "v"),
        ({b"id": None}, None),
        ({b"at": b"soon"}, None),
        ({b"at": b"inf"}, "at"),
        ({b"ttl": b"nan"}, "ttl"),
        ({b"sch": b"2030-01-01T00:00:00"}, "sch"),
        ({b"sch": b"garbage"}, None),
        ({b"sid": b"\xff"}, "sid"),
        ({b"ap": b"{"}, "ap"),
        ({b"ap": b"[1]"}, "ap"),
        ({b"ap": b'{"a": null}'}, "ap"),
        ({b"ap": b'{"a": {"$what": 1}}'}, "ap"),
        ({b"ap": b'{"a": {"$uuid": "nope"}}'}, "ap"),
    ],
)
def test_decode_refuses_damaged_entries_with_the_field(damage: dict[bytes, bytes | None], field: str | None):
    fields = GOOD.encode()
    for name, value in damage.items():
        if value is None:
            fields.pop(name, None)
        else:
            fields[name] = value
    with pytest.raises(CorruptEntryError) as caught:
        Envelope.decode(fields)
    if field is not None:
        assert caught.value.field == field


def test_decode_ignores_unknown_fields_of_the_same_version():
    fields = {**GOOD.encode(), b"future": b"x"}
    assert Envelope.decode(fields) == GOOD


# --- partitioning -----------------------------------------------------------------------------------------


def _env(**props: Any) -> Envelope:
    return Envelope(entity="e", message_id=props.pop("message_id", "mid"), body=b"", accepted_at=0.0, **props)


@pytest.mark.parametrize(
    ("props", "dedup", "key"),
    [
        ({"session_id": "s", "partition_key": "s"}, True, "s"),
        ({"session_id": "s"}, False, "s"),
        ({"partition_key": "p"}, True, "p"),
        ({}, True, "mid"),
        ({}, False, None),
    ],
)
def test_partition_key_precedence(props: dict[str, Any], dedup: bool, key: str | None):
    assert partition_key(_env(**props), dedup) == key


def test_keyed_shard_is_crc32_and_refuses_an_unavailable_shard():
    assert shard_of_key("customer-7", 8) == zlib.crc32(b"customer-7") % 8
    shard = choose_shard("customer-7", 8, round_robin=123)
    assert shard == shard_of_key("customer-7", 8)
    with pytest.raises(PartitionUnavailableError):
        choose_shard("customer-7", 8, 0, unavailable={shard})


def test_keyless_messages_round_robin_and_skip_unavailable_shards():
    assert [choose_shard(None, 3, n) for n in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [choose_shard(None, 3, n, unavailable={1}) for n in range(3)] == [0, 2, 2]
    with pytest.raises(PartitionUnavailableError):
        choose_shard(None, 2, 0, unavailable={0, 1})


@given(st.text(), st.integers(min_value=1, max_value=64), st.integers(), st.integers())
def test_same_key_same_shard_whatever_the_counter(key: str, shards: int, rr1: int, rr2: int):
    assert choose_shard(key, shards, rr1) == choose_shard(key, shards, rr2) < shards


# --- door formats -----------------------------------------------------------------------------------------


def test_v1_message_encodings():
    assert v1_message({"body": "é"}) == ("é".encode(), {})
    assert v1_message({"body": base64.b64encode(b"\x00").decode(), "body_encoding": "base64"})[0] == b"\x00"
    body, props = v1_message({"body": [1, {"a": None}], "body_encoding": "json"})
    assert body == b'[1,{"a":null}]'
    assert props == {"content_type": "application/json"}


def test_rest_message_maps_broker_properties_and_types_custom_headers():
    body, props = rest_message(
        b"x!",
        '{"MessageId": "m", "Label": "l", "ForcePersistence": true, '
        '"ScheduledEnqueueTimeUtc": "Sun, 06 Nov 1994 08:49:37 GMT"}',
        {"n": "5", "f": "1.5", "b": "false", "q": '"7"', "s": "plain", "o": '{"a": 1}'},
        "text/plain",
    )
    assert body == b"x!"
    assert props["message_id"] == "m"
    assert props["subject"] == "l"
    assert props["content_type"] == "text/plain"
    assert props["scheduled_enqueue_time_utc"] == "1994-11-06T08:49:37+00:00"
    assert props["application_properties"] == {
        "n": 5,
        "f": 1.5,
        "b": False,
        "q": "7",
        "s": "plain",
        "o": '{"a": 1}',
    }


def test_rest_batch_needs_a_list_of_items_with_body():
    assert rest_batch([{"Body": "a"}]) == [(b"a", {})]
    for bad in (
        {"Body": "a"},
        [{"Body": 1}],
        [{"Body": "a", "UserProperties": []}],
    ):
        with pytest.raises(InvalidMessageError):
            rest_batch(bad)


def test_redis_door_entry_parsing():
    body, props = redis_door_message(
        {b"body": b"\xff", b"time_to_live": b"2.5", b"application_properties": b'{"a": 1}', b"subject": b"s"},
        "derived",
    )
    assert body == b"\xff"
    assert props == {
        "message_id": "derived",
        "time_to_live": 2.5,
        "application_properties": {"a": 1},
        "subject": "s",
    }
    assert redis_door_message({b"body": b"AA==", b"body_encoding": b"base64"}, "d")[0] == b"\x00"
    assert redis_door_message({b"body": b"x", b"message_id": b"given"}, "d")[1]["message_id"] == "given"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({}, "field_required"),
        ({b"body": b"x", b"time_to_live": b"soon"}, "time_to_live_invalid"),
        ({b"body": b"x", b"application_properties": b"{"}, "invalid_type"),
        ({b"body": b"x", b"color": b"red"}, "unknown_field"),
        ({b"body": b"x", b"subject": b"\xff"}, "invalid_utf8"),
        ({b"body": b"*", b"body_encoding": b"base64"}, "body_invalid_base64"),
        ({b"body": b"x", b"body_encoding": b"hex"}, "body_encoding_invalid"),
    ],
)
def test_redis_door_refusals(fields: dict[bytes, bytes], code: str):
    with pytest.raises(InvalidMessageError) as caught:
        redis_door_message(fields, "d")
    assert caught.value.code == code


def test_door_message_id_is_stable_per_entry():
    assert door_message_id("e", "1-0") == door_message_id("e", "1-0") != door_message_id("e", "1-1")


# --- auth -------------------------------------------------------------------------------------------------


def test_api_keys_are_checked_by_digest_and_allow_list():
    keys_ = [
        ApiKey("ops", hash_api_key("secret-1")),
        ApiKey("app", hash_api_key("secret-2"), frozenset({"orders"})),
    ]
    assert hash_api_key("secret-1") == hashlib.sha256(b"secret-1").hexdigest()
    assert authenticate_key("secret-1", keys_).name == "ops"
    app = authenticate_key("secret-2", keys_)
    app.check_entity("orders")
    with pytest.raises(EntityNotAllowedError):
        app.check_entity("payments")
    with pytest.raises(AuthenticationError) as caught:
        authenticate_key("secret-3", keys_)
    assert "secret" not in str(caught.value)


def test_sas_tokens():
    sig = sas_signature("https://ns/orders", 2000, "k3y")
    from urllib.parse import quote

    token = f"SharedAccessSignature sr=https%3A%2F%2Fns%2Forders&sig={quote(sig, safe='')}&se=2000&skn=root"
    assert authenticate_sas(token, key_name="root", key="k3y", now=1000).name == "sas:root"
    for bad_token, now in [
        (token, 3000),  # expired
        (token.replace("skn=root", "skn=other"), 1000),
        (token.replace("se=2000", "se=2001"), 1000),
        ("SharedAccessSignature sr=x", 1000),
        ("Bearer x", 1000),
    ]:
        with pytest.raises(AuthenticationError):
            authenticate_sas(bad_token, key_name="root", key="k3y", now=now)
    with pytest.raises(AuthenticationError):
        authenticate_sas(token, key_name="root", key="wrong", now=1000)


# --- keys and URLs ----------------------------------------------------------------------------------------


def test_every_key_of_an_entity_shares_one_hash_tag():
    tagged = [
        keys.outbox("a/b", 3),
        keys.stats("a/b"),
        keys.message_id_prefix("a/b"),
        keys.ingress("a/b"),
        keys.quarantine("a/b"),
        keys.deadletter("a/b"),
    ]
    assert all(key.startswith("bridge:{a/b}:") for key in tagged)
    assert keys.outbox("x}y", 0).startswith("bridge:{x%7Dy}:")


@pytest.mark.parametrize(
    ("url", "kind", "hosts", "service", "db", "password"),
    [
        ("redis://127.0.0.1:6379/0", "single", (), None, 0, None),
        (
            "redis+sentinel://:p%40ss@s1:26379,s2:26380/mymaster/2",
            "sentinel",
            (("s1", 26379), ("s2", 26380)),
            "mymaster",
            2,
            "p@ss",
        ),
        ("redis+sentinel://s1/primary", "sentinel", (("s1", 6379),), "primary", 0, None),
        (
            "rediss+cluster://user:pw@[::1]:7000,10.0.0.2:7001",
            "cluster",
            (("::1", 7000), ("10.0.0.2", 7001)),
            None,
            0,
            "pw",
        ),
    ],
)
def test_redis_urls(
    url: str, kind: str, hosts: tuple[Any, ...], service: str | None, db: int, password: str | None
):
    target = parse_redis_url(url)
    assert (target.kind, target.hosts, target.service_name, target.db, target.password) == (
        kind,
        hosts,
        service,
        db,
        password,
    )
    assert "pw" not in repr(target) and "p@ss" not in repr(target)


@pytest.mark.parametrize(
    "url",
    [
        "127.0.0.1:6379",
        "redis+nope://h",
        "redis+sentinel://h:1",
        "redis+sentinel://:pw@/m",
        "redis+cluster://h:1/0",
        "redis+sentinel://h:x/m",
        "redis+sentinel://h:1/m/db",
    ],
)
def test_bad_redis_urls_never_echo_the_url(url: str):
    with pytest.raises(ConfigurationError) as caught:
        parse_redis_url(url)
    assert url not in str(caught.value)


def test_choose_shard_refusals_say_why() -> None:
    with pytest.raises(ValueError, match=r"^an outbox has at least one shard$"):
        choose_shard(None, 0, 0)
    with pytest.raises(PartitionUnavailableError, match=r"^every outbox shard is unavailable$"):
        choose_shard(None, 2, 0, unavailable={0, 1})
    shard = shard_of_key("k", 4)
    with pytest.raises(
        PartitionUnavailableError, match=rf"^outbox shard {shard} for this partition key is unavailable$"
    ):
        choose_shard("k", 4, 0, unavailable={shard})


def test_application_properties_are_stored_as_compact_tagged_json() -> None:
    props = {"b": b"\x00\xff", "u": uuid.UUID(int=1), "s": "Zoë", "n": 1, "t": timedelta(seconds=1.5)}

    assert (
        encode_properties(props)
        == (
            '{"b":{"$bytes":"AP8="},"u":{"$uuid":"00000000-0000-0000-0000-000000000001"},"s":"Zoë","n":1,'
            '"t":{"$timedelta":1.5}}'
        ).encode()
    )
    assert decode_properties(encode_properties(props)) == props
    with pytest.raises(ValueError):
        encode_properties({"f": float("nan")})  # not JSON


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"a":{"$colour":1}}', "application property 'a' has an unknown tag"),
        (b'{"a":{"$bytes":"AA==!"}}', "application property 'a' has a malformed $bytes"),
    ],
)
def test_stored_properties_it_did_not_write_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(CorruptEntryError) as caught:
        decode_properties(raw)
    assert (str(caught.value), caught.value.field) == (message, "ap")


@pytest.mark.parametrize(
    ("damage", "message", "field"),
    [
        ({b"v": b"2"}, "unsupported outbox entry version b'2'", "v"),
        ({b"id": None}, "outbox entry lacks id, e or b", None),
        ({b"e": None}, "outbox entry lacks id, e or b", None),
        ({b"b": None}, "outbox entry lacks id, e or b", None),
        ({b"at": None}, "outbox entry lacks at", "at"),
        ({b"at": b"soon"}, "malformed outbox entry: could not convert string to float: 'soon'", None),
        ({b"at": b"inf"}, "field at is not a finite number", "at"),
        ({b"sch": b"2030-01-01T00:00:00"}, "scheduled time has no offset", "sch"),
        ({b"sid": b"\xff"}, "field sid is not UTF-8", "sid"),
        ({b"ap": b"{"}, "application properties are not JSON", "ap"),
        ({b"ap": b"[1]"}, "application properties are not a JSON object", "ap"),
        ({b"ap": b'{"a": [1]}'}, "application property 'a' has an unsupported type", "ap"),
    ],
)
def test_a_damaged_entry_is_quarantined_with_a_reason_naming_the_field(
    damage: dict[bytes, bytes | None], message: str, field: str | None
) -> None:
    fields = GOOD.encode()
    for name, value in damage.items():
        if value is None:
            fields.pop(name)
        else:
            fields[name] = value
    with pytest.raises(CorruptEntryError) as caught:
        Envelope.decode(fields)
    assert (str(caught.value), caught.value.field) == (message, field)


def test_a_stored_timestamp_property_without_an_offset_reads_as_utc() -> None:
    assert decode_properties(b'{"t":{"$datetime":"2026-05-01T12:00:00"}}') == {
        "t": datetime(2026, 5, 1, 12, tzinfo=UTC)
    }
