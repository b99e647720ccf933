"""Chaos and soak: a steady mixed load through every door while processes die and namespaces fail.

    python -m bench.chaos --duration 60 --seed 7 --json            # short run (the default suite runs one)
    python -m bench.chaos --duration 1800 --rate 120 --seed 1      # soak: >= 30 min, >= 200,000 messages

What runs (``bridge.embedded.up``, the processes of ``bridge up``, every one real): a private Redis
(AOF ``always``), two local namespaces, the ingress, 3 send workers, 2 beats and 2 receivers per entity
whose handler records every call (``bench/chaos_handler.py``). Three entities cover the modes and kinds:
``chaos-passive`` (queue, passive, 2 outbox shards, partition keys, TTLs, scheduled messages),
``chaos-active`` (topic with one subscription, active, partition keys) and ``chaos-paired`` (session
queue, paired, TTLs). Three load threads — HTTP, ``Producer`` and the Redis door — send with their own
MessageIds (a retry re-sends the same id) and per-key sequence numbers (``chaos_seq``), one message of a
key at a time, so the order a door acknowledged is the order the key must keep.

Faults (seeded, one at a time, every kind once per cycle in a shuffled order, random gaps and holds):
``kill -9`` of a worker, a beat, a receiver and the ingress (restarted after the hold), primary and
secondary outage, blackhole, ``busy`` and ``stall`` (the namespaces' fault control), a Redis restart, a
Redis ``kill -9`` (same data directory; down 2 s at most) and a Redis outage (``kill -9``, down for the
whole hold: ``--hold 40 60`` makes it a long one), a namespace process ``kill -9`` (data kept,
restarted), and a ``disaster`` of the secondary, only while it holds nothing that exists nowhere else
(``disaster_safe``).

Then everything is restored, the load stops, and the run waits (bounded) until every acknowledged message
was handed and the outbox is empty; the receivers, workers and beats stop; ``bench/chaos_checker.py``
peeks what the namespaces still hold, reconciles, and compares with ``bridge report --json``. The last
line printed is the verdict (JSON with ``--json``); the exit status is 1 when anything was lost, handed
twice, reordered or mis-carried, or when the ledger disagrees. Memory and growth (Redis memory, worker and
receiver RSS, outbox, journal and duplicate-window sizes) are sampled into ``memory.csv`` and drawn into
``memory.png`` in the run folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import redis

from bench import chaos_checker
from bench.chaos_finish import run_ledger, stop_processes
from bench.chaos_load import (
    ACTIVE,
    DOORS,
    KEYS_PER_DOOR,
    PAIRED,
    PASSIVE,
    Door,
    Ledger,
    http_sender,
    producer_sender,
    redis_door_sender,
)
from bench.chaos_memory import Sampler
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
        held_secondary = chaos_checker.peek_namespace(
            "secondary", self.local.secondary.connection_string, plain, backlog_paths()
        )
        on_primary = chaos_checker.peek_namespace("primary", self.local.primary.connection_string, plain, [])
        handed = {r["id"] for r in chaos_checker.read_records(self.records)}
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


# ---- the run ----------------------------------------------------------------------------------------------


def drained(chaos: Chaos, acked_ids: set[str]) -> bool:
    """Every acknowledged message handed, and the outbox and the Redis doors empty."""
    handed = {r["id"] for r in chaos_checker.read_records(chaos.records)}
    if acked_ids - handed:
        return False
    client = redis.Redis.from_url(chaos.local.redis.url, socket_timeout=5)
    try:
        for name, options in ENTITIES.items():
            if client.xlen(f"bridge:{{{name}}}:in"):
                return False
            for shard in range(int(str(options.get("outbox_shards", 1)))):
                if client.xlen(f"bridge:{{{name}}}:out:{shard}"):
                    return False
    finally:
        client.close()
    return True


def main(argv: list[str] | None = None) -> int:
    """Run, check, print the verdict; exit 1 when it failed."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="Seconds of load with faults.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=30.0, help="Messages per second over all doors.")
    parser.add_argument("--receivers", type=int, default=2, help="Receiver processes per entity.")
    parser.add_argument("--hold", type=float, nargs=2, default=(2.0, 4.0), metavar=("MIN", "MAX"))
    parser.add_argument(
        "--first",
        nargs="+",
        default=[],
        choices=FAULTS,
        metavar="KIND",
        help="Fault kinds the first cycle starts with, in this order (e.g. redis_outage).",
    )
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--sample-interval", type=float, default=2.0)
    parser.add_argument("--data-dir", type=Path, default=None, help="Run folder (kept); default: a temp dir.")
    parser.add_argument("--no-ledger", action="store_true", help="Skip bridge report (no ledger_agrees).")
    parser.add_argument("--json", action="store_true", help="Print the verdict as one JSON object, last.")
    args = parser.parse_args(argv)

    wall = time.monotonic()
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="bridge-chaos-"))
    if base.exists() and any(base.iterdir()):
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    chaos = Chaos(base, args.seed, args.receivers, tuple(args.hold), args.first)
    ledger = Ledger(base)
    doors: list[Door] = []
    sampler: Sampler | None = None
    result: dict[str, Any] = {"seed": args.seed, "duration": args.duration, "run_dir": str(base)}
    try:
        chaos.start()
        url = chaos.local.redis.url
        senders = {
            "http": http_sender(chaos.ingress_url),
            "producer": producer_sender(url),
            "redis": redis_door_sender(url),
        }
        for index, door in enumerate(DOORS):
            doors.append(Door(door, args.rate / len(DOORS), args.seed * 100 + index, ledger, senders[door]))
        sampler = Sampler(chaos, ledger, args.sample_interval, ENTITIES, entity_specs())
        sampler.start()
        result["startup_seconds"] = round(time.monotonic() - wall, 1)
        chaos.say(f"started in {result['startup_seconds']}s; load at {args.rate}/s for {args.duration}s")
        for thread in doors:
            thread.start()
        stopping = threading.Event()
        warmup = min(5.0, args.duration / 6)
        time.sleep(warmup)
        chaos.run_faults(time.monotonic() + args.duration - warmup, stopping)
        chaos.restore_all()
        for thread in doors:
            thread.stopping.set()
        for thread in doors:
            thread.join(Door.GIVE_UP + 10)
        chaos.say(f"load stopped: sent={ledger.sent} acked={ledger.acked}; draining")
        acked_ids = {r["id"] for r in chaos_checker.read_jsonl(base / "acked.jsonl")}
        deadline = time.monotonic() + args.drain_timeout
        drain_started = time.monotonic()
        while not drained(chaos, acked_ids) and time.monotonic() < deadline:
            time.sleep(1.0)
            if int(time.monotonic() - drain_started) % 15 == 0:
                chaos.restore_all()
        result["drain_seconds"] = round(time.monotonic() - drain_started, 1)
        chaos.say(f"drained in {result['drain_seconds']}s")
        time.sleep(2.0)  # late copies (active mode's second one) are suppressed, not handed
        stop_processes(chaos.of("receive-") + chaos.of("worker") + chaos.of("beat") + chaos.of("serve"))
        chaos.say("bridge processes stopped; peeking the namespaces")
        sampler.stopping.set()
        sampler.join(10)
        held = []
        for name, ns in (("primary", chaos.local.primary), ("secondary", chaos.local.secondary)):
            held += chaos_checker.peek_namespace(
                name, ns.connection_string, entity_specs(), backlog_paths() if name == "secondary" else []
            )
        run = {
            "entities": entity_specs(),
            "namespaces": {
                "primary": chaos.local.primary.connection_string,
                "secondary": chaos.local.secondary.connection_string,
            },
            "backlog": backlog_paths(),
            "redis_url": chaos.local.redis.url,
            "receiver_kills": chaos.receiver_kills,
            "redis_windows": chaos.redis_windows,
            "fault_windows": chaos.fault_windows,
            "resets": chaos.resets,
        }
        with (base / "held.jsonl").open("w") as out:
            out.writelines(json.dumps(h.__dict__) + "\n" for h in held)
        run_file = base / "run.json"
        run_file.touch(mode=0o600)
        run_file.write_text(json.dumps(run))
        if not args.no_ledger:
            chaos.say("running bridge report --json")
            summary = run_ledger(chaos)
            if summary is not None:
                (base / "ledger.json").write_text(json.dumps(summary))
        chaos.say("checking")
        verdict = chaos_checker.check(base, held)
        result.update(verdict.as_dict())
        result["memory"] = sampler.write(base)
    finally:
        for thread in doors:
            thread.stopping.set()
        if sampler is not None:
            sampler.stopping.set()
        for stack in chaos.stacks:
            up.stop(stack)
        ledger.close()
    result["faults"] = dict(chaos.faults)
    result["faults_skipped"] = dict(chaos.skipped)
    result["wall_seconds"] = round(time.monotonic() - wall, 1)
    result.pop("ledger", None)
    fidelity = result.get("fidelity", {})
    result["fidelity_ok"] = all(v == 0 for k, v in fidelity.items() if k != "checked")
    result["passed"] = bool(
        result.get("lost") == 0
        and result.get("handed_twice") == 0
        and result.get("order_violations") == 0
        and result.get("unexpected") == 0
        and result["fidelity_ok"]
        and (result.get("ledger_agrees") or args.no_ledger)
    )
    for line in chaos.events:
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        keys = (
            "sent",
            "acknowledged",
            "handed",
            "lost",
            "handed_twice",
            "broker_duplicates",
            "order_violations",
        )
        print(
            " ".join(f"{k}={result.get(k)}" for k in keys),
            f"faults={result['faults']}",
            f"passed={result['passed']}",
        )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
