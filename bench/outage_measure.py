"""What ``bench.outage`` measures besides the chaos checker's verdict: memory of every process kind, the
outbox over time and its drain after the restore, the raw SDK's batched send rate on the same namespace,
Redis bytes per outbox entry, what the ledger says existed only on a namespace that was lost, and the
table of how long an outage each mode rides out with the default bounds."""

from __future__ import annotations

import contextlib
import csv
import glob
import itertools
import os
import signal
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from bench.chaos_memory import Sampler, group_rss

if TYPE_CHECKING:
    from bench.outage_stack import Outage

KINDS = ("worker", "beat", "receive-", "serve")
"""Bridge process kinds by name prefix (``bridge.embedded.up`` names them)."""
RSS_FIELDS = ("worker_rss", "beat_rss", "receiver_rss", "ingress_rss", "namespace_rss", "redis_rss")
FIELDS = ("t", "phase", "redis_used_memory", *RSS_FIELDS, "outbox", "ingress", "journal", "dedup_window")


class OutageSampler(Sampler):
    """The chaos sampler plus the beats, the ingress, both namespaces and Redis's own RSS, and the phase."""

    def sample(self) -> dict[str, float]:
        row = super().sample()
        outage: Outage = self.chaos  # type: ignore[assignment]
        row["beat_rss"] = sum(group_rss(p.proc.pid) for p in outage.of("beat"))
        row["ingress_rss"] = sum(group_rss(p.proc.pid) for p in outage.of("serve"))
        pids = [ns.pid for ns in (outage.local.primary, outage.local.secondary) if ns.running]
        row["namespace_rss"] = sum(group_rss(pid) for pid in pids if pid)
        client = redis.Redis.from_url(outage.local.redis.url, socket_timeout=2)
        try:
            row["redis_rss"] = int(client.info("memory")["used_memory_rss"])
        finally:
            client.close()
        row["phase"] = outage.phase  # type: ignore[assignment]
        return row

    def write(self, folder: Path) -> dict[str, Any]:
        """``memory.csv`` and ``memory.png``; per series first/last/max, and the max per phase."""
        with (folder / "memory.csv").open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=FIELDS)
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: row.get(k, "") for k in FIELDS})
        summary: dict[str, Any] = {"samples": len(self.rows), "interval": self.interval}
        for name in FIELDS[2:]:
            values = [row[name] for row in self.rows if name in row]
            if values:
                per_phase: dict[str, float] = defaultdict(float)
                for row in self.rows:
                    if name in row:
                        phase = str(row.get("phase"))
                        per_phase[phase] = max(per_phase[phase], row[name])
                summary[name] = {"first": values[0], "last": values[-1], "max": max(values), **per_phase}
        with contextlib.suppress(ImportError):
            draw(self.rows, folder / "memory.png")
        return summary


def draw(rows: list[dict[str, Any]], path: Path) -> None:
    """Memory (MiB) of every process kind and of Redis, and the outbox, over time, phases shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for name in ("redis_used_memory", *RSS_FIELDS):
        points = [(r["t"], r[name] / 2**20) for r in rows if name in r]
        if points:
            top.plot(*zip(*points, strict=True), label=name)
    top.set_ylabel("MiB")
    top.legend(loc="upper left", fontsize=8)
    for name in ("outbox", "ingress", "journal", "dedup_window"):
        points = [(r["t"], r[name]) for r in rows if name in r]
        if points:
            bottom.plot(*zip(*points, strict=True), label=name)
    bottom.set_ylabel("entries / ids")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper left", fontsize=8)
    colours = {"primary_down": "#fde2c8", "both_down": "#f8c8c8"}
    for axis in (top, bottom):
        start: float | None = None
        phase = None
        for row in [*rows, {"t": rows[-1]["t"] if rows else 0, "phase": None}]:
            if row.get("phase") != phase:
                if phase in colours and start is not None:
                    axis.axvspan(start, row["t"], color=colours[str(phase)], alpha=0.6, lw=0)
                phase, start = row.get("phase"), row["t"]
    fig.suptitle("bench.outage: memory and outbox (shaded: primary down, both down)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def cpu_by_group() -> tuple[dict[int, float], dict[int, float]]:
    """CPU seconds (user + system) used so far by the live processes, summed per process group, and per
    process (one pass over ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    groups: dict[int, float] = defaultdict(float)
    single: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            used = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
        groups[int(fields[2])] += used
        single[int(entry)] = used
    return groups, single


class CpuWatch(threading.Thread):
    """CPU seconds used by each process kind, every ``interval`` seconds from its start: where the time of
    the drain goes (``over``: the CPU each kind used between two times)."""

    def __init__(self, outage: Outage, interval: float = 1.0) -> None:
        super().__init__(name="outage-cpu", daemon=True)
        self.outage = outage
        self.interval = interval
        self.stopping = threading.Event()
        self.rows: list[tuple[float, dict[str, float]]] = []

    def sample(self) -> dict[str, float]:
        """Cumulative CPU seconds per kind (the bench's own process: the load doors and the watchers)."""
        outage = self.outage
        groups, single = cpu_by_group()
        row = {kind.rstrip("-"): sum(groups[p.proc.pid] for p in outage.of(kind)) for kind in KINDS}
        pids = [ns.pid for ns in (outage.local.primary, outage.local.secondary) if ns.running]
        row["namespaces"] = sum(groups[pid] for pid in pids if pid)
        redis_pid = getattr(getattr(outage.local.redis, "_proc", None), "pid", None)
        row["redis"] = single.get(redis_pid, 0.0) if redis_pid else 0.0
        own = os.times()
        row["bench"] = own.user + own.system
        return row

    def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self.rows.append((time.time(), self.sample()))
            if self.stopping.wait(self.interval):
                return

    def over(self, start: float, end: float) -> dict[str, Any]:
        """CPU seconds per kind from the sample nearest ``start`` to the one nearest ``end``, and how busy
        the machine's cores were with them (1.0: every core all the time)."""
        if len(self.rows) < 2:
            return {}
        first = min(self.rows, key=lambda row: abs(row[0] - start))
        last = min(self.rows, key=lambda row: abs(row[0] - end))
        if last[0] <= first[0]:
            return {}
        used = {kind: round(last[1][kind] - first[1].get(kind, 0.0), 1) for kind in last[1]}
        seconds = last[0] - first[0]
        busy = sum(used.values()) / (seconds * (os.cpu_count() or 1))
        return {"seconds": round(seconds, 1), "cpu_s": used, "cores_busy": round(busy, 2)}


class OutboxWatch(threading.Thread):
    """The outbox's length per entity every ``interval`` seconds (``fast`` after the restore), for its
    peak and the drain: Redis memory per entry is taken at the end of the outage (``snapshot``)."""

    def __init__(self, redis_url: str, entities: list[str], interval: float = 0.5) -> None:
        super().__init__(name="outage-outbox", daemon=True)
        self.url = redis_url
        self.entities = entities
        self.interval = interval
        self.stopping = threading.Event()
        self.rows: list[tuple[float, dict[str, int]]] = []

    def lengths(self, client: redis.Redis) -> dict[str, int]:
        """Entries per entity (outbox shard 0; every entity here has one shard) and the Redis door."""
        pipe = client.pipeline(transaction=False)
        for name in self.entities:
            pipe.xlen(f"bridge:{{{name}}}:out:0")
        return dict(zip(self.entities, (int(n) for n in pipe.execute()), strict=True))

    def run(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=2)
        while not self.stopping.wait(self.interval):
            with contextlib.suppress(redis.RedisError):
                self.rows.append((time.time(), self.lengths(client)))
        client.close()

    def snapshot(self) -> dict[str, Any]:
        """Redis memory of each outbox stream (``MEMORY USAGE ... SAMPLES 0``: every entry) and its length."""
        client = redis.Redis.from_url(self.url, socket_timeout=30)
        try:
            out: dict[str, Any] = {}
            for name in self.entities:
                key = f"bridge:{{{name}}}:out:0"
                length = int(client.xlen(key))
                usage = int(client.memory_usage(key, samples=0) or 0)
                out[name] = {"entries": length, "bytes": usage}
            return out
        finally:
            client.close()

    def write(self, folder: Path, t0: float) -> None:
        """``outbox.csv``: seconds since ``t0`` and each entity's outbox length."""
        with (folder / "outbox.csv").open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["t", *self.entities])
            for t, lengths in self.rows:
                writer.writerow([round(t - t0, 2), *(lengths[e] for e in self.entities)])

    def drain(self, restored: float, acked: list[dict[str, Any]], empty_at: int) -> dict[str, Any]:
        """Peak per entity, and per entity the drain after ``restored``: when its outbox first fell (its
        start: the bridge noticed the namespace is back), when it held at most ``empty_at`` entries again
        (its end), and the rate entries left it in between — what it held at the start plus what the
        doors acknowledged for it meanwhile, over the time. ``drained_after_restore_s``: when every
        entity's outbox was that small again."""
        peak = {e: max((n[e] for _, n in self.rows), default=0) for e in self.entities}
        result: dict[str, Any] = {"peak": sum(peak.values()), "peak_per_entity": peak, "per_entity": {}}
        ends = []
        for entity in self.entities:
            series = [(t, n[entity]) for t, n in self.rows]
            after = [(t, n) for t, n in series if t >= restored]
            held = max((n for t, n in series if restored - 1.0 <= t <= restored), default=0)
            start = next((t for (t, n), (_, m) in itertools.pairwise(after) if m < n), None)
            end = next((t for t, n in after if n <= empty_at and (start is None or t >= start)), None)
            row: dict[str, Any] = {"at_restore": held}
            if held <= empty_at:  # nothing to drain: done at the restore
                ends.append(restored)
                result["per_entity"][entity] = row
                continue
            if start is not None and end is not None:
                ends.append(end)
                row["start_after_restore_s"] = round(start - restored, 2)
                row["end_after_restore_s"] = round(end - restored, 2)
                arrived = sum(1 for r in acked if r["entity"] == entity and start <= r["t_ack"] <= end)
                row["moved"] = held + arrived
                if end > start:
                    row["rate"] = round((held + arrived) / (end - start), 1)
            result["per_entity"][entity] = row
        if ends and len(ends) == len(self.entities):
            result["drained_after_restore_s"] = round(max(ends) - restored, 2)
            result["from_restore"] = from_restore(result["per_entity"], restored, max(ends), acked)
        result["all_entities"] = aggregate(result["per_entity"], restored)
        return result


def from_restore(
    per_entity: dict[str, dict[str, Any]], restored: float, drained: float, acked: list[dict[str, Any]]
) -> dict[str, Any]:
    """The drain as a whole, the wait before it included: every entity's outbox at the restore plus what
    the doors acknowledged from the restore until the last outbox was down to a second of load
    (``drained``), over that whole time. The per-entity rates count from each outbox's first fall; this
    one charges the bridge for the time it took to notice the namespaces were back, too."""
    held = sum(row.get("at_restore", 0) for row in per_entity.values())
    arrived = sum(1 for r in acked if r["entity"] in per_entity and restored <= r["t_ack"] <= drained)
    seconds = drained - restored
    moved = held + arrived
    return {
        "moved": moved,
        "seconds": round(seconds, 2),
        "rate": round(moved / seconds, 1) if seconds > 0 else None,
    }


def aggregate(per_entity: dict[str, dict[str, Any]], restored: float) -> dict[str, Any]:
    """Every entity's drain together: the messages moved over the time at least one entity was draining
    (the union of their windows), since they share the namespaces and the worker."""
    windows = sorted(
        (restored + row["start_after_restore_s"], restored + row["end_after_restore_s"])
        for row in per_entity.values()
        if "rate" in row
    )
    busy, reach = 0.0, float("-inf")
    for start, end in windows:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    moved = sum(row.get("moved", 0) for row in per_entity.values() if "rate" in row)
    return {"moved": moved, "busy_s": round(busy, 2), "rate": round(moved / busy, 1) if busy else None}


class ReceiversAside(threading.Thread):
    """``--drain alone``: the receivers stopped (``SIGSTOP`` to each one's process group) from the restore
    until every entity's outbox is down to ``empty_at`` entries (or ``timeout`` s passed), then continued.
    On this two-core machine the receivers, taking the drained messages off the same namespaces as they
    arrive, use about as much CPU as the drain itself; stopped, the drain has the machine to itself as a
    bridge whose consumers run elsewhere would, and the raw SDK baseline (sent with the bridge stopped)
    has too. Their peek-locks are not renewed meanwhile; a copy whose lock expires comes again and the
    receiver's duplicate window takes it once."""

    def __init__(self, processes: list[Any], watch: OutboxWatch, empty_at: int, timeout: float) -> None:
        super().__init__(name="receivers-aside", daemon=True)
        self.processes = processes
        self.watch = watch
        self.empty_at = empty_at
        self.timeout = timeout
        self.paused_at: float | None = None
        self.resumed_at: float | None = None
        self._over = False
        self._lock = threading.Lock()

    def _signal(self, sig: signal.Signals) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.proc.pid, sig)

    def run(self) -> None:
        with self._lock:
            if self._over:  # resumed before it began: never stop them
                return
            self._signal(signal.SIGSTOP)
            paused = self.paused_at = time.time()
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and self.resumed_at is None:
            rows = self.watch.rows
            late = rows and rows[-1][0] >= paused + 0.5
            if late and all(n <= self.empty_at for n in rows[-1][1].values()):
                break
            time.sleep(0.05)
        self.resume()

    def resume(self) -> None:
        """Continue the receivers (once; nothing when they were never stopped)."""
        with self._lock:
            self._over = True
            if self.paused_at is None or self.resumed_at is not None:
                return
            self._signal(signal.SIGCONT)
            self.resumed_at = time.time()


def raw_sdk_rate(conn: str, queue: str, rounds: int = 3, count: int = 2000) -> dict[str, Any]:
    """Baseline: msgs/s of one raw SDK sender sending batches of 100 messages shaped like the load's (a
    body of ~40 bytes, four application properties, a partition key), ``rounds`` times after a warm-up."""
    rates = [count / seconds for seconds in raw_sdk_seconds(conn, queue, [count] * rounds)]
    return {
        "median": round(statistics.median(rates), 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "rounds": rounds,
        "messages_per_round": count,
    }


def raw_sdk_seconds(conn: str, queue: str, counts: list[int], warm_up: int = 500) -> list[float]:
    """Seconds one raw SDK sender takes to send each of ``counts`` messages in batches of 100 (after
    ``warm_up`` messages on the same link)."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    def message(i: int) -> ServiceBusMessage:
        props: dict[str | bytes, Any] = {
            "chaos_door": "raw",
            "chaos_f": 0.5 + i,
            "chaos_b": i % 2 == 0,
            "chaos_seq": i,
        }
        body = f"chaos raw-{i}-{i:012x}"
        return ServiceBusMessage(
            body, message_id=f"raw-{i}", partition_key="raw-0", application_properties=props
        )

    seconds: list[float] = []
    with ServiceBusClient.from_connection_string(conn) as client, client.get_queue_sender(queue) as sender:

        def send(n: int) -> None:
            for start in range(0, n, 100):
                batch = sender.create_message_batch()
                for i in range(start, min(n, start + 100)):
                    batch.add_message(message(i))
                sender.send_messages(batch)

        send(warm_up)
        for count in counts:
            started = time.perf_counter()
            send(count)
            seconds.append(time.perf_counter() - started)
    return seconds


def journal_rows(folder: Path) -> list[dict[str, Any]]:
    """Every rolled journal row (``kind``, ``message_id``, ``namespace``, ``role``, ``path``, ``size``,
    ``stream_ms``, ``time``) of the run's journal folder (what ``bridge report`` read)."""
    import pyarrow.parquet as pq

    columns = [
        "entity", "kind", "message_id", "namespace", "role", "path", "size", "stream_ms", "event_id", "time"
    ]  # fmt: skip
    rows: dict[str, dict[str, Any]] = {}
    for name in glob.glob(str(folder / "**" / "*.parquet"), recursive=True):
        for row in pq.read_table(name, columns=columns).to_pylist():
            rows[row["event_id"]] = row  # the roll may write an event twice; its id is unique
    return list(rows.values())


def only_on_lost(rows: list[dict[str, Any]], recreated_at: float) -> dict[str, list[str]]:
    """Per entity, the MessageIds the journal shows as accepted by the primary before it was re-created
    (``recreated_at``; it was unreachable from its loss until then, so every such copy went to the lost
    one), by no other namespace and not by the re-created primary, and never handled: the messages that
    existed only on the lost namespace."""
    sent_before: dict[str, str] = {}
    elsewhere: set[str] = set()
    handled: set[str] = set()
    for row in rows:
        message_id = row["message_id"]
        if not message_id:
            continue
        if row["kind"] == "handled":
            handled.add(message_id)
        elif row["kind"] == "sent":
            if row["role"] == "primary" and row["stream_ms"] / 1000.0 < recreated_at:
                sent_before[message_id] = row["entity"]
            else:
                elsewhere.add(message_id)
    out: dict[str, list[str]] = defaultdict(list)
    for message_id, entity in sent_before.items():
        if message_id not in elsewhere and message_id not in handled:
            out[entity].append(message_id)
    return {entity: sorted(ids) for entity, ids in out.items()}


def accepted_size(rows: list[dict[str, Any]]) -> float:
    """Mean bytes an accepted message counts toward the outbox bounds (the journal's ``size``)."""
    sizes = [row["size"] for row in rows if row["kind"] == "accepted" and row["size"]]
    return statistics.fmean(sizes) if sizes else 0.0


def ride_out_table(
    bytes_per_entry: float, counted_size: float, rates: tuple[int, ...]
) -> list[dict[str, Any]]:
    """How long each mode rides out an outage at R msgs/s per entity with the default bounds.

    An entity's outbox holds at most ``max_pending_messages`` and ``max_pending_bytes`` (counted sizes);
    whichever comes first is the bound, and Redis needs ``bytes_per_entry`` per entry for it. While the
    primary is down, passive and active ``any`` send to the secondary and paired mode to its backlog
    queues (after ``failover_interval``): the outbox does not grow, so they ride it out as long as the
    secondary takes the messages; active ``all`` keeps every message until the primary takes its copy.
    With both down every mode keeps every message."""
    from bridge.settings import EntitySettings, IngressSettings

    entity, ingress = EntitySettings(), IngressSettings()
    by_bytes = entity.max_pending_bytes / counted_size if counted_size else float("inf")
    bound = int(min(entity.max_pending_messages, by_bytes))
    rows = []
    for rate in rates:
        seconds = bound / rate
        rows.append(
            {
                "rate": rate,
                "bound_messages": bound,
                "bound_seconds": seconds,
                "redis_bytes_at_bound": bound * bytes_per_entry,
                "ingress_total_messages": ingress.max_total_messages,
            }
        )
    return rows


def duration(seconds: float) -> str:
    """``1 h 23 min``, ``16 min 40 s``, ``42 s``."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"
