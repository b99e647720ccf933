"""One outbox shard's ceiling: how fast one drainer empties a full shard, against the raw SDK in the same run.

    python -m bench.shard [--messages 10000] [--rounds 2] [--appendfsync always|everysec]
                          [--mode passive|any|all] [--body 1024]

Starts a ``LocalStack`` (private redis-server with AOF, ``appendfsync always`` unless told otherwise; two
local namespaces as real processes), no worker: the drainer runs in this process, so its CPU time is
measured alone. Each round, with bodies of ``--body`` bytes (1 KB by default; ``bench.outage``'s load
sends about 200-byte messages):

1. **raw SDK**: one warm ``ServiceBusSender`` sends ``--messages`` messages with a MessageId in lists of 200
   (one batch each; with 1 KB bodies about one full 256 KB transfer): msgs/s and CPU microseconds per message
   of this process (the SDK's threads included);
2. **one shard**: the same number written to the outbox of an entity with one shard (passive, or active
   with ``--mode any|all``: every message goes to both namespaces at once, so a message costs two sends)
   (``Producer.send_batch``, not timed), then drained by ``ShardDrainer.run`` until all are acknowledged:
   msgs/s, CPU microseconds per message of this process (drainer, its settler and read-ahead threads, the
   SDK's threads) and of Redis (``INFO cpu``), and Redis commands per message.

The drain rate of a full shard is the highest rate one shard sustains with a bounded queue: offered more,
its backlog grows. Nothing here asserts: it prints the figures and the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage

ENTITY = "bench-shard"
RAW_QUEUE = "bench-shard-raw"
BATCH = 200
MODES: dict[str, dict[str, str]] = {
    "passive": {"replication": "passive"},
    "any": {"replication": "active", "success_policy": "any"},
    "all": {"replication": "active", "success_policy": "all"},
}


def raw_round(conn: str, total: int, tag: str, body: bytes) -> tuple[float, float]:
    """msgs/s and CPU seconds of one warm sender sending ``total`` messages in lists of ``BATCH``."""
    with (
        ServiceBusClient.from_connection_string(conn) as client,
        client.get_queue_sender(RAW_QUEUE) as sender,
    ):

        def send(n: int, prefix: str) -> None:
            for i in range(0, n, BATCH):
                sender.send_messages(
                    [ServiceBusMessage(body, message_id=f"{prefix}{i + j}") for j in range(BATCH)]
                )

        send(BATCH, f"{tag}-warm-")
        started, cpu = time.perf_counter(), time.process_time()
        send(total, f"{tag}-")
        return total / (time.perf_counter() - started), time.process_time() - cpu


def redis_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_calls(client: Any) -> int:
    return sum(int(v["calls"]) for k, v in client.info("commandstats").items() if k != "cmdstat_info")


def shard_round(ctx: Any, producer: Any, total: int, tag: str, body: bytes) -> dict[str, float]:
    """Fill the shard with ``total`` messages, then drain it with one drainer; the figures."""
    from bridge.delivery.drainer import ShardDrainer

    for i in range(0, total, 1000):
        producer.send_batch(ENTITY, [{"body": body, "message_id": f"{tag}-{i + j}"} for j in range(1000)])
    calls, rcpu = redis_calls(ctx.redis), redis_cpu(ctx.redis)
    started, cpu = time.perf_counter(), time.process_time()
    sent = 0
    while sent < total:
        report = ShardDrainer(ctx, ENTITY, 0).run(budget=120, idle_reads=1, block_ms=50)
        if report.sent == 0:
            raise SystemExit(f"the drain stopped after {sent} of {total}: {report}")
        sent += report.sent
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    return {
        "rate": sent / elapsed,
        "cpu_us": used / sent * 1e6,
        "redis_us": (redis_cpu(ctx.redis) - rcpu) / sent * 1e6,
        "redis_calls": (redis_calls(ctx.redis) - calls) / sent,
    }


def main() -> None:
    """Run the rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000, help="messages per round and side")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--appendfsync", default="always", choices=["always", "everysec"])
    parser.add_argument("--mode", default="passive", choices=list(MODES))
    parser.add_argument("--body", type=int, default=1024, help="bytes of each message's body")
    args = parser.parse_args()
    body = b"x" * args.body
    total = args.messages - args.messages % 1000

    from bridge.delivery.context import DeliveryContext
    from bridge.embedded.stack import LocalStack
    from bridge.producer import Producer
    from bridge.settings import Settings

    base = Path(tempfile.mkdtemp(prefix="bench-shard-"))
    print(
        f"bench.shard: {args.body}-byte bodies, {total} per round and side, {args.rounds} rounds, one "
        f"{args.mode} entity with one outbox shard drained in this process, Redis appendfsync "
        f"{args.appendfsync}",
        flush=True,
    )
    stack = LocalStack(base, entities={ENTITY: MODES[args.mode]}, settings={"BRIDGE_LOG_LEVEL": "WARNING"})
    stack.redis.appendfsync = args.appendfsync
    raws: list[tuple[float, float]] = []
    shards: list[dict[str, float]] = []
    with stack:
        os.environ.update(stack.env())
        settings = Settings()
        producer = Producer(settings=settings)
        ctx = DeliveryContext.build(settings)
        try:
            shard_round(ctx, producer, 1000, "warm", body)
            for n in range(args.rounds):
                raws.append(raw_round(stack.primary.connection_string, total, f"r{n}", body))
                shards.append(shard_round(ctx, producer, total, f"b{n}", body))
                (rate, cpu), s = raws[-1], shards[-1]
                print(
                    f"  round {n + 1}: raw SDK {rate:7,.0f} msgs/s {cpu / total * 1e6:5.0f} us CPU/msg   "
                    f"one shard {s['rate']:7,.0f} msgs/s {s['cpu_us']:5.0f} us CPU/msg "
                    f"+ Redis {s['redis_us']:4.0f} us ({s['redis_calls']:.2f} commands/msg)   "
                    f"ratio {s['rate'] / rate:.2f}",
                    flush=True,
                )
        finally:
            ctx.close()
            producer.close()
    shutil.rmtree(base, ignore_errors=True)
    ratios = [s["rate"] / r for (r, _), s in zip(raws, shards, strict=True)]
    print()
    print(
        f"one shard / raw SDK, msgs/s: median {statistics.median(ratios):.2f} "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    raw_cpu = statistics.median(c / total * 1e6 for _, c in raws)
    shard_cpu = statistics.median(s["cpu_us"] + s["redis_us"] for s in shards)
    print(f"CPU us per message, median: one shard (drainer + Redis) {shard_cpu:.0f}, raw SDK {raw_cpu:.0f}")


if __name__ == "__main__":
    main()
