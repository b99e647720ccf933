"""The live ledger's folder: its Spark checkpoint, its committed state per micro-batch, its tables.

::

    <directory>/checkpoint/                 Spark's checkpoint (source offsets, the de-duplication state)
    <directory>/state/v-<batch>/messages/   Parquet: facts of every message still open or lingering,
                                            and ``is_open``
    <directory>/state/v-<batch>/totals.json running counts, event counts, latency per minute, clock
    <directory>/state/CURRENT               the name of the last committed ``v-<batch>``
    <directory>/latency/minute=<m>/b-<batch>.parquet   latency samples, kept ``latency_minutes``
    <directory>/ledger.json                 the published ledger (``bridge.core.live_ledger.verdict``)

Which journal files the committed state holds is read from Spark's own record of the files its query
took, the file source log in the checkpoint (``files_read``): ``bridge report --from-ledger`` answers
only when every journal file is there.

A micro-batch commits by writing ``v-<batch>`` whole and then replacing ``CURRENT`` (an atomic rename):
a batch that Spark runs again after a crash (its id is at or below ``CURRENT``'s) is skipped, so a
restart from the checkpoint never counts an event twice. Readers (``bridge status``, the status page,
Prometheus) read ``ledger.json`` or the Redis copy of it; none needs Spark.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bridge.core.live_ledger import OpenMessage

VERSIONS_KEPT = 2


@dataclass(frozen=True)
class LedgerPaths:
    """Where each part of the live ledger lives under its folder."""

    root: Path

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoint folder."""
        return self.root / "checkpoint"

    @property
    def state(self) -> Path:
        """The committed versions."""
        return self.root / "state"

    @property
    def latency(self) -> Path:
        """Latency samples by minute."""
        return self.root / "latency"

    @property
    def published(self) -> Path:
        """The published ledger."""
        return self.root / "ledger.json"

    def version(self, batch_id: int) -> Path:
        """The folder of the state committed by micro-batch ``batch_id``."""
        return self.state / f"v-{batch_id:012d}"


def empty_totals() -> dict[str, Any]:
    """The totals before the first micro-batch."""
    return {"batch_id": -1, "clock": None, "events": 0, "counts": {}, "event_counts": [], "latency": []}


def current(paths: LedgerPaths) -> tuple[Path | None, dict[str, Any]]:
    """The last committed version's folder (None before the first) and its totals."""
    pointer = paths.state / "CURRENT"
    if not pointer.exists():
        return None, empty_totals()
    folder = paths.state / pointer.read_text().strip()
    return folder, json.loads((folder / "totals.json").read_text())


def files_read(paths: LedgerPaths, upto_batch: int) -> set[Path]:
    """The journal files the micro-batches up to ``upto_batch`` read (resolved paths).

    Spark's file stream source logs, per micro-batch, the files it hands to that batch before running it:
    ``checkpoint/sources/0/<batch>`` and, every few batches, ``<batch>.compact`` with every entry so far;
    each is a version line (``v1``) and one JSON object per file (``path``, ``timestamp``, ``batchId``)
    (``docs/journal-ledger.md``, "Answering from the live ledger"). A line that does not parse is skipped:
    a file it named counts as not read, so the answer waits or falls back rather than claims too much.
    """
    folder = paths.checkpoint / "sources" / "0"
    out: set[Path] = set()
    if not folder.is_dir():
        return out
    for log_file in folder.iterdir():
        if log_file.name.startswith(".") or not log_file.name.split(".", 1)[0].isdigit():
            continue
        try:
            lines = log_file.read_text().splitlines()
        except OSError:
            continue
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                batch, path = int(entry["batchId"]), str(entry["path"])
            except (ValueError, KeyError, TypeError):
                continue
            if batch <= upto_batch and path.startswith("file:"):
                out.add(Path(unquote(urlparse(path).path)).resolve())
    return out


def commit(paths: LedgerPaths, batch_id: int, totals: dict[str, Any]) -> None:
    """Write ``totals`` into ``v-<batch_id>`` (whose Parquet parts Spark wrote already), point ``CURRENT``
    at it, and drop versions older than the last ``VERSIONS_KEPT``."""
    folder = paths.version(batch_id)
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomically(folder / "totals.json", json.dumps(totals, default=str))
    _write_atomically(paths.state / "CURRENT", folder.name)
    versions = sorted(p for p in paths.state.iterdir() if p.is_dir() and p.name.startswith("v-"))
    for old in versions[:-VERSIONS_KEPT]:
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.tmp")
    with open(partial, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def write_samples(paths: LedgerPaths, batch_id: int, samples: pa.Table) -> set[int]:
    """A batch's latency samples (``entity``, ``measure``, ``minute``, ``ms``), one file per minute
    (named by the batch: a re-run replaces it); returns the minutes written."""
    minutes = {int(minute) for minute in pc.unique(samples["minute"]).to_pylist()}
    schema = pa.schema([("entity", pa.string()), ("measure", pa.string()), ("ms", pa.float64())])
    for minute in minutes:
        folder = paths.latency / f"minute={minute}"
        folder.mkdir(parents=True, exist_ok=True)
        group = samples.filter(pc.equal(samples["minute"], minute))
        table = pa.table({name: group[name].cast(schema.field(name).type) for name in schema.names}, schema)
        partial = folder / f".b-{batch_id:012d}.tmp"
        pq.write_table(table, partial)
        os.replace(partial, folder / f"b-{batch_id:012d}.parquet")
    return minutes


def drop_samples_before(paths: LedgerPaths, minute: int) -> None:
    """Forget the latency samples of minutes before ``minute`` (their percentiles stay in the totals)."""
    if not paths.latency.is_dir():
        return
    for folder in paths.latency.iterdir():
        if folder.name.startswith("minute=") and int(folder.name.split("=", 1)[1]) < minute:
            shutil.rmtree(folder, ignore_errors=True)


def open_messages(folder: Path | None) -> list[OpenMessage]:
    """The open messages of a committed version (none before the first): its messages flagged
    ``is_open``, or the ``open`` table of a version written before that flag was."""
    if folder is None:
        return []
    if (folder / "open").is_dir():
        path, where = folder / "open", None
    else:
        path, where = folder / "messages", [("is_open", "=", True)]
    if not path.is_dir() or not any(path.glob("*.parquet")):
        return []
    table = pq.read_table(path, columns=["entity", "message_id", "accepted_at"], filters=where)
    accepted = table.column("accepted_at")
    if pa.types.is_timestamp(accepted.type):
        # as epoch seconds (Spark writes timestamps in UTC)
        accepted = pc.divide(accepted.cast(pa.timestamp("us")).cast(pa.int64()), 1_000_000.0)
    return [
        OpenMessage(entity, message_id, float(at))
        for entity, message_id, at in zip(
            table.column("entity").to_pylist(),
            table.column("message_id").to_pylist(),
            accepted.to_pylist(),
            strict=True,
        )
        if at is not None
    ]


def publish(paths: LedgerPaths, ledger: dict[str, Any]) -> None:
    """Replace ``ledger.json``."""
    paths.root.mkdir(parents=True, exist_ok=True)
    _write_atomically(paths.published, json.dumps(ledger, indent=2, default=str))


def read_published(root: Path) -> dict[str, Any] | None:
    """The last published ledger in ``root`` (None when the ledger never published there)."""
    path = LedgerPaths(root).published
    return json.loads(path.read_text()) if path.exists() else None
