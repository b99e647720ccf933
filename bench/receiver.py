"""The receiving end against a raw SDK receive loop, and Redis bytes per remembered MessageId, in one run.

    python -m bench.receiver [--messages 10000] [--rounds 2] [--remembered 200000] [--lookups 20000]
    python -m bench.receiver --window-only    # only the window's memory and lookups (no namespaces)

Starts a private Redis and two local namespaces (each its own process), then, per round:

1. baseline: the plain azure-servicebus SDK on a queue of the primary holding ``--messages`` messages
   (512-byte bodies): PEEK_LOCK ``receive_messages(100)``, ``complete_message`` each (msgs/s), measured
   before 2 and again after 3 (on a second queue) and averaged, so a change of the machine's load during
   the round affects the baseline as much as the receiver;
2. receiver: the same number of messages in a fresh queue of the primary, read by ``bridge.Receiver``
   (this process, default settings) with a no-op handler: receive, claim in the window, handler, done
   marks, complete, counters (msgs/s);
3. active: the same number of messages sent to a queue on *both* namespaces with the same MessageIds
   (what active replication does), read by one ``Receiver`` from both: handled msgs/s, every copy settled.

Each rate is measured from the first message in hand (first receive returned; first handler call) to the
last settled (last complete; the counters saying every message — and in 3 every copy — was settled), so
connection set-up and the receiver's start-up (administration lookup) are outside both.

Prints 2/1 (target >= 0.8) and 3/1 (target >= 0.5), then the memory of the window, for ids of 32 hex
digits (what the ingress assigns) and of 128 characters: ``--remembered`` ids claimed and marked done in
a fresh Redis database, with ``MEMORY USAGE`` of the record's keys and the ``used_memory`` delta, each
divided by the number of ids (target <= 32 B), against the same ids in the sorted set an earlier version
kept (one member per id, scored by its expiry), measured in the same run (ratio). Then lookups/s: claims of
100 ids at a time through eight live buckets (a 21 s window of 3 s spans, filled span by span), for ids
never seen (each checks every bucket) and for ids handled before (completed as duplicates), against the
same claims with the same number of ids in the earlier sorted set (ratio), the four measured in
alternation (medians of five rounds).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

import redis
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from bridge.core.received import ReceivedMessage
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.redis_server import RedisServer
from bridge.receiving import Receiver
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow
from bridge.settings import Settings

BODY = b"x" * 512


def fill(ns: LocalNamespace, queue: str, ids: list[str]) -> None:
    """Send one message per id to ``queue`` in batches of 100."""
    client = ServiceBusClient.from_connection_string(ns.connection_string)
    with client, client.get_queue_sender(queue) as sender:
        for start in range(0, len(ids), 100):
            batch = sender.create_message_batch()
            for message_id in ids[start : start + 100]:
                batch.add_message(ServiceBusMessage(BODY, message_id=message_id))
            sender.send_messages(batch)


def raw_rate(ns: LocalNamespace, queue: str, total: int) -> float:
    """msgs/s of the plain SDK loop, first receive returned → last complete."""
    client = ServiceBusClient.from_connection_string(ns.connection_string)
    with client, client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        got, started = 0, None
        while got < total:
            messages = receiver.receive_messages(max_message_count=100, max_wait_time=5)
            if started is None and messages:
                started = time.perf_counter()
            for message in messages:
                receiver.complete_message(message)
            got += len(messages)
        assert started is not None
        return total / (time.perf_counter() - started)


def receiver_rate(settings: Settings, queue: str, total: int, copies: int) -> float:
    """Handled msgs/s of a ``Receiver`` with a no-op handler, first handler call → every copy settled."""
    first: list[float] = []

    def handler(message: ReceivedMessage) -> None:
        if not first:
            first.append(time.perf_counter())

    receiver = Receiver(queue, handler, settings=settings)
    thread = threading.Thread(target=receiver.run)
    thread.start()
    client = redis.Redis.from_url(settings.redis_url.get_secret_value())
    keys = ReceiverKeys(queue)
    try:
        while True:
            counts = client.hmget(keys.counts, "handled", "duplicates_suppressed")
            handled, duplicates = (int(v or 0) for v in counts)
            if handled >= total and handled + duplicates >= total * copies:
                ended = time.perf_counter()
                break
            time.sleep(0.002)
    finally:
        receiver.stop()
        thread.join()
        client.close()
    assert handled == total, f"handled {handled} of {total}"
    return total / (ended - first[0])


def fill_record(window: DedupWindow, count: int, shape: int, into: list[str] | None = None) -> None:
    """Claim and mark done ``count`` fresh ids of ``shape`` characters, 500 per call (added to ``into``)."""
    for start in range(0, count, 500):
        ids = [(uuid.uuid4().hex * 4)[:shape] for _ in range(min(500, count - start))]
        window.claim(ids)
        window.done(ids)
        if into is not None:
            into += ids


def memory_per_id(url: str, count: int, shape: int) -> tuple[float, float]:
    """(MEMORY USAGE of the record ÷ ids, used_memory delta ÷ ids) after ``count`` ids were handled."""
    client = redis.Redis.from_url(url)
    client.flushall()
    keys = ReceiverKeys("memory")
    window = DedupWindow(client, keys, owner="bench", window=3600, max_remembered=10**10, inflight_ttl=30)
    window.check_compact()
    before = int(client.info("memory")["used_memory"])
    fill_record(window, count, shape)
    after = int(client.info("memory")["used_memory"])
    usage = sum(
        int(client.memory_usage(k, samples=0) or 0) for k in client.scan_iter(f"{keys.seen}*", 10_000)
    )
    assert window.remembered() == count
    client.close()
    return usage / count, (after - before) / count


def sorted_set_memory_per_id(url: str, count: int, shape: int) -> tuple[float, float]:
    """The same two figures for the earlier version's window: a sorted set, MessageId -> expiry ms."""
    client = redis.Redis.from_url(url)
    client.flushall()
    key = ReceiverKeys("memory").done
    expiry = int(time.time() * 1000) + 3_600_000
    before = int(client.info("memory")["used_memory"])
    for start in range(0, count, 500):
        ids = [(uuid.uuid4().hex * 4)[:shape] for _ in range(min(500, count - start))]
        client.zadd(key, dict.fromkeys(ids, expiry))
    after = int(client.info("memory")["used_memory"])
    usage = int(client.memory_usage(key, samples=0) or 0)
    assert client.zcard(key) == count
    client.close()
    return usage / count, (after - before) / count


LOOKUP_SPAN = 3.0
"""Seconds per bucket in the lookup measurement (a 21 s window: eight live buckets after seven spans)."""


def lookup_rates(url: str, per_bucket: int, lookups: int) -> dict[str, float]:
    """Claims/s of ids never seen and of ids handled before, with eight live buckets of ``per_bucket``
    ids, and the same with ``7 * per_bucket`` ids in the earlier version's sorted set (the claim script
    reads it, for ids it holds, as the earlier claim did: one ``ZSCORE`` per id). The four kinds are
    measured in alternation, ``lookups`` ids each in all, so a change of the machine's load affects them
    alike; each figure is the median over the rounds. Also ``live``: the live buckets at the end."""
    client = redis.Redis.from_url(url)
    client.flushall()
    new, old = ReceiverKeys("lookups"), ReceiverKeys("lookups-earlier")
    windows = {
        name: DedupWindow(client, keys, owner="bench", window=7 * LOOKUP_SPAN, max_remembered=10**10,
                          inflight_ttl=30)
        for name, keys in (("record", new), ("earlier", old))
    }  # fmt: skip
    expiry = int(time.time() * 1000) + 3_600_000
    handled: dict[str, list[str]] = {"record": [], "earlier": []}
    time.sleep(LOOKUP_SPAN - time.time() % LOOKUP_SPAN)  # start with a span
    for _ in range(7):  # seven spans, then the current one: eight buckets
        span_start = time.time()
        fill_record(windows["record"], per_bucket, 32, handled["record"])
        ids = [uuid.uuid4().hex for _ in range(per_bucket)]
        for start in range(0, per_bucket, 500):
            client.zadd(old.done, dict.fromkeys(ids[start : start + 500], expiry))
        handled["earlier"] += ids
        time.sleep(max(0.0, LOOKUP_SPAN - (time.time() - span_start)))
    fill_record(windows["record"], 500, 32)
    rates: dict[str, list[float]] = {}
    rounds, size = 5, max(100, lookups // 5)
    for r in range(rounds):
        for name, window in windows.items():
            fresh = [uuid.uuid4().hex for _ in range(size)]
            again = handled[name][-(r + 1) * size : len(handled[name]) - r * size]
            for kind, ids in (("fresh", fresh), ("handled", again)):
                rates.setdefault(f"{name} {kind}", []).append(claim_rate(window, ids))
    live = float(len(client.hgetall(new.seen)))
    client.close()
    return {**{k: statistics.median(v) for k, v in rates.items()}, "live": live}


def claim_rate(window: DedupWindow, ids: list[str]) -> float:
    """Ids claimed per second, 100 per call."""
    started = time.perf_counter()
    for start in range(0, len(ids), 100):
        window.claim(ids[start : start + 100])
    return len(ids) / (time.perf_counter() - started)


def print_memory(url: str, count: int) -> None:
    """The record against the earlier sorted set, bytes per id, for both id shapes."""
    for shape, label in ((32, "32 hex digits"), (128, "128 characters")):
        usage, delta = memory_per_id(url, count, shape)
        old_usage, old_delta = sorted_set_memory_per_id(url, count, shape)
        print(
            f"window memory per MessageId ({count} ids of {label}): record MEMORY USAGE {usage:.1f} B, "
            f"used_memory delta {delta:.1f} B (target <= 32) | earlier sorted set {old_usage:.1f} B, "
            f"{old_delta:.1f} B | ratio {usage / old_usage:.3f}, {delta / old_delta:.3f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--remembered", type=int, default=200_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--window-only", action="store_true", help="only the window's memory and lookups")
    args = parser.parse_args()
    if args.window_only:
        with RedisServer() as server:
            window_figures(server.url, args.remembered, args.lookups)
        return
    with (
        RedisServer() as server,
        LocalNamespace("primary", auto_create=True) as primary,
        LocalNamespace("secondary", auto_create=True) as secondary,
    ):
        settings = Settings.model_validate(
            {
                "redis_url": server.url,
                "primary": {
                    "connection_string": primary.connection_string,
                    "certificate": primary.certificate,
                },
                "secondary": {
                    "connection_string": secondary.connection_string,
                    "certificate": secondary.certificate,
                },
            }
        )
        rounds(settings, primary, secondary, args.messages, args.rounds)
        window_figures(server.url, args.remembered, args.lookups)


def rounds(settings: Settings, primary: LocalNamespace, secondary: LocalNamespace, total: int, count: int
           ) -> None:  # fmt: skip
    """The receiver and active rates against the raw SDK, ``count`` rounds, and their medians."""
    single = Settings.model_validate({**settings.model_dump(), "secondary": None})
    ratios, active_ratios = [], []
    for round_ in range(count):
        ids = [f"r{round_}-{uuid.uuid4().hex}" for _ in range(total)]
        for queue in (f"raw-{round_}", f"raw-again-{round_}", f"one-{round_}", f"two-{round_}"):
            fill(primary, queue, ids)
        fill(secondary, f"two-{round_}", ids)
        # The machine's load may change during a round: the baseline is measured before and after.
        before = raw_rate(primary, f"raw-{round_}", total)
        one = receiver_rate(single, f"one-{round_}", total, copies=1)
        two = receiver_rate(settings, f"two-{round_}", total, copies=2)
        after = raw_rate(primary, f"raw-again-{round_}", total)
        raw = (before + after) / 2
        ratios.append(one / raw)
        active_ratios.append(two / raw)
        print(
            f"round {round_ + 1}: raw SDK receive+complete {raw:7.0f} msgs/s | receiver {one:7.0f} "
            f"msgs/s ({one / raw:.2f}) | active, 2 copies each {two:7.0f} handled/s ({two / raw:.2f})",
            flush=True,
        )
    print(f"receiver / raw SDK:           median {statistics.median(ratios):.2f} (target >= 0.8)")
    print(f"active handled / raw SDK:     median {statistics.median(active_ratios):.2f} (target >= 0.5)")


def window_figures(url: str, remembered: int, lookups: int) -> None:
    """Bytes per id against the earlier sorted set, then lookups/s."""
    print_memory(url, remembered)
    rates = lookup_rates(url, remembered // 10, lookups)
    print(
        f"window lookups, claims of 100 through {rates['live']:.0f} live buckets (medians): never-seen ids "
        f"{rates['record fresh']:.0f}/s, ids handled before {rates['record handled']:.0f}/s | earlier sorted "
        f"set {rates['earlier fresh']:.0f}/s, {rates['earlier handled']:.0f}/s | ratio "
        f"{rates['record fresh'] / rates['earlier fresh']:.2f}, "
        f"{rates['record handled'] / rates['earlier handled']:.2f}"
    )


if __name__ == "__main__":
    main()
