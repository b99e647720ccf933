"""The first send after an idle period: its cost to the raw SDK and to the bridge (``bench.latency``).

Its own ``LocalStack``, whose primary namespace closes idle links after ``--idle-link-timeout`` seconds and
then their idle connections after as many more (Azure: 600 s and 300 s), and whose worker reopens cached
senders unused for half that (``retry.link_refresh_after``; 300 s of Azure's 600 s by default). Each of
``--idle-rounds`` rounds waits longer than both timeouts together, then sends:

1. ``raw idle``: one message on a raw SDK sender (default SDK settings) last used before the idle period;
2. ``raw warm``: one more on the same sender at once;
3. ``bridge idle``: one message through ``Producer.send_batch`` (the worker's links sat idle as long);
4. ``bridge warm``: one more once the previous one is in.

A message's latency is from the send call to its enqueued time at the namespace (``enqueued_time_utc``,
millisecond resolution, read by receivers that reconnect whenever their own links idle out), so a receiver
reconnecting does not count. The figure that matters: ``bridge idle`` minus ``raw warm``, percentile by
percentile (target p99 <= 100 ms); ``raw idle`` shows what the SDK alone pays for the same idle period.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

BODY = b"x" * 1024
ENTITY = "bench-idle-send"
RAW_QUEUE = "bench-idle-send-raw"
KINDS = ("raw idle", "raw warm", "bridge idle", "bridge warm")


class Enqueued:
    """RECEIVE_AND_DELETE receivers that record each message's enqueued time; they reopen on any error."""

    def __init__(self, conn: str, queues: Sequence[str]) -> None:
        self.conn = conn
        self.at: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(q,), daemon=True) for q in queues]

    def start(self) -> Enqueued:
        for thread in self.threads:
            thread.start()
        return self

    def _run(self, queue: str) -> None:
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
        while not self.stop.is_set():
            try:
                with (
                    ServiceBusClient.from_connection_string(self.conn, retry_total=0) as client,
                    client.get_queue_receiver(queue, receive_mode=mode) as receiver,
                ):
                    while not self.stop.is_set():
                        for message in receiver.receive_messages(max_message_count=50, max_wait_time=0.5):
                            when = message.enqueued_time_utc
                            if when is not None:
                                with self.lock:
                                    self.at[str(message.message_id)] = when.timestamp()
            except Exception:  # its own link idled out: reconnect (this receiver is not measured)
                time.sleep(0.05)

    def wait_for(self, message_id: str, timeout: float = 60.0) -> float:
        """The enqueued time of ``message_id`` (waits for it to be received)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if message_id in self.at:
                    return self.at[message_id]
            time.sleep(0.01)
        raise TimeoutError(f"{message_id} not received within {timeout} s")

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    """The phase; returns seconds per kind, one value per round."""
    from bridge.embedded.stack import LocalStack
    from bridge.producer import Producer
    from bridge.settings import Settings

    timeout = args.idle_link_timeout
    entities: dict[str, Any] = {ENTITY: {}}
    base = Path(tempfile.mkdtemp(prefix="bench-latency-idle-"))
    stack = LocalStack(
        base,
        entities=entities,
        settings={"BRIDGE_LOG_LEVEL": "WARNING", "BRIDGE_RETRY__LINK_REFRESH_AFTER": str(timeout / 2)},
    )
    stack.primary.idle_timeouts = (timeout, timeout)
    out: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with stack:
        env = stack.env()
        producer = Producer(
            settings=Settings.model_validate({"redis_url": env["BRIDGE_REDIS_URL"], "entities": entities})
        )
        stack.start_worker(concurrency=args.concurrency)
        stack.start_beat()
        conn = stack.primary.connection_string
        enqueued = Enqueued(conn, [RAW_QUEUE, ENTITY]).start()
        try:
            with (
                ServiceBusClient.from_connection_string(conn) as client,
                client.get_queue_sender(RAW_QUEUE) as sender,
            ):
                _round(sender, producer, enqueued, "warm-up", {})
                for index in range(args.idle_rounds):
                    time.sleep(2 * timeout + 1.0)  # past the link and then the connection timeout
                    _round(sender, producer, enqueued, str(index), out)
        finally:
            enqueued.close()
            producer.close()
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return out


def _round(sender: Any, producer: Any, enqueued: Enqueued, tag: str, out: dict[str, list[float]]) -> None:
    for kind in ("raw idle", "raw warm"):
        message_id = f"{kind.replace(' ', '-')}-{tag}"
        at = time.time()
        sender.send_messages(ServiceBusMessage(BODY, message_id=message_id))
        out.setdefault(kind, []).append(enqueued.wait_for(message_id) - at)
    for kind in ("bridge idle", "bridge warm"):
        message_id = f"{kind.replace(' ', '-')}-{tag}"
        at = time.time()
        producer.send_batch(ENTITY, [{"body": BODY, "message_id": message_id}])
        out.setdefault(kind, []).append(enqueued.wait_for(message_id) - at)


def report(results: dict[str, list[float]], percentiles: Any) -> None:
    """Print the figures of ``run`` (``percentiles`` is ``bench.latency.percentiles``)."""
    figures = {kind: percentiles(values) for kind, values in results.items() if values}
    if len(figures) < len(KINDS):
        return
    rounds = len(results["raw idle"])
    title = f"first send after an idle period ({rounds} rounds), send -> enqueued, ms"
    print(f"{title:<60}     p50     p95     p99     max")
    for kind in KINDS:
        print(f"  {kind:<58}" + "".join(f"{figures[kind][k]:8.1f}" for k in ("p50", "p95", "p99", "max")))
    added = {k: figures["bridge idle"][k] - figures["raw warm"][k] for k in figures["raw warm"]}
    print(
        f"  {'added: bridge idle - raw warm':<58}"
        + "".join(f"{added[k]:8.1f}" for k in ("p50", "p95", "p99", "max"))
    )
    print("  (target: added p99 <= 100 ms; 'raw idle' is the SDK alone after the same idle period)")
