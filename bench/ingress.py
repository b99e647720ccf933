"""Ingress throughput and latency, as ratios against raw redis-py measured in the same run.

    python -m bench.ingress [--seconds 5] [--concurrency 32]

Starts a private redis-server (AOF, ``appendfsync everysec``) and a real ``bridge serve`` process, then
measures, with 1 KB bodies:

1. baseline: one redis-py client doing ``XADD`` one at a time (msgs/s);
2. baseline: redis-py pipelines of 100 ``XADD`` (msgs/s), each entry holding the fields an outbox entry
   holds (see below);
3. HTTP single-message ingress, 32 concurrent keep-alive connections (msgs/s, p50/p99 of the 202);
4. HTTP batch ingress, 100 messages per request;
5. ``bridge.Producer.send_batch`` of 100 messages.

and prints 3/1, 4/2, 5/2 (targets 0.5, 0.6, 0.7) and the p99 of a single 202 at ``--concurrency``
(target <= 10 ms).

On a loaded machine those wall-clock ratios move with whatever else runs between the baseline's seconds
and the bridge's, so it also prints CPU seconds per 10,000 messages, which a neighbour's load barely moves:
for the pipelined baseline the client's (this process) plus redis-server's, for the HTTP batch run the
``bridge serve`` process's plus redis-server's (read from ``/proc``, Linux only), and their ratio.

What baseline 2 stores, and why: an outbox entry for a 1 KB message without properties has five fields
(``v``, ``id``, ``b``, ``at``, ``e``; ``bridge.core.envelope``), and the HTTP batch door and the producer
store exactly that. The pipelined baseline stores the same five fields with the same values (a 32-hex
MessageId, the body, an epoch timestamp, the entity), prepared once outside the timed loop, so the ratio
compares the bridge with the cheapest way to put *the same entries* into Redis with redis-py. Nothing the
bridge does on top (validation, MessageId generation, the idempotency record, the bounds, the counters) is
done by the baseline: that is what the ratio prices. A single-field ``XADD`` of the bare body is also
measured and printed for reference (``--`` line); storing one field instead of five makes redis-py's
client-side work smaller, so a ratio against it would charge the bridge for writing the documented layout.
The producer run starts from an empty Redis, like the baselines.

The load generator is a minimal asyncio HTTP/1.1 client so that it costs the machine as little as possible;
it runs in this process, the server in its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import redis

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.redis_server import RedisServer

BODY = b"x" * 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def raw_single(port: int, seconds: float) -> float:
    client = redis.Redis(port=port)
    fields = {b"b": BODY}
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(100):
            client.xadd("bench:raw:single", fields)
        count += 100
    rate = count / (time.perf_counter() - start)
    client.delete("bench:raw:single")
    client.close()
    return rate


# What an outbox entry holds for a 1 KB message without properties (bridge.core.envelope, version 1).
OUTBOX_FIELDS = {
    b"v": b"1",
    b"id": b"0123456789abcdef0123456789abcdef",
    b"b": BODY,
    b"at": b"1700000000.1234567",
    b"e": b"bench-raw",
}


class Costs:
    """CPU seconds spent per message by the sides of one measurement (``cpu_seconds``)."""

    def __init__(self) -> None:
        self.per_message: dict[str, float] = {}
        self.parts: dict[str, list[float]] = {}

    def measure(self, name: str, pids: list[int | None], run: Callable[[], int]) -> int:
        """Run ``run`` (returns the messages it stored) and record the CPU of ``pids`` (None: this
        process) per message."""
        before = [cpu_seconds(pid) if pid else time.process_time() for pid in pids]
        messages = run()
        after = [cpu_seconds(pid) if pid else time.process_time() for pid in pids]
        parts = [(b - a) / max(messages, 1) for a, b in zip(before, after, strict=True)]
        self.parts[name] = parts
        self.per_message[name] = sum(parts)
        return messages


def raw_pipelined(port: int, seconds: float, fields: dict[bytes, bytes] = OUTBOX_FIELDS) -> float:
    return _raw_pipelined(port, seconds, fields)[0]


def _raw_pipelined(port: int, seconds: float, fields: dict[bytes, bytes]) -> tuple[float, int]:
    client = redis.Redis(port=port)
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        pipe = client.pipeline(transaction=False)
        for _ in range(100):
            pipe.xadd("bench:raw:pipe", fields)
        pipe.execute()
        count += 100
    rate = count / (time.perf_counter() - start)
    client.delete("bench:raw:pipe")
    client.close()
    return rate, count


def producer_batch(url: str, seconds: float) -> float:
    from bridge import Producer
    from bridge.settings import Settings

    producer = Producer(settings=Settings(redis_url=url))
    batch = [BODY] * 100
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        producer.send_batch("bench-producer", batch)
        count += 100
    rate = count / (time.perf_counter() - start)
    producer.close()
    return rate


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection sending the same request again and again."""

    def __init__(self, request: bytes, stop_at: float, latencies: list[float], done: asyncio.Future[None]):
        self.request = request
        self.stop_at = stop_at
        self.latencies = latencies
        self.done = done
        self.buffer = b""
        self.sent_at = 0.0
        self.statuses: dict[int, int] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._send()

    def _send(self) -> None:
        self.sent_at = time.perf_counter()
        self.transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buffer[:head_end]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buffer) < head_end + 4 + length:
            return
        status = int(head[9:12])
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.buffer = self.buffer[head_end + 4 + length :]
        now = time.perf_counter()
        self.latencies.append(now - self.sent_at)
        if now < self.stop_at:
            self._send()
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def http_load(
    port: int, request: bytes, concurrency: int, seconds: float
) -> tuple[list[float], dict[int, int]]:
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds
    protocols = []
    waits = []
    for _ in range(concurrency):
        done: asyncio.Future[None] = loop.create_future()
        _, protocol = await loop.create_connection(
            lambda done=done: _Connection(request, stop_at, latencies, done), "127.0.0.1", port
        )
        protocols.append(protocol)
        waits.append(done)
    await asyncio.gather(*waits)
    statuses: dict[int, int] = {}
    for protocol in protocols:
        for status, count in protocol.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return latencies, statuses


def _request(path: str, payload: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()

    costs = Costs()
    with RedisServer(appendfsync="everysec") as server:
        redis_pid = server._proc.pid if server._proc else None
        single = raw_single(server.port, args.seconds)
        pipelined = 0.0

        def pipelined_run() -> int:
            nonlocal pipelined
            pipelined, count = _raw_pipelined(server.port, args.seconds, OUTBOX_FIELDS)
            return count

        costs.measure("pipelined", [None, redis_pid], pipelined_run)
        pipelined_bare = raw_pipelined(server.port, args.seconds, {b"b": BODY})

        port = free_port()
        env = {**os.environ, "BRIDGE_REDIS_URL": server.url, "BRIDGE_LOG_LEVEL": "WARNING"}
        env.pop("BRIDGE_CONFIG", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
        )
        try:
            if not wait_listening("127.0.0.1", port, 60):
                raise SystemExit("bridge serve did not start")
            body_text = BODY.decode()
            one = _request("/v1/entities/bench-http/messages", json.dumps({"body": body_text}).encode())
            asyncio.run(http_load(port, one, args.concurrency, 1.0))  # warm-up
            latencies, statuses = asyncio.run(http_load(port, one, args.concurrency, args.seconds))
            http_single = statuses.get(202, 0) / args.seconds
            many = _request(
                "/v1/entities/bench-batch/messages:batch",
                json.dumps({"messages": [{"body": body_text}] * 100}).encode(),
            )
            batch_statuses: dict[int, int] = {}

            def batch_run() -> int:
                nonlocal batch_statuses
                _, batch_statuses = asyncio.run(http_load(port, many, 8, args.seconds))
                return batch_statuses.get(202, 0) * 100

            costs.measure("http batch", [proc.pid, redis_pid], batch_run)
            http_batch = batch_statuses.get(202, 0) * 100 / args.seconds
        finally:
            proc.terminate()
            proc.wait(10)
        # Start from an empty Redis, as the baselines do (they delete their stream): the HTTP runs leave
        # hundreds of MB behind, and AOF rewrites of that data would compete with the producer for CPU.
        redis.Redis(port=server.port).flushall()
        producer = producer_batch(server.url, args.seconds)

    print(f"raw redis-py XADD, one at a time    {single:12,.0f} msgs/s")
    print(f"raw redis-py XADD, pipelined x100   {pipelined:12,.0f} msgs/s   (outbox fields)")
    print(f"-- same, body as the only field     {pipelined_bare:12,.0f} msgs/s   (reference only)")
    print(
        f"HTTP single, concurrency {args.concurrency:<3}       {http_single:12,.0f} msgs/s   "
        f"statuses {statuses}"
    )
    print(f"HTTP batch x100, concurrency 8      {http_batch:12,.0f} msgs/s   statuses {batch_statuses}")
    print(f"Producer.send_batch x100            {producer:12,.0f} msgs/s")
    print()
    print(f"HTTP single / raw single XADD       {http_single / single:6.2f}   (target >= 0.5)")
    print(f"HTTP batch / raw pipelined XADD     {http_batch / pipelined:6.2f}   (target >= 0.6)")
    print(f"Producer batch / raw pipelined XADD {producer / pipelined:6.2f}   (target >= 0.7)")
    print(f"-- Producer / bare-body pipelined   {producer / pipelined_bare:6.2f}   (reference only)")
    print(
        f"HTTP single 202 latency             p50 {_percentile(latencies, 0.5) * 1000:.2f} ms   "
        f"p99 {_percentile(latencies, 0.99) * 1000:.2f} ms   "
        f"(mean {statistics.fmean(latencies) * 1000:.2f} ms; target p99 <= 10 ms)"
    )
    raw_cpu, http_cpu = costs.per_message["pipelined"], costs.per_message["http batch"]
    print(
        f"CPU s per 10,000 msgs: raw pipelined XADD (client + redis) {raw_cpu * 10_000:.3f}, HTTP batch x100 "
        f"(bridge serve + redis) {http_cpu * 10_000:.3f}; raw / HTTP {raw_cpu / http_cpu:.2f} "
        "(the batch ratio's CPU-bound form)"
    )
    client, raw_redis = costs.parts["pipelined"]
    serve, http_redis = costs.parts["http batch"]
    print(
        f"  of which: redis-py client {client * 10_000:.3f} + redis {raw_redis * 10_000:.3f}; "
        f"bridge serve {serve * 10_000:.3f} + redis {http_redis * 10_000:.3f}"
    )


if __name__ == "__main__":
    main()
