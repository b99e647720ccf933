"""The ``[status_history]`` section of the settings: the status page's rolling history in Redis.

Part of the one settings model (``bridge.settings.Settings.status_history``), kept in its own module beside
the other sections; import it from ``bridge.settings``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_SAMPLES = 20_000
"""The most samples a history may hold (``window / interval``): the page draws every one."""


class HistorySettings(BaseModel):
    """How often the serve processes sample the bridge's state for the status page's charts, and for how
    long the samples are kept (``docs/operations.md``, "Status page"). One serve process samples each
    slot, whichever claims it first; the samples live in one Redis sorted set, trimmed to ``window``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Sample the state for the status page's charts.")
    interval: float = Field(default=5.0, ge=0.2, le=3600, description="Seconds between samples.")
    window: float = Field(default=3600.0, gt=0, description="Seconds of samples kept (then trimmed).")

    @model_validator(mode="after")
    def _bounded(self) -> HistorySettings:
        if self.window / self.interval > MAX_SAMPLES:
            raise ValueError(f"window / interval must be at most {MAX_SAMPLES} samples")
        return self

    @property
    def samples(self) -> int:
        """How many samples the window holds at most."""
        return int(self.window // self.interval) + 1
