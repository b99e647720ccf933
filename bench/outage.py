"""Long outages end to end: the primary down, then both namespaces down, then restored, under steady load.

    python -m bench.outage                                         # the full run: 20 + 10 minutes, defaults
    python -m bench.outage --primary-down 120 --both-down 60 --json            # compressed (minutes → s)
    python -m bench.outage --primary-down 120 --both-down 60 --disaster --json # the primary's data lost
    python -m bench.outage --primary-down 20 --both-down 10 --fast --json      # the test's scale

The stack, the load and the checks are the chaos run's (``bench/chaos_stack.py``, ``bench/chaos_load.py``,
``bench/chaos_checker.py``, ``bridge report``); what differs is the entities and the schedule. Four
entities, one per replication mode: ``outage-passive``, ``outage-any`` (active, ``success_policy =
"any"``), ``outage-all`` (active, ``"all"``) and ``outage-paired`` (paired, a session queue), one outbox
shard each; one receiver per entity; ``bridge up``'s worker (prefork, 2 children) and two beats. Every
bridge setting is its default (``bridge up``'s short timings are set back to the defaults), unless
``--fast`` takes the chaos run's short timings (failover and ping every second), which is how a test
compresses the minutes into seconds.

Schedule: ``--warmup`` s of load; the primary in outage for ``--primary-down`` s (``--disaster``: its data
dropped at the start, re-created empty at the restore, as an operator's ``bridge provision`` would); then
the secondary too for ``--both-down`` s; then both restored, the outbox drain watched, ``--after`` s more
load; then the load stops, the run drains, and the checker and the ledger run.

Reported (the last line, JSON with ``--json``): the chaos verdict (lost, handed twice, order violations,
fidelity, the ledger agreeing); sender-visible errors per phase; the outbox's peak per entity and its drain
after the restore as a rate ÷ the raw SDK's batched send rate on the primary (measured before the load,
three rounds); Redis bytes per outbox entry; memory of every process kind and of Redis every
``--sample-interval`` s (``memory.csv``, ``memory.png`` in the run folder); the messages the paired
entity syphoned from the backlog; with ``--disaster``, the ids the journal shows existed only on the lost
primary, which must be exactly the ids the checker found lost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import chaos_checker, chaos_evidence, outage_measure
from bench.chaos_finish import run_ledger, stop_processes
from bench.chaos_load import (
    DOORS,
    Door,
    Ledger,
    http_sender,
    producer_sender,
    redis_door_sender,
)
from bench.outage_stack import ENTITIES, PAIRED, RAW_QUEUE, Outage, backlog_paths, entity_specs
from bridge.embedded import up


def errors_by_phase(doors: list[Door], phases: dict[str, list[float]]) -> dict[str, int]:
    """Sender-visible errors (a door's send raised) per phase."""
    out = dict.fromkeys(phases, 0)
    for door in doors:
        for at in door.errors:
            phase = next((p for p, (s, e) in phases.items() if s <= at <= e), "restored")
            out[phase] = out.get(phase, 0) + 1
    return out


def unsettled(
    outage: Outage, acked_ids: set[str], watch: outage_measure.OutboxWatch
) -> tuple[set[str], bool]:
    """Acknowledged messages not handed yet, and whether the outbox and the Redis doors still hold any."""
    import redis

    missing = acked_ids - {r["id"] for r in chaos_evidence.read_records(outage.records)}
    client = redis.Redis.from_url(outage.local.redis.url, socket_timeout=5)
    try:
        if any(client.xlen(f"bridge:{{{name}}}:in") for name in ENTITIES):
            return missing, True
        return missing, any(watch.lengths(client).values())
    finally:
        client.close()


def still_held(outage: Outage, missing: set[str]) -> bool:
    """Whether a namespace still holds one of ``missing`` (not dead-lettered): it is on its way. The
    session queue is not peeked (the running receivers hold its sessions' locks); its messages are taken
    as they come, which is progress. A peek that fails counts as holding (wait on)."""
    plain = [spec for spec in entity_specs() if not spec.get("sessions")]
    held = set()
    try:
        for name, ns in (("primary", outage.local.primary), ("secondary", outage.local.secondary)):
            backlog = backlog_paths() if name == "secondary" else []
            found = chaos_evidence.peek_namespace(name, ns.connection_string, plain, backlog)
            held |= {h.message_id for h in found if not h.dead_letter}
    except Exception as exc:
        outage.say(f"peek failed, waiting on: {type(exc).__name__}")
        return True
    return bool(missing & held)


def wait_drained(outage: Outage, args: argparse.Namespace, acked_ids: set[str], watch: Any) -> float:
    """Until every acknowledged message was handed and the outbox is empty (bounded). After a disaster
    the messages that existed only on the lost primary never come: then until the outbox is empty, no
    message arrived for two lock durations and 10 s (a copy locked by a receiver whose link the restore
    cut comes back after one), and no namespace holds one of the missing ids any more (the paired
    backlog may wait for the syphon)."""
    quiet = args.quiet if args.quiet is not None else 2 * (10.0 if args.fast else 60.0) + 10.0
    deadline = time.monotonic() + args.drain_timeout
    started = last_change = time.monotonic()
    last_missing = -1
    while time.monotonic() < deadline:
        missing, held = unsettled(outage, acked_ids, watch)
        if not missing and not held:
            break
        if len(missing) != last_missing:
            last_missing, last_change = len(missing), time.monotonic()
        if args.disaster and not held and time.monotonic() - last_change > quiet:
            if not still_held(outage, missing):
                outage.say(f"{len(missing)} acknowledged message(s) not handed, held by no namespace")
                break
            last_change = time.monotonic()
        time.sleep(1.0)
    return round(time.monotonic() - started, 1)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--primary-down", type=float, default=1200.0, help="Seconds the primary is down.")
    parser.add_argument("--both-down", type=float, default=600.0, help="Seconds both are down after it.")
    parser.add_argument("--disaster", action="store_true", help="The primary's data is lost, not kept.")
    parser.add_argument("--rate", type=float, default=40.0, help="Messages per second over all doors.")
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--after", type=float, default=30.0, help="Seconds of load after the restore.")
    parser.add_argument("--fast", action="store_true", help="The chaos run's short timings, not defaults.")
    parser.add_argument("--raw-rounds", type=int, default=3, help="Rounds of the raw SDK baseline.")
    parser.add_argument("--raw-messages", type=int, default=2000, help="Messages per baseline round.")
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument(
        "--drain",
        choices=("with-receivers", "alone"),
        default="with-receivers",
        help="alone: the receivers are stopped (SIGSTOP) from the restore until every outbox is drained, as"
        " if they ran on machines of their own, then continued; they take what the drain sent then.",
    )
    parser.add_argument("--sample-interval", type=float, default=10.0)
    parser.add_argument(
        "--quiet",
        type=float,
        default=None,
        help="After a disaster: seconds without a message handed before the namespaces are asked whether"
        " they still hold a missing one (default: two lock durations and 10 s).",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="Run folder (kept); default: a temp dir.")
    parser.add_argument("--json", action="store_true", help="Print the verdict as one JSON object, last.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run, check, print the verdict; exit 1 when it failed."""
    args = parse(argv)
    wall = time.monotonic()
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="bridge-outage-"))
    if base.exists() and any(base.iterdir()):
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    outage = Outage(base, args.fast)
    ledger = Ledger(base)
    doors: list[Door] = []
    threads: list[Any] = []
    result: dict[str, Any] = {"run_dir": str(base), "disaster": args.disaster, "fast": args.fast}
    result.update(primary_down=args.primary_down, both_down=args.both_down, rate=args.rate)
    try:
        outage.start()
        outage.raw_rate = outage_measure.raw_sdk_rate(
            outage.local.primary.connection_string, RAW_QUEUE, args.raw_rounds, args.raw_messages
        )
        result["raw_sdk_rate"] = outage.raw_rate
        outage.say(f"raw SDK batched send rate on the primary: {outage.raw_rate}")
        doors = make_doors(outage, args.rate, ledger)
        url = outage.local.redis.url
        sampler = outage_measure.OutageSampler(outage, ledger, args.sample_interval, ENTITIES, entity_specs())
        outage.sampler = sampler
        watch = outage_measure.OutboxWatch(url, list(ENTITIES))
        threads = [sampler, watch]
        for thread in [*threads, *doors]:
            thread.start()
        outage.t0 = sampler.t0 = time.time()
        outage.enter("warmup")
        time.sleep(args.warmup)
        result.update(run(outage, args, doors, ledger, watch))
        result["memory"] = sampler.write(base)
    finally:
        for thread in [*doors, *threads]:
            thread.stopping.set()
        for stack in outage.stacks:
            up.stop(stack)
        ledger.close()
    result["wall_seconds"] = round(time.monotonic() - wall, 1)
    for line in outage.events:
        print(line, file=sys.stderr)
    result["passed"] = passed(result)
    (base / "verdict.json").write_text(json.dumps(result, default=str))
    if args.json:
        print(json.dumps(result, default=str))
    else:
        keys = (
            "acknowledged",
            "lost",
            "handed_twice",
            "order_violations",
            "sender_errors",
            "outbox",
            "passed",
        )
        print(" ".join(f"{k}={result.get(k)}" for k in keys))
    return 0 if result["passed"] else 1


def make_doors(outage: Outage, rate: float, ledger: Ledger) -> list[Door]:
    """The three load threads (HTTP, ``Producer``, Redis door), each sending to the four entities in turn."""
    url = outage.local.redis.url
    senders = {"http": http_sender(outage.ingress_url), "producer": producer_sender(url)}
    senders["redis"] = redis_door_sender(url)
    return [
        Door(door, rate / len(DOORS), 100 + index, ledger, senders[door], tuple(ENTITIES), PAIRED, None)
        for index, door in enumerate(DOORS)
    ]


def run(
    outage: Outage, args: argparse.Namespace, doors: list[Door], ledger: Ledger, watch: Any
) -> dict[str, Any]:
    """The outages, the drain, the stop, the checks; the figures."""
    cpu = outage_measure.CpuWatch(outage)
    empty_at = max(5, int(args.rate / 4))
    aside = outage_measure.ReceiversAside(outage.of("receive-"), watch, empty_at, args.drain_timeout)
    pause = aside.start if args.drain == "alone" else lambda: None
    try:
        restored = outage.outages(args.primary_down, args.both_down, args.disaster, watch, pause)
        cpu.start()
        watch.interval = 0.1  # the drain takes seconds: watch it closely
        time.sleep(args.after)
        if args.drain == "alone":
            aside.join(args.drain_timeout)
    finally:
        aside.resume()
    outage.enter("stopping")
    for door in doors:
        door.stopping.set()
    for door in doors:
        door.join(Door.GIVE_UP + 10)
    acked_rows = chaos_evidence.read_jsonl(outage.base / "acked.jsonl")
    acked_ids = {r["id"] for r in acked_rows}
    outage.say(f"load stopped: sent={ledger.sent} acked={ledger.acked}; draining")
    out: dict[str, Any] = {"drain_after_load_s": wait_drained(outage, args, acked_ids, watch)}
    out["sender_errors"] = errors_by_phase(doors, outage.phases)
    watch.stopping.set()
    watch.write(outage.base, outage.t0)
    outbox = watch.drain(restored, acked_rows, empty_at=empty_at)
    outbox["drain"] = args.drain
    if aside.paused_at is not None and aside.resumed_at is not None:
        outbox["receivers_paused_s"] = round(aside.resumed_at - aside.paused_at, 2)
    raw = outage.raw_rate["median"]
    for row in [*outbox["per_entity"].values(), outbox["all_entities"]]:
        if row.get("rate") and raw:
            row["rate_vs_raw_sdk"] = round(row["rate"] / raw, 2)
    at_peak = outage.at_peak
    entries = sum(v["entries"] for v in at_peak.values())
    outbox["at_end_of_outage"] = at_peak
    outbox["redis_bytes_per_entry"] = (
        round(sum(v["bytes"] for v in at_peak.values()) / entries, 1) if entries else None
    )
    out["outbox"] = outbox
    time.sleep(2.0)  # late copies (active mode's second one) are suppressed, not handed
    whole = outbox.get("from_restore")
    cpu.stopping.set()
    if whole:
        whole["cpu"] = cpu.over(restored, restored + whole["seconds"])
    window = (restored, restored + whole["seconds"]) if whole else None
    verdict = finish(outage, args, same_count=whole["moved"] if whole else 0, window=window)
    same = verdict.pop("raw_same_count_s", None)
    sends = verdict.pop("sends_in_window", None)
    if whole and whole["rate"] and same:
        whole["raw_sdk_seconds"] = round(same, 2)
        whole["raw_sdk_rate"] = round(whole["moved"] / same, 1)
        whole["rate_vs_raw_sdk"] = round(whole["rate"] / whole["raw_sdk_rate"], 2)
        if sends:
            # Each namespace's work: active mode sends every message to both, the syphon moves the
            # backlog; the raw SDK sends each of its messages once.
            whole["sends"] = sends
            whole["sends_rate"] = round(sends / whole["seconds"], 1)
            whole["sends_vs_raw_sdk"] = round(whole["sends_rate"] / whole["raw_sdk_rate"], 2)
    verdict["ride_out"] = ride_out(outbox, verdict["accepted_size_mean"])
    return {**out, **verdict}


def finish(
    outage: Outage,
    args: argparse.Namespace,
    same_count: int = 0,
    window: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Stop the bridge processes, time the raw SDK sending ``same_count`` messages (as many as the drain
    moved), peek the namespaces, run the ledger and the checker; with ``window`` (the drain, wall-clock
    seconds), count the copies the namespaces accepted in it (the journal's ``sent`` events)."""
    if outage.sampler is not None:  # the chart ends with the run, not with the checks after it
        outage.sampler.stopping.set()
        outage.sampler.join(10)
    stop_processes(outage.of("receive-") + outage.of("worker") + outage.of("beat") + outage.of("serve"))
    same: float | None = None
    if same_count:
        conn = outage.local.primary.connection_string
        same = outage_measure.raw_sdk_seconds(conn, RAW_QUEUE, [same_count])[0]
        outage.say(f"raw SDK: {same_count} messages in batches of 100 in {same:.1f} s")
    outage.say("bridge processes stopped; peeking the namespaces")
    held = []
    for name, ns in (("primary", outage.local.primary), ("secondary", outage.local.secondary)):
        backlog = backlog_paths() if name == "secondary" else []
        held += chaos_evidence.peek_namespace(name, ns.connection_string, entity_specs(), backlog)
    run_file = outage.base / "run.json"
    run_file.touch(mode=0o600)
    run_file.write_text(
        json.dumps(
            {
                "entities": entity_specs(),
                "namespaces": {
                    "primary": outage.local.primary.connection_string,
                    "secondary": outage.local.secondary.connection_string,
                },
                "backlog": backlog_paths(),
                "redis_url": outage.local.redis.url,
                "receiver_kills": [],
                "redis_windows": [],
                "fault_windows": outage.fault_windows,
                "resets": outage.resets,
            }
        )
    )
    with (outage.base / "held.jsonl").open("w") as out:
        out.writelines(json.dumps(h.__dict__) + "\n" for h in held)
    outage.say("running bridge report --json")
    summary = run_ledger(outage)
    if summary is not None:
        (outage.base / "ledger.json").write_text(json.dumps(summary))
    verdict = chaos_checker.check(outage.base, held).as_dict()
    verdict.pop("ledger", None)
    rows = outage_measure.journal_rows(outage.base / "journal")
    syphoned = {r["message_id"] for r in rows if r["kind"] == "sent" and r["path"] == "syphon"}
    backlogged = {r["message_id"] for r in rows if r["kind"] == "sent" and r["path"] == "backlog"}
    verdict.update(syphoned=len(syphoned), sent_to_backlog=len(backlogged))
    verdict["backlog_not_syphoned"] = len(backlogged - syphoned)
    verdict["accepted_size_mean"] = round(outage_measure.accepted_size(rows), 1)
    if window is not None:
        verdict["sends_in_window"] = sum(
            1 for r in rows if r["kind"] == "sent" and window[0] <= r["time"].timestamp() <= window[1]
        )
    if args.disaster:
        verdict.update(disaster(outage, rows, held))
    verdict["raw_same_count_s"] = same
    return verdict


def ride_out(outbox: dict[str, Any], counted_size: float) -> list[dict[str, Any]]:
    """The docs' table from this run's measured bytes: per rate, the outbox bound and how long it lasts."""
    per_entry = outbox.get("redis_bytes_per_entry") or 0.0
    return outage_measure.ride_out_table(per_entry, counted_size, (100, 1_000, 10_000))


def disaster(outage: Outage, rows: list[dict[str, Any]], held: list[Any]) -> dict[str, Any]:
    """The ledger's messages that existed only on the lost primary, against the checker's lost ids."""
    only = outage_measure.only_on_lost(rows, outage.recreated_at)
    acked = {r["id"] for r in chaos_evidence.read_jsonl(outage.base / "acked.jsonl")}
    handed = {r["id"] for r in chaos_evidence.read_records(outage.records)}
    held_ids = {h.message_id for h in held}
    lost = acked - handed - held_ids
    ledger_ids = {i for ids in only.values() for i in ids}
    return {
        "only_on_lost_namespace": {entity: len(ids) for entity, ids in only.items()},
        "only_on_lost_namespace_ids": {entity: ids[:20] for entity, ids in only.items()},
        "lost_not_only_on_lost_namespace": sorted(lost - ledger_ids)[:20],
        "ledger_only_on_lost_not_lost": sorted(ledger_ids - lost)[:20],
        "disaster_accounted": lost == ledger_ids,
    }


def passed(result: dict[str, Any]) -> bool:
    """Nothing lost (but, after a disaster, exactly what the ledger says existed only on the lost
    namespace), nothing handed twice or reordered, fidelity, no sender-visible error, the ledger agreeing
    (after a disaster: but for its ``lost``, which counts a message delivered to the lost namespace as
    delivered)."""
    fidelity = result.get("fidelity", {})
    ledger_ok = bool(result.get("ledger_agrees"))
    if result.get("disaster"):
        ledger_ok = result.get("disaster_accounted", False) and all(
            " lost=" in d for d in result.get("ledger_differences", [])
        )
    else:
        ledger_ok = ledger_ok and result.get("lost") == 0
    return bool(
        ledger_ok
        and result.get("handed_twice") == 0
        and result.get("order_violations") == 0
        and result.get("unexpected") == 0
        and all(v == 0 for k, v in fidelity.items() if k != "checked")
        and not any(result.get("sender_errors", {}).values())
        and result.get("backlog_not_syphoned") == 0
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
