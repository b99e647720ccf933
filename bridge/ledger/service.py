"""``bridge ledger``: the live ledger as a long-running service.

It starts the streaming query (``bridge.ledger.stream``) and, every ``interval`` seconds, publishes the
ledger: the committed totals and open messages turned into a verdict and an overdue list
(``bridge.core.live_ledger.verdict``), written to ``<directory>/ledger.json`` and handed to
``on_publish`` (the CLI stores it in Redis, ``bridge.state.live_ledger``, where ``bridge status``, the
status page and the Prometheus collector read it). Overdue is judged against this host's clock at
publication, so a message turns overdue even while no new event arrives.

Before each publication it checks the footer of every journal file it has not checked yet: a file that
cannot be read is named in the ledger (Spark skips it; ``spark.sql.files.ignoreCorruptFiles``) and the
verdict is at best ``incomplete``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bridge.core.ledger import EventCount, billable_operations
from bridge.core.live_ledger import LedgerInput, Unreadable, event_figures, verdict
from bridge.ledger import live_store
from bridge.ledger.live_store import LedgerPaths

IGNORE_CORRUPT = "spark.sql.files.ignoreCorruptFiles"


@dataclass
class FileCheck:
    """Journal files whose footer was read already, and those that could not be read."""

    seen: set[Path] = field(default_factory=set)
    unreadable: dict[Path, str] = field(default_factory=dict)

    def scan(self, journal: Path) -> list[Unreadable]:
        """Check the files that appeared since the last scan; every unreadable file so far."""
        for path in sorted(journal.rglob("*.parquet")) if journal.is_dir() else []:
            if path in self.seen or path.name.startswith((".", "_")):  # Spark skips these names too
                continue
            self.seen.add(path)
            try:
                pq.read_metadata(path)
            except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                self.unreadable[path] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return [Unreadable(str(path), error) for path, error in sorted(self.unreadable.items())]


def ledger_input(totals: Mapping[str, Any], folder: Path | None, unreadable: list[Unreadable]) -> LedgerInput:
    """What the committed totals say, in the form ``verdict`` takes."""
    counts = [
        EventCount(row[0], row[1], row[2], row[3], row[4], int(row[5]), int(row[6]))
        for row in totals["event_counts"]
    ]
    figures = event_figures(totals["event_counts"])
    operations: dict[str, int] = {}
    for op in billable_operations(counts):
        operations[op.entity] = operations.get(op.entity, 0) + op.operations
    return LedgerInput(
        counts=totals["counts"],
        open_messages=live_store.open_messages(folder),
        events=int(totals["events"]),
        failovers=figures.failovers,
        operations=operations,
        overflow=figures.overflow,
        unreadable=unreadable,
        clock=totals.get("clock"),
    )


def publication(
    paths: LedgerPaths, now: float, overdue_after: float, unreadable: list[Unreadable], listed: int = 100
) -> dict[str, Any]:
    """The ledger as published at ``now``."""
    folder, totals = live_store.current(paths)
    ledger = verdict(ledger_input(totals, folder, unreadable), now, overdue_after, listed)
    ledger["published_at"] = now
    ledger["batch_id"] = totals["batch_id"]
    ledger["latency"] = totals["latency"]
    return ledger


Publish = Callable[[dict[str, Any]], bool | None]


def run(
    spark: Any,
    journal: Path,
    paths: LedgerPaths,
    options: Mapping[str, float],
    *,
    duration: float | None = None,
    on_publish: Publish | None = None,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Run until ``duration`` passes, ``stop`` is set, Ctrl-C, or ``on_publish`` returns True; returns the
    last ledger.

    ``stop`` is how a signal should end it: an exception raised by a signal handler lands wherever the
    main thread is, inside a Py4J call or a publication's write included, while the event is read only
    between publications, so the query always stops from a known point.
    ``options``: ``interval``, ``linger``, ``latency_minutes``, ``overdue_after``, ``listed``."""
    from bridge.ledger import stream

    # A file that cannot be read is skipped by Spark, and named in the ledger by ``FileCheck``.
    ignoring = spark.conf.get(IGNORE_CORRUPT, "false")
    spark.conf.set(IGNORE_CORRUPT, "true")
    running = stream.start(spark, journal, paths, options)
    files = FileCheck()
    started = time.monotonic()
    ledger: dict[str, Any] = {}
    stop = stop or threading.Event()
    try:
        while not stop.is_set() and (duration is None or time.monotonic() - started < duration):
            failure = running.exception()
            if failure is not None:
                raise RuntimeError(f"the live ledger's streaming query failed: {failure}")
            ledger = publication(
                paths, time.time(), options["overdue_after"], files.scan(journal), int(options["listed"])
            )
            live_store.publish(paths, ledger)
            if on_publish is not None and on_publish(ledger):
                break
            stop.wait(float(options["interval"]))
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
        spark.conf.set(IGNORE_CORRUPT, ignoring)
    return ledger
