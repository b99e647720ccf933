"""The live ledger's freshness, and reports from a warm session, measured in one process.

    python -m bench.ledger_live [--rate 2000] [--seconds 60] [--interval 1] [--report-events 100000]
                                [--rounds 3] [--master local[2]] [--conf KEY=VALUE ...]
    python -m bench.ledger_live --against KEY=VALUE [--against ...] [--rounds 3] [--seconds 30]

1. freshness: the live ledger (``bridge.ledger.service``) runs on an empty journal folder while a writer
   rolls ``--rate`` messages/s into it, one file a second as the roll does (each message: accepted, sent,
   handled, its event times spread over the second before the file is written); the writer is a process
   of its own, as the roll is. A watcher reads the committed state every 50 ms; a message's freshness is
   the time from its ``accepted`` event to the first commit that holds it. Prints p50/p99/max over every
   message, and how far behind the ledger was at the end (events written but not yet committed), so a
   ledger that falls behind cannot pass unnoticed.
2. warm report: ``bridge report``'s job (``run_report``) on ``--report-events`` events in this process's
   session, already started: ``--rounds`` times, each printed. Then a live ledger reads the same journal
   and ``bridge report --from-ledger --drained --json`` answers from its state, ``--rounds`` times as its
   own process (Python's start included) and in this process; each answer's counts are checked against
   the Spark job's, so a fast wrong answer cannot pass unnoticed.
3. cold report / floor: ``bridge report`` as its own process against the floor job (``bench.ledger``:
   start a session, read the journal, one grouped count), alternated ``--rounds`` times.

``--against KEY=VALUE`` runs part 1 alone, ``--rounds`` times in each of two settings alternated in the
same session: the session as built (``--conf`` included), then with these Spark settings, each round on
a new ledger folder; it prints each round and the ratio of the medians (against / baseline). Settings
that Spark reads when a query starts (the state store, shuffle partitions) work; static ones do not.

Nothing here asserts a time; it prints the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty
from typing import Any

from bench.ledger import generate, run_floor, run_report


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def _write_second(journal: Path, rate: int, first: int, second_start: float, prefix: str = "m") -> int:
    """One roll's file: ``rate`` messages (accepted, sent, handled) accepted over the second before
    ``second_start``; returns the events written."""
    from bridge.core import journal as J
    from bridge.core.journal_files import to_row
    from bridge.journal.roll import file_path, table_of, write_durably

    rows = []
    for i in range(rate):
        at = second_start - 1 + i / rate
        mid = f"{prefix}-{first + i:010d}"
        ms = int(at * 1000)
        rows.append(to_row("orders", f"{ms}-{3 * i}", J.accepted(mid, at, door="http", size=100)))
        copy = J.sent(mid, at + 0.01, namespace="ns1", role="primary", path="direct", batch="b")
        rows.append(to_row("orders", f"{ms}-{3 * i + 1}", copy))
        rows.append(to_row("orders", f"{ms}-{3 * i + 2}", J.handled(mid, at + 0.02)))
    first_id = f"{rows[0]['stream_ms']}-{rows[0]['stream_seq']}"
    last_id = f"{rows[-1]['stream_ms']}-{rows[-1]['stream_seq']}"
    write_durably(table_of(rows, time.time()), file_path(journal, "orders", first_id, last_id))
    return len(rows)


def _writer(
    journal: Path,
    rate: int,
    seconds: float,
    written: Any,
    stop: Any,
    offset: int = 0,
) -> None:
    """One file a second of ``rate`` messages; ``written`` (a queue) gets (first acceptance time, events so
    far, counting ``offset`` events written before) per file."""
    total, n, started = offset, 0, time.time()
    while not stop.is_set() and time.time() - started < seconds:
        second_start = time.time()
        total += _write_second(journal, rate, n, second_start)
        n += rate
        written.put((second_start - 1, total))
        stop.wait(max(0.0, 1.0 - (time.time() - second_start)))


def freshness(
    spark: Any, root: Path, rate: int, seconds: float, interval: float, catch_up: float
) -> tuple[float, float] | None:
    """Part 1 (module docstring). The ledger first commits one small warm-up file (its first micro-batch
    compiles the plans); the writer starts after that, and the ledger runs until it committed everything
    written or ``catch_up`` seconds after the writer stopped."""
    from bridge.ledger import live_store, service
    from bridge.ledger.live_store import LedgerPaths

    journal, paths = root / "live-journal", LedgerPaths(root / "live-ledger")
    journal.mkdir(parents=True)
    written: list[tuple[float, int]] = []
    commits: list[tuple[float, int]] = []
    stop, warm = threading.Event(), threading.Event()
    # The writer is a process of its own, as the roll is (beat): in this one its Python would share the
    # interpreter's lock with the driver's.
    spawn = multiprocessing.get_context("spawn")
    queue, stop_writing = spawn.Queue(), spawn.Event()
    writer = spawn.Process(
        target=_writer, args=(journal, rate, seconds, queue, stop_writing, 300), daemon=True
    )

    def take() -> None:
        while True:
            try:
                written.append(queue.get_nowait())
            except Empty:
                return

    _write_second(journal, 100, 0, time.time(), "warm")

    def watch() -> None:
        last = -1
        while not stop.is_set():
            _, totals = live_store.current(paths)
            if totals["events"] != last:
                last = totals["events"]
                commits.append((time.time(), int(last)))
                if last > 0:
                    warm.set()
            stop.wait(0.05)

    def write() -> None:
        warm.wait()
        writer.start()

    starter = threading.Thread(target=write, daemon=True)
    started = time.monotonic()

    def done(_ledger: dict[str, Any]) -> bool:
        take()
        if writer.is_alive() or writer.exitcode is None:
            return False
        take()
        if not written:
            return False
        return bool(commits and commits[-1][1] >= written[-1][1]) or time.monotonic() - started > catch_up

    options = {"interval": interval, "linger": 30.0, "latency_minutes": 60.0, "overdue_after": 300.0,
               "listed": 100.0, "max_files": 200.0}  # fmt: skip
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    starter.start()
    service.run(spark, journal, paths, options, duration=seconds + catch_up + 600, on_publish=done)
    stop.set()
    stop_writing.set()
    warm.set()
    starter.join()
    if writer.pid is not None:
        writer.join()
    take()
    watcher.join()
    return _print_freshness(written, commits, rate, seconds, interval)


def _print_freshness(
    written: list[tuple[float, int]],
    commits: list[tuple[float, int]],
    rate: int,
    seconds: float,
    interval: float,
) -> tuple[float, float] | None:
    """Prints the figures; returns (p50, p99), or None when no second was committed."""
    samples: list[float] = []
    for second_start, events in written:
        seen = next((at for at, n in commits if n >= events), None)
        if seen is not None:
            # the second's messages were accepted evenly over it: their ages at that commit
            samples += [seen - (second_start + k / 10) for k in range(10)]
    behind = written[-1][1] - (commits[-1][1] if commits else 0) if written else 0
    head = f"freshness at {rate:,} msgs/s ({3 * rate:,} events/s, {seconds:.0f} s, trigger {interval:g} s): "
    if not samples:
        print(head + f"no second of the {len(written)} written was committed; {behind:,} events behind")
        return None
    print(
        head + f"p50 {_percentile(samples, 0.5):.1f} s, p99 {_percentile(samples, 0.99):.1f} s, "
        f"max {max(samples):.1f} s (target p99 <= 10 s); {len(written) - len(samples) // 10} of "
        f"{len(written)} seconds never committed, {behind:,} events behind at the end",
        flush=True,
    )
    return _percentile(samples, 0.5), _percentile(samples, 0.99)


def against(spark: Any, root: Path, args: argparse.Namespace, settings: dict[str, str]) -> None:
    """``--against``: part 1 alternated between the session as built and with ``settings``."""
    before = {key: spark.conf.get(key, None) for key in settings}
    results: dict[str, list[tuple[float, float]]] = {"baseline": [], "against": []}
    for round_ in range(1, args.rounds + 1):
        for side in ("baseline", "against"):
            for key, value in (settings if side == "against" else before).items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
            print(f"round {round_}, {side}:", flush=True)
            got = freshness(
                spark, root / f"{side}-{round_}", args.rate, args.seconds, args.interval, args.catch_up
            )
            if got is not None:
                results[side].append(got)
    if not results["baseline"] or not results["against"]:
        print("against: a side never committed a second; no ratio")
        return
    for index, name in ((0, "p50"), (1, "p99")):
        base = statistics.median(r[index] for r in results["baseline"])
        other = statistics.median(r[index] for r in results["against"])
        print(f"freshness {name}: baseline median {base:.1f} s, against median {other:.1f} s, "
              f"ratio {other / base:.2f} ({', '.join(f'{k}={v}' for k, v in settings.items())})")  # fmt: skip


def warm_report(spark: Any, root: Path, events: int, rounds: int) -> Path:
    """Part 2 (module docstring); returns the journal it generated."""
    from bridge.core.ledger import price_table
    from bridge.ledger.job import ReportInputs
    from bridge.ledger.job import run_report as job

    journal = root / f"journal-{events}"
    generate(journal, events)
    times = []
    summary: dict[str, Any] = {}
    for round_ in range(1, rounds + 1):
        started = time.monotonic()
        summary = job(spark, ReportInputs(journal, root / "warm-report", price_table(), drained=True))
        times.append(time.monotonic() - started)
        print(
            f"  warm report round {round_}: {times[-1]:.1f} s (accepted {summary['accepted']:,})", flush=True
        )
    print(
        f"warm report on {events:,} events: best {min(times):.1f} s, median {statistics.median(times):.1f} s "
        f"(target <= 3 s)",
        flush=True,
    )
    ledger = root / "live-ledger" / "ledger.json"
    if ledger.exists():
        started = time.monotonic()
        json.loads(ledger.read_text())
        print(f"the running ledger's answer (ledger.json): {1000 * (time.monotonic() - started):.1f} ms")
    from_ledger(spark, root, journal, rounds, summary)
    return journal


def from_ledger(spark: Any, root: Path, journal: Path, rounds: int, batch: dict[str, Any]) -> None:
    """Part 2's answer from a live ledger that read ``journal`` (module docstring)."""
    import os
    import subprocess
    import sys

    from bridge.core.ledger import EXTRA_KEYS, SUMMARY_KEYS, price_table
    from bridge.ledger import live_report, service
    from bridge.ledger.live_store import LedgerPaths
    from bridge.ledger.summary import ReportInputs

    paths = LedgerPaths(root / "ledger-of-report")
    options = {"interval": 1.0, "linger": 120.0, "latency_minutes": 60.0, "overdue_after": 300.0,
               "listed": 100.0, "max_files": 200.0}  # fmt: skip
    started = time.monotonic()
    service.run(spark, journal, paths, options, duration=900, on_publish=lambda _: not live_report.coverage(
        paths, journal).unread)  # fmt: skip
    print(f"  the live ledger read the journal in {time.monotonic() - started:.1f} s", flush=True)
    keys = (*SUMMARY_KEYS, *EXTRA_KEYS, "events")
    where = ["--journal", str(journal), "--dir", str(paths.root), "--out", str(root / "answer")]
    command = [
        sys.executable,
        "-m",
        "bridge.cli.main",
        "report",
        "--from-ledger",
        "--drained",
        "--json",
        *where,
    ]
    env = {**os.environ, "BRIDGE_JOURNAL__DIRECTORY": str(journal)}
    processes, inline = [], []
    for _ in range(rounds):
        started = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        processes.append(time.monotonic() - started)
        answer = json.loads(done.stdout)
        started = time.monotonic()
        live_report.answer(
            paths, ReportInputs(journal, root / "ledger-inline", price_table(), drained=True), 0
        )
        inline.append(time.monotonic() - started)
        same = all(answer[k] == batch[k] for k in keys)
        agree = "the same as" if same else "DIFFERENT from"
        print(f"  from the ledger: process {processes[-1]:.2f} s, in process {inline[-1]:.3f} s, "
              f"counts {agree} the Spark job's", flush=True)  # fmt: skip
    print(
        f"bridge report --from-ledger on {batch['events']:,} events: best {min(processes):.2f} s, median "
        f"{statistics.median(processes):.2f} s as a process (target <= 3 s)",
        flush=True,
    )


def cold_ratio(journal: Path, root: Path, master: str, rounds: int) -> None:
    """Part 3 (module docstring)."""
    ratios = []
    for round_ in range(1, rounds + 1):
        elapsed, _, _, _ = run_report(journal, root / "cold-report", master, "1g")
        floor, _, _ = run_floor(journal, master, "1g")
        ratios.append(elapsed / floor)
        print(f"  cold round {round_}: report {elapsed:.1f} s, floor {floor:.1f} s, ratio {ratios[-1]:.2f}")
    print(
        f"cold report / floor: best {min(ratios):.2f}, median {statistics.median(ratios):.2f}, "
        f"worst {max(ratios):.2f} (target <= 1.5)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--catch-up", type=float, default=300, help="seconds the ledger may take after")
    parser.add_argument("--report-events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE Spark setting (repeatable)")
    parser.add_argument(
        "--against", action="append", default=[], help="KEY=VALUE: part 1 alone, A/B (repeatable)"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-ledger-live-"))
    try:
        run_all(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_all(args: argparse.Namespace, root: Path) -> None:
    """Parts 1-3 in one warm session (``args``: this module's options)."""
    from bridge.cli.context import key_value_pairs
    from bridge.ledger.spark import build_session

    spark = build_session(args.master, conf=key_value_pairs(args.conf, "--conf"))
    try:
        if args.against:
            against(spark, root, args, key_value_pairs(args.against, "--against"))
            return
        freshness(spark, root, args.rate, args.seconds, args.interval, args.catch_up)
        journal = warm_report(spark, root, args.report_events, args.rounds)
    finally:
        spark.stop()
    cold_ratio(journal, root, args.master, args.rounds)


if __name__ == "__main__":
    main()
