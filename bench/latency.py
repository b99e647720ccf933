"""Delivery latency: what the bridge adds to a send, and what an idle worker costs.

    python -m bench.latency [--seconds 25] [--rates 1,100,2000] [--idle-seconds 20] [--idle-entities 7]
                            [--idle-shards 32] [--concurrency 2] [--shards 1] [--appendfsync always|everysec]
                            [--idle-rounds 12] [--idle-link-timeout 2] [--skip latency|idle|first-send]
                            [--keep]

Starts a ``LocalStack`` (private redis-server with AOF, ``appendfsync always`` as in the test rig unless
``--appendfsync everysec``, Redis's own default; two local namespaces as real processes) with one
``bridge worker --concurrency C`` and one ``bridge beat``, default settings, a passive entity with one outbox
shard (``--shards``), and measures with 1 KB bodies:

1. **Latency at a steady rate** (1, 100 and 2,000 msgs/s by default, ``--seconds`` each). The baseline is the
   raw SDK's own send -> receive on the same namespace: one warm ``ServiceBusSender`` sends (socket reads of
   ``SOCKET_TIMEOUT``, as the bridge's senders), a raw SDK
   receiver (RECEIVE_AND_DELETE, prefetch) on another queue of the same namespace stamps each arrival.
   Then the bridge: the application hands the same messages to ``Producer.send_batch`` (the clock starts
   before the call) and a receiver on the bridge entity stamps them. Up to 100 msgs/s every tick carries
   one message; above, a tick every 10 ms carries rate/100 (one batched send, one ``send_batch``). The
   figures are p50/p95/p99/max of each, and the *added* latency: bridge minus raw, percentile by
   percentile (targets at 1 and 100 msgs/s: p50 <= 5 ms, p99 <= 50 ms). Each side also prints the rate it
   offered: a raw sender whose sends take longer than a tick falls behind the schedule instead of queueing
   (its latency counts from each send's start), so below the asked rate the two sides are not comparable.
2. **Idle cost** (``--idle-seconds``): with no traffic, Redis ``INFO commandstats`` deltas (commands run
   inside scripts are counted too) and the CPU time of the worker's processes (main + pool children), with
   the bench entity and ``--idle-entities`` more configured with one shard each, then again (worker and beat
   restarted) with about ``--idle-shards`` more shards spread over the same entities; the difference is the
   marginal cost of one idle shard (per-entity work cancels out). The Celery broker is the same Redis, so
   the fixed part includes Celery's own polling and the beat's tasks.
3. **First send after an idle period** (``--idle-rounds``, ``--idle-link-timeout``): on a stack of its own
   whose namespace closes idle links and connections within seconds as Azure does within minutes, the
   first send of the raw SDK and of the bridge after each idle period, against a warm send
   (``bench/latency_idle.py``; target: the bridge's first send p99 at most 100 ms over a warm raw send).

Warm-ups (first connections, first sends) are excluded. Nothing here asserts: it prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

from bench import latency_idle
from bridge.settings import RetrySettings

BODY = b"x" * 1024
ENTITY = "bench-latency"
RAW_QUEUE = "bench-latency-raw"
TICK = 0.01
SOCKET_TIMEOUT = RetrySettings().sender_socket_timeout
"""The SDK socket read of the raw sender and of both receivers: the bridge's senders' (0.02 s, not the SDK's
0.2 s). The SDK's keep-alive holds a connection for one such read every 30 s (docs/servicebus-sdk.md); with
the SDK's default the raw baseline and the receivers that stamp arrivals stalled 200 ms every 30 s, which
the figures of both sides then carried, or not, depending on where a run's window fell."""


# ---- receiving -------------------------------------------------------------------------------------------
class Arrivals:
    """A raw SDK receiver on one queue that stamps each message's arrival (``time.time()``) by MessageId."""

    def __init__(self, conn: str, queue: str) -> None:
        self.conn, self.queue = conn, queue
        self.at: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Arrivals:
        self.thread.start()
        self.ready.wait(30)
        return self

    def _run(self) -> None:
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
        with (
            ServiceBusClient.from_connection_string(self.conn) as client,
            client.get_queue_receiver(
                self.queue,
                receive_mode=mode,
                prefetch_count=500,
                max_wait_time=0.5,
                socket_timeout=SOCKET_TIMEOUT,
            ) as receiver,
        ):
            self.ready.set()
            while not self.stop.is_set():
                # The iterator hands each message over as it arrives (a batch receive would wait for more);
                # it ends after 0.5 s without one.
                for message in receiver:
                    now = time.time()
                    with self.lock:
                        self.at[str(message.message_id)] = now
                    if self.stop.is_set():
                        break

    def wait_for(self, ids: Sequence[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(i in self.at for i in ids):
                    return
            time.sleep(0.05)
        with self.lock:
            missing = sum(1 for i in ids if i not in self.at)
        raise SystemExit(f"{self.queue}: {missing} of {len(ids)} messages did not arrive in {timeout:.0f}s")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


# ---- sending at a rate -----------------------------------------------------------------------------------
def paced(
    rate: float, seconds: float, send: Callable[[int], list[tuple[str, float]]]
) -> list[tuple[str, float]]:
    """Call ``send(k)`` every tick for ``seconds`` so that ``rate`` messages a second go out; the sends."""
    tick = 1.0 / rate if rate <= 100 else TICK
    per_tick = max(1, round(rate * tick))
    sent: list[tuple[str, float]] = []
    next_at = time.monotonic()
    until = next_at + seconds
    while next_at < until:
        sent.extend(send(per_tick))
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    return sent


def raw_sender(sender: Any, counter: list[int]) -> Callable[[int], list[tuple[str, float]]]:
    """The baseline: one warm SDK sender, one ``send_messages`` call per tick."""

    def send(k: int) -> list[tuple[str, float]]:
        ids = [f"raw-{counter[0] + i}" for i in range(k)]
        counter[0] += k
        messages = [ServiceBusMessage(BODY, message_id=i) for i in ids]
        at = time.time()
        sender.send_messages(messages if k > 1 else messages[0])
        return [(i, at) for i in ids]

    return send


def bridge_sender(producer: Any, counter: list[int]) -> Callable[[int], list[tuple[str, float]]]:
    """The bridge: the application hands the messages to ``Producer.send_batch``."""

    def send(k: int) -> list[tuple[str, float]]:
        ids = [f"bridge-{counter[0] + i}" for i in range(k)]
        counter[0] += k
        at = time.time()
        producer.send_batch(ENTITY, [{"body": BODY, "message_id": i} for i in ids])
        return [(i, at) for i in ids]

    return send


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99 and max of ``values`` (nearest rank), in milliseconds."""
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "max": ordered[-1] * 1000}


def offered(
    rate: float, seconds: float, send: Callable[[int], list[tuple[str, float]]]
) -> tuple[list[tuple[str, float]], float]:
    """``paced``, and the rate it managed: a sender whose calls take longer than a tick falls behind the
    schedule, and its latency (from each call's start) then no longer includes that wait."""
    started = time.monotonic()
    sent = paced(rate, seconds, send)
    return sent, len(sent) / (time.monotonic() - started)


def latencies(
    run: tuple[list[tuple[str, float]], float], arrivals: Arrivals, timeout: float
) -> dict[str, float]:
    sent, rate = run
    arrivals.wait_for([i for i, _ in sent], timeout)
    with arrivals.lock:
        return {**percentiles([arrivals.at[i] - at for i, at in sent]), "offered": rate}


# ---- idle cost -------------------------------------------------------------------------------------------
def _cpu_seconds(root: int) -> float:
    """utime + stime of ``root`` and all its descendants, seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        stat = stats.get(pid)
        if stat is not None:
            total += int(stat[11]) + int(stat[12])
        todo.extend(children.get(pid, []))
    return total / ticks


def idle_cost(stack: Any, seconds: float, entities: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """Redis commands and worker CPU over ``seconds`` of no traffic, once every shard has its drainer."""
    import redis

    from bridge.embedded.stack import wait_until
    from bridge.state import keys

    worker = next(p for p in stack.processes if p.name.startswith("worker"))
    client = redis.Redis.from_url(stack.redis.url)
    try:
        shards = [(e, s) for e, o in entities.items() for s in range(int(o.get("outbox_shards", 1)))]

        def settled() -> bool:
            members = client.zcount(keys.drainers(), int(time.time() * 1000), "+inf")
            return members == concurrency and all(client.exists(keys.shard_lease(e, s)) for e, s in shards)

        wait_until(settled, 120, what="every shard owned by the new worker")
        time.sleep(3.0)

        def calls() -> dict[str, int]:
            return {
                k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in client.info("commandstats").items()
            }

        before, cpu_before, started = calls(), _cpu_seconds(worker.proc.pid), time.monotonic()
        time.sleep(seconds)
        after, cpu_after, elapsed = calls(), _cpu_seconds(worker.proc.pid), time.monotonic() - started
        # The two INFO calls themselves are not the bridge's.
        delta = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}
        delta["info"] = delta.get("info", 0) - 1
        return {
            "per_second": sum(delta.values()) / elapsed,
            "by_command": {k: v / elapsed for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v > 0},
            "cpu": (cpu_after - cpu_before) / elapsed,
        }
    finally:
        client.close()


def restart_workers(stack: Any, concurrency: int, entities: dict[str, Any]) -> None:
    for proc in list(stack.processes):
        proc.stop()
    stack.processes.clear()
    env = {"BRIDGE_ENTITIES": json.dumps(entities)}
    stack.start_worker(concurrency=concurrency, **env)
    stack.start_beat(**env)


def shard_count(entities: dict[str, Any]) -> int:
    return sum(int(options.get("outbox_shards", 1)) for options in entities.values())


# ---- main ------------------------------------------------------------------------------------------------
def main() -> None:
    """Run the phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="length of each rate's run, per side")
    parser.add_argument("--rates", default="1,100,2000", help="messages per second, comma-separated")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--idle-entities", type=int, default=7, help="idle entities besides the bench's")
    parser.add_argument("--idle-shards", type=int, default=32, help="extra idle shards for the marginal cost")
    parser.add_argument("--concurrency", type=int, default=2, help="worker pool processes")
    parser.add_argument("--shards", type=int, default=1, help="outbox_shards of the bench entity")
    parser.add_argument(
        "--appendfsync",
        default="always",
        choices=["always", "everysec"],
        help="the Redis AOF policy (the rig's default: always; Redis's own default: everysec)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the stack's data and logs")
    parser.add_argument("--idle-rounds", type=int, default=12, help="idle periods for the first-send case")
    parser.add_argument(
        "--idle-link-timeout",
        type=float,
        default=2.0,
        help="the namespace's link and connection idle timeout (s)",
    )
    parser.add_argument("--skip", action="append", default=[], choices=["latency", "idle", "first-send"])
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]

    from bridge.embedded.stack import LocalStack
    from bridge.producer import Producer
    from bridge.settings import Settings

    entities: dict[str, Any] = {ENTITY: {"outbox_shards": args.shards} if args.shards > 1 else {}}
    base = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    print(
        f"bench.latency: 1 KB messages, bridge worker --concurrency {args.concurrency} + beat, default "
        f"settings, passive entity with {args.shards} outbox shard(s), Redis appendfsync {args.appendfsync}; "
        f"stack in {base}",
        flush=True,
    )
    results: list[tuple[float, dict[str, float], dict[str, float]]] = []
    idle: list[tuple[int, dict[str, Any]]] = []
    stack = LocalStack(base, entities=entities, settings={"BRIDGE_LOG_LEVEL": "WARNING"})
    stack.redis.appendfsync = args.appendfsync
    with stack:
        env = stack.env()
        producer = Producer(
            settings=Settings.model_validate({"redis_url": env["BRIDGE_REDIS_URL"], "entities": entities})
        )
        stack.start_worker(concurrency=args.concurrency)
        stack.start_beat()
        conn = stack.primary.connection_string
        raw_in = Arrivals(conn, RAW_QUEUE).start()
        bridge_in = Arrivals(conn, ENTITY).start()
        raw_count, bridge_count = [0], [0]
        try:
            with (
                ServiceBusClient.from_connection_string(conn) as client,
                client.get_queue_sender(RAW_QUEUE, socket_timeout=SOCKET_TIMEOUT) as sender,
            ):
                raw = raw_sender(sender, raw_count)
                bridge = bridge_sender(producer, bridge_count)
                # Warm-up: connections, links, the worker's SDK client, the receivers' credit.
                raw_in.wait_for([i for i, _ in paced(20, 1.0, raw)], 60)
                bridge_in.wait_for([i for i, _ in paced(20, 1.0, bridge)], 60)
                if "latency" not in args.skip:
                    for rate in rates:
                        raw_figures = latencies(offered(rate, args.seconds, raw), raw_in, 60)
                        bridge_figures = latencies(offered(rate, args.seconds, bridge), bridge_in, 120)
                        results.append((rate, raw_figures, bridge_figures))
                        print(
                            f"  {rate:6g} msgs/s  raw {_fmt(raw_figures)}   bridge {_fmt(bridge_figures)}"
                            f"   (offered: raw {raw_figures['offered']:,.0f}, "
                            f"bridge {bridge_figures['offered']:,.0f} msgs/s)",
                            flush=True,
                        )
        finally:
            raw_in.close()
            bridge_in.close()
            producer.close()
        if "idle" not in args.skip:
            # The same entities twice, with one shard each and then with more: the difference is what
            # shards cost, per-entity work (the sweeper's look at a Redis-door stream, probes) cancels out.
            names = [ENTITY] + [f"bench-idle-{i}" for i in range(args.idle_entities)]
            per_entity = 1 + args.idle_shards // len(names)
            for shards in (1, per_entity):
                configured = {name: {"outbox_shards": shards} for name in names}
                restart_workers(stack, args.concurrency, configured)
                cost = idle_cost(stack, args.idle_seconds, configured, args.concurrency)
                idle.append((shard_count(configured), cost))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    first_send = {} if "first-send" in args.skip else latency_idle.run(args)

    print()
    if results:
        print("added latency (bridge - raw SDK send->receive), ms      p50     p95     p99     max")
        for rate, raw_figures, bridge_figures in results:
            added = {k: bridge_figures[k] - raw_figures[k] for k in ("p50", "p95", "p99", "max")}
            print(
                f"  {rate:6g} msgs/s                                  "
                + "".join(f"{added[k]:8.1f}" for k in ("p50", "p95", "p99", "max"))
            )
        print("  (targets at 1 and 100 msgs/s: p50 <= 5 ms, p99 <= 50 ms)")
    if idle:
        for shards, cost in idle:
            top = ", ".join(f"{name} {rate:.2f}" for name, rate in list(cost["by_command"].items())[:8])
            per_shard = cost["per_second"] / shards
            print(
                f"idle, {shards} shards: Redis {cost['per_second']:.1f} commands/s "
                f"({per_shard:.2f} per shard); worker CPU {100 * cost['cpu']:.2f} % of a core"
            )
            print(f"  top commands/s: {top}")
        if len(idle) == 2:
            (s1, c1), (s2, c2) = idle
            marginal = (c2["per_second"] - c1["per_second"]) / (s2 - s1)
            print(
                f"marginal idle cost of one shard: {marginal:.2f} Redis commands/s, "
                f"{100 * (c2['cpu'] - c1['cpu']) / (s2 - s1):.3f} % of a core   (worker CPU target < 2 %)"
            )

    if first_send:
        latency_idle.report(first_send, percentiles)


def _fmt(figures: dict[str, float]) -> str:
    return "/".join(f"{figures[k]:.1f}" for k in ("p50", "p95", "p99", "max")) + " ms"


if __name__ == "__main__":
    main()
