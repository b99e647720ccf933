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

    python -m bench.emulator --compare REF [--rounds 5]

compares the local Service Bus of this tree with the one of commit ``REF`` in the same run: the ``bridge``
package of ``REF`` is unpacked (``git archive``) into a temporary folder and the emulator process runs from
it (``PYTHONPATH`` plus ``PYTHONSAFEPATH``, so the working directory's ``bridge`` is not imported); the client
side is the same SDK for both. Rounds alternate which tree goes first. It prints, per figure, each tree's
median with its lowest and highest run, the ratio of the medians (this tree ÷ ``REF``) and the spread of the
per-round ratios: the rule it checks is "throughput falls by no more than 10 %" (ratio of medians >= 0.90);
then the same with each figure divided by its own run's SDK baseline, which runs no server code and so
measures only how busy the machine was during that run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import ServiceBusError

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


FIGURES = ("send", "peek_lock", "receive_and_delete")
NO_MORE_THAN = 0.10  # the rule: throughput may fall by no more than 10 % against the earlier commit


def measure(total: int, persist: bool) -> dict[str, float]:
    """One run against a fresh namespace: the SDK baseline and the three server figures (msgs/s)."""
    with (
        LocalNamespace("bench", auto_create=True, persistent=persist) as ns,
        ServiceBusClient.from_connection_string(ns.connection_string, retry_total=0) as client,
    ):
        q1, q2 = f"bench-{uuid.uuid4().hex[:6]}", f"bench-{uuid.uuid4().hex[:6]}"
        baseline = build_batches(client, q1, total)
        send_rate = send_batches(client, q1, total)
        send_batches(client, q2, total)
        peek_lock_rate = receive(client, q1, total, ServiceBusReceiveMode.PEEK_LOCK)
        delete_rate = receive(client, q2, total, ServiceBusReceiveMode.RECEIVE_AND_DELETE)
    return {
        "baseline": baseline,
        "send": send_rate,
        "peek_lock": peek_lock_rate,
        "receive_and_delete": delete_rate,
    }


def code_of(ref: str) -> Path:
    """The ``bridge`` package of commit ``ref``, unpacked into a temporary folder."""
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                               text=True).stdout.strip())  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="bench-emulator-"))
    archive = subprocess.run(["git", "archive", ref, "bridge"], cwd=root, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


@contextmanager
def emulator_code(tree: Path) -> Iterator[None]:
    """Emulator processes started inside run the ``bridge`` package of ``tree``."""
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = str(tree)
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def compare(ref: str, rounds: int, total: int, persist: bool) -> None:
    """This tree's emulator against ``ref``'s, alternating, and the 10 % rule on the medians."""
    here = Path(__file__).resolve().parent.parent
    trees = {"this tree": here, ref: code_of(ref)}
    runs: dict[str, list[dict[str, float] | None]] = {label: [] for label in trees}
    try:
        for index in range(rounds):
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            for label in order:
                runs[label].append(_one_run(trees[label], total, persist, f"round {index + 1} {label}"))
    finally:
        shutil.rmtree(trees[ref], ignore_errors=True)
    _report(ref, rounds, total, runs)


def _one_run(tree: Path, total: int, persist: bool, title: str) -> dict[str, float] | None:
    """One measurement with ``tree``'s emulator, or None (printed) when the run failed."""
    try:
        with emulator_code(tree):
            figures = measure(total, persist)
    except (ServiceBusError, RuntimeError) as exc:
        print(f"  {title}: failed: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        return None
    print(f"  {title}: " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items()), flush=True)
    return figures


def _report(ref: str, rounds: int, total: int, runs: dict[str, list[dict[str, float] | None]]) -> None:
    """Medians, ranges and per-round ratios over the rounds where both trees completed."""
    pairs = [(a, b) for a, b in zip(runs["this tree"], runs[ref], strict=True) if a and b]
    lost = {label: sum(r is None for r in results) for label, results in runs.items()}
    print(f"\nlocal Service Bus, this tree vs {ref}: {rounds} rounds of {total} messages of 1 KB, msgs/s")
    print(f"  rounds where both completed: {len(pairs)}; failed runs: {lost}")
    if not pairs:
        return
    failed = []
    for figure in ("baseline", *FIGURES):
        mine, theirs = [a[figure] for a, _ in pairs], [b[figure] for _, b in pairs]
        ratio = statistics.median(mine) / statistics.median(theirs)
        per_round = [a / b for a, b in zip(mine, theirs, strict=True)]
        print(
            f"  {figure:<19} this tree {statistics.median(mine):8,.0f} ({min(mine):,.0f}-{max(mine):,.0f})"
            f"   {ref} {statistics.median(theirs):8,.0f} ({min(theirs):,.0f}-{max(theirs):,.0f})"
            f"   ratio {ratio:4.2f} (rounds {min(per_round):.2f}-{max(per_round):.2f})"
        )
        if figure in FIGURES and ratio < 1 - NO_MORE_THAN:
            failed.append(figure)
    verdict = "met" if not failed else f"NOT met for {', '.join(failed)}"
    print(f"  rule: no figure falls by more than {NO_MORE_THAN:.0%} (ratio of medians >= 0.90): {verdict}")
    # The baseline runs no server code, so its ratio is the load's share; each figure over its own run's
    # baseline takes that share out (the rule on this view is the one to read on a busy machine).
    print("  each figure over its run's SDK baseline (the server-less control measured seconds before):")
    normalized_failed = []
    for figure in FIGURES:
        mine = [a[figure] / a["baseline"] for a, _ in pairs]
        theirs = [b[figure] / b["baseline"] for _, b in pairs]
        ratio = statistics.median(mine) / statistics.median(theirs)
        per_round = [a / b for a, b in zip(mine, theirs, strict=True)]
        print(
            f"  {figure:<19} this tree {statistics.median(mine):5.3f} ({min(mine):.3f}-{max(mine):.3f})"
            f"   {ref} {statistics.median(theirs):5.3f} ({min(theirs):.3f}-{max(theirs):.3f})"
            f"   ratio {ratio:4.2f} (rounds {min(per_round):.2f}-{max(per_round):.2f})"
        )
        if ratio < 1 - NO_MORE_THAN:
            normalized_failed.append(figure)
    verdict = "met" if not normalized_failed else f"NOT met for {', '.join(normalized_failed)}"
    print(f"  rule on the normalized figures (ratio of medians >= 0.90): {verdict}")


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--no-persist", action="store_true")
    parser.add_argument("--compare", metavar="REF", help="also run the emulator of commit REF, alternating")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per tree with --compare (default 5)")
    args = parser.parse_args()
    total = args.messages - args.messages % BATCH
    if args.compare:
        compare(args.compare, args.rounds, total, not args.no_persist)
        return
    figures = measure(total, not args.no_persist)
    baseline, send_rate = figures["baseline"], figures["send"]
    peek_lock_rate, delete_rate = figures["peek_lock"], figures["receive_and_delete"]

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
