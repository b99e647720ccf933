"""The journal's event layout (``bridge.core.journal``): encode/decode, identity, partitions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from bridge.core import journal as J
from bridge.core import journal_files as F
from bridge.core.journal import EventKind, JournalEvent


@pytest.mark.parametrize(
    "event",
    [
        J.accepted("m-1", 1700000000.123456, door="http", size=123, keys="customer-7", shard=3),
        J.sent("m-1", 1.5, namespace="ns1", role="primary", path="direct", batch="b-1"),
        J.sent("m-1", 1.5, namespace="ns2", role="secondary", path="backlog", batch="b-2", queue="4"),
        J.send_failed("m-1", 2.0, namespace="ns1", role="primary", error_class="outage", batch="b-1"),
        J.role_swapped(3.0, from_role="primary", to_role="secondary", epoch=7, reason="outage: refused"),
        J.failover_engaged(4.0, reason="interval passed"),
        J.failover_ended(5.0),
        J.backlog_rotation_changed(6.0, queue="2", result="removed", reason="send failed"),
        J.ping(7.0, namespace="ns1", ok=False, error_class="outage", count=2),
        J.syphon_receive(8.0, namespace="ns2", queue="0", calls=3, empty=True),
        J.syphoned("m-1", 9.0, namespace="ns2", queue="0"),
        J.received("m-1", 10.0, namespace="ns1", role="primary"),
        J.handled("m-1", 11.0),
        J.duplicate_suppressed("m-1", 12.0, namespace="ns2", role="secondary"),
        J.dead_lettered("m-1", 13.0, where="local", reason="message_too_large"),
        J.quarantined(None, 14.0, reason="corrupt_entry"),
    ],
)
def test_every_kind_round_trips_through_the_stream_layout(event: JournalEvent) -> None:
    fields = event.encode()
    as_stream = {fields[i].encode(): fields[i + 1].encode() for i in range(0, len(fields), 2)}

    assert fields[:4] == ["v", "1", "k", str(event.kind)]  # the append script finds the kind there
    assert JournalEvent.decode(as_stream) == event


def test_unknown_fields_and_kinds_of_a_later_version_are_kept() -> None:
    decoded = JournalEvent.decode({b"v": b"2", b"k": b"teleported", b"t": b"1.0", b"zz": b"new"})

    assert decoded.kind == "teleported"
    assert decoded.extra == {"zz": "new"}
    assert decoded.encode()[-2:] == ["zz", "new"]


def test_an_entry_without_a_kind_is_not_an_event() -> None:
    with pytest.raises(ValueError, match="without a kind"):
        JournalEvent.decode({b"body": b"x"})


def test_reasons_are_cut_to_a_bounded_length() -> None:
    encoded = J.dead_lettered("m", 1.0, where="local", reason="x" * 1000).encode()

    assert len(encoded[encoded.index("x") + 1]) == J.MAX_REASON_LENGTH


@pytest.mark.parametrize(
    "stamp",
    ["1970-01-01T00:00:00", "2000-02-29T23:59:59", "2026-05-01T13:30:00", "2100-03-01T00:00:01"],
)
def test_partition_of_matches_the_calendar(stamp: str) -> None:
    moment = datetime.fromisoformat(stamp).replace(tzinfo=UTC)

    assert F.partition_of(int(moment.timestamp() * 1000)) == (moment.strftime("%Y-%m-%d"), moment.hour)


def test_stream_ids_split_and_advance() -> None:
    assert J.split_stream_id("1700000000000-5") == (1700000000000, 5)
    assert J.next_stream_id("1700000000000-5") == "1700000000000-6"
    assert J.event_id("orders", "1-2") == "orders/1-2"


def test_groups_by_partition_are_contiguous_id_ranges_in_order() -> None:
    hour = 3_600_000
    entries = [(f"{ms}-0", J.handled("m", 0.0)) for ms in (hour - 2, hour - 1, hour, hour + 5, 2 * hour)]

    groups = F.group_by_partition(entries)

    assert [[sid for sid, _ in part] for part in groups.values()] == [
        [f"{hour - 2}-0", f"{hour - 1}-0"],
        [f"{hour}-0", f"{hour + 5}-0"],
        [f"{2 * hour}-0"],
    ]
    assert list(groups) == [("1970-01-01", 0), ("1970-01-01", 1), ("1970-01-01", 2)]


def test_a_rolled_row_has_every_column_and_its_identity() -> None:
    row = F.to_row("orders", "1700000000000-3", J.accepted("m-1", 1.25, door="producer", size=10))

    assert set(row) == {name for name, _ in F.COLUMNS} - {"rolled_at"}
    assert row["event_id"] == "orders/1700000000000-3"
    assert (row["stream_ms"], row["stream_seq"], row["kind"], row["time"]) == (
        1700000000000,
        3,
        "accepted",
        1.25,
    )
    assert row["extra"] is None
    assert EventKind(row["kind"]) is EventKind.ACCEPTED


def test_the_rolls_column_reader_reads_entries_as_decode_does() -> None:
    events = [
        J.accepted("m-1", 1700000000.25, door="http", size=10, keys="k", shard=2),
        J.sent("m-1", 1700000000.5, namespace="ns1", role="primary", path="backlog", batch="b", queue="3"),
        J.JournalEvent.decode({b"v": b"2", b"k": b"later_kind", b"t": b"1.0", b"zz": b"new"}),
    ]
    entries = [
        (f"1700000000000-{i}", dict(zip(*[iter(x.encode() for x in e.encode())] * 2, strict=True)))
        for i, e in enumerate(events)
    ]
    entries.append(("1700000000001-0", {b"body": b"not an event"}))

    columns = F.columns_from_entries("orders", entries)

    for index, (stream_id, event) in enumerate(zip([s for s, _ in entries], events, strict=False)):
        row = F.to_row("orders", stream_id, event)
        for name, _ in F.COLUMNS:
            got = columns[name][index]
            got = got.decode() if isinstance(got, bytes) else got
            want = round(row["time"] * 1_000_000) if name == "time" else row.get(name)
            if name != "version":
                assert got == want, (index, name)
    assert (columns["kind"][3], columns["extra"][3]) == ("undecodable", '{"body": "not an event"}')


def test_a_batch_entry_stands_for_one_event_per_message_id() -> None:
    template = J.JournalEvent(J.EventKind.ACCEPTED, 5.0, door="http")
    items = J.encode_batch(template, ["m1", "m2"], sizes=[10, 20], shards=[0, 3])
    data = dict(zip(items[::2], items[1::2], strict=True))
    data["Y"] = '["k", null]'

    events = J.JournalEvent.decode_entry(data)
    columns = F.columns_from_entries("orders", [("9-0", data)])

    assert [(e.message_id, e.size, e.shard, e.keys, e.door) for e in events] == [
        ("m1", 10, 0, "k", "http"),
        ("m2", 20, 3, None, "http"),
    ]
    assert columns["event_id"] == ["orders/9-0/0", "orders/9-0/1"]
    assert (columns["message_id"], columns["size"], columns["keys"]) == (["m1", "m2"], [10, 20], ["k", None])
    with pytest.raises(ValueError, match="no MessageId"):
        J.encode_batch(J.handled("m", 1.0), ["x"])


# Each constructor's stream layout, field by field: what the roll, the ledger and `bridge journal` read. The
# times are whole numbers so the layout shows that ``t`` is always written as a float.
@pytest.mark.parametrize(
    ("make", "layout"),
    [
        (
            lambda: J.accepted(
                "m-1", 7, door="http", size=123, keys="customer-7", shard=3, trace_id="ab" * 16
            ),
            {"k": "accepted", "t": "7.0", "m": "m-1", "d": "http", "z": "123", "y": "customer-7", "s": "3"}
            | {"i": "ab" * 16},
        ),
        (
            lambda: J.accepted("m-2", 7, door="rest", size=5),
            {"k": "accepted", "t": "7.0", "m": "m-2", "d": "rest", "z": "5"},
        ),
        (
            lambda: J.sent(
                "m-1", 8, namespace="ns2", role="secondary", path="backlog", batch="b-2", queue="4"
            ),
            {
                "k": "sent",
                "t": "8.0",
                "m": "m-1",
                "n": "ns2",
                "r": "secondary",
                "p": "backlog",
                "b": "b-2",
                "q": "4",
            },
        ),
        (
            lambda: J.send_failed(
                "m-1", 9, namespace="ns1", role="primary", error_class="outage", batch="b-1"
            ),
            {
                "k": "send_failed",
                "t": "9.0",
                "m": "m-1",
                "n": "ns1",
                "r": "primary",
                "b": "b-1",
                "c": "outage",
            },
        ),
        (
            lambda: J.role_swapped(
                3, from_role="primary", to_role="secondary", epoch=7, reason="outage: refused"
            ),
            {
                "k": "role_swapped",
                "t": "3.0",
                "x": "outage: refused",
                "f": "primary",
                "u": "secondary",
                "g": "7",
            },
        ),
        (
            lambda: J.failover_engaged(4, reason="interval passed"),
            {"k": "failover_engaged", "t": "4.0", "x": "interval passed"},
        ),
        (lambda: J.failover_engaged(4), {"k": "failover_engaged", "t": "4.0"}),
        (
            lambda: J.failover_ended(5, reason="primary healthy"),
            {"k": "failover_ended", "t": "5.0", "x": "primary healthy"},
        ),
        (lambda: J.failover_ended(5), {"k": "failover_ended", "t": "5.0"}),
        (
            lambda: J.backlog_rotation_changed(6, queue="2", result="removed", reason="send failed"),
            {"k": "backlog_rotation_changed", "t": "6.0", "x": "send failed", "q": "2", "o": "removed"},
        ),
        (
            lambda: J.backlog_rotation_changed(6, queue="2", result="readmitted"),
            {"k": "backlog_rotation_changed", "t": "6.0", "q": "2", "o": "readmitted"},
        ),
        (
            lambda: J.ping(7, namespace="ns1", ok=False, error_class="outage", count=2),
            {"k": "ping", "t": "7.0", "n": "ns1", "r": "primary", "c": "outage", "o": "failed", "j": "2"},
        ),
        (
            lambda: J.ping(7, namespace="ns1", ok=True),
            {"k": "ping", "t": "7.0", "n": "ns1", "r": "primary", "o": "accepted", "j": "1"},
        ),
        (
            lambda: J.syphon_receive(8, namespace="ns2", queue="0", calls=3, empty=True),
            {
                "k": "syphon_receive",
                "t": "8.0",
                "n": "ns2",
                "r": "secondary",
                "q": "0",
                "o": "empty",
                "j": "3",
            },
        ),
        (
            lambda: J.syphon_receive(8, namespace="ns2", queue="1", calls=1, empty=False),
            {
                "k": "syphon_receive",
                "t": "8.0",
                "n": "ns2",
                "r": "secondary",
                "q": "1",
                "o": "messages",
                "j": "1",
            },
        ),
        (
            lambda: J.syphoned("m-1", 9, namespace="ns2", queue="0"),
            {"k": "syphoned", "t": "9.0", "m": "m-1", "n": "ns2", "r": "secondary", "q": "0"},
        ),
        (
            lambda: J.received("m-1", 10, namespace="ns1", role="primary"),
            {"k": "received", "t": "10.0", "m": "m-1", "n": "ns1", "r": "primary"},
        ),
        (lambda: J.handled("m-1", 11), {"k": "handled", "t": "11.0", "m": "m-1"}),
        (
            lambda: J.duplicate_suppressed("m-1", 12, namespace="ns2", role="secondary"),
            {"k": "duplicate_suppressed", "t": "12.0", "m": "m-1", "n": "ns2", "r": "secondary"},
        ),
        (
            lambda: J.dead_lettered("m-1", 13, where="backlog", reason="message_too_large"),
            {"k": "dead_lettered", "t": "13.0", "m": "m-1", "x": "message_too_large", "w": "backlog"},
        ),
        (
            lambda: J.quarantined(None, 14, reason="corrupt_entry"),
            {"k": "quarantined", "t": "14.0", "x": "corrupt_entry"},
        ),
    ],
)
def test_each_constructor_writes_its_documented_fields(
    make: Callable[[], JournalEvent], layout: dict[str, str]
) -> None:
    fields = make().encode()

    assert fields[:2] == ["v", "1"]
    assert dict(zip(fields[2::2], fields[3::2], strict=True)) == layout


def test_a_batch_entry_as_redis_returns_it_decodes_bytes_and_replaces_bad_utf8() -> None:
    template = J.JournalEvent(
        J.EventKind.SENT, 5.0, namespace="ns1", role="primary", path="direct", batch="b"
    )
    items = J.encode_batch(template, ["m1", "m2"], sizes=[10, 20], shards=[0, 3])
    raw = {key.encode(): value.encode() for key, value in zip(items[::2], items[1::2], strict=True)}
    raw[b"zz"] = b"caf\xff"

    events = J.JournalEvent.decode_entry(raw)

    # The arrays are compact JSON: one entry per request stays small on the hot path.
    assert (raw[b"M"], raw[b"Z"], raw[b"S"]) == (b'["m1","m2"]', b"[10,20]", b"[0,3]")
    assert [(e.kind, e.message_id, e.size, e.shard, e.namespace) for e in events] == [
        (EventKind.SENT, "m1", 10, 0, "ns1"),
        (EventKind.SENT, "m2", 20, 3, "ns1"),
    ]
    assert events[0].extra == {"zz": "caf\ufffd"}


def test_a_single_entry_decodes_to_one_event_and_bad_utf8_is_replaced() -> None:
    raw = {b"v": b"1", b"k": b"dead_lettered", b"t": b"3.5", b"m": b"m-\xff", b"x": b"too large"}

    assert J.JournalEvent.decode_entry(raw) == [
        J.dead_lettered("m-\ufffd", 3.5, where=None, reason="too large")  # type: ignore[arg-type]
    ]
    assert J.JournalEvent.decode(raw).message_id == "m-\ufffd"


def test_partition_of_matches_the_calendar_on_every_day_of_a_leap_cycle_and_before_1970() -> None:
    day = 86_400_000
    start = datetime(1967, 12, 30, tzinfo=UTC)
    for offset in range(4 * 366):
        moment = start + timedelta(days=offset, hours=offset % 24)
        assert F.partition_of(int(moment.timestamp() * 1000)) == (moment.strftime("%Y-%m-%d"), moment.hour)
    for stamp in ("1600-02-29T01:00:00", "1600-03-01T00:00:00", "1599-12-31T23:00:00", "0400-03-01T00:00:00"):
        moment = datetime.fromisoformat(stamp).replace(tzinfo=UTC)
        ms = int(moment.timestamp() * 1000)
        assert F.partition_of(ms) == (moment.strftime("%Y-%m-%d").zfill(10), moment.hour), stamp
    assert F.partition_of(-day) == ("1969-12-31", 0)
    # Around the start of the algorithm's first era (day -719468 is 0000-03-01; year 0 is a leap year)
    assert F.partition_of(-719468 * day) == ("0000-03-01", 0)
    assert F.partition_of(-719469 * day) == ("0000-02-29", 0)


def test_a_rolled_row_keeps_plain_text_kinds_and_sorted_extra_fields() -> None:
    event = J.JournalEvent.decode({b"k": b"sent", b"t": b"1.0", b"zz": b"2", b"aa": b"1"})

    row = F.to_row("orders", "5-0", event)

    assert type(row["kind"]) is str
    assert row["time"] == 1.0
    assert row["extra"] == '{"aa": "1", "zz": "2"}'


def test_the_column_reader_keeps_version_time_and_sorted_extras_and_reads_bad_utf8() -> None:
    entries = [
        ("7", {b"v": b"1", b"k": b"handled", b"t": b"2.5", b"m": b"m-1", b"zz": b"2", b"\xffa": b"x\xff"}),
        ("8-2", {b"body": b"not an event", b"at": b"9"}),
    ]

    columns = F.columns_from_entries("orders", entries)

    assert columns["version"] == [1, None]
    assert columns["time"] == [2_500_000, 0]
    assert (columns["stream_ms"], columns["stream_seq"]) == ([7, 8], [0, 2])
    assert columns["kind"] == [b"handled", F.UNDECODABLE]  # text stays as the stream gave it
    assert columns["extra"] == ['{"zz": "2", "\\ufffda": "x\\ufffd"}', '{"at": "9", "body": "not an event"}']
