"""The journal roll beat task (see ``bridge.journal.roll``): Redis streams into Parquet files."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bridge.delivery.context import get_context
from workers.app import app
from workers.app import settings as worker_settings


@app.task(name="bridge.journal_roll")
def journal_roll() -> dict[str, Any]:
    """Roll every journal into ``journal.directory`` (scheduled only when that is set)."""
    ctx = get_context(worker_settings)
    journal = ctx.settings.journal
    if journal.directory is None:
        return {"skipped": "journal.directory is not set"}
    # pyarrow is imported here, not at worker start-up: only the process that rolls pays for it.
    from bridge.journal.roll import roll
    from bridge.journal.store import JournalStore

    report = roll(
        JournalStore(ctx.redis, journal),
        journal.directory,
        chunk=journal.roll_chunk,
        lease_ttl=journal.roll_lease_ttl,
        owners=[*ctx.reader.entities(), *ctx.settings.entities],
        budget=journal.roll_interval,
    )
    result = asdict(report)
    result["files"] = len(report.files)
    return result
