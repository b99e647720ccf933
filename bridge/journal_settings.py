"""The ``[journal]`` section of the settings: the lifecycle journal, its roll and the ledger's prices.

Part of the one settings model (``bridge.settings.Settings.journal``), kept in its own module beside the
other sections; import it from ``bridge.settings``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class LiveLedgerSettings(BaseModel):
    """The live ledger (``bridge ledger``, ``docs/journal-ledger.md``, "The live ledger"): its folder,
    when an open message counts as overdue, and how it bounds its state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    directory: Path | None = Field(
        default=None,
        description="Folder of its checkpoint, state and tables; default: 'ledger' beside journal.directory.",
    )
    overdue_after: float = Field(
        default=300.0, gt=0, description="Seconds after acceptance an open message counts as overdue."
    )
    interval: float = Field(default=2.0, gt=0, description="Seconds between micro-batches and publications.")
    linger: float = Field(
        default=120.0,
        ge=0,
        description="Seconds of journal time a settled message stays in the state (late copies find it).",
    )
    latency_minutes: int = Field(default=60, gt=0, description="Minutes of latency percentiles kept.")
    listed: int = Field(default=100, gt=0, description="Overdue MessageIds listed per entity.")
    max_files: int = Field(default=200, gt=0, description="Journal files read per micro-batch.")

    def folder(self, journal: Path | None) -> Path | None:
        """``directory``, else ``ledger`` beside the journal folder (None when neither is set)."""
        if self.directory is not None:
            return self.directory
        return None if journal is None else journal.parent / "ledger"

    def options(self) -> dict[str, float]:
        """The streaming job's options (``bridge.ledger.service.run``)."""
        return {
            "interval": self.interval,
            "linger": self.linger,
            "latency_minutes": float(self.latency_minutes),
            "overdue_after": self.overdue_after,
            "listed": float(self.listed),
            "max_files": float(self.max_files),
        }


class JournalSettings(BaseModel):
    """The lifecycle journal (Redis streams), its roll into Parquet and the ledger report
    (``docs/journal-ledger.md``).

    Each entity's journal stream holds at most ``max_length`` entries (an entry is one event, or a batch of
    events that differ only by MessageId); an entry that finds it full is not written but counted
    (``bridge:{<entity>}:journal:overflow``, shown by ``bridge report``): the journal never blocks
    delivery, and nothing is trimmed before the roll wrote it to a file.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Write lifecycle events to the journal streams.")
    max_length: int = Field(default=1_000_000, gt=0, description="Entries per journal stream, then overflow.")
    directory: Path | None = Field(
        default=None,
        description="Parquet journal folder; when set, beat rolls the streams into it every roll_interval.",
    )
    roll_interval: float = Field(default=60.0, gt=0, description="Seconds between journal rolls (beat).")
    roll_chunk: int = Field(default=100_000, gt=0, le=10_000_000, description="Events read per roll step.")
    roll_lease_ttl: float = Field(default=120.0, gt=0, description="Seconds the one roller's lease lives.")
    prices: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Price per million billable operations by kind (send, receive, ping, ...); "
            "see docs/journal-ledger.md."
        ),
    )
    currency: str = Field(default="USD", min_length=1, max_length=8)
    live_ledger: LiveLedgerSettings = Field(default_factory=LiveLedgerSettings)
