"""``bridge demo``: everything ``bridge up`` starts, and a scripted story told live in the terminal.

Steady traffic goes to three entities, one per replication mode — ``orders`` (passive), ``audit`` (active)
and ``payments`` (paired; its messages carry SessionIds) — while the story takes the namespaces down:

1. **steady traffic**: every message reaches the primary;
2. **primary outage**: ``orders`` swaps to the secondary (backup), ``audit`` keeps going on the one
   namespace left, ``payments`` fails over to the backlog queues after ``failover_interval``;
3. **both down**: producers still get 202s; the outbox holds everything;
4. **restore**: both namespaces come back, the outbox drains;
5. **ping and syphon**: the ping finds the primary again, the syphon moves the backlog to it;
6. **receive**: traffic stops; the receivers hand every message to the handler exactly once
   (their counters: handled = accepted per entity; active mode's second copies are suppressed);
7. **ledger**: ``bridge report`` (PySpark) reconciles the journal: the summary must say ``lost=0``.

The live view (rich) shows a progress bar per phase and a table of entities, roles and depths read from
the ingress's ``/status.json``. The last line is ``demo: lost=<n> ...`` with the paths of the HTML report
and the status page URL; the demo passes only when ``lost=0`` and every message was handled once.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bridge.embedded import up

PASSIVE, ACTIVE, PAIRED = "orders", "audit", "payments"
ENTITIES: dict[str, dict[str, object]] = {
    PASSIVE: {"replication": "passive", "outbox_shards": 2},
    ACTIVE: {"replication": "active"},
    PAIRED: {"replication": "paired", "requires_session": True},
}
SESSIONS = 5
PRIMARY_NAME = "demo-primary"
"""The primary namespace's name, so the backlog queues have known paths before the namespaces start."""


def namespace_entities(pace: Pace) -> str:
    """The entities file of both local namespaces: the session queue and the backlog queues.

    The backlog queues get the description ``bridge provision`` gives them, except the lock duration in
    ``--fast``: a backlog message a syphon held when its connection died stays locked that long. The same
    goes for the story's own queues: a copy a receiver held when the outage cut its connection comes back
    only when its lock ends, so ``--fast`` declares them with ``entity_lock`` (the other entities are
    created on first use with Service Bus's default minute).
    """
    count = int(pace.settings.get("BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT", "10"))
    lines = [f"[queues.{PAIRED}]", "requires_session = true"]
    if pace.entity_lock is not None:
        lines.append(f"lock_duration = {pace.entity_lock}")
        for name in (PASSIVE, ACTIVE):
            lines += ["", f"[queues.{name}]", f"lock_duration = {pace.entity_lock}"]
    lines.append("")
    for index in range(count):
        lines += [
            f'[queues."{PRIMARY_NAME}/x-servicebus-transfer/{index}"]',
            f"lock_duration = {pace.backlog_lock}",
            "max_delivery_count = 2147483647",
            "",
        ]
    return "\n".join(lines)


HANDLED = re.compile(r"received (\S+) on \S+ from the")
"""A handled message in a receiver's log (``bridge.embedded.handlers.log_message``)."""


@dataclass(frozen=True)
class Pace:
    """How long the story holds each phase, and the paired-mode timings it runs with."""

    hold: float
    rate: float
    settings: dict[str, str]
    timeout: float
    backlog_lock: int = 60
    entity_lock: int | None = None
    """Lock duration of the story's queues (None: created on first use, with the default minute)."""


FAST = Pace(
    hold=4.0,
    rate=8.0,
    settings={
        "BRIDGE_PAIRED__FAILOVER_INTERVAL": "1",
        "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
        "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
        "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "3",
        "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "2",
        "BRIDGE_PAIRED__BACKLOG_DEPTH_TTL": "1",
        "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
        "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.3",
    },
    timeout=90.0,
    backlog_lock=5,
    entity_lock=10,
)
NORMAL = Pace(hold=15.0, rate=10.0, settings={}, timeout=180.0)


@dataclass
class Traffic:
    """A producer thread posting to every entity at ``rate`` messages/s each; what the ingress accepted."""

    url: str
    rate: float
    accepted: dict[str, list[str]] = field(default_factory=lambda: {e: [] for e in ENTITIES})
    refused: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Start posting."""
        self._thread = threading.Thread(target=self._run, name="demo-traffic", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop posting (returns when the thread ended)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def total(self) -> int:
        """Messages accepted so far."""
        return sum(len(ids) for ids in self.accepted.values())

    def _run(self) -> None:
        count = 0
        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self._stop.is_set():
                started = time.monotonic()
                for entity in ENTITIES:
                    envelope: dict[str, Any] = {"body": json.dumps({"n": count, "entity": entity})}
                    if entity == PAIRED:
                        envelope["session_id"] = f"customer-{count % SESSIONS}"
                    try:
                        answer = http.post(f"/v1/entities/{entity}/messages", json=envelope)
                    except httpx.HTTPError:
                        self.refused += 1
                        continue
                    if answer.status_code == 202:
                        self.accepted[entity].append(answer.json()["message_id"])
                    else:
                        self.refused += 1
                count += 1
                self._stop.wait(max(0.0, 1.0 / self.rate - (time.monotonic() - started)))


@dataclass
class Phase:
    """One step of the story: an action, then a condition on the status to wait for."""

    name: str
    action: Callable[[], object]
    done: Callable[[dict[str, Any]], bool]
    hold: float = 0.0


@dataclass
class Outcome:
    """The verdict of a run: the demo's own count by MessageId, and the ledger's."""

    accepted: int = 0
    lost: int | None = None
    handled: int = 0
    handled_twice: int = 0
    ledger: dict[str, Any] = field(default_factory=dict)
    failed_phase: str | None = None

    @property
    def ledger_complete(self) -> bool:
        """The ledger saw every accepted message (its journal is complete) and lost none."""
        return self.ledger.get("accepted") == self.accepted and self.ledger.get("lost") == 0

    @property
    def passed(self) -> bool:
        """Every phase reached, nothing lost, nothing handled twice, and the ledger agrees."""
        return (
            self.failed_phase is None
            and self.lost == 0
            and self.handled_twice == 0
            and self.handled == self.accepted
            and self.ledger_complete
        )

    def final_line(self, status_url: str) -> str:
        """The last line of the demo (``lost=0`` only when nothing was lost)."""
        ledger = self.ledger
        return (
            f"demo: lost={'?' if self.lost is None else self.lost} accepted={self.accepted} "
            f"handled={self.handled} handled_twice={self.handled_twice} "
            f"ledger_accepted={ledger.get('accepted', '?')} ledger_lost={ledger.get('lost', '?')} "
            f"suppressed_duplicates={ledger.get('suppressed_duplicates', '?')} "
            f"report={ledger.get('html', '-')} status={status_url} "
            f"verdict={'PASSED' if self.passed else 'FAILED'}"
        )


def entity(status: dict[str, Any], name: str) -> dict[str, Any]:
    """The status record of ``name`` (empty before it has any)."""
    return next((e for e in status.get("entities", []) if e["name"] == name), {})


def _primary_down(status: dict[str, Any]) -> bool:
    orders, audit, payments = (entity(status, n) for n in (PASSIVE, ACTIVE, PAIRED))
    return (
        orders.get("active") == "secondary"
        and not audit.get("namespaces", {}).get("primary", {}).get("available", True)
        and bool(payments.get("paired", {}).get("failed_over"))
        and payments.get("cost", {}).get("backlog_sends", 0) > 0
    )


CAUGHT_UP = 3.0
"""Seconds: with traffic running the outbox is rarely empty, but its oldest message is this young."""


def _caught_up(status: dict[str, Any]) -> bool:
    return all(entity(status, n).get("outbox_oldest_age", CAUGHT_UP) < CAUGHT_UP for n in ENTITIES)


def backlog_empty_since(status: dict[str, Any], since: float) -> bool:
    """Every backlog queue measured empty after ``since`` (depths are cached by the ingress for seconds)."""
    depths = (status.get("backlog") or {}).get("depths") or {}
    return bool(depths) and all(d["messages"] == 0 and d["measured_at"] > since for d in depths.values())


class Story:
    """The demo run: the stack, the traffic, the phases, the verdict."""

    def __init__(self, base_dir: Path | None, pace: Pace, *, concurrency: int = 4) -> None:
        self.pace = pace
        self.base_dir = base_dir
        self.concurrency = concurrency
        self.stacks: list[up.Stack] = []
        self.traffic: Traffic | None = None
        self.status: dict[str, Any] = {}
        self.restored_at = float("inf")

    @property
    def stack(self) -> up.Stack:
        """The running stack."""
        return self.stacks[0]

    def start(self) -> None:
        """Start every process (``bridge up``'s set, with the pace's settings)."""
        base = self.base_dir or Path(tempfile.mkdtemp(prefix="bridge-demo-"))
        base.mkdir(parents=True, exist_ok=True)
        entities_file = base / "namespace-entities.toml"
        entities_file.write_text(namespace_entities(self.pace))
        up.start(
            base,
            concurrency=self.concurrency,
            entities=ENTITIES,
            settings={"BRIDGE_PRIMARY__NAME": PRIMARY_NAME, **self.pace.settings},
            on_start=self.stacks.append,
            namespace_entities=entities_file,
        )
        self.traffic = Traffic(self.stack.ingress_url, self.pace.rate)

    def stop(self) -> None:
        """Stop the traffic and every process."""
        if self.traffic is not None:
            self.traffic.stop()
        for stack in self.stacks:
            up.stop(stack)

    def read_status(self) -> dict[str, Any]:
        """The ingress's ``/status.json`` (the last good one when it cannot answer)."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            answer = httpx.get(f"{self.stack.ingress_url}/status.json", timeout=10)
            if answer.status_code == 200:
                self.status = answer.json()
        return self.status

    def phases(self) -> list[Phase]:
        """The story (see the module docstring)."""
        local = self.stack.local
        traffic = self.traffic
        assert traffic is not None
        accepted_total = traffic.total

        def nothing() -> None:
            pass

        def receive_done(status: dict[str, Any]) -> bool:
            return all(
                entity(status, n).get("receiver", {}).get("handled", -1) >= len(traffic.accepted[n])
                for n in ENTITIES
            )

        return [
            Phase(
                "steady traffic to passive, active and paired entities",
                traffic.start,
                lambda s: (
                    accepted_total() > 0 and all(entity(s, n).get("cost", {}).get("total") for n in ENTITIES)
                ),
                self.pace.hold,
            ),
            Phase(
                "primary outage: swap, both-to-one, backlog",
                local.primary.control.outage,
                _primary_down,
                self.pace.hold,
            ),
            Phase(
                "both namespaces down: the outbox holds everything",
                local.secondary.control.outage,
                lambda s: True,
                self.pace.hold,
            ),
            Phase("restore both namespaces: the outbox drains", self._restore, _caught_up),
            Phase("ping sees the primary, the syphon drains the backlog", nothing, self._syphoned),
            Phase("traffic stops; the receivers hand every message once", traffic.stop, receive_done),
        ]

    def _restore(self) -> None:
        self.restored_at = time.time()
        self.stack.local.primary.control.restore()
        self.stack.local.secondary.control.restore()

    def _syphoned(self, status: dict[str, Any]) -> bool:
        payments = entity(status, PAIRED)
        return (
            not payments.get("paired", {}).get("failed_over", True)
            and backlog_empty_since(status, self.restored_at)
            and _caught_up(status)
        )

    def ledger(self) -> dict[str, Any]:
        """``bridge report --json`` over this run's journal (the PySpark ledger)."""
        out = self.stack.base / "report"
        done = subprocess.run(
            [sys.executable, "-m", "bridge.cli.main", "report", "--out", str(out), "--json"],
            env={**self.stack.local.env(), "PYTHONWARNINGS": "ignore"},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bridge report failed ({done.returncode}): {done.stderr[-2000:]}")
        summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return summary

    def handled_ids(self) -> Counter[str]:
        """How often each MessageId reached a handler, from the receivers' logs (one ``log_message`` line
        per call)."""
        seen: Counter[str] = Counter()
        for name in ENTITIES:
            log = self.stack.base / f"receive-{name}.log"
            if log.exists():
                seen.update(f"{name}/{m}" for m in HANDLED.findall(log.read_text(errors="replace")))
        return seen

    def verdict(self, outcome: Outcome) -> Outcome:
        """Fill the demo's own count: accepted ids against the ids the handlers got."""
        traffic = self.traffic
        assert traffic is not None
        accepted = {f"{n}/{m}" for n, ids in traffic.accepted.items() for m in ids}
        handled = self.handled_ids()
        outcome.accepted = len(accepted)
        outcome.handled = len(set(handled) & accepted)
        outcome.lost = len(accepted - set(handled))
        outcome.handled_twice = sum(1 for count in handled.values() if count > 1)
        return outcome


def env_file_hint(stack: up.Stack) -> str:
    """How to use the stack from another shell."""
    return f"set -a; . {stack.env_file}; set +a; bridge status"
