"""What a chaos run left behind, read for the checker: the run folder's JSON lines, what the namespaces
still hold (peeked with the unmodified ``azure-servicebus`` SDK) and two things from Redis with plain
redis-py (the local dead-letter streams and the receivers' counters of suppressed copies, by their
documented key names). Like the checker, it imports nothing from ``bridge``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path`` (a torn last line, from a kill mid-write, is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every handler call of every receiver process, in the order of their timestamps."""
    rows: list[dict[str, Any]] = []
    for name in sorted(glob.glob(str(folder / "recv-*.jsonl"))):
        rows.extend(read_jsonl(Path(name)))
    rows.sort(key=lambda r: r["t"])
    return rows


# ---- what the namespaces still hold (raw SDK) -------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """One message still in a namespace after the run."""

    namespace: str
    path: str
    message_id: str | None
    dead_letter: bool


def _peek_all(receiver: Any) -> list[Any]:
    got: list[Any] = []
    seq = 0
    while True:
        batch = receiver.peek_messages(max_message_count=250, sequence_number=seq, timeout=5)
        if not batch:
            return got
        got.extend(batch)
        seq = max(m.sequence_number for m in batch) + 1


def peek_namespace(
    name: str, connection_string: str, entities: list[dict[str, Any]], backlog: list[str]
) -> list[Held]:
    """Every message (active, scheduled and dead-lettered) still in the run's entities of one namespace.

    Each entity, dead-letter queue and session is peeked by its own client on its own thread: opening and
    closing an SDK receiver costs about a second of waiting, peeking itself milliseconds.
    """
    from concurrent.futures import ThreadPoolExecutor

    # (path, subscription, dead-letter, session)
    targets: list[tuple[str, str | None, bool, str | None]] = []
    for entity in entities:
        path, sub = entity["name"], entity.get("subscription")
        for dead in (False, True):
            if entity.get("sessions") and not dead and sub is None:
                targets += [(path, None, False, session) for session in entity.get("session_ids", [])]
            else:
                targets.append((path, sub, dead, None))
    targets += [(path, None, dead, None) for path in backlog for dead in (False, True)]

    def peek(target: tuple[str, str | None, bool, str | None]) -> list[Held]:
        from azure.servicebus import ServiceBusClient, ServiceBusSubQueue

        path, sub, dead, session = target
        sub_queue = ServiceBusSubQueue.DEAD_LETTER if dead else None
        with ServiceBusClient.from_connection_string(connection_string, retry_total=1) as client:
            if sub is not None:
                receiver = client.get_subscription_receiver(path, sub, sub_queue=sub_queue)
            elif session is not None:
                receiver = client.get_queue_receiver(path, session_id=session, max_wait_time=1)
            else:
                receiver = client.get_queue_receiver(path, sub_queue=sub_queue)
            with receiver:
                return [Held(name, path, m.message_id, dead) for m in _peek_all(receiver)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        return [held for found in pool.map(peek, targets) for held in found]


# ---- the reconciliation ---------------------------------------------------------------------------------


def _redis(run: dict[str, Any]) -> Any:
    import redis

    return redis.Redis.from_url(run["redis_url"], socket_timeout=10)


def local_dead_letters(run: dict[str, Any]) -> set[str]:
    """MessageIds in the outbox's local dead-letter streams (``bridge:{<entity>}:deadletter``)."""
    ids: set[str] = set()
    client = _redis(run)
    try:
        for entity in {e["name"] for e in run["entities"]}:
            for _, fields in client.xrange(f"bridge:{{{entity}}}:deadletter"):
                mid = fields.get(b"message_id") or fields.get(b"id")
                if mid:
                    ids.add(mid.decode())
    finally:
        client.close()
    return ids


def suppressed(run: dict[str, Any]) -> int:
    """Copies the receivers completed without a handler call (broker-level duplicates, including active
    mode's second copies), from their counters (``bridge:{<entity>}:rx:[sub:<S>:]counts``)."""
    client = _redis(run)
    total = 0
    try:
        for e in run["entities"]:
            sub = e.get("subscription")
            key = f"bridge:{{{e['name']}}}:rx:" + (f"sub:{sub}:" if sub else "") + "counts"
            total += int(client.hget(key, "duplicates_suppressed") or 0)
    finally:
        client.close()
    return total


@contextlib.contextmanager
def run_redis(run_dir: Path) -> Iterator[None]:
    """The run's Redis, started again on the run folder's data (``redis/``, AOF) when it no longer runs —
    a kept run folder is re-checked after its processes stopped — and stopped again afterwards."""
    import redis

    run = json.loads((run_dir / "run.json").read_text())
    client = redis.Redis.from_url(run["redis_url"], socket_timeout=5)
    try:
        client.ping()
        yield
        return
    except redis.ConnectionError:
        pass
    finally:
        client.close()
    port = urlsplit(run["redis_url"]).port or 6379
    data = run_dir / "redis"
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
    command += ["--appendonly", "yes", "--save", "", "--logfile", str(run_dir / "recheck-redis.log")]
    server = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                redis.Redis(port=port, socket_timeout=5).ping()  # answers once the AOF is loaded
                break
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"could not start the run's Redis again (see {data})") from None
                time.sleep(0.2)
        yield
    finally:
        server.terminate()
        server.wait(30)
