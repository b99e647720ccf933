"""The journal's rolled form: the columns of a Parquet journal file and the folder each event goes to.

The roll (``bridge.journal.roll``) turns stream entries (``bridge.core.journal``) into rows with these
columns and writes them into Hive partitions by the stream id's UTC hour; the ledger reads them back with
the same column list. Pure: dates are computed from the milliseconds without a clock or a timezone database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any, TypeVar

from bridge.core.journal import BATCH_FIELDS, FIELD_NAMES, VERSION, JournalEvent, event_id, split_stream_id

COLUMNS: tuple[tuple[str, str], ...] = (
    ("event_id", "string"),
    ("entity", "string"),
    ("stream_ms", "int64"),
    ("stream_seq", "int64"),
    ("version", "int32"),
    ("kind", "string"),
    ("time", "timestamp"),
    ("message_id", "string"),
    ("door", "string"),
    ("size", "int64"),
    ("keys", "string"),
    ("namespace", "string"),
    ("role", "string"),
    ("path", "string"),
    ("batch", "string"),
    ("error_class", "string"),
    ("reason", "string"),
    ("where", "string"),
    ("queue", "string"),
    ("result", "string"),
    ("from_role", "string"),
    ("to_role", "string"),
    ("epoch", "int64"),
    ("count", "int64"),
    ("shard", "int32"),
    ("trace_id", "string"),
    ("extra", "string"),
    ("rolled_at", "timestamp"),
)
"""Columns of a rolled journal file, in order, with their logical types (``time``: UTC microseconds).

The roll adds ``event_id``, ``entity``, the stream id's parts and ``rolled_at`` (when the roll wrote the
row: the live view's watermark, since rolls happen in order while event times may be old); ``extra``
holds unknown fields as JSON. Files live in ``date=YYYY-MM-DD/hour=HH/`` folders (Hive partitions, from the
stream id's time)."""


def to_row(entity: str, stream_id: str, event: JournalEvent) -> dict[str, Any]:
    """One rolled row (time still epoch seconds; the adapter converts it to its timestamp type)."""
    ms, seq = split_stream_id(stream_id)
    row: dict[str, Any] = {
        "event_id": event_id(entity, stream_id),
        "entity": entity,
        "stream_ms": ms,
        "stream_seq": seq,
        "version": VERSION,
        "kind": str(event.kind),
        "time": event.at,
        "extra": json.dumps(event.extra, sort_keys=True) if event.extra else None,
    }
    for item in fields(event):
        if item.name not in ("kind", "at", "extra"):
            row[item.name] = getattr(event, item.name)
    return row


T = TypeVar("T")
_INTEGER_COLUMNS = frozenset({"size", "epoch", "count", "shard"})
_COLUMN_OF_FIELD: dict[bytes | str, str] = {
    key: ("time" if name == "at" else name)
    for name, short in FIELD_NAMES.items()
    for key in (short, short.encode())
}
UNDECODABLE = "undecodable"
"""The kind of a stream entry that has no kind (not a journal event): kept, all its fields in ``extra``."""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def columns_from_entries(
    entity: str, entries: Sequence[tuple[str, Mapping[Any, Any]]]
) -> dict[str, list[Any]]:
    """The rolled columns of raw stream entries ``(stream id, fields)`` (``rolled_at`` left empty), read as
    ``JournalEvent.decode_entry`` reads them — a batch entry becomes one row per MessageId — without
    building an event per entry (the roll's hot loop). ``time`` is in whole microseconds; text values stay
    as the stream gave them (``bytes`` from a binary client: the Arrow conversion decodes UTF-8 once per
    column)."""
    names = [name for name, _ in COLUMNS]
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for stream_id, data in entries:
        ms, _, seq = stream_id.partition("-")
        row: dict[str, Any] = dict.fromkeys(names)
        row["event_id"] = f"{entity}/{stream_id}"
        row["entity"] = entity
        row["stream_ms"], row["stream_seq"] = int(ms), int(seq or 0)
        extra: dict[str, str] | None = None
        batch: list[Any] | None = None
        per_id: dict[str, list[Any]] = {}
        for key, value in data.items():
            column = _COLUMN_OF_FIELD.get(key)
            if column is None:
                name = _text(key)
                if name == "v":
                    row["version"] = int(value)
                elif name == "M":
                    batch = json.loads(value)
                elif name in BATCH_FIELDS:
                    per_id[_COLUMN_OF_FIELD[BATCH_FIELDS[name]]] = json.loads(value)
                else:
                    extra = extra or {}
                    extra[name] = _text(value)
            elif column == "time":
                row["time"] = round(float(value) * 1_000_000)
            elif column in _INTEGER_COLUMNS:
                row[column] = int(value)
            else:
                row[column] = value
        if row["kind"] is None:
            row["kind"] = UNDECODABLE
            row["time"] = 0
            extra, batch = {_text(k): _text(v) for k, v in data.items()}, None
        if extra:
            row["extra"] = json.dumps(extra, sort_keys=True)
        if batch is None:
            for name in names:
                columns[name].append(row[name])
            continue
        for index, message_id in enumerate(batch):
            row["event_id"] = f"{entity}/{stream_id}/{index}"
            row["message_id"] = message_id
            for column, values in per_id.items():
                row[column] = values[index]
            for name in names:
                columns[name].append(row[name])
    return columns


def partition_of(stream_ms: int) -> tuple[str, int]:
    """``("YYYY-MM-DD", hour)`` (UTC) of a stream id's millisecond time: the folder its event rolls into."""
    days, rest = divmod(stream_ms // 1000, 86400)
    return _civil_date(days), rest // 3600


def _civil_date(days: int) -> str:
    # Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm), without a clock or
    # a timezone database, so the core stays pure.
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return f"{year:04d}-{month:02d}-{day:02d}"


def group_by_partition(entries: Iterable[tuple[str, T]]) -> dict[tuple[str, int], list[tuple[str, T]]]:
    """Consecutive ``(stream id, entry)`` pairs grouped by the hour folder they roll into, order kept.

    Stream ids grow with time, so each group is a contiguous id range; the roll names each file after its
    group's first and last id, so re-rolling the same range replaces the file instead of adding one.
    """
    groups: dict[tuple[str, int], list[tuple[str, T]]] = {}
    hour, group = -1, None
    for stream_id, entry in entries:
        ms = int(stream_id.partition("-")[0])
        if group is None or ms // 3_600_000 != hour:
            hour = ms // 3_600_000
            group = groups.setdefault(partition_of(ms), [])
        group.append((stream_id, entry))
    return groups
