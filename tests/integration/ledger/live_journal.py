"""A journal with known answers for the live ledger's tests: written as rolled files, out of order."""

from __future__ import annotations

import os
import time
from pathlib import Path

from bridge.core import journal as J
from bridge.core.journal_files import to_row
from bridge.journal.roll import file_path, table_of, write_durably

T = 1_790_000_000.0
P, S = "ns1", "ns2"

# The live ledger's options for a test that follows it: publish every half second, nothing overdue or
# dropped from the state within a test's span.
FOLLOW_OPTIONS = {
    "interval": 0.5,
    "linger": 3600.0,
    "latency_minutes": 1_000_000.0,
    "overdue_after": 300.0,
    "listed": 100,
    "max_files": 200,
}


def _events() -> dict[str, list[J.JournalEvent]]:
    sent = J.sent
    orders = [
        # active mode: both namespaces accept a copy, a receiver suppresses the second
        J.accepted("a1", T + 0, door="http", size=10),
        sent("a1", T + 0.02, namespace=P, role="primary", path="direct", batch="b1"),
        sent("a1", T + 0.03, namespace=S, role="secondary", path="direct", batch="b2"),
        J.received("a1", T + 0.1, namespace=P, role="primary"),
        J.handled("a1", T + 0.2),
        J.received("a1", T + 0.3, namespace=S, role="secondary"),
        J.duplicate_suppressed("a1", T + 0.3, namespace=S, role="secondary"),
        J.accepted("a2", T + 1, door="http", size=10),
        J.dead_lettered("a2", T + 1.1, where="local", reason="message_too_large"),
        J.accepted("a3", T + 2, door="http", size=10),  # open: no end
        # a gap: a4's acceptance never reached the journal (it was full), its handling did
        J.JournalEvent(J.EventKind.JOURNAL_OVERFLOW, T + 3, count=1),
        sent("a4", T + 3.1, namespace=P, role="primary", path="direct", batch="b3"),
        J.handled("a4", T + 3.2),
        J.accepted("a5", T + 65, door="http", size=10),
        sent("a5", T + 65.5, namespace=P, role="primary", path="direct", batch="b4"),
        J.handled("a5", T + 66),
    ]
    payments = [
        J.failover_engaged(T + 10, reason="send failed"),
        J.accepted("p1", T + 10.5, door="http", size=10),
        sent("p1", T + 10.6, namespace=S, role="secondary", path="backlog", batch="c1", queue="0"),
        J.accepted("p2", T + 11, door="http", size=10),
        sent("p2", T + 11.1, namespace=S, role="secondary", path="backlog", batch="c2", queue="0"),
        J.ping(T + 20, namespace=P, ok=True),
        J.failover_ended(T + 20, reason="ping accepted"),
        # the paired restore: a barrier to the backlog queue, and a receiver's copy of a ping
        sent("barrier-1", T + 20.1, namespace=S, role="secondary", path="barrier", batch="c3", queue="0"),
        J.JournalEvent(J.EventKind.RECEIVED, T + 20.2, "ping-1", namespace=P, role="primary", result="ping"),
        J.syphoned("p1", T + 21, namespace=S, queue="0"),
        sent("p1", T + 21.05, namespace=P, role="primary", path="syphon", batch="c4", queue="0"),
        J.handled("p1", T + 21.5),
        # p2 still waits in the backlog queue
    ]
    return {"orders": orders, "payments": payments}


def write_journal(journal: Path, files: int = 4, reverse: bool = False) -> int:
    """Every event of both entities in ``files`` files per entity of consecutive events, the files' times
    in the order of their events (or, with ``reverse``, the last events first: the ledger then sees ends
    before beginnings); returns the events written."""
    total = 0
    written: list[tuple[float, Path]] = []
    for entity, events in _events().items():
        rows = [to_row(entity, f"{int(e.at * 1000)}-{i}", e) for i, e in enumerate(events)]
        size = -(-len(rows) // files)
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            first = f"{chunk[0]['stream_ms']}-{chunk[0]['stream_seq']}"
            last = f"{chunk[-1]['stream_ms']}-{chunk[-1]['stream_seq']}"
            path = file_path(journal, entity, first, last)
            write_durably(table_of(chunk, time.time()), path)
            written.append((chunk[0]["time"], path))
            total += len(chunk)
    # Spark's file source takes new files oldest first (by modification time).
    base = time.time() - 1000
    for index, (_, path) in enumerate(sorted(written, key=lambda item: item[0], reverse=reverse)):
        os.utime(path, (base + index, base + index))
    return total
