"""``bridge report`` at scale, and the roll's throughput, as ratios measured in the same run.

    python -m bench.ledger [--events 1000000 5000000] [--master local[2]] [--driver-memory 1g] [--rounds 1]
                           [--roll-events 200000] [--hot-path-messages 50000] [--hot-path-rounds 3]
                           [--skip report|roll|hot-path|live] [--live-rate 2000] [--live-seconds 60]
                           [--keep]

1. report: for each size, a synthetic rolled journal (Parquet, the roll's layout: hour partitions, files of
   250,000 events) with a realistic mix per message — accepted, sent, received, handled; 5 % sent to the
   backup after a failed send, 2 % through a backlog queue and syphoned, 1 % sent twice and suppressed by
   the receiver, 0.1 % lost — then ``bridge report --drained --json`` on ``--master`` as a separate process.
   Wall time includes the JVM's start; the driver's peak memory is the JVM's VmHWM. Prints the times and the
   ratio largest/smallest (target <= 5.5 for 5x the events), and checks the report found exactly the
   messages the generator lost (so a fast but wrong job cannot pass unnoticed). Against each report, the
   floor of any Spark job on this machine, measured on the same journal right after it: a minimal PySpark
   job (its own process and JVM, Spark's defaults but for the same master and driver memory) that starts
   its session, reads the journal and collects one grouped count. It prints report / floor per size
   (targets <= 1.5 up to 100,000 events, <= 2 above), in wall seconds and in CPU seconds of each process
   tree (user + system, from ``/proc``: on a machine shared with other work the wall-clock ratio moves
   with the neighbours' load, the CPU ratio much less); ``--rounds N`` alternates the two N times and
   prints every round, so the spread shows.
2. roll: ``--roll-events`` single events appended to a private Redis (batches of 200, one script call
   each), then rolled into Parquet: events/s of both.
3. hot path: the outbox write alone (``Producer.send_batch`` of 1,000 1 KB messages into one Redis,
   journal off and on alternated in this process), then ``bench.workers``' end-to-end run (50,000 1 KB
   messages written with ``Producer.send_batch`` until the primary's queue holds them all; ``bridge worker
   --concurrency 2``, 4 outbox shards) on a stack with ``journal.enabled = false`` and one with it on,
   alternated ``--hot-path-rounds`` times. Ratios on / off of the best rates and the median of the rounds'
   ratios (target >= 0.9).

4. live: the live ledger's freshness at ``--live-rate`` messages/s, the report's time on 100,000 events in
   a warm session, and cold report / floor on the same journal (``bench.ledger_live`` says how; also
   ``python -m bench.ledger_live`` alone).

Nothing here asserts a time; it prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

FILE_EVENTS = 250_000
HOUR_MS = 3_600_000
START = 1_790_000_000.0


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _tree_sample(root_pid: int, cpu: dict[int, float]) -> int:
    """The largest VmHWM among ``root_pid`` and its descendants (the JVM is a child of the CLI); records each
    one's user + system CPU seconds so far in ``cpu``."""
    best = 0
    pending = [root_pid]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        best = max(best, int(line.split()[1]))
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            cpu[pid] = max(cpu.get(pid, 0.0), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        pending.extend(int(child) for child in children)
    return best


def _watched(command: list[str], what: str) -> tuple[float, int, float, str]:
    """Run ``command``: wall seconds, the tree's peak RSS (KB), its CPU seconds (sampled every 0.2 s, so a
    last fraction of a second may be missed) and stdout."""
    env = dict(os.environ)
    env.setdefault("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    cpu: dict[int, float] = {}
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_sample(process.pid, cpu))
            done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = process.communicate()
    elapsed = time.monotonic() - started
    done.set()
    watcher.join()
    if process.returncode != 0:
        raise SystemExit(f"{what} failed ({process.returncode}):\n{stderr[-3000:]}")
    return elapsed, peak, sum(cpu.values()), stdout


def generate(folder: Path, events: int, seed: int = 7) -> dict[str, int]:
    """Write a rolled journal of about ``events`` events; returns the generator's own counts."""
    from bridge.core import journal as J
    from bridge.core.journal_files import to_row
    from bridge.journal.roll import file_path, table_of, write_durably

    rng = random.Random(seed)
    expected = {"messages": 0, "lost": 0, "events": 0}
    batch: list[dict[str, Any]] = []
    first_id = ""
    ms, seq = int(START * 1000), 0
    entities = ("orders", "payments", "audit", "invoices")

    def flush() -> None:
        nonlocal batch, first_id
        if batch:
            last_id = f"{batch[-1]['stream_ms']}-{batch[-1]['stream_seq']}"
            write_durably(table_of(batch, START), file_path(folder, "bench", first_id, last_id))
        batch, first_id = [], ""

    def emit(entity: str, event: J.JournalEvent) -> None:
        nonlocal ms, seq, first_id
        seq += 1
        if seq > 50:
            ms, seq = ms + 1, 0
        stream_id = f"{ms}-{seq}"
        if not first_id:
            first_id = stream_id
        batch.append(to_row(entity, stream_id, event))
        expected["events"] += 1
        if len(batch) >= FILE_EVENTS or J.split_stream_id(first_id)[0] // HOUR_MS != ms // HOUR_MS:
            flush()

    n = 0
    while expected["events"] < events:
        n += 1
        entity = entities[n % len(entities)]
        mid = f"{entity}-{n:09d}"
        at = START + n * 0.001
        expected["messages"] += 1
        emit(entity, J.accepted(mid, at, door="http", size=1024))
        roll = rng.random()
        if roll < 0.001:
            expected["lost"] += 1
            continue
        if roll < 0.021:
            emit(entity, J.sent(mid, at + 0.02, namespace="ns2", role="secondary", path="backlog", batch="b"))
            emit(entity, J.sent(mid, at + 30, namespace="ns1", role="primary", path="syphon", batch="s"))
            emit(entity, J.syphoned(mid, at + 30.01, namespace="ns2", queue="3"))
        elif roll < 0.071:
            emit(entity, J.send_failed(mid, at + 0.01, namespace="ns1", role="primary", error_class="outage",
                                       batch="b"))  # fmt: skip
            emit(entity, J.sent(mid, at + 0.03, namespace="ns2", role="secondary", path="backup", batch="b"))
        else:
            emit(entity, J.sent(mid, at + 0.005 + rng.random() * 0.01, namespace="ns1", role="primary",
                                path="direct", batch="b"))  # fmt: skip
        emit(entity, J.received(mid, at + 0.05, namespace="ns1", role="primary"))
        emit(entity, J.handled(mid, at + 0.06))
        if roll > 0.99:
            emit(entity, J.sent(mid, at + 1, namespace="ns1", role="primary", path="direct", batch="d"))
            emit(entity, J.duplicate_suppressed(mid, at + 1.05, namespace="ns1", role="primary"))
    flush()
    return expected


def run_report(
    journal: Path, out: Path, master: str, driver_memory: str
) -> tuple[float, int, float, dict[str, Any]]:
    """``bridge report`` as a separate process: wall seconds, the driver's peak RSS (KB), CPU seconds, its
    summary."""
    command = [
        sys.executable, "-m", "bridge.cli.main", "report", "--drained", "--json", "--journal", str(journal),
        "--out", str(out), "--master", master, "--driver-memory", driver_memory,
    ]  # fmt: skip
    elapsed, peak, cpu, stdout = _watched(command, "bridge report")
    return elapsed, peak, cpu, json.loads(stdout)


FLOOR_JOB = """
import sys, time
from pyspark.sql import SparkSession
journal, master, memory = sys.argv[1:4]
spark = (SparkSession.builder.master(master).config("spark.driver.memory", memory)
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
rows = spark.read.option("basePath", journal).parquet(journal).groupBy("entity").count().collect()
print(sum(row["count"] for row in rows))
spark.stop()
"""
"""The yardstick: start a session, read the journal, one grouped count (``FLOOR_JOB``'s own process)."""


def run_floor(journal: Path, master: str, driver_memory: str) -> tuple[float, float, int]:
    """``FLOOR_JOB`` as a separate process: wall seconds (JVM start included), CPU seconds and the events it
    counted."""
    command = [sys.executable, "-c", FLOOR_JOB, journal.resolve().as_uri(), master, driver_memory]
    elapsed, _, cpu, stdout = _watched(command, "the floor job")
    return elapsed, cpu, int(stdout.split()[-1])


def bench_report(args: argparse.Namespace, root: Path) -> None:
    """Every size: generate, then ``--rounds`` times the report and the floor back to back."""
    times: dict[int, float] = {}
    for size in sorted(args.events):
        journal = root / f"journal-{size}"
        started = time.monotonic()
        expected = generate(journal, size)
        made = time.monotonic() - started
        print(
            f"{size:>10,} events ({expected['messages']:,} messages, generated in {made:.0f} s)", flush=True
        )
        ratios: list[float] = []
        cpu_ratios: list[float] = []
        for round_ in range(1, args.rounds + 1):
            elapsed, peak_kb, cpu, summary = run_report(journal, root / f"report-{size}", args.master,
                                                        args.driver_memory)  # fmt: skip
            floor, floor_cpu, counted = run_floor(journal, args.master, args.driver_memory)
            cpu_ratios.append(cpu / floor_cpu)
            times[size] = min(times.get(size, elapsed), elapsed)
            ratios.append(elapsed / floor)
            found = summary["accepted"], summary["lost"]
            check = (
                "ok"
                if found == (expected["messages"], expected["lost"]) and counted == expected["events"]
                else f"WRONG (expected {expected}, floor counted {counted})"
            )
            print(
                f"  round {round_}: bridge report {elapsed:.1f} s wall incl. JVM start, floor {floor:.1f} s, "
                f"report / floor {elapsed / floor:.2f} (target <= {1.5 if size <= 100_000 else 2}); "
                f"CPU s report {cpu:.0f}, floor {floor_cpu:.0f}, ratio {cpu / floor_cpu:.2f}; driver "
                f"peak RSS {peak_kb / 1024:,.0f} MB (--driver-memory {args.driver_memory}); accepted/lost "
                f"{found}: {check}",
                flush=True,
            )
        if len(ratios) > 1:
            print(f"  report / floor over {len(ratios)} rounds: {min(ratios):.2f}-{max(ratios):.2f}, "
                  f"median {statistics.median(ratios):.2f}; in CPU seconds {min(cpu_ratios):.2f}-"
                  f"{max(cpu_ratios):.2f}, median {statistics.median(cpu_ratios):.2f}")  # fmt: skip
    if len(times) > 1:
        small, large = min(times), max(times)
        print(f"ratio {large / small:.0f}x events: {times[large] / times[small]:.2f} (target <= 5.5)")


def bench_roll(events: int) -> None:
    from bridge.core import journal as J
    from bridge.embedded.redis_server import RedisServer
    from bridge.journal.roll import roll
    from bridge.journal.store import JournalStore
    from bridge.redis.connection import sync_client
    from bridge.settings import JournalSettings

    server = RedisServer(appendfsync="everysec")
    server.start()
    folder = Path(tempfile.mkdtemp(prefix="bench-roll-"))
    try:
        store = JournalStore(sync_client(server.url), JournalSettings(max_length=events + 1))
        batch = [
            J.sent(f"m-{i}", START + i, namespace="ns1", role="primary", path="direct", batch="b")
            for i in range(200)
        ]
        started = time.monotonic()
        for _ in range(events // 200):
            store.append("orders", batch)
        appended = time.monotonic() - started
        started = time.monotonic()
        report = roll(store, folder, chunk=100_000, lease_ttl=120)
        rolled = time.monotonic() - started
        print(f"journal append: {events / appended:,.0f} events/s (batches of 200, one script call each)")
        print(f"roll: {report.events:,} events into {len(report.files)} files in {rolled:.1f} s = "
              f"{report.events / rolled:,.0f} events/s")  # fmt: skip
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def ingress_cost(rounds: int, calls: int = 20, per_call: int = 1000) -> None:
    """``Producer.send_batch`` of 1 KB messages into one private Redis (AOF everysec), journal off and on
    alternated in this process: what the write script's ``accepted`` entries cost the ingress."""
    from bridge.embedded.redis_server import RedisServer
    from bridge.producer import Producer
    from bridge.settings import JournalSettings, Settings

    server = RedisServer(appendfsync="everysec")
    server.start()
    rates: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(rounds):
            for enabled in (False, True):
                settings = Settings(
                    redis_url=server.url,
                    journal=JournalSettings(enabled=enabled),
                    entities={"e": {"max_pending_messages": 10**8, "max_pending_bytes": 10**11}},
                    ingress={"max_total_messages": 10**8, "max_total_bytes": 10**11},
                )
                with Producer(settings=settings) as producer:
                    body = b"x" * 1024
                    started = time.perf_counter()
                    for _ in range(calls):
                        producer.send_batch("e", [body] * per_call)
                    rates[enabled].append(calls * per_call / (time.perf_counter() - started))
    finally:
        server.close()
    ratios = [on / off for off, on in zip(rates[False], rates[True], strict=True)]
    print(
        f"outbox write (Producer.send_batch x{per_call}, 1 KB): journal off {max(rates[False]):,.0f}, on "
        f"{max(rates[True]):,.0f} msgs/s best of {rounds}; on / off best "
        f"{max(rates[True]) / max(rates[False]):.2f}, median of rounds {statistics.median(ratios):.2f} "
        "(target >= 0.9)"
    )


def hot_path(messages: int, rounds: int) -> None:
    """``bench.workers``' end-to-end measurement (outbox write -> accepted by the primary, 4 shards,
    ``bridge worker --concurrency 2``) on a stack with the journal off and one with it on, alternated."""
    from bench.queue_counts import queue_counter
    from bench.workers import BRIDGE_ENTITY, bridge_rate
    from bridge.embedded.stack import LocalStack
    from bridge.producer import Producer
    from bridge.settings import JournalSettings, Settings

    entities = {BRIDGE_ENTITY: {"outbox_shards": 4}}
    rates: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(rounds):
        for enabled in (False, True):
            base = Path(tempfile.mkdtemp(prefix="bench-journal-"))
            flag = "true" if enabled else "false"
            settings_env = {"BRIDGE_LOG_LEVEL": "WARNING", "BRIDGE_JOURNAL__ENABLED": flag}
            try:
                with LocalStack(base, entities=entities, settings=settings_env) as stack:
                    settings = Settings(
                        redis_url=stack.env()["BRIDGE_REDIS_URL"],
                        entities=entities,
                        journal=JournalSettings(enabled=enabled),
                    )
                    with Producer(settings=settings) as producer:
                        stack.start_worker(concurrency=2)
                        stack.start_beat()
                        rate, fill_rate = bridge_rate(stack, producer, queue_counter(stack.primary), messages)
                rates[enabled].append((rate, fill_rate))
                print(
                    f"  journal {'on ' if enabled else 'off'}: end to end {rate:8,.0f} msgs/s, "
                    f"outbox filled at {fill_rate:9,.0f} msgs/s",
                    flush=True,
                )
            finally:
                shutil.rmtree(base, ignore_errors=True)

    def best(enabled: bool, which: int) -> float:
        return max(r[which] for r in rates[enabled])

    def paired(which: int) -> float:
        # Each round ran off then on back to back: the median of those ratios resists a noisy neighbour.
        return statistics.median(
            on[which] / off[which] for off, on in zip(rates[False], rates[True], strict=True)
        )

    print(
        f"journal on / off, end to end: best {best(True, 0) / best(False, 0):.2f}, median of rounds "
        f"{paired(0):.2f} (target >= 0.9); the stacks' outbox fill: best "
        f"{best(True, 1) / best(False, 1):.2f}, median {paired(1):.2f} ({rounds} rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--rounds", type=int, default=1, help="report and floor, alternated")
    parser.add_argument("--roll-events", type=int, default=200_000)
    parser.add_argument("--hot-path-messages", type=int, default=50_000)
    parser.add_argument("--hot-path-rounds", type=int, default=3)
    parser.add_argument("--skip", action="append", default=[], choices=["report", "roll", "hot-path", "live"])
    parser.add_argument("--live-rate", type=int, default=2000, help="live: messages/s")
    parser.add_argument("--live-seconds", type=float, default=60, help="live: seconds of writing")
    parser.add_argument("--keep", action="store_true", help="keep the generated journals")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    try:
        if "report" not in args.skip:
            bench_report(args, root)
        if "roll" not in args.skip:
            bench_roll(args.roll_events)
        if "hot-path" not in args.skip:
            ingress_cost(max(5, args.hot_path_rounds))
            hot_path(args.hot_path_messages, args.hot_path_rounds)
        if "live" not in args.skip:
            from bench.ledger_live import run_all

            live = argparse.Namespace(
                rate=args.live_rate, seconds=args.live_seconds, interval=1.0, catch_up=300.0,
                report_events=100_000, rounds=max(3, args.rounds), master=args.master,
            )  # fmt: skip
            run_all(live, root)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
