"""What the status page reads: the snapshot with its summary line and errors, and the charts' series.

It sits in the status read model (above the stores) so the HTTP routes only serve it: the samples come
from ``bridge.state.history`` on the reader's client, the series and bands from
``bridge.core.history_series``, the summary from ``bridge.status.health_view``.
"""

from __future__ import annotations

from typing import Any

from bridge.core.history_series import build_series
from bridge.settings import Settings
from bridge.state.history import HistoryStore
from bridge.status.health_view import with_health
from bridge.status.snapshot import StateReader


class PageModel:
    """The page's two reads on one ``StateReader`` (one per app)."""

    def __init__(self, settings: Settings, reader: StateReader) -> None:
        self.settings = settings
        self.reader = reader

    def history(self) -> HistoryStore:
        """The history store on the reader's client."""
        history = self.settings.status_history
        return HistoryStore(self.reader.client(), history.window, history.samples)

    def status(self) -> dict[str, Any]:
        """The snapshot with the page's summary and error list."""
        return with_health(self.settings, self.reader.client(), self.reader.snapshot())

    def series(self) -> dict[str, Any]:
        """The charts' data: every sample in the window, as series and bands."""
        history = self.settings.status_history
        names = {
            role: ns.namespace_name
            for role, ns in (("primary", self.settings.primary), ("secondary", self.settings.secondary))
            if ns is not None
        }
        store = self.history()
        out = build_series(store.samples(), history.interval, names)
        out.update(window=history.window, enabled=history.enabled, memory_bytes=store.memory())
        return out
