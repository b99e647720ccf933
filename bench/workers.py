"""Send workers end to end, as ratios against baselines measured in the same run on the same namespace.

    python -m bench.workers [--messages 50000] [--naive-messages 100] [--concurrency 2] [--shards 4]
                            [--pending 1000000] [--rss-seconds 60] [--skip rss] ...

Starts a ``LocalStack`` (private redis-server with the rig's AOF settings, two local namespaces as real
processes) and measures, with 1 KB bodies:

1. baseline: the raw SDK sending batches of 100 to the primary namespace from one sender (msgs/s);
2. the bridge: ``bridge worker --concurrency C`` + ``bridge beat`` with default settings, N messages
   written to the outbox with ``Producer.send_batch``; the clock runs from the first write until the
   primary's queue holds all N (its runtime count, read through the management endpoint) — msgs/s,
   ratio to (1), target >= 0.85;
3. a deliberately naive Celery sender (``naive_send`` below: one task per message, each opening its own
   ``ServiceBusClient`` and sender), run by ``celery worker`` with the same concurrency and the same Redis
   broker — ratio bridge / naive, target >= 5;
4. the failover gap with default retry settings: a steady producer, then ``outage()`` of the primary
   (refused connections); the time from the outage to the first message the secondary accepted (its
   EnqueuedTimeUtc), and how many messages had to wait for it — target <= 0.3 s; then the same with a
   ``blackhole()`` (TCP accepted, never answered), where only the attempt deadline can end the first
   send — target <= ``retry.attempt_deadline`` + 0.3 s (``--failover-fault`` picks one or both);
5. worker RSS with ``--pending`` messages in the outbox and both namespaces in outage (nothing drains):
   VmRSS of the worker's main process and its pool children, sampled every second — flat means the
   backlog is not loaded into memory.

Warm-ups (first connections, first batches) are excluded from every rate. Nothing here asserts: it prints
the figures and their ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from celery import Celery

from bench.queue_counts import queue_counter, wait_count
from bench.workers_failover import DEADLINE, FAILOVER_ENTITY, failovers

BODY = b"x" * 1024
BATCH = 100
BRIDGE_ENTITY = "bench-bridge"
BACKLOG_ENTITY = "bench-backlog"
RAW_QUEUE = "bench-raw"
NAIVE_QUEUE = "bench-naive"
NAIVE_CELERY_QUEUE = "bench-naive"

# ---- the naive sender (imported by its own ``celery worker``; configured through the environment) ------
naive_app = Celery("bench-naive", broker=os.environ.get("BENCH_NAIVE_BROKER", "memory://"))
naive_app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    task_default_queue=NAIVE_CELERY_QUEUE,
    broker_connection_retry_on_startup=True,
)


@naive_app.task(name="bench.naive_send")  # type: ignore[untyped-decorator]
def naive_send(queue: str, body: str) -> None:
    """One message, one client: what a first attempt at "Celery sends to Service Bus" looks like."""
    with (
        ServiceBusClient.from_connection_string(os.environ["BENCH_NAIVE_CONNECTION_STRING"]) as client,
        client.get_queue_sender(queue) as sender,
    ):
        sender.send_messages(ServiceBusMessage(body))


# ---- measuring ---------------------------------------------------------------------------------------------
def raw_sdk(conn: str, total: int) -> tuple[float, float]:
    """Baseline: msgs/s of one SDK sender sending batches of 100 (warm-up excluded), and the CPU seconds
    its process spent on them (all threads: the SDK's own included)."""
    with (
        ServiceBusClient.from_connection_string(conn) as client,
        client.get_queue_sender(RAW_QUEUE) as sender,
    ):

        def send(n: int) -> None:
            for _ in range(n // BATCH):
                batch = sender.create_message_batch()
                for _ in range(BATCH):
                    batch.add_message(ServiceBusMessage(BODY))
                sender.send_messages(batch)

        send(10 * BATCH)
        started, cpu = time.perf_counter(), time.process_time()
        send(total)
        return total / (time.perf_counter() - started), time.process_time() - cpu


def fill(producer: Any, entity: str, total: int, per_call: int = 1000, threads: int = 1) -> float:
    """Write ``total`` 1 KB messages to the outbox with ``Producer.send_batch``; returns msgs/s."""
    calls = [min(per_call, total - i) for i in range(0, total, per_call)]
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not calls:
                    return
                n = calls.pop()
            producer.send_batch(entity, [BODY] * n)

    started = time.perf_counter()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return total / (time.perf_counter() - started)


def bridge_cpu(stack: Any, client: Any) -> dict[str, float]:
    """CPU seconds so far of each bridge process: the worker (main + pool children), the beat, Redis."""
    from bench.latency import _cpu_seconds

    used = {p.name: _cpu_seconds(p.proc.pid) for p in stack.processes}
    info = client.info("cpu")
    used["redis"] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return used


def bridge_rate(
    stack: Any, producer: Any, count: Callable[[str], int], total: int
) -> tuple[float, float, dict[str, float]]:
    """msgs/s from the first outbox write until the primary's queue holds all ``total``, the fill msgs/s,
    and the CPU seconds each bridge process spent meanwhile (``bridge_cpu``)."""
    import redis

    client = redis.Redis.from_url(stack.redis.url)
    warm = 1000
    fill(producer, BRIDGE_ENTITY, warm, per_call=100)
    wait_count(count, BRIDGE_ENTITY, warm, 120)
    cpu = bridge_cpu(stack, client)
    started = time.perf_counter()
    fill_rate = fill(producer, BRIDGE_ENTITY, total)
    done = wait_count(count, BRIDGE_ENTITY, warm + total, 600)
    spent = {name: used - cpu.get(name, 0.0) for name, used in bridge_cpu(stack, client).items()}
    client.close()
    return float(total / (done - started)), fill_rate, spent


def naive_rate(stack: Any, count: Callable[[str], int], total: int, concurrency: int) -> float:
    """msgs/s of the naive task-per-message Celery sender, same broker and concurrency."""
    # Imported here: the naive worker imports this module and must not load the bridge.
    from bridge.embedded.redis_server import stop_process

    env = {
        **os.environ,
        "BENCH_NAIVE_BROKER": stack.redis.url,
        "BENCH_NAIVE_CONNECTION_STRING": stack.primary.connection_string,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    log = (stack.base_dir / "naive-worker.log").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.workers:naive_app",
            "worker",
            "--concurrency",
            str(concurrency),
            "--pool",
            "prefork",
            "--without-gossip",
            "--without-mingle",
            "-Q",
            NAIVE_CELERY_QUEUE,
            "--loglevel",
            "WARNING",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    naive_app.conf.broker_url = stack.redis.url
    try:
        warm = 4 * concurrency
        for _ in range(warm):
            naive_send.delay(NAIVE_QUEUE, BODY.decode())
        wait_count(count, NAIVE_QUEUE, warm, 120)
        started = time.perf_counter()
        for _ in range(total):
            naive_send.delay(NAIVE_QUEUE, BODY.decode())
        done = wait_count(count, NAIVE_QUEUE, warm + total, 900)
        return total / (done - started)
    finally:
        stop_process(proc)
        log.close()


def _rss_mb(root: int) -> tuple[float, int]:
    """VmRSS of ``root`` and all its descendants (MB), and how many processes that is."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(name))
    total_kb, todo, seen = 0, [root], 0
    while todo:
        pid = todo.pop()
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
                    seen += 1
        except OSError:
            continue
        todo.extend(children.get(pid, []))
    return total_kb / 1024, seen


def worker_rss(stack: Any, producer: Any, pending: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """RSS of a fresh worker over ``seconds`` with ``pending`` undeliverable messages in the outbox."""
    import redis

    from bridge.outbox import keys

    for proc in list(stack.processes):
        proc.stop()
    stack.processes.clear()
    stack.primary.control.outage()
    stack.secondary.control.outage()
    fill_rate = fill(producer, BACKLOG_ENTITY, pending, threads=2)
    client = redis.Redis.from_url(stack.redis.url)
    used = int(client.info("memory")["used_memory"]) / 1024**2
    worker = stack.start_worker("rss-worker", concurrency=concurrency)
    stack.start_beat("rss-beat")
    samples: list[tuple[float, float, int]] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        time.sleep(1.0)
        if not worker.running:
            raise SystemExit(f"the worker died: {worker.log_tail()}")
        mb, procs = _rss_mb(worker.proc.pid)
        samples.append((time.monotonic() - started, mb, procs))
    left = sum(int(client.xlen(keys.outbox(BACKLOG_ENTITY, s))) for s in range(_shards(stack)))
    client.close()
    return {"fill_rate": fill_rate, "redis_mb": used, "samples": samples, "left": left}


def _print_cpu(cpu: dict[str, float], raw_cpu: float, total: int) -> None:
    """CPU seconds per 10,000 delivered messages of each bridge process against the raw SDK sender's."""
    per = 10_000 / total
    parts = ", ".join(f"{name} {used * per:.2f}" for name, used in sorted(cpu.items()))
    bridge = sum(cpu.values()) * per
    print(
        f"CPU s per 10,000 msgs: bridge {bridge:.2f} ({parts}; the producer's writes not counted), "
        f"raw SDK sender {raw_cpu * per:.2f}; bridge / raw {bridge / (raw_cpu * per):.2f}, "
        f"gap {bridge - raw_cpu * per:.2f}"
    )


def _shards(stack: Any) -> int:
    return int(stack.entities[BACKLOG_ENTITY]["outbox_shards"])


def main() -> None:
    """Run the phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50000, help="bridge and raw SDK messages")
    parser.add_argument("--naive-messages", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes (bridge and naive)")
    parser.add_argument("--shards", type=int, default=4, help="outbox_shards of the bench entities")
    parser.add_argument("--pending", type=int, default=1_000_000, help="backlog for the RSS phase")
    parser.add_argument("--rss-seconds", type=float, default=60.0)
    parser.add_argument("--failover-rate", type=float, default=500.0, help="msgs/s during the failover")
    parser.add_argument("--failover-fault", choices=["outage", "blackhole", "both"], default="both")
    parser.add_argument("--keep", action="store_true", help="keep the stack's data and logs")
    parser.add_argument("--skip", action="append", default=[], choices=["bridge", "naive", "failover", "rss"])
    args = parser.parse_args()
    total = args.messages - args.messages % BATCH

    from bridge.embedded.stack import LocalStack
    from bridge.producer import Producer
    from bridge.settings import Settings

    shards = {"outbox_shards": args.shards}
    entities = {
        BRIDGE_ENTITY: shards,
        FAILOVER_ENTITY: {},  # one shard (the default): more shards than worker processes starve some
        BACKLOG_ENTITY: {
            **shards,
            "max_pending_messages": max(1_000_000, 2 * args.pending),
            "max_pending_bytes": max(1024**3, 4 * 1024 * args.pending),
        },
    }
    base = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    print(
        f"bench.workers: 1 KB messages, concurrency {args.concurrency}, {args.shards} outbox shards, "
        f"default retry settings; stack in {base} (removed at the end unless --keep)",
        flush=True,
    )
    with LocalStack(
        base,
        entities=entities,
        settings={
            "BRIDGE_LOG_LEVEL": "WARNING",
            "BRIDGE_INGRESS__MAX_TOTAL_BYTES": str(max(4 * 1024**3, 8 * 1024 * args.pending)),
        },
    ) as stack:
        env = stack.env()
        settings = Settings.model_validate(
            {
                "redis_url": env["BRIDGE_REDIS_URL"],
                "entities": entities,
                "ingress": {"max_total_bytes": max(4 * 1024**3, 8 * 1024 * args.pending)},
            }
        )
        producer = Producer(settings=settings)
        count = queue_counter(stack.primary)
        stack.start_worker(concurrency=args.concurrency)
        stack.start_beat()
        results: dict[str, Any] = {}
        raw, raw_cpu = raw_sdk(stack.primary.connection_string, total)
        print(f"  raw SDK batched sender, batches of {BATCH}   {raw:10,.0f} msgs/s", flush=True)
        if "bridge" not in args.skip:
            results["bridge"], fill_rate, results["cpu"] = bridge_rate(stack, producer, count, total)
            print(
                f"  bridge end to end, {total} msgs            {results['bridge']:10,.0f} msgs/s"
                f"   (outbox filled at {fill_rate:,.0f} msgs/s)",
                flush=True,
            )
        if "naive" not in args.skip:
            results["naive"] = naive_rate(stack, count, args.naive_messages, args.concurrency)
            print(f"  naive Celery task per message            {results['naive']:10,.1f} msgs/s", flush=True)
        if "failover" not in args.skip:
            results["failover"] = failovers(stack, producer, args)
        if "rss" not in args.skip:
            results["rss"] = worker_rss(stack, producer, args.pending, args.rss_seconds, args.concurrency)
        producer.close()
    if not args.keep:  # the Redis AOF of a 1,000,000-message backlog is over 1 GB
        shutil.rmtree(base, ignore_errors=True)

    print()
    if "bridge" in results:
        print(f"bridge / raw SDK batched          {results['bridge'] / raw:6.2f}   (target >= 0.85)")
        if "naive" in results:
            naive = results["bridge"] / results["naive"]
            print(f"bridge / naive Celery sender      {naive:6.0f}   (target >= 5)")
        _print_cpu(results["cpu"], raw_cpu, total)
    for fault, f in results.get("failover", {}).items():
        target = "0.3 s" if fault == "outage" else f"{DEADLINE:g} + 0.3 s"
        print(
            f"failover gap ({fault} -> first accept by secondary)  {f['gap']:.2f} s from the fault's call, "
            f"{f['gap_applied']:.2f} s from its answer (the control took {f['control']:.2f} s)   "
            f"(target <= {target})"
        )
        print(f"  the workers recorded the primary unavailable {f['noticed']:.3f} s after the answer")
        print(
            f"  messages delayed by it: {f['delayed']} (longest wait {f['max_delay']:.2f} s; healthy "
            f"p50 latency {f['healthy_p50'] * 1000:.0f} ms at {args.failover_rate:.0f} msgs/s); "
            f"produced {f['produced']}, received {f['received']} ({f['unique']} unique)"
        )
    if "rss" in results:
        r = results["rss"]
        samples = r["samples"]
        first, last = samples[min(4, len(samples) - 1)], samples[-1]
        peak = max(mb for _, mb, _ in samples)
        print(
            f"worker RSS with {args.pending:,} pending (outbox filled at {r['fill_rate']:,.0f} msgs/s, "
            f"redis used_memory {r['redis_mb']:,.0f} MB, {r['left']:,} still in the outbox at the end):"
        )
        print(
            f"  t={first[0]:.0f}s {first[1]:.1f} MB -> t={last[0]:.0f}s {last[1]:.1f} MB "
            f"(peak {peak:.1f} MB, {last[2]} processes; main + {last[2] - 1} pool children)"
        )
        every = max(1, len(samples) // 8)
        print("  samples: " + ", ".join(f"{t:.0f}s {mb:.1f}" for t, mb, _ in samples[::every]))


if __name__ == "__main__":
    main()
