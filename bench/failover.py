"""Failover harness: acknowledged vs delivered while the Redis primary is killed (``kill -9``), run after run.

    python -m bench.failover [--kills 10] [--messages 20000] [--rate 60] [--topology sentinel|cluster|both]
                             [--durability local|replicated] [--lag] [--outage] [--hold] [--seed 1]
                             [--scenario kill|double|disk-lost|disk-lost-early] [--no-ledger]

Per topology it starts the whole stack on real processes (``bench.failover_topology``: Sentinel's primary,
replica and three Sentinels, or a Cluster of three masters with a replica each; two local Service Bus
namespaces; ``bridge serve``, a worker, a beat and a receiver that appends every MessageId it is handed to a
file). Eight producer threads, one per session (the MessageId carries the session and its sequence number),
POST to the HTTP door at ``--rate`` messages/s together; each retries a 503 or a broken connection with the
same MessageId until it is answered 202, as a real producer does. The topology's share of ``--kills`` then
happens one after another, each at a random moment (seeded) of its run: with ``--lag`` the primary's packets
to its replica are dropped (``iptables``, needs root) for the last ``LAG`` seconds before the kill; with
``--outage`` the primary namespace is down (its fault control) from the kill until ``OUTAGE`` seconds after;
with ``--hold`` both namespaces are down from ``HOLD`` seconds before the kill until ``OUTAGE`` seconds
after, so the outbox holds what was acknowledged meanwhile when Redis fails.
After the kill the Sentinels or the Cluster promote the replica and the killed node comes back as a replica.
On Sentinel, ``--scenario`` makes each kill a double failover or a lost disk (``bench.failover_scenarios``).
Once every kill is done the producer stops and the harness waits until the receiver has every acknowledged
message or nothing new arrives for ``--settle`` seconds.

A run is the traffic acknowledged from the start of one kill (its lag included) to the next. Per run it
prints: acknowledged (202), delivered (handed to the receiver), lost (acknowledged, never delivered),
duplicates (handed more than once) and the kill; per topology the keys (sessions) whose messages reached the
receiver out of sequence, then ``bridge report``'s own counts over the run's journal beside the harness's
and how many acknowledged messages left no ``accepted`` event for the ledger to see (``--no-ledger``
skips the report; ``bench.failover_ledger``), and the summary. With ``--durability replicated`` it exits 1
if any acknowledged message is lost, except under ``disk-lost-early``, which no mode survives.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.failover_ledger import ledger_count, ledger_row
from bench.failover_scenarios import SCENARIOS
from bench.failover_topology import ENTITY, TOPOLOGIES, Topology

KEYS = 8
LAG = 1.0
"""Seconds the replication link is cut before a ``--lag`` kill."""
OUTAGE = 3.0
"""Seconds the primary namespace stays down after an ``--outage`` kill (both after a ``--hold`` one)."""
HOLD = 3.0
"""Seconds both namespaces are down before a ``--hold`` kill: the outbox holds what was acknowledged."""


@dataclass
class Run:
    """One kill and the traffic acknowledged from it to the next."""

    kill: str = ""
    lagged: bool = False
    acked: list[str] = field(default_factory=list)


class Producer:
    """POSTs at a steady rate, one thread per key (so each key's messages go out in sequence); retries a
    refusal with the same MessageId; files each 202 under the current run."""

    def __init__(self, base: str, rate: float, limit: int) -> None:
        self.base = base
        self.rate = rate / KEYS
        self.limit = limit // KEYS
        self.runs: list[Run] = [Run(kill="(before the first kill)")]
        self.refused = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, args=(key,), daemon=True) for key in range(KEYS)]

    def start(self) -> None:
        """Start sending."""
        for thread in self.threads:
            thread.start()

    @property
    def alive(self) -> bool:
        """True while a key still has messages to send."""
        return any(thread.is_alive() for thread in self.threads)

    def join(self, timeout: float) -> None:
        """Wait for every thread."""
        for thread in self.threads:
            thread.join(timeout)

    def _loop(self, key: int) -> None:
        started = time.monotonic()
        with httpx.Client(base_url=self.base, timeout=10) as http:
            for seq in range(self.limit):
                if self.stop.is_set():
                    return
                message_id = f"k{key}-{seq}"
                body = {"body": message_id, "message_id": message_id, "session_id": f"k{key}"}
                while not self.stop.is_set():
                    try:
                        answer = http.post(f"/v1/entities/{ENTITY}/messages", json=body)
                        if answer.status_code == 202:
                            self.runs[-1].acked.append(message_id)
                            break
                    except httpx.HTTPError:
                        pass
                    self.refused += 1
                    time.sleep(0.1)
                time.sleep(max(0.0, started + (seq + 1) / self.rate - time.monotonic()))


def received(path: Path) -> list[str]:
    """Every MessageId the receiver was handed, in the order it was handed them."""
    return path.read_text().split()


def settle(path: Path, acked: set[str], quiet: float) -> list[str]:
    """Wait until the receiver has every acknowledged message, or nothing new came for ``quiet`` seconds."""
    seen, last_change = 0, time.monotonic()
    while True:
        ids = received(path)
        if acked <= set(ids):
            return ids
        if len(ids) != seen:
            seen, last_change = len(ids), time.monotonic()
        if time.monotonic() - last_change > quiet:
            return ids
        time.sleep(0.5)


def out_of_order(ids: list[str]) -> int:
    """Keys whose first deliveries are not in sequence order."""
    last: dict[str, int] = {}
    bad: set[str] = set()
    first_seen: set[str] = set()
    for message_id in ids:
        if message_id in first_seen:
            continue
        first_seen.add(message_id)
        key, _, seq = message_id.partition("-")
        if int(seq) < last.get(key, -1):
            bad.add(key)
        last[key] = max(int(seq), last.get(key, -1))
    return len(bad)


def kill_all(topology: Topology, producer: Producer, args: argparse.Namespace, kills: int) -> None:
    """The topology's kills, each at a seeded random moment of its share of the traffic."""
    rng = random.Random(args.seed)
    period = args.messages / max(1, args.total_kills) / args.rate
    for _ in range(kills):
        time.sleep(rng.uniform(0.3, 1.0) * period)
        run = Run()
        producer.runs.append(run)
        cut = topology.lagging() if args.lag else None
        run.lagged = bool(cut.__enter__()) if cut else False
        hold = getattr(args, "hold", False)
        try:
            if hold:
                topology.outage(True, both=True)
                time.sleep(HOLD)
            if cut:
                time.sleep(LAG)
            if args.outage and not hold:
                topology.outage(True)
            run.kill = topology.kill(rng)
        finally:
            if cut:
                cut.__exit__(None, None, None)
        if args.outage or hold:
            time.sleep(OUTAGE)
            topology.outage(False, both=hold)
        print(f"  {topology.name}: kill {len(producer.runs) - 1}: {run.kill}", flush=True)


def measure(topology: Topology, args: argparse.Namespace, kills: int) -> list[dict[str, object]]:
    """Start the topology, send while killing, settle; the rows of the table."""
    base = topology.start()
    producer = Producer(base, args.rate, args.messages * kills // max(1, args.total_kills))
    producer.start()
    try:
        kill_all(topology, producer, args, kills)
        while producer.alive:
            time.sleep(0.5)
    finally:
        producer.stop.set()
        producer.join(30)
    acked = {m for run in producer.runs for m in run.acked}
    ids = settle(topology.received, acked, args.settle)
    counts = Counter(ids)
    delivered = set(counts)
    if getattr(args, "ledger", False):
        assert topology.stack is not None
        print(f"  {topology.name}: bridge report over the run's journal...", flush=True)
        count = ledger_count(topology.stack, topology.base / "report", acked, acked - delivered)
    rows: list[dict[str, object]] = []
    for index, run in enumerate(producer.runs):
        mine = set(run.acked)
        rows.append(
            {
                "topology": topology.name,
                "mode": topology.mode,
                "scenario": topology.scenario,
                "run": index,
                "acked": len(mine),
                "delivered": len(mine & delivered),
                "lost": len(mine - delivered),
                "duplicates": sum(1 for m in mine if counts[m] > 1),
                "lagged": run.lagged,
                "kill": run.kill,
            }
        )
    # Every MessageId is retried until answered 202, so the receiver can only see acknowledged ones.
    rows.append(
        {
            "topology": topology.name,
            "run": "order",
            "keys_out_of_order": out_of_order(ids),
            "unacknowledged_delivered": len(delivered - acked),
        }
    )
    if getattr(args, "ledger", False):
        rows.append(ledger_row(topology.name, count))
    print(f"  {topology.name}: refused and retried {producer.refused} times", flush=True)
    return rows


def table(rows: list[dict[str, object]]) -> None:
    """One line per run."""
    print(f"{'topology':9s} {'run':>3s} {'acked':>6s} {'delivered':>9s} {'lost':>5s} {'dups':>5s} lag  kill")
    for row in rows:
        if row["run"] == "order":
            print(f"{row['topology']:9s} keys delivered out of order: {row['keys_out_of_order']}")
            continue
        if row["run"] == "ledger":
            ledger_line(rows, row)
            continue
        print(
            f"{row['topology']:9s} {row['run']:>3} {row['acked']:>6} {row['delivered']:>9} {row['lost']:>5}"
            f" {row['duplicates']:>5} {'yes' if row['lagged'] else 'no ':3s}  {row['kill']}"
        )


def ledger_line(rows: list[dict[str, object]], row: dict[str, object]) -> None:
    """``bridge report``'s counts beside the harness's, and the acknowledged messages it never saw."""
    if row["error"]:
        print(f"{row['topology']:9s} bridge report failed: {row['error']}")
        return
    runs = [r for r in rows if r["run"] not in ("order", "ledger")]
    acked, delivered, lost = (sum(int(str(r[k])) for r in runs) for k in ("acked", "delivered", "lost"))
    print(
        f"{row['topology']:9s} harness:       acknowledged {acked}, delivered {delivered}, lost {lost}\n"
        f"{row['topology']:9s} bridge report: accepted {row['accepted']}, delivered {row['delivered']},"
        f" handled {row['handled']}, pending {row['pending']}, lost {row['lost']},"
        f" delivered without an acceptance {row['unexpected']}\n"
        f"{row['topology']:9s} acknowledged with no `accepted` event in the journal: {row['acked_unseen']}"
        f" (of the harness's {lost} lost: {row['lost_unseen']})"
    )


def totals(rows: list[dict[str, object]]) -> None:
    """One topology's summary line."""
    runs = [row for row in rows if row["run"] not in ("order", "ledger")]
    total = {
        key: sum(int(str(row[key])) for row in runs) for key in ("acked", "delivered", "lost", "duplicates")
    }
    kills = sum(1 for row in runs if row["run"] != 0)
    order = sum(int(str(row["keys_out_of_order"])) for row in rows if row["run"] == "order")
    lossy = sum(1 for row in runs if int(str(row["lost"])))
    print(
        f"summary {rows[0]['topology']} ({runs[0]['mode']}, {runs[0]['scenario']}): {kills} kills,"
        f" acknowledged {total['acked']},"
        f" delivered {total['delivered']}, lost {total['lost']} (in {lossy} runs),"
        f" duplicates {total['duplicates']}, keys out of order {order}"
    )


def summary(rows: list[dict[str, object]]) -> int:
    """Totals per topology; the exit status (1 when a ``replicated`` run lost an acknowledged message in a
    scenario ``replicated`` promises to survive: every one but ``disk-lost-early``)."""
    for name in dict.fromkeys(str(row["topology"]) for row in rows):
        totals([row for row in rows if row["topology"] == name])
    runs = [row for row in rows if row["run"] not in ("order", "ledger")]
    promised = [row for row in runs if row["mode"] == "replicated" and row["scenario"] != "disk-lost-early"]
    return 1 if sum(int(str(row["lost"])) for row in promised) else 0


def main() -> None:
    """Run the harness (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=60.0)
    parser.add_argument("--topology", choices=("sentinel", "cluster", "both"), default="both")
    parser.add_argument("--durability", choices=("local", "replicated"), default="replicated")
    parser.add_argument("--lag", action="store_true")
    parser.add_argument("--outage", action="store_true")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--scenario", choices=SCENARIOS, default="kill")
    parser.add_argument("--no-ledger", dest="ledger", action="store_false")
    args = parser.parse_args()
    names = ["sentinel", "cluster"] if args.topology == "both" else [args.topology]
    args.total_kills = args.kills
    base = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    rows: list[dict[str, object]] = []
    for index, name in enumerate(names):
        kills = args.kills // len(names) + (1 if index < args.kills % len(names) else 0)
        mode = args.durability
        topology = TOPOLOGIES[name](base / name, mode, args.scenario)
        print(f"{name}: {kills} kills, durability {mode}; data in {base / name}", flush=True)
        try:
            mine = measure(topology, args, kills)
        finally:
            topology.stop()
        table(mine)  # as soon as a topology is done: a long invocation shows its runs one by one
        rows += mine
    print()
    sys.exit(summary(rows))


if __name__ == "__main__":
    main()
