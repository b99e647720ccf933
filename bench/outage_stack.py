"""The outage run's stack: its four entities (one per replication mode) and settings, and ``Outage``, the
chaos stack (``bench/chaos_stack.py``) with the outage's schedule — the primary down, then both, then
restored — as its one fault (``bench/outage.py`` runs it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import outage_measure
from bench.chaos_load import (
    DOORS,
    KEYS_PER_DOOR,
)
from bench.chaos_stack import SETTINGS as CHAOS_SETTINGS
from bench.chaos_stack import Chaos
from bridge.embedded import up

PRIMARY_NAME = "outage-primary"
PASSIVE, ANY, ALL, PAIRED = "outage-passive", "outage-any", "outage-all", "outage-paired"
RAW_QUEUE = "outage-raw"
ENTITIES: dict[str, dict[str, object]] = {
    PASSIVE: {"replication": "passive"},
    ANY: {"replication": "active", "success_policy": "any"},
    ALL: {"replication": "active", "success_policy": "all"},
    PAIRED: {"replication": "paired", "requires_session": True},
}
REPO = Path(__file__).resolve().parent.parent


def default_settings() -> dict[str, str]:
    """``bridge up``'s short timings set back to the settings model's defaults."""
    from bridge import settings as model

    sections: dict[str, Any] = {
        "retry": model.RetrySettings,
        "workers": model.WorkerSettings,
        "paired": model.PairedSettings,
        "receiver": model.ReceiverSettings,
    }
    out = {}
    for key in up.SETTINGS:
        section, _, name = key.removeprefix("BRIDGE_").lower().partition("__")
        if section in sections:
            out[key] = str(sections[section].model_fields[name].default)
    return out


def backlog_paths() -> list[str]:
    """The paired entity's backlog queues on the secondary (the default count)."""
    from bridge.settings import PairedSettings

    return [f"{PRIMARY_NAME}/x-servicebus-transfer/{i}" for i in range(PairedSettings().backlog_queue_count)]


def entity_specs() -> list[dict[str, Any]]:
    """What the checker needs to know of each entity."""
    sessions = [f"{door}-{k}" for door in DOORS for k in range(KEYS_PER_DOOR)]
    return [
        {"name": PASSIVE, "mode": "passive"},
        {"name": ANY, "mode": "active"},
        {"name": ALL, "mode": "active"},
        {"name": PAIRED, "mode": "paired", "sessions": True, "session_ids": sessions},
    ]


def namespace_entities(fast: bool) -> str:
    """Both namespaces' declared entities (``--fast``: 10 s locks, as the chaos run; else the default)."""
    lock = ["lock_duration = 10"] if fast else []
    lines = [f'[queues."{PAIRED}"]', "requires_session = true", *lock, ""]
    for name in (PASSIVE, ANY, ALL, RAW_QUEUE):
        lines += [f'[queues."{name}"]', *lock, ""]
    for path in backlog_paths():
        lines += [f'[queues."{path}"]', "lock_duration = 5", "max_delivery_count = 2147483647", ""]
    return "\n".join(lines)


class Outage(Chaos):
    """The chaos run's stack with this run's entities, settings and schedule instead of random faults."""

    def __init__(self, base: Path, fast: bool) -> None:
        super().__init__(base, seed=1, receivers=1, hold=(0.0, 0.0))
        self.fast = fast
        self.phase = "warmup"
        self.phases: dict[str, list[float]] = {}
        self.raw_rate: dict[str, Any] = {}
        self.t0 = time.time()
        self.recreated_at = 0.0
        self.sampler: outage_measure.OutageSampler | None = None
        self.at_peak: dict[str, Any] = {}
        """Each outbox stream's entries and Redis bytes at the end of the outage (its peak)."""

    def start(self) -> None:
        """``bridge up``'s processes and one recording receiver per entity."""
        (self.base / "namespace-entities.toml").write_text(namespace_entities(self.fast))
        timings = {k: v for k, v in CHAOS_SETTINGS.items() if "BACKLOG" not in k} if self.fast else {}
        up.start(
            self.base,
            concurrency=2,
            receivers=False,
            entities=ENTITIES,
            settings={
                **default_settings(),
                **timings,
                "BRIDGE_PRIMARY__NAME": PRIMARY_NAME,
                "BRIDGE_LOG_LEVEL": "WARNING",
                "CHAOS_RECORD_DIR": str(self.records),
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            },
            on_start=self.stacks.append,
            namespace_entities=self.base / "namespace-entities.toml",
        )
        for spec in entity_specs():
            self.local.start_bridge(
                f"receive-{spec['name']}-0",
                "receive",
                spec["name"],
                "--handler",
                "bench.chaos_handler:record",
            )

    def enter(self, phase: str) -> None:
        """Start a phase (its window is kept for the errors and the latency split)."""
        now = time.time()
        if self.phase in self.phases:
            self.phases[self.phase][1] = now
        self.phase = phase
        self.phases[phase] = [now, now]
        self.say(f"phase {phase}")

    def outages(
        self,
        primary_down: float,
        both_down: float,
        disaster: bool,
        watch: outage_measure.OutboxWatch,
        before_restore: Callable[[], None] = lambda: None,
    ) -> float:
        """The primary down (or lost), then both; both restored (``before_restore`` called first). Returns
        when the restore began (a re-created primary takes seconds to start, and the secondary is back
        meanwhile)."""
        primary, secondary = self.local.primary, self.local.secondary
        self.enter("primary_down")
        primary.control.outage()
        if disaster:
            self.resets["primary"].append(time.time())
            primary.control.disaster()
            self.say("disaster: the primary lost every entity and message (kept unreachable)")
        time.sleep(primary_down)
        self.enter("both_down")
        secondary.control.outage()
        time.sleep(both_down)
        self.at_peak = watch.snapshot()
        before_restore()
        self.enter("restored")
        secondary.control.restore()
        if disaster:
            self.recreated_at = time.time()
            primary.restart()  # empty; declares the entities again (`namespace-entities.toml`)
            self.say("the primary re-created empty")
        else:
            primary.control.restore()
        self.fault_windows.append(["primary_down", *self.phases["primary_down"]])
        self.fault_windows.append(["both_down", self.phases["both_down"][0], time.time()])
        return self.phases["restored"][0]
