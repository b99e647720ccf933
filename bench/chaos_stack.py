"""The chaos run's stack and faults: its entities and settings, the processes of ``bridge up``, and each
fault as a method (``fault_<kind>``) that causes it, holds it and heals it (``bench/chaos.py`` runs them).

``bench/outage.py`` builds its own run on the same stack (``Outage`` extends ``Chaos``).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench import chaos_evidence
from bench.chaos_load import (
    ACTIVE,
    DOORS,
    KEYS_PER_DOOR,
    PAIRED,
    PASSIVE,
)
from bridge.embedded import up
from bridge.embedded.ports import wait_listening
from bridge.embedded.stack import BridgeProcess, LocalStack

SUBSCRIPTION = "all"
PRIMARY_NAME = "chaos-primary"
BACKLOG_QUEUES = 2
ENTITIES: dict[str, dict[str, object]] = {
    PASSIVE: {"replication": "passive", "outbox_shards": 2},
    ACTIVE: {"replication": "active"},
    PAIRED: {"replication": "paired", "requires_session": True},
}
SETTINGS = {
    # Short timings, so that a fault shows and heals within seconds (as `bridge demo --fast`).
    "BRIDGE_PRIMARY__NAME": PRIMARY_NAME,
    "BRIDGE_PAIRED__FAILOVER_INTERVAL": "1",
    "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
    "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
    "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "3",
    "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": str(BACKLOG_QUEUES),
    "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
    "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.3",
    "BRIDGE_JOURNAL__ROLL_INTERVAL": "20",
    "BRIDGE_LOG_LEVEL": "WARNING",
}
FAULTS = (
    "worker_kill",
    "beat_kill",
    "receiver_kill",
    "ingress_kill",
    "primary_outage",
    "secondary_outage",
    "blackhole",
    "busy",
    "stall",
    "redis_restart",
    "redis_kill",
    "redis_outage",
    "namespace_kill",
    "secondary_disaster",
)
REPO = Path(__file__).resolve().parent.parent


def backlog_paths() -> list[str]:
    """The paired mode's backlog queues in the secondary."""
    return [f"{PRIMARY_NAME}/x-servicebus-transfer/{i}" for i in range(BACKLOG_QUEUES)]


def session_ids() -> list[str]:
    """Every SessionId the load uses (the paired entity's keys)."""
    return [f"{door}-{k}" for door in DOORS for k in range(KEYS_PER_DOOR)]


def namespace_entities() -> str:
    """Both namespaces' declared entities: the session queue, the topic and its subscription, backlog."""
    # Lock durations of 10 s: a copy locked by a receiver whose connection a fault cut comes back within
    # seconds instead of Service Bus's default minute (which only stretches the drain).
    lines = [f'[queues."{PAIRED}"]', "requires_session = true", "lock_duration = 10", ""]
    lines += [f'[queues."{PASSIVE}"]', "lock_duration = 10", ""]
    lines += [
        f'[topics."{ACTIVE}"]',
        f'[topics."{ACTIVE}".subscriptions."{SUBSCRIPTION}"]',
        "lock_duration = 10",
        "",
    ]
    for path in backlog_paths():
        lines += [f'[queues."{path}"]', "lock_duration = 5", "max_delivery_count = 2147483647", ""]
    return "\n".join(lines)


def entity_specs() -> list[dict[str, Any]]:
    """What the checker needs to know of each entity."""
    return [
        {"name": PASSIVE, "mode": "passive"},
        {"name": ACTIVE, "mode": "active", "subscription": SUBSCRIPTION},
        {"name": PAIRED, "mode": "paired", "sessions": True, "session_ids": session_ids()},
    ]


# ---- the load ---------------------------------------------------------------------------------------------


# ---- the stack and the faults -----------------------------------------------------------------------------


class Chaos:
    """The running stack, its processes by role, and the fault injector."""

    def __init__(
        self, base: Path, seed: int, receivers: int, hold: tuple[float, float], first: Sequence[str] = ()
    ) -> None:
        self.base = base
        self.first = list(first)
        """Fault kinds the first cycle starts with, in this order (``--first``)."""
        self.rng = random.Random(seed)
        self.receivers_per_entity = receivers
        self.hold = hold
        self.faults: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.receiver_kills: list[dict[str, float]] = []
        self.redis_windows: list[list[float]] = []
        self.fault_windows: list[list[Any]] = []  # [kind, start, end] (epoch seconds), for latency_ms
        self.resets: dict[str, list[float]] = {"primary": [], "secondary": []}
        self.events: list[str] = []
        self.stacks: list[up.Stack] = []
        self.records = base / "records"
        self.records.mkdir(parents=True, exist_ok=True)

    @property
    def local(self) -> LocalStack:
        """The stack's Redis, namespaces and processes."""
        return self.stacks[0].local

    def start(self) -> None:
        """Everything ``bridge up`` starts, plus two workers and the recording receivers."""
        (self.base / "namespace-entities.toml").write_text(namespace_entities())
        up.start(
            self.base,
            concurrency=1,
            receivers=False,
            entities=ENTITIES,
            settings={
                **SETTINGS,
                "CHAOS_RECORD_DIR": str(self.records),
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            },
            on_start=self.stacks.append,
            namespace_entities=self.base / "namespace-entities.toml",
        )
        for name in ("worker-2", "worker-3"):
            self.local.start_worker(name, concurrency=1)
        for spec in entity_specs():
            sub = ["--subscription", spec["subscription"]] if spec.get("subscription") else []
            for index in range(self.receivers_per_entity):
                self.local.start_bridge(
                    f"receive-{spec['name']}-{index}",
                    "receive",
                    spec["name"],
                    *sub,
                    "--handler",
                    "bench.chaos_handler:record",
                )

    @property
    def ingress_url(self) -> str:
        """The ingress base URL (the same port after a restart)."""
        return self.stacks[0].ingress_url

    def of(self, prefix: str) -> list[BridgeProcess]:
        """The bridge processes whose name starts with ``prefix``."""
        return [p for p in self.local.processes if p.name.startswith(prefix)]

    def respawn(self, proc: BridgeProcess) -> BridgeProcess:
        """Start ``proc``'s command again (same name, arguments and log), in its place in the stack."""
        new = BridgeProcess(proc.name, proc.args, self.local.env(), proc.log_path)
        index = self.local.processes.index(proc)
        self.local.processes[index] = new
        if proc.name == "serve":
            port = int(proc.args[proc.args.index("--port") + 1])
            wait_listening("127.0.0.1", port, 30)
        return new

    def say(self, text: str) -> None:
        """Log a line to ``chaos.log`` (and keep it for the report)."""
        line = f"{time.strftime('%H:%M:%S')} {text}"
        self.events.append(line)
        with (self.base / "chaos.log").open("a") as out:
            out.write(line + "\n")

    # ---- faults -------------------------------------------------------------------------------------------
    def run_faults(self, until: float, stopping: threading.Event) -> None:
        """Inject faults until ``until`` (monotonic): every kind once per cycle, shuffled."""
        pending: list[str] = []
        first_cycle = True
        while not stopping.is_set():
            if not pending:
                pending = list(FAULTS)
                self.rng.shuffle(pending)
                if first_cycle:
                    pending = self.first + [kind for kind in pending if kind not in self.first]
                    first_cycle = False
            gap = self.rng.uniform(0.5, 2.0)
            hold = self.rng.uniform(*self.hold)
            if time.monotonic() + gap + hold > until:
                return
            stopping.wait(gap)
            kind = pending.pop(0)
            started = time.time()
            try:
                done = getattr(self, f"fault_{kind}")(hold)
            except Exception as exc:
                self.say(f"fault {kind} failed: {type(exc).__name__}: {exc}")
                done = False
            if done is False:
                self.skipped[kind] += 1
                if kind == "secondary_disaster" and pending:
                    # Try again later in the cycle, once the secondary is redundant. Never as the only kind
                    # left: retrying it alone would stop every other fault (e.g. while the passive entity
                    # is on the secondary, only a later secondary outage moves it back); the next cycle
                    # brings it again.
                    pending.append(kind)
            else:
                self.faults[kind] += 1
                self.fault_windows.append([kind, started, time.time()])

    def _kill_and_respawn(self, prefix: str, hold: float, kind: str) -> None:
        proc = self.rng.choice(self.of(prefix))
        pid = proc.proc.pid
        self.say(f"{kind}: kill -9 {proc.name} (pid {pid}) for {hold:.1f}s")
        if kind == "receiver_kill":
            self.receiver_kills.append({"pid": pid, "t": time.time()})
        proc.kill()
        time.sleep(hold)
        self.respawn(proc)

    def fault_worker_kill(self, hold: float) -> None:
        self._kill_and_respawn("worker", hold, "worker_kill")

    def fault_beat_kill(self, hold: float) -> None:
        self._kill_and_respawn("beat", hold, "beat_kill")

    def fault_receiver_kill(self, hold: float) -> None:
        self._kill_and_respawn("receive-", hold, "receiver_kill")

    def fault_ingress_kill(self, hold: float) -> None:
        self._kill_and_respawn("serve", hold, "ingress_kill")

    def _namespace(self) -> Any:
        return self.rng.choice((self.local.primary, self.local.secondary))

    def _control_fault(self, ns: Any, kind: str, hold: float, cause: Callable[[], object]) -> None:
        self.say(f"{kind} on {ns.name} for {hold:.1f}s")
        cause()
        time.sleep(hold)
        ns.control.restore()

    def fault_primary_outage(self, hold: float) -> None:
        ns = self.local.primary
        self._control_fault(ns, "outage", hold, ns.control.outage)

    def fault_secondary_outage(self, hold: float) -> None:
        ns = self.local.secondary
        self._control_fault(ns, "outage", hold, ns.control.outage)

    def fault_blackhole(self, hold: float) -> None:
        ns = self._namespace()
        self._control_fault(ns, "blackhole", hold, ns.control.blackhole)

    def fault_busy(self, hold: float) -> None:
        ns = self._namespace()
        self._control_fault(ns, "busy", hold, lambda: ns.control.busy(probability=0.5))

    def fault_stall(self, hold: float) -> None:
        ns = self._namespace()
        self._control_fault(ns, "stall", hold, lambda: ns.control.stall(delay=2.0))

    def fault_redis_restart(self, hold: float) -> None:
        self.say("redis_restart: SIGTERM and start on the same data")
        start = time.time()
        self.local.redis.restart()
        self.redis_windows.append([start, time.time()])

    def fault_redis_kill(self, hold: float) -> None:
        down = min(hold, 2.0)
        self.say(f"redis_kill: kill -9, start again after {down:.1f}s on the same data")
        start = time.time()
        self.local.redis.kill()
        time.sleep(down)
        self.local.redis.start()
        self.redis_windows.append([start, time.time()])

    def fault_redis_outage(self, hold: float) -> None:
        self.say(f"redis_outage: kill -9, Redis down for {hold:.1f}s, then started on the same data")
        start = time.time()
        self.local.redis.kill()
        time.sleep(hold)
        self.local.redis.start()
        self.redis_windows.append([start, time.time()])

    def fault_namespace_kill(self, hold: float) -> None:
        ns = self._namespace()
        self.say(f"namespace_kill: kill -9 {ns.name}, start again after {hold:.1f}s (data kept)")
        ns.kill()
        time.sleep(hold)
        ns.start()

    def fault_secondary_disaster(self, hold: float) -> bool:
        reason = self.disaster_unsafe()
        if reason:
            self.say(f"secondary_disaster skipped: {reason}")
            return False
        self.say(f"secondary_disaster: the secondary loses everything; re-created after {hold:.1f}s")
        # Unreachable and empty until re-provisioned (the outage also keeps the local namespace's
        # auto-create from making a queue where the topic was); the restart declares the entities again
        # from `namespace-entities.toml`, as an operator's `bridge provision` would.
        self.local.secondary.control.outage()
        self.resets["secondary"].append(time.time())
        self.local.secondary.control.disaster()
        time.sleep(hold)
        self.local.secondary.restart()
        return True

    def disaster_unsafe(self) -> str | None:
        """Why a disaster of the secondary would destroy something that exists nowhere else (None: safe).

        Per mode: *passive* — the secondary holds the entity's messages only after a swap, so the role
        must be primary and every message the secondary holds must be handled already or be on the primary
        too; *active* — every message is on both, except what was sent while the primary failed: the same
        rule; *paired* — the secondary holds the backlog queues, so the entity must not be failed over and
        every backlog message must be handled (or on the primary); dead-letter queues of the secondary
        count like the rest. The paired session queue of the secondary is not peeked: paired mode never
        sends the entity itself to the secondary. Called with no other fault active (faults come one at a
        time), so nothing new reaches the secondary alone between this check and the disaster.
        """
        try:
            status = httpx.get(f"{self.ingress_url}/status.json", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return "status unavailable"
        by_name = {e["name"]: e for e in status.get("entities", [])}
        if by_name.get(PASSIVE, {}).get("active", "primary") != "primary":
            return "passive entity swapped to the secondary"
        if by_name.get(PAIRED, {}).get("paired", {}).get("failed_over"):
            return "paired entity failed over"
        plain = [s for s in entity_specs() if not s.get("sessions")]
        held_secondary = chaos_evidence.peek_namespace(
            "secondary", self.local.secondary.connection_string, plain, backlog_paths()
        )
        on_primary = chaos_evidence.peek_namespace("primary", self.local.primary.connection_string, plain, [])
        handed = {r["id"] for r in chaos_evidence.read_records(self.records)}
        elsewhere = handed | {h.message_id for h in on_primary if not h.dead_letter}
        only_here = [h for h in held_secondary if h.message_id not in elsewhere]
        if only_here:
            return f"{len(only_here)} message(s) only on the secondary (e.g. {only_here[0].path})"
        return None

    def restore_all(self) -> None:
        """Clear every fault and bring every process back."""
        try:
            if not self.local.redis.running:
                self.local.redis.start()
            for ns in (self.local.primary, self.local.secondary):
                if not ns.running:
                    self.say(f"restore: namespace {ns.name} was not running; started again")
                    ns.start()
                with contextlib.suppress(Exception):
                    ns.control.restore()
            for proc in list(self.local.processes):
                if not proc.running:
                    self.say(f"restore: {proc.name} was not running; started again")
                    self.respawn(proc)
        except Exception as exc:
            self.say(f"restore failed: {type(exc).__name__}: {exc}")
