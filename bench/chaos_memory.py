"""Memory and growth of a ``bench.chaos`` run: Redis memory, worker and receiver RSS, outbox, journal,
duplicate-window and idempotency sizes sampled into ``memory.csv`` and drawn into ``memory.png``."""

from __future__ import annotations

import contextlib
import csv
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from bench.chaos_load import Ledger
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow

if TYPE_CHECKING:
    from bench.chaos_stack import Chaos


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in the process group ``pgid`` (a Celery worker and its pool)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return total


SAMPLE_FIELDS = (
    "t",
    "redis_used_memory",
    "worker_rss",
    "receiver_rss",
    "outbox",
    "ingress",
    "journal",
    "dedup_window",
    "idempotency_keys",
    "acked",
)


class Sampler(threading.Thread):
    """Every ``interval`` seconds: memory and sizes into ``memory.csv``."""

    def __init__(
        self,
        chaos: Chaos,
        ledger: Ledger,
        interval: float,
        entities: dict[str, dict[str, object]],
        specs: list[dict[str, Any]],
    ) -> None:
        super().__init__(name="chaos-sampler", daemon=True)
        self.entities = entities
        self.specs = specs
        self.chaos = chaos
        self.ledger = ledger
        self.interval = interval
        self.stopping = threading.Event()
        self.rows: list[dict[str, float]] = []
        self.t0 = time.time()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            with contextlib.suppress(Exception):
                self.rows.append(self.sample())

    def sample(self) -> dict[str, float]:
        """One row (Redis figures are skipped while Redis is down)."""
        local = self.chaos.local
        row: dict[str, float] = {
            "t": round(time.time() - self.t0, 1),
            "worker_rss": sum(group_rss(p.proc.pid) for p in self.chaos.of("worker")),
            "receiver_rss": sum(group_rss(p.proc.pid) for p in self.chaos.of("receive-")),
            "acked": self.ledger.acked,
        }
        client = redis.Redis.from_url(local.redis.url, socket_timeout=2)
        try:
            row["redis_used_memory"] = int(client.info("memory")["used_memory"])
            pipe = client.pipeline(transaction=False)
            for name, options in self.entities.items():
                for shard in range(int(str(options.get("outbox_shards", 1)))):
                    pipe.xlen(f"bridge:{{{name}}}:out:{shard}")
            row["outbox"] = sum(pipe.execute())
            row["ingress"] = sum(client.xlen(f"bridge:{{{n}}}:in") for n in self.entities)
            row["journal"] = sum(client.xlen(f"bridge:{{{n}}}:journal") for n in self.entities)
            row["dedup_window"] = sum(
                DedupWindow(
                    client,
                    ReceiverKeys(s["name"], s.get("subscription") or None),
                    owner="chaos-memory",
                    window=1,
                    max_remembered=1,
                    inflight_ttl=1,
                ).remembered()
                for s in self.specs
            )
            row["idempotency_keys"] = sum(
                sum(1 for _ in client.scan_iter(match=f"bridge:{{{n}}}:mid:*", count=1000))
                for n in self.entities
            )
        finally:
            client.close()
        return row

    def write(self, folder: Path) -> dict[str, Any]:
        """``memory.csv`` and ``memory.png``; returns first/last/max of each series."""
        with (folder / "memory.csv").open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=SAMPLE_FIELDS)
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: row.get(k, "") for k in SAMPLE_FIELDS})
        summary: dict[str, Any] = {"samples": len(self.rows)}
        for name in SAMPLE_FIELDS[1:]:
            values = [row[name] for row in self.rows if name in row]
            if values:
                summary[name] = {"first": values[0], "last": values[-1], "max": max(values)}
        with contextlib.suppress(ImportError):
            draw(self.rows, folder / "memory.png")
        return summary


def draw(rows: list[dict[str, float]], path: Path) -> None:
    """Memory (MiB) and sizes over time, two panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for name in ("redis_used_memory", "worker_rss", "receiver_rss"):
        points = [(r["t"], r[name] / 2**20) for r in rows if name in r]
        if points:
            top.plot(*zip(*points, strict=True), label=name)
    top.set_ylabel("MiB")
    top.legend(loc="upper left")
    for name in ("outbox", "ingress", "journal", "dedup_window", "idempotency_keys"):
        points = [(r["t"], r[name]) for r in rows if name in r]
        if points:
            bottom.plot(*zip(*points, strict=True), label=name)
    bottom.set_ylabel("entries / keys")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper left")
    fig.suptitle("bench.chaos: memory and growth")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
