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
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from bench import chaos_checker, chaos_evidence
from bench.chaos_finish import run_ledger, stop_processes
from bench.chaos_load import (
    DOORS,
    Door,
    Ledger,
    http_sender,
    producer_sender,
    redis_door_sender,
)
from bench.chaos_memory import Sampler
from bench.chaos_stack import ENTITIES, FAULTS, Chaos, backlog_paths, entity_specs
from bridge.embedded import up

# ---- the run ----------------------------------------------------------------------------------------------


def drained(chaos: Chaos, acked_ids: set[str]) -> bool:
    """Every acknowledged message handed, and the outbox and the Redis doors empty."""
    handed = {r["id"] for r in chaos_evidence.read_records(chaos.records)}
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
        acked_ids = {r["id"] for r in chaos_evidence.read_jsonl(base / "acked.jsonl")}
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
            held += chaos_evidence.peek_namespace(
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
