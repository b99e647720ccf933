"""The chaos run's checker: separate from the code under test, it reconciles what went in with what came out.

It imports nothing from ``bridge``: it reads plain files, peeks the namespaces with the unmodified
``azure-servicebus`` SDK and reads two things from Redis with plain redis-py (the receivers' counters of
suppressed copies and the local dead-letter streams, by their documented key names). Inputs, all in the
run folder that ``bench/chaos.py`` writes:

- ``run.json``: entities (queue/topic, subscription, sessions, mode), the namespaces' connection strings,
  the backlog queue paths, the session ids, the Redis URL, receiver kills and Redis fault windows;
- ``acked.jsonl``: every message a door acknowledged (MessageId, entity, door, key, per-key sequence, TTL,
  schedule, properties); ``unacked.jsonl``: MessageIds tried and never acknowledged (given up);
- ``records/recv-*.jsonl``: one line per handler call (``bench/chaos_handler.py``);
- ``ledger.json``: the last line of ``bridge report --json``.

What it reports (``check``): see ``docs/chaos.md``, "What is checked", for the precise definitions.
Run it alone on a kept run folder: ``python -m bench.chaos_checker RUN_DIR`` (it uses the peek saved in
``held.jsonl``, or peeks again when the namespaces still run).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench.chaos_evidence import (
    Held,
    local_dead_letters,
    peek_namespace,
    read_jsonl,
    read_records,
    run_redis,
    suppressed,
)

CRASH_WINDOW = 5.0
"""Seconds: a handler call this close before its receiver process was killed may be followed by one more
call for the same id (``docs/receiving.md``, "Guarantees": the done mark is written after the handler
returned, so a crash in between hands the id again) — if that call does not overlap it."""
IN_HAND_PER_KILL = 2 * 100
"""The most ids a receiver process can hold between a handler call and its done mark when it is killed,
so the most one kill can bring back: one batch (``receiver.batch_size``, 100) per namespace link (a
session receiver holds fewer: one message per session thread)."""
AFTERMATH = 5.0
"""Seconds after a fault's end during which a delivery still counts as ``with_faults`` in ``latency_ms``
(backoffs and reconnects outlive the fault itself)."""

SCHEDULE_SLACK = 1.0
"""Seconds a scheduled message may be handed before its due time (clocks of one machine; AMQP rounding)."""


@dataclass
class Verdict:
    """The checker's numbers (``as_dict`` is what the chaos run prints)."""

    sent: int = 0
    acknowledged: int = 0
    stored: int = 0
    handed: int = 0
    lost: int = 0
    lost_ids: list[str] = field(default_factory=list)
    handed_twice: int = 0
    handed_twice_ids: list[str] = field(default_factory=list)
    handed_concurrently: int = 0
    handed_concurrently_ids: list[str] = field(default_factory=list)
    handed_again_after_crash: int = 0
    crash_window_bound: int = 0
    broker_duplicates: int = 0
    order_violations: int = 0
    order: dict[str, int] = field(default_factory=dict)
    order_examples: list[str] = field(default_factory=list)
    unexpected: int = 0
    held: int = 0
    dead_lettered: int = 0
    fidelity: dict[str, int] = field(default_factory=dict)
    per_entity: dict[str, dict[str, int]] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)
    ledger_agrees: bool = False
    ledger_differences: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return dict(self.__dict__)


def fault_windows(run: dict[str, Any], run_dir: Path) -> list[tuple[float, float]]:
    """When a fault was in force (epoch seconds): ``run.json``'s ``fault_windows``, or for a run folder
    written before they were recorded, the times and holds ``chaos.log`` states (second resolution, so
    each window is widened by one second)."""
    if "fault_windows" in run:
        return [(float(start), float(end)) for _, start, end in run["fault_windows"]]
    windows = [(float(start), float(end)) for start, end in run.get("redis_windows", [])]
    acked = run_dir / "acked.jsonl"
    log = run_dir / "chaos.log"
    if not (acked.exists() and log.exists()):
        return windows
    with acked.open() as rows:
        first = next((json.loads(line) for line in rows if line.strip()), None)
    if first is None:
        return windows
    # chaos.log's clock is local time (time.strftime), so is the day's midnight here.
    day = datetime.fromtimestamp(first["t_ack"]).replace(hour=0, minute=0, second=0, microsecond=0)
    pattern = re.compile(
        r"^(\d\d):(\d\d):(\d\d) (?!secondary_disaster skipped|started ).*? (?:for|after) ([\d.]+)s"
    )
    for line in log.read_text().splitlines():
        found = pattern.match(line)
        if found:
            hours, minutes, seconds, hold = found.groups()
            start = day.timestamp() + int(hours) * 3600 + int(minutes) * 60 + int(seconds)
            windows.append((start, start + float(hold) + 1.0))
    return windows


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Again:
    """Ids handed more than once, by kind (``handed_again``)."""

    twice: set[str] = field(default_factory=set)
    concurrent: set[str] = field(default_factory=set)
    after_crash: set[str] = field(default_factory=set)
    crash_bound: int = 0


def handed_again(calls: dict[str, list[dict[str, Any]]], kills: list[dict[str, Any]]) -> Again:
    """Every handler call after an id's first, judged (``docs/chaos.md``, "What is checked").

    A call that starts before an earlier call of the same id ended (``t`` .. ``end``; a record without
    ``end`` lasted no time) ran *concurrently*: never excused, whatever faults were on. A later call is the
    *crash window* only when the call before it was made by a receiver process killed within
    ``CRASH_WINDOW`` seconds after it (each kill excuses one more call per id; Redis faults excuse nothing:
    the done mark and the in-flight mark survive them). Any other later call is handed *twice*; concurrent
    ids are counted there too. ``crash_bound``: what the kills can bring back at most — per kill, the ids
    its process handed in the ``CRASH_WINDOW`` seconds before it, at most ``IN_HAND_PER_KILL``.
    """
    out = Again()
    for message_id, rows in calls.items():
        ordered = sorted(rows, key=lambda r: r["t"])
        busy_until = float("-inf")
        for before, call in pairwise(ordered):
            busy_until = max(busy_until, before.get("end", before["t"]))
            if call["t"] < busy_until:
                out.concurrent.add(message_id)
                out.twice.add(message_id)
            elif any(k["pid"] == before["pid"] and 0 <= k["t"] - before["t"] <= CRASH_WINDOW for k in kills):
                out.after_crash.add(message_id)
            else:
                out.twice.add(message_id)
    out.after_crash -= out.twice
    for kill in kills:
        in_hand = {
            message_id
            for message_id, rows in calls.items()
            if any(r["pid"] == kill["pid"] and 0 <= kill["t"] - r["t"] <= CRASH_WINDOW for r in rows)
        }
        out.crash_bound += min(len(in_hand), IN_HAND_PER_KILL)
    return out


def check(run_dir: Path, held: list[Held] | None = None) -> Verdict:
    """Reconcile the run in ``run_dir`` (``held``: the namespaces' leftovers, peeked now when ``None``)."""
    run = json.loads((run_dir / "run.json").read_text())
    acked_rows = read_jsonl(run_dir / "acked.jsonl")
    unacked_ids = {r["id"] for r in read_jsonl(run_dir / "unacked.jsonl")}
    records = read_records(run_dir / "records")
    if held is None and (run_dir / "held.jsonl").exists():
        held = [Held(**row) for row in read_jsonl(run_dir / "held.jsonl")]
    if held is None:
        held = []
        for ns in ("primary", "secondary"):
            held += peek_namespace(
                ns, run["namespaces"][ns], run["entities"], run["backlog"] if ns == "secondary" else []
            )

    v = Verdict()
    acked = {r["id"]: r for r in acked_rows}
    attempted = set(acked) | unacked_ids
    v.sent = len(attempted)
    v.acknowledged = len(acked)
    entity_of = {r["id"]: r["entity"] for r in acked_rows}
    entity_of.update({r["id"]: r["entity"] for r in read_jsonl(run_dir / "unacked.jsonl")})

    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        calls[rec["id"]].append(rec)
    handed = set(calls)
    v.handed = len(handed & attempted)
    v.unexpected = len(handed - attempted)

    held_ids = {h.message_id for h in held if not h.dead_letter}
    dlq_ids = {h.message_id for h in held if h.dead_letter}
    dlq_ids |= local_dead_letters(run)
    v.held = len((held_ids - handed) & attempted)
    v.dead_lettered = len(dlq_ids & attempted)
    # Stored: everything acknowledged, and whatever was tried without an answer but shows up anywhere.
    stored = set(acked) | (unacked_ids & (handed | held_ids | dlq_ids))
    v.stored = len(stored)

    lost = sorted(set(acked) - handed - dlq_ids - held_ids)
    v.lost, v.lost_ids = len(lost), lost[:20]

    again = handed_again(calls, run.get("receiver_kills", []))
    v.handed_twice, v.handed_twice_ids = len(again.twice), sorted(again.twice)[:20]
    v.handed_concurrently = len(again.concurrent)
    v.handed_concurrently_ids = sorted(again.concurrent)[:20]
    v.handed_again_after_crash, v.crash_window_bound = len(again.after_crash), again.crash_bound

    v.order, v.order_examples = _order(calls, run)
    v.order_violations = sum(v.order.values())
    v.fidelity = _fidelity(calls, acked)
    v.broker_duplicates = suppressed(run)

    latencies = [rows[0]["t"] - acked[i]["t_ack"] for i, rows in calls.items() if i in acked]
    sched = {i for i, r in acked.items() if r.get("sched")}
    plain = [rows[0]["t"] - acked[i]["t_ack"] for i, rows in calls.items() if i in acked and i not in sched]
    v.latency_ms = {
        "p50": round(_percentile(plain, 0.5) * 1000, 1),
        "p99": round(_percentile(plain, 0.99) * 1000, 1),
        "max": round(max(latencies, default=0.0) * 1000, 1),
    }
    windows = fault_windows(run, run_dir)
    split: dict[str, list[float]] = {"without_faults": [], "with_faults": []}
    for i, rows in calls.items():
        if i in acked and i not in sched:
            start, end = acked[i]["t_ack"], rows[0]["t"]
            hit = any(s <= end and start <= e + AFTERMATH for s, e in windows)
            split["with_faults" if hit else "without_faults"].append(end - start)
    for name, values in split.items():
        v.latency_ms[name] = {
            "n": len(values),
            "p50": round(_percentile(values, 0.5) * 1000, 1),
            "p99": round(_percentile(values, 0.99) * 1000, 1),
            "max": round(max(values, default=0.0) * 1000, 1),
        }
    for name in {e["name"] for e in run["entities"]}:
        mine = {i for i in stored if entity_of.get(i) == name}
        v.per_entity[name] = {
            "stored": len(mine),
            "handed": len(mine & handed),
            "dead_lettered": len(mine & dlq_ids),
            "lost": sum(1 for i in lost if entity_of.get(i) == name),
        }

    ledger_path = run_dir / "ledger.json"
    if ledger_path.exists():
        v.ledger = json.loads(ledger_path.read_text())
        v.ledger_differences = compare_ledger(v, v.ledger)
        v.ledger_agrees = not v.ledger_differences
    else:
        v.ledger_differences = ["no ledger.json (bridge report did not run or failed)"]
    return v


def _order(calls: dict[str, list[dict[str, Any]]], run: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """First copies out of sequence, per key.

    ``broker``: per (entity, namespace, numbering series, key), the handed copies sorted by the
    namespace's own sequence number must carry increasing run sequence numbers — the order the bridge
    delivered a key in. A namespace re-created after a disaster numbers from 1 again: ``_series`` finds
    where, in the copies themselves. ``sequence_restart``: restarts beyond the disasters ``run["resets"]``
    records for that namespace (a namespace that kept its data must never number again).
    ``session_handler``: per session of a session entity whose messages live on one namespace (paired:
    the secondary only holds backlog queues), the handler calls in time order must be increasing.
    """
    broker: dict[tuple[str, str, str, str], list[tuple[int, int, str]]] = defaultdict(list)
    handler: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    one_namespace = {e["name"] for e in run["entities"] if e.get("sessions") and e["mode"] == "paired"}
    firsts = [
        (message_id, rows[0])
        for message_id, rows in calls.items()
        if rows[0].get("key") is not None and rows[0].get("seq") is not None
    ]
    series, restarts = _series(firsts)
    for message_id, first in firsts:
        group = (first["entity"], first["ns"], f"series{series[message_id]}", first["key"])
        broker[group].append((first["bseq"], first["seq"], message_id))
        if first["entity"] in one_namespace:
            handler[(first["entity"], first["key"])].append((first["t"], first["seq"], message_id))
    counts = {"broker": 0, "session_handler": 0, "sequence_restart": 0}
    examples: list[str] = []
    resets = run.get("resets", {})
    for (entity, namespace), restarted in sorted(restarts.items()):
        recorded = len(resets.get(namespace, []))
        if restarted > recorded:
            counts["sequence_restart"] += restarted - recorded
            examples.append(
                f"sequence_restart {entity}/{namespace}: numbering restarted {restarted} time(s), "
                f"{recorded} disaster(s) recorded"
            )
    for kind, groups in (("broker", broker), ("session_handler", handler)):
        for group_key, items in groups.items():
            top = -1
            for _, seq, message_id in sorted(items):
                if seq < top:
                    counts[kind] += 1
                    if len(examples) < 10:
                        examples.append(f"{kind} {'/'.join(group_key)}: seq {seq} after {top} ({message_id})")
                top = max(top, seq)
    return counts, examples


def _series(
    firsts: list[tuple[str, dict[str, Any]]],
) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """The numbering series of each first copy (0, 1, ... per entity and namespace), and how often each
    entity's numbering restarted on each namespace.

    A namespace numbers an entity's messages in the order it enqueues them, so, sorted by enqueued time,
    the sequence numbers of one namespace's copies rise; where they fall back, the entity was created
    anew (a disaster: the re-created one counts from 1) and a new series begins. Why from the copies and
    not from a time the harness took: a boundary placed even a second early (``chaos.log`` has whole
    seconds and is written before the outage is switched on) puts the old namespace's last copies, with
    their large numbers, into the new series, where they sort after the re-created namespace's first
    copies — order violations that never happened (``docs/findings.md``, "Findings and fixes"). The keyed
    copies judged here are never scheduled (``chaos_load``: a scheduled message is keyless), so each one
    was enqueued when it was numbered.
    """
    by_entity: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    for message_id, first in firsts:
        enqueued = first.get("enq") or first["t"]
        by_entity[(first["entity"], first["ns"])].append((enqueued, first["bseq"], message_id))
    series: dict[str, int] = {}
    restarts: dict[tuple[str, str], int] = {}
    for ref, copies in by_entity.items():
        current, last = 0, None
        for _, number, message_id in sorted(copies):
            # Distinct messages never share a number within one series: equal or lower starts a new one.
            if last is not None and number <= last:
                current += 1
            series[message_id], last = current, number
        restarts[ref] = current
    return series, restarts


def _fidelity(calls: dict[str, list[dict[str, Any]]], acked: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per handed first copy: key, TTL, schedule and typed properties as sent."""
    out = Counter(
        {"checked": 0, "key": 0, "ttl": 0, "schedule_early": 0, "schedule_time": 0, "properties": 0}
    )
    for message_id, rows in calls.items():
        sent = acked.get(message_id)
        if sent is None:
            continue
        got = rows[0]
        out["checked"] += 1
        if sent.get("key") is not None and got.get("key") != sent["key"]:
            out["key"] += 1
        want_key = sent.get("session") or sent.get("pk")
        if want_key is not None and (got.get("session") or got.get("pk")) != want_key:
            out["key"] += 1
        if sent.get("ttl") is not None:
            # Elapsed from the first try, not the acknowledgement: an answer that came late (a retried
            # request whose first try was stored) can follow the handler call itself.
            ttl, elapsed = got.get("ttl"), got["t"] - sent.get("t_sent", sent["t_ack"])
            # Remaining TTL (a backlog copy is restored with what is left): never more, never far less.
            if ttl is None or ttl > sent["ttl"] + 0.01 or ttl < sent["ttl"] - elapsed - 2.0:
                out["ttl"] += 1
        if sent.get("sched") is not None:
            if got["t"] < sent["sched"] - SCHEDULE_SLACK:
                out["schedule_early"] += 1
            if got.get("sched") is None or abs(got["sched"] - sent["sched"]) > 0.01:
                out["schedule_time"] += 1
        if got.get("props") != sent.get("props"):
            out["properties"] += 1
    return dict(out)


def compare_ledger(v: Verdict, ledger: dict[str, Any]) -> list[str]:
    """The numbers both sides must agree on; an empty list means they agree.

    Per entity: ``accepted`` (ledger: ids with an accepted event) = the checker's stored ids; ``handled``
    (ledger: ids with a handled event) = ids the handlers were given; ``dead_lettered`` = the checker's
    dead-lettered ids; ``lost`` = the checker's lost; and the ledger's ``pending`` is 0 (the run drained).
    """
    diffs: list[str] = []
    per = ledger.get("entities") or {}
    for name, mine in sorted(v.per_entity.items()):
        theirs = per.get(name) or {}
        for ours_key, their_key in (
            ("stored", "accepted"),
            ("handed", "handled"),
            ("dead_lettered", "dead_lettered"),
            ("lost", "lost"),
        ):
            if theirs.get(their_key) != mine[ours_key]:
                diffs.append(
                    f"{name}: ledger {their_key}={theirs.get(their_key)} checker {ours_key}={mine[ours_key]}"
                )
        if theirs.get("pending") not in (0, None):
            diffs.append(f"{name}: ledger pending={theirs.get('pending')} after the drain")
    return diffs


def main(argv: list[str]) -> int:
    """``python -m bench.chaos_checker RUN_DIR``: print the verdict of a kept run folder (its Redis is
    started again from the folder when it no longer runs)."""
    with run_redis(Path(argv[0])):
        verdict = check(Path(argv[0]))
    print(json.dumps(verdict.as_dict(), default=str))
    return 0 if verdict.lost == verdict.handed_twice == verdict.order_violations == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main(sys.argv[1:]))
