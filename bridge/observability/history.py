"""The status page's history: the sampler every serve process runs, and what one sample takes from the state.

``HistorySampler`` wakes at each slot boundary (``status_history.interval`` seconds on Redis's clock),
claims the slot (``bridge.state.history.HistoryStore.claim``: one process per slot, however many serve
processes run) and, when it won, stores one ``bridge.core.history.Sample`` read from the same snapshot
the page shows (``bridge.observability.snapshot``), plus the outbox's accepted counter and the workers'
latency histograms. A failed read skips the slot: the chart shows a gap, the next slot is tried as usual.

Connection: the ``StateReader``'s blocking client (``redis_url``); nothing here reads a secret.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from bridge.core.history import EntitySample, Sample, slot_of
from bridge.errors import BridgeError
from bridge.outbox.reader import OutboxReader
from bridge.redis.clock import server_time
from bridge.settings import Settings
from bridge.state.history import HistoryStore, LatencyStore

log = logging.getLogger(__name__)


def _sent(cost: Mapping[str, Any]) -> int:
    """Outbox messages sent to a namespace: direct, backup and backlog sends (a dual send counts twice)."""
    return (
        int(cost.get("primary_sends", 0))
        + int(cost.get("backup_sends", 0))
        + int(cost.get("backlog_sends", 0))
    )


def _redis(server: Mapping[str, Any] | None) -> dict[str, float] | None:
    if server is None:
        return None
    return {
        "used_memory": float(server["used_memory"]),
        "maxmemory": float(server["maxmemory"]),
        "aof_ok": 1.0 if server["aof_enabled"] and server["aof_last_write_ok"] else 0.0,
    }


def sample_from_snapshot(
    at: float,
    snapshot: Mapping[str, Any],
    accepted: Mapping[str, int | None],
    latency: Mapping[str, tuple[int, ...]],
) -> Sample:
    """One sample of a ``collect_snapshot`` object, the outbox's accepted counters and the latencies."""
    entities = {}
    for e in snapshot["entities"]:
        paired = e.get("paired") or {}
        entities[e["name"]] = EntitySample(
            accepted=accepted.get(e["name"]),
            sent=_sent(e["cost"]),
            handled=int((e.get("receiver") or {}).get("handled", 0)),
            depth=int(e["outbox_depth"]),
            oldest_age=float(e.get("outbox_oldest_age") or 0.0),
            latency=latency.get(e["name"], ()),
            active=str(e["active"]),
            backlog=bool(paired.get("failed_over")),
            up={
                role: bool(ns["available"])
                for role, ns in e["namespaces"].items()
                if ns.get("configured", True)
            },
        )
    return Sample(at=at, entities=entities, redis=_redis(snapshot.get("redis")))


class HistorySampler:
    """Samples the state once per slot it claims, on a daemon thread, until ``stop``."""

    def __init__(self, settings: Settings, reader: Any) -> None:
        self.settings = settings
        self.reader = reader
        self.interval = settings.status_history.interval
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-history", daemon=True)
        self.sampled = 0
        """Slots this process sampled (the others were claimed by another process, or failed)."""

    def store(self) -> HistoryStore:
        """The history store on the reader's client."""
        history = self.settings.status_history
        return HistoryStore(self.reader.client(), history.window, history.samples)

    def start(self) -> HistorySampler:
        """Start the thread."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end and wait for it."""
        self._stop.set()
        self._thread.join(timeout)

    def tick(self) -> float:
        """Sample the current slot when this process wins it; the seconds until the next slot."""
        client = self.reader.client()
        now = server_time(client)
        slot = slot_of(now, self.interval)
        store = self.store()
        if store.claim(slot):
            snapshot = self.reader.snapshot()
            names = [e["name"] for e in snapshot["entities"]]
            outbox = OutboxReader(client, self.settings)
            accepted = {name: outbox.accepted_total(name) for name in names}
            latency = LatencyStore(client).histograms(names)
            store.append(sample_from_snapshot(slot * self.interval, snapshot, accepted, latency))
            self.sampled += 1
        return (slot + 1) * self.interval - now

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = self.tick()
            except BridgeError as exc:
                log.debug("status history: slot not sampled: %s", exc)
                wait = self.interval
            except Exception:  # a sampler that died would leave the charts empty, unnoticed
                log.exception("status history: slot not sampled")
                wait = self.interval
            # A little past the boundary, so Redis's clock is in the new slot when this process asks.
            wait = min(self.interval, max(0.0, wait)) + 0.01
