"""The ``[journal]`` section of the settings: the lifecycle journal, its roll and the ledger's prices.

Part of the one settings model (``bridge.settings.Settings.journal``), kept in its own module beside the
other sections; import it from ``bridge.settings``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


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
