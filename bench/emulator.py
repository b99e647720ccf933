"""Speed of the local Service Bus, driven by the raw azure-servicebus SDK.

    python -m bench.emulator [--messages 20000] [--no-persist]

Starts one ``bridge emulator`` process (with its fsync'd write-ahead log unless ``--no-persist``) and
measures, with 1 KB bodies:

1. baseline: how fast the SDK alone builds ``ServiceBusMessageBatch``es of 100 (no network) — the
   ceiling any server can be driven at from one Python client on this machine;
2. batched sends of 100 per batch (msgs/s; target >= 5,000);
3. PEEK_LOCK receive + ``complete_message`` one by one (msgs/s; target >= 2,000);
4. RECEIVE_AND_DELETE receive (msgs/s, for reference).

It prints each figure, its ratio to the target and the send figure's ratio to the baseline (1), which
says how much of the client's own ceiling the server lets it reach.
"""

from __future__ import annotations

import argparse
import time
import uuid

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

from bridge.embedded.namespaces import LocalNamespace

BODY = b"x" * 1024
BATCH = 100
SEND_TARGET = 5000.0
RECEIVE_TARGET = 2000.0


def build_batches(client: ServiceBusClient, queue: str, total: int) -> float:
    """Baseline: msgs/s of building batches of 100 with the SDK (no send)."""
    with client.get_queue_sender(queue) as sender:
        started = time.perf_counter()
        built = 0
        while built < total:
            batch = sender.create_message_batch()
            for _ in range(BATCH):
                batch.add_message(ServiceBusMessage(BODY))
            built += BATCH
        return built / (time.perf_counter() - started)


def send_batches(client: ServiceBusClient, queue: str, total: int) -> float:
    """msgs/s of batched sends of 100."""
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(b"warm-up"))
        started = time.perf_counter()
        sent = 0
        while sent < total:
            batch = sender.create_message_batch()
            for _ in range(BATCH):
                batch.add_message(ServiceBusMessage(BODY))
            sender.send_messages(batch)
            sent += BATCH
        return sent / (time.perf_counter() - started)


def receive(client: ServiceBusClient, queue: str, total: int, mode: ServiceBusReceiveMode) -> float:
    """msgs/s of receiving ``total`` messages (and completing each one in PEEK_LOCK)."""
    peek_lock = mode == ServiceBusReceiveMode.PEEK_LOCK
    with client.get_queue_receiver(queue, receive_mode=mode, prefetch_count=0) as receiver:
        got = 0
        started = time.perf_counter()
        while got < total:
            messages = receiver.receive_messages(max_message_count=100, max_wait_time=5)
            if not messages:
                raise RuntimeError(f"queue ran dry after {got} of {total}")
            for message in messages:
                if peek_lock:
                    receiver.complete_message(message)
            got += len(messages)
        return got / (time.perf_counter() - started)


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--no-persist", action="store_true")
    args = parser.parse_args()
    total = args.messages - args.messages % BATCH

    with (
        LocalNamespace("bench", auto_create=True, persistent=not args.no_persist) as ns,
        ServiceBusClient.from_connection_string(ns.connection_string, retry_total=0) as client,
    ):
        q1, q2 = f"bench-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:6]}"
        baseline = build_batches(client, q1, total)
        send_rate = send_batches(client, q1, total)
        send_batches(client, q2, total)
        peek_lock_rate = receive(client, q1, total, ServiceBusReceiveMode.PEEK_LOCK)
        delete_rate = receive(client, q2, total, ServiceBusReceiveMode.RECEIVE_AND_DELETE)

    persisted = "off" if args.no_persist else "on (fsync per group commit)"
    print(f"local Service Bus benchmark: {total} messages of 1 KB, persistence {persisted}")
    print(f"  baseline  SDK batch building (no network)   {baseline:10.0f} msgs/s")
    print(
        f"  send      batches of {BATCH}                    {send_rate:10.0f} msgs/s"
        f"   {send_rate / SEND_TARGET:5.2f} x target 5,000   {send_rate / baseline:5.2f} x baseline"
    )
    print(
        f"  receive   PEEK_LOCK + complete               {peek_lock_rate:10.0f} msgs/s"
        f"   {peek_lock_rate / RECEIVE_TARGET:5.2f} x target 2,000"
    )
    print(f"  receive   RECEIVE_AND_DELETE                 {delete_rate:10.0f} msgs/s")


if __name__ == "__main__":
    main()
