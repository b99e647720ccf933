"""The syphon's drain rate with a very long backlog queue against its rate with a short one, same run.

    python -m bench.syphon_backlog [--messages 1000000] [--small 5000] [--window 20000] [--repeats 3]
                                   [--batch 100] [--body 256] [--cold]

Starts a private Redis and two local namespaces (each its own process, ``bridge emulator``), then, on one
backlog queue of the secondary, with ``run_syphon`` (the beat task's body, in this process: leases,
restore, batched send, settle, cost counters; runs of 2 s back to back):

1. normal rate: ``--small`` aliased messages in the queue, syphoned until it is empty (msgs/s), ``--repeats``
   times;
2. ``--messages`` more aliased messages sent to the queue (through the SDK, batches of 500 from four
   threads; the fill time is printed);
3. rate at depth: ``--window`` messages syphoned from the head of that queue, ``--repeats`` windows back to
   back (the queue stays within ``repeats * window`` of ``--messages`` deep);
4. with ``--cold``: the scan for lost set-aside records forgotten (as a replaced Redis server makes it due),
   the time until the first message moves again (one pass over the whole queue) and its peeks.

Prints each rate, their medians and 3/1 (target >= 0.7). Before each measured part a syphon has run on the
queue once, as the beat task's runs do every interval, so the scan pass is complete on this Redis server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.syphon import create_queues, settings_for, syphon_rate
from bridge.core.envelope import Envelope
from bridge.core.paired import backlog_queue_paths
from bridge.delivery.context import DeliveryContext
from bridge.embedded.stack import LocalStack
from bridge.paired.syphon_run import run_syphon
from bridge.servicebus.messages import BacklogMessage, to_backlog_message
from bridge.servicebus.pool import NamespacePool
from bridge.settings import Settings
from bridge.state import keys

CHUNK = 500
"""Messages per send while filling (the SDK batches them by size)."""
FILLERS = 4
"""Threads filling the queue, each with its own connection."""


def aliased(offset: int, count: int, body: bytes) -> list[object]:
    """``count`` backlog messages for entity ``orders``, MessageIds from ``offset`` on."""
    out: list[object] = []
    now = time.time()
    for i in range(offset, offset + count):
        envelope = Envelope(
            entity="orders",
            message_id=f"m-{i}",
            body=body,
            accepted_at=now,
            application_properties={"tenant": "t-1", "n": i},
            time_to_live=86_400.0,
        )
        message = to_backlog_message(envelope)
        assert isinstance(message, BacklogMessage)
        out.append(message.message)
    return out


def fill(settings: Settings, queue: str, offset: int, count: int, body: bytes) -> float:
    """Send ``count`` messages to ``queue`` from ``FILLERS`` threads; seconds it took."""
    chunks = [(start, min(CHUNK, offset + count - start)) for start in range(offset, offset + count, CHUNK)]
    lock = threading.Lock()

    def work() -> None:
        pool = NamespacePool(settings)
        try:
            while True:
                with lock:
                    if not chunks:
                        return
                    start, size = chunks.pop(0)
                result = pool.send("secondary", queue, aliased(start, size, body))  # type: ignore[arg-type]
                assert result.ok, result.failed
        finally:
            pool.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(min(FILLERS, len(chunks)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def cold_pass(ctx: DeliveryContext, queue: str) -> tuple[float, int]:
    """Forget the scan pass, then run until a message moves: seconds and peeks it took."""
    ctx.redis.delete(keys.aside_scan(queue))
    started, peeks = time.perf_counter(), 0
    while True:
        report = run_syphon(ctx, budget=2.0)
        peeks += sum(q.peeks for q in report.queues)
        if any(q.sent for q in report.queues):
            return time.perf_counter() - started, peeks


def spread(rates: list[float]) -> str:
    return f"median {statistics.median(rates):8.0f} msgs/s  (runs: {', '.join(f'{r:.0f}' for r in rates)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=5000)
    parser.add_argument("--window", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body", type=int, default=256)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    body = b"x" * args.body
    with tempfile.TemporaryDirectory(prefix="bench-backlog-") as tmp:
        stack = LocalStack(Path(tmp), entities={"orders": {"replication": "paired"}}).start()
        try:
            settings = settings_for(stack, args.batch, queues=1)
            assert settings.primary is not None and settings.secondary is not None
            (queue,) = backlog_queue_paths(settings.primary.namespace_name, 1)
            create_queues(settings.secondary, [queue])
            create_queues(settings.primary, ["orders"])
            ctx = DeliveryContext.build(settings)
            try:
                offset = 0
                fill(settings, queue, offset, 200, body)
                offset += 200
                syphon_rate(ctx, 200)  # warm-up: links attached, the scan pass complete on this Redis server
                small: list[float] = []
                for _ in range(args.repeats):
                    fill(settings, queue, offset, args.small, body)
                    offset += args.small
                    small.append(syphon_rate(ctx, args.small))
                seconds = fill(settings, queue, offset, args.messages, body)
                offset += args.messages
                print(
                    f"filled {args.messages} messages of {args.body} B in {seconds:.0f} s "
                    f"({args.messages / seconds:.0f} msgs/s)",
                    flush=True,
                )
                deep = [syphon_rate(ctx, args.window) for _ in range(args.repeats)]
                print(f"syphon, backlog of {args.small:>9}      : {spread(small)}")
                print(f"syphon, backlog of {args.messages:>9}      : {spread(deep)}")
                ratio = statistics.median(deep) / statistics.median(small)
                print(f"ratio deep / short               : {ratio:8.2f}   (target >= 0.7)")
                if args.cold:
                    taken, peeks = cold_pass(ctx, queue)
                    left = args.messages - args.repeats * args.window
                    print(f"a new scan pass over ~{left} messages: {taken:.1f} s, {peeks} peeks")
            finally:
                ctx.close()
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
