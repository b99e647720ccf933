"""``bridge report --follow``: the live ledger, drawn on the terminal.

It runs the live ledger itself (``bridge.ledger.service``: the streaming query of ``bridge ledger``) in a
folder of its own, and draws each publication: per entity the counts the ledger keeps with
``bridge.ledger.figures`` — the batch report's own definitions — the overdue messages, and the verdict
with its reasons. There is no second tally: what ``--follow`` shows is what ``bridge ledger`` publishes.

"Lost" is what the ledger can call lost without the outbox: messages a receiver completed as duplicates
of another id's fingerprint and never handled (``suppressed_unhandled``), counted as lost by the batch
report too. An accepted message with no end shows as overdue; the batch report, which checks the outbox,
decides whether it is lost.

The folder is a temporary one, removed at the end, unless the caller names one to keep (started again on
it, the view goes on from its checkpoint). ``roll`` (the CLI's: ``LiveRoll``, unless ``--offline``) runs
after each publication and returns the note drawn with the next one; nothing is published to Redis, so a
running ``bridge ledger`` stays the one ``bridge status`` shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.core.ledger import LABELS
from bridge.errors import BridgeError
from bridge.ledger import service
from bridge.ledger.live_store import LedgerPaths
from bridge.settings import Settings

COLUMNS: tuple[tuple[str, str], ...] = (
    ("accepted", LABELS["accepted"]),
    ("delivered", LABELS["delivered"]),
    ("handled", LABELS["handled"]),
    ("dead_lettered", LABELS["dead_lettered"]),
    ("quarantined_messages", LABELS["quarantined"]),
    ("pending", LABELS["pending"]),
    ("overdue", "overdue"),
    ("suppressed_unhandled", LABELS["lost"]),
    ("broker_duplicates", LABELS["broker_duplicates"]),
    ("suppressed_duplicates", LABELS["suppressed_duplicates"]),
)
"""(count in the publication's entity record, column heading), in the order drawn."""


def rows(ledger: Mapping[str, Any]) -> list[tuple[str, list[int]]]:
    """Per entity (and ``all``, their sum) the ``COLUMNS`` counts of a publication."""
    out = [
        (name, [int(record.get(key) or 0) for key, _ in COLUMNS])
        for name, record in sorted(ledger.get("entities", {}).items())
    ]
    if out:
        out.append(("all", [sum(values) for values in zip(*(counts for _, counts in out), strict=True)]))
    return out


def render(ledger: Mapping[str, Any], note: str) -> Any:
    """The view of one publication: the table, then the verdict's reasons."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    verdict = str(ledger.get("verdict", "starting"))
    table = Table(title=f"bridge report --follow: {verdict.upper()}  ({note})")
    table.add_column("entity")
    for _, heading in COLUMNS:
        table.add_column(heading, justify="right")
    for name, counts in rows(ledger):
        table.add_row(Text(name), *(Text(f"{value:,}") for value in counts))
    lines = [Text(f"note: {reason}") for reason in ledger.get("reasons", [])]
    return Group(table, *lines)


def follow(
    spark: Any,
    journal: Path,
    paths: LedgerPaths,
    options: Mapping[str, float],
    *,
    roll: Callable[[], str] | None = None,
    duration: float | None = None,
    on_update: Callable[[dict[str, Any]], bool] | None = None,
    console: Any = None,
) -> dict[str, Any]:
    """Run the live ledger in ``paths`` and draw each publication on ``console`` (stderr by default) until
    ``duration`` passes, Ctrl-C, or ``on_update`` (called with each publication) returns True; returns
    the last publication."""
    from rich.console import Console
    from rich.live import Live

    if console is None:
        console = Console(stderr=True)
        if not console.is_terminal:
            # Piped into a file: no terminal width to fit, so no column is cut to "acce…".
            console = Console(stderr=True, width=1000)
    note = "offline" if roll is None else "starting"
    with Live(render({}, note), console=console, auto_refresh=False) as view:

        def on_publish(ledger: dict[str, Any]) -> bool:
            nonlocal note
            view.update(render(ledger, note), refresh=True)
            done = on_update is not None and on_update(ledger)
            if roll is not None and not done:
                note = roll()
            return done

        return service.run(spark, journal, paths, options, duration=duration, on_publish=on_publish)


@dataclass(frozen=True)
class LiveRoll:
    """The roll of the live journal into ``journal`` before each publication; Redis unavailable is a
    note, and the view goes on from the files it has."""

    settings: Settings
    journal: Path

    def roll(self) -> str:
        """Roll now; the note to draw."""
        from bridge.ledger.live import roll_live
        from bridge.redis.connection import sync_client

        try:
            client = sync_client(self.settings.redis_url.get_secret_value())
            try:
                roll_live(client, self.settings, self.journal)
            finally:
                client.close()
        except BridgeError as exc:
            return f"Redis unavailable: {type(exc).__name__}"
        return f"journal rolled {time.strftime('%H:%M:%S')}"
