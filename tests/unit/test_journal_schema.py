"""The journal's event layout (``bridge.core.journal``): encode/decode, identity, partitions."""

from __future__ import annotations

from datetime import UTC, datetime

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
