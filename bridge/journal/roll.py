"""The roll: move the journal streams from Redis into Parquet files, losing and double-counting nothing.

Layout (Hive partitions by the stream id's UTC hour, so a reader can prune by time)::

    <directory>/date=2026-05-01/hour=13/j-<owner slug>-<first stream id>-<last stream id>.parquet

One roll step for one owner: read the oldest ``roll_chunk`` events, write them (split by hour) to files,
then trim the stream up to the last event written. Each file is written to a hidden temporary name,
fsync'd, renamed into place and its folder fsync'd, so a file either exists whole or not at all, and the
trim happens only after every file of the step is durable.

Crash safety. A roller killed after writing and before trimming leaves the events in the stream: nothing
is lost. The next step reads the same oldest events (the stream only grows at its end, and only the roll
trims); a part with the same id range gets the same name and replaces the earlier file, and a part that
now reaches further is a new file that repeats the earlier one's events. Every row carries its
``event_id`` (``<owner>/<stream id>``) and the ledger keeps one row per id (``dropDuplicates`` in the
report, ``dropDuplicatesWithinWatermark`` in the live view), so nothing is counted twice either — nor when
a partition is copied or re-written by hand. A new name rather than an overwrite for the longer range keeps
the live view, which reads each file name once, complete.

One roller at a time: a lease in Redis (``bridge.state.lease``), renewed before every trim; a roller that
lost it stops without trimming.

Overflow: the counts of events that found a stream full (``JournalStore.overflow``) are written as
``journal_overflow`` rows into the first file of a step and subtracted in the same ``MULTI`` as the trim.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bridge.core.journal import EventKind, JournalEvent, event_id, split_stream_id
from bridge.core.journal_files import COLUMNS, columns_from_entries, group_by_partition, partition_of, to_row
from bridge.journal.folders import JournalFolders
from bridge.journal.keys import ROLL_LEASE
from bridge.journal.store import JournalStore
from bridge.redis.lease import Lease

log = logging.getLogger(__name__)

_ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in COLUMNS])
"""The Arrow schema of a rolled file (``bridge.core.journal.COLUMNS``)."""


@dataclass
class RollReport:
    """What one roll did."""

    owners: int = 0
    events: int = 0
    overflow: int = 0
    files: list[str] = field(default_factory=list)
    busy: bool = False
    """Another roller held the lease; nothing was done."""
    stopped: str | None = None
    """Why the roll ended before the streams were empty (lease lost, budget spent)."""


@dataclass(frozen=True)
class Step:
    """One written-but-not-yet-trimmed step: trim through ``last_id``, subtract ``overflow``."""

    owner: str
    last_id: str | None
    events: int
    overflow: dict[str, int]
    files: list[str]


def owner_slug(owner: str) -> str:
    """A file-name-safe, collision-free form of a journal owner (entity paths may contain ``/``)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", owner)[:80]
    return f"{readable}-{hashlib.sha1(owner.encode(), usedforsecurity=False).hexdigest()[:8]}"


def file_path(directory: Path, owner: str, first_id: str, last_id: str) -> Path:
    """Where the part of a step from ``first_id`` to ``last_id`` goes (in ``first_id`` 's hour)."""
    ms, seq = split_stream_id(first_id)
    end_ms, end_seq = split_stream_id(last_id)
    day, hour = partition_of(ms)
    name = f"j-{owner_slug(owner)}-{ms}-{seq}-{end_ms}-{end_seq}.parquet"
    return directory / f"date={day}" / f"hour={hour:02d}" / name


def table_of(rows: Sequence[dict[str, Any]], rolled_at: float) -> pa.Table:
    """An Arrow table of rolled rows (``to_row``: times in epoch seconds)."""
    columns: dict[str, list[Any]] = {name: [] for name, _ in COLUMNS}
    for row in rows:
        for name, kind in COLUMNS:
            value = row.get(name)
            if kind == "timestamp" and value is not None:
                value = round(float(value) * 1_000_000)
            columns[name].append(value)
    return table_from_columns(columns, rolled_at)


def table_from_columns(columns: dict[str, list[Any]], rolled_at: float) -> pa.Table:
    """An Arrow table of rolled columns (times in whole microseconds), ``rolled_at`` set for every row."""
    count = len(columns["event_id"])
    columns["rolled_at"] = [round(rolled_at * 1_000_000)] * count
    arrays = [_array(columns[name], kind) for name, kind in COLUMNS]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _array(values: list[Any], kind: str) -> pa.Array:
    if kind == "timestamp":
        return pa.array(values, type=pa.int64()).cast(_ARROW_TYPES[kind])
    try:
        return pa.array(values, type=_ARROW_TYPES[kind])
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # A value that is not UTF-8 (written by hand into a journal): keep it, readably.
        text = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]
        return pa.array(text, type=_ARROW_TYPES[kind])


def write_durably(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` so that a crash leaves either the whole file or none.

    Temporary name in the same folder (hidden: Spark skips names starting with ``.``), fsync, rename over
    any earlier file of that name, fsync the folder; new folders are fsync'd into their parents too.
    """
    _make_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync(path.parent)


def _make_dirs(folder: Path) -> None:
    missing: list[Path] = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        _fsync(created.parent)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def overflow_rows(owner: str, anchor_id: str, counts: dict[str, int], now: float) -> list[dict[str, Any]]:
    """``journal_overflow`` rows for ``counts``, identified by the step's first id: a re-roll after a crash
    writes the same ids with counts at least as high, and the ledger keeps the highest per id."""
    rows = []
    for kind, count in sorted(counts.items()):
        event = JournalEvent(EventKind.JOURNAL_OVERFLOW, now, reason=kind, count=count)
        row = to_row(owner, anchor_id, event)
        row["event_id"] = f"{event_id(owner, anchor_id)}/overflow/{kind}"
        rows.append(row)
    return rows


def write_step(
    store: JournalStore, directory: Path, owner: str, chunk: int, now: Callable[[], float] = time.time
) -> Step:
    """Read ``owner``'s oldest events and write them to files; the stream is not trimmed yet."""
    overflow = store.overflow(owner)
    entries = store.read_raw(owner, chunk)
    if not entries and not overflow:
        return Step(owner, None, 0, {}, [])
    rolled_at = now()
    anchor = entries[0][0] if entries else f"{int(rolled_at * 1000)}-0"
    extra = overflow_rows(owner, anchor, overflow, rolled_at) if overflow else []
    files: list[str] = []
    if not entries:
        path = file_path(directory, owner, anchor, anchor)
        write_durably(table_of(extra, rolled_at), path)
        return Step(owner, None, 0, overflow, [str(path)])
    for index, part in enumerate(group_by_partition(entries).values()):
        table = table_from_columns(columns_from_entries(owner, part), rolled_at)
        if index == 0 and extra:
            table = pa.concat_tables([table, table_of(extra, rolled_at)])
        path = file_path(directory, owner, part[0][0], part[-1][0])
        write_durably(table, path)
        files.append(str(path))
    return Step(owner, entries[-1][0], len(entries), overflow, files)


def finish_step(store: JournalStore, step: Step) -> None:
    """Trim what ``step`` wrote and subtract its overflow counts, atomically."""
    if step.last_id is not None or step.overflow:
        store.trim_through(step.owner, step.last_id, step.overflow)


def roll(
    store: JournalStore,
    directory: Path,
    *,
    chunk: int,
    lease_ttl: float,
    owners: Iterable[str] = (),
    budget: float | None = None,
    holder: str | None = None,
    clock: Callable[[], float] = time.time,
) -> RollReport:
    """Roll every journal (the registry's owners and ``owners``) into ``directory`` until empty or
    ``budget`` seconds passed; a no-op (``busy``) while another roller holds the lease."""
    report = RollReport()
    lease = Lease.named(store.client, ROLL_LEASE)
    me = holder or f"{os.getpid()}:{uuid.uuid4().hex[:8]}"
    ttl_ms = max(1, int(lease_ttl * 1000))
    if not lease.acquire(me, ttl_ms):
        report.busy = True
        return report
    started = clock()
    try:
        # Before any file: a report must learn of every folder that may hold some (several hosts).
        JournalFolders(store.client).record(directory, started)
        for owner in store.owners(owners):
            report.owners += 1
            while True:
                step = write_step(store, directory, owner, chunk, clock)
                if step.last_id is None and not step.overflow:
                    break
                if not lease.renew(me, ttl_ms):
                    report.stopped = "lease lost"
                    return report
                finish_step(store, step)
                report.events += step.events
                report.overflow += sum(step.overflow.values())
                report.files.extend(step.files)
                if step.events < chunk:
                    break
                if budget is not None and clock() - started > budget:
                    report.stopped = "budget"
                    return report
    finally:
        lease.release(me)
    if report.events or report.overflow:
        log.info(
            "journal roll: %d events, %d files, %d overflowed",
            report.events,
            len(report.files),
            report.overflow,
        )
    return report
