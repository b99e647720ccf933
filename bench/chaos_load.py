"""The load of ``bench.chaos``: one thread per door (HTTP, ``Producer``, Redis door) sending messages with
per-key sequence numbers, and the run's own record of what each door acknowledged."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis

PASSIVE, ACTIVE, PAIRED = "chaos-passive", "chaos-active", "chaos-paired"
DOORS = ("http", "producer", "redis")
KEYS_PER_DOOR = 3


class Ledger:
    """The run's own record of what was acknowledged (``acked.jsonl``) and given up (``unacked.jsonl``)."""

    def __init__(self, folder: Path) -> None:
        self._lock = threading.Lock()
        self._acked = (folder / "acked.jsonl").open("a")
        self._unacked = (folder / "unacked.jsonl").open("a")
        self.acked = 0
        self.unacked = 0
        self.sent = 0

    def write(self, row: dict[str, Any], acked: bool) -> None:
        """One line, flushed (the harness is never the process being killed)."""
        with self._lock:
            out = self._acked if acked else self._unacked
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
            out.flush()
            if acked:
                self.acked += 1
            else:
                self.unacked += 1

    def close(self) -> None:
        """Close both files."""
        self._acked.close()
        self._unacked.close()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


class Door(threading.Thread):
    """One load thread: sends messages through one door, one at a time, retrying each until acknowledged."""

    GIVE_UP = 60.0

    def __init__(
        self,
        door: str,
        rate: float,
        seed: int,
        ledger: Ledger,
        send: Callable[[str, dict[str, Any]], None],
        entities: tuple[str, ...] = (PASSIVE, ACTIVE, PAIRED),
        sessions: str = PAIRED,
        scheduled: str | None = PASSIVE,
    ):
        """``entities`` take turns; ``sessions`` is the one whose keys are SessionIds (TTLs on every other
        message); ``scheduled`` gets every eighth of its messages scheduled and TTLs on all (None: none)."""
        super().__init__(name=f"chaos-{door}", daemon=True)
        self.entities = entities
        self.sessions = sessions
        self.scheduled = scheduled
        self.errors: list[float] = []
        """When a send raised (epoch seconds): what the door's caller saw fail before its retry."""
        self.door = door
        self.rate = rate
        self.rng = random.Random(seed)
        self.ledger = ledger
        self.send = send
        self.stopping = threading.Event()
        self.seq: Counter[tuple[str, str]] = Counter()
        self.count = 0

    def message(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The next message: entity, envelope fields (the door's view), and the row for ``acked.jsonl``."""
        entity = self.entities[self.count % len(self.entities)]
        self.count += 1
        message_id = f"{self.door}-{self.count}-{self.rng.getrandbits(48):012x}"
        fields: dict[str, Any] = {"message_id": message_id, "body": f"chaos {message_id}"}
        row: dict[str, Any] = {"id": message_id, "entity": entity, "door": self.door}
        scheduled = entity == self.scheduled and self.count % 8 == 1
        if scheduled:
            # Keyless: a scheduled message is enqueued when due, so it stands outside any key's order.
            row["sched"] = round(time.time() + self.rng.uniform(2.0, 5.0), 3)
            fields["scheduled_enqueue_time_utc"] = _iso(row["sched"])
            key = None
        else:
            key = f"{self.door}-{self.rng.randrange(KEYS_PER_DOOR)}"
            seq = self.seq[(entity, key)]
            self.seq[(entity, key)] += 1
            row.update(key=key, seq=seq)
            if entity == self.sessions:
                fields["session_id"] = row["session"] = key
            else:
                fields["partition_key"] = row["pk"] = key
        if entity == self.scheduled or (entity == self.sessions and self.count % 2):
            fields["time_to_live"] = row["ttl"] = 3600.0
        props: dict[str, Any] = {
            "chaos_door": self.door,
            "chaos_f": 0.5 + self.count,
            "chaos_b": self.count % 2 == 0,
        }
        if key is not None:
            props.update(chaos_key=key, chaos_seq=row["seq"])
        fields["application_properties"] = props
        row["props"] = {k: [type(v).__name__, v] for k, v in props.items()}
        return entity, fields, row

    def run(self) -> None:
        interval = 1.0 / self.rate
        while not self.stopping.is_set():
            started = time.monotonic()
            entity, fields, row = self.message()
            row["t_sent"] = time.time()
            self.ledger.sent += 1
            deadline = time.monotonic() + self.GIVE_UP
            acked = False
            while time.monotonic() < deadline:
                try:
                    self.send(entity, fields)
                    acked = True
                    break
                except Exception:
                    self.errors.append(time.time())
                    time.sleep(0.2)
            row["t_ack"] = time.time()
            self.ledger.write(row, acked)
            self.stopping.wait(max(0.0, interval - (time.monotonic() - started)))


def http_sender(url: str) -> Callable[[str, dict[str, Any]], None]:
    """POST the envelope to ``/v1``; only a 202 acknowledges."""
    client = httpx.Client(base_url=url, timeout=5)

    def send(entity: str, fields: dict[str, Any]) -> None:
        answer = client.post(f"/v1/entities/{entity}/messages", json=fields)
        if answer.status_code != 202:
            raise RuntimeError(f"HTTP {answer.status_code}")

    return send


def producer_sender(redis_url: str) -> Callable[[str, dict[str, Any]], None]:
    """``bridge.Producer.send``; returning acknowledges."""
    from bridge.producer import Producer

    producer = Producer(redis_url)

    def send(entity: str, fields: dict[str, Any]) -> None:
        props = dict(fields)
        producer.send(entity, props.pop("body"), **props)

    return send


def redis_door_sender(redis_url: str) -> Callable[[str, dict[str, Any]], None]:
    """``XADD bridge:{<entity>}:in``; Redis's reply (AOF ``always``: after the fsync) acknowledges."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)

    def send(entity: str, fields: dict[str, Any]) -> None:
        entry = {k: (json.dumps(v) if isinstance(v, dict) else str(v)) for k, v in fields.items()}
        client.xadd(f"bridge:{{{entity}}}:in", entry)  # type: ignore[arg-type]

    return send
