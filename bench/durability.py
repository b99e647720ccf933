"""The cost of ``ingress.durability = "replicated"``, as ratios against ``local`` measured in the same run.

    python -m bench.durability [--rounds 5] [--singles 200] [--seconds 3] [--concurrency 4] [--batch 100]

Starts one Redis under Sentinel (``bridge.embedded.sentinel``: a primary and a replica of the pinned
Valkey, both ``appendonly yes`` with ``appendfsync always``, and three Sentinels) and two real ``bridge
serve`` processes on it, given the same ``redis+sentinel://`` URL: one with ``durability = "local"``, one
with ``"replicated"`` (``wait_replicas = 1``). Both write to the same servers, so the only difference is the
confirmation (``WAITAOF 1 1``, one round trip after the write, on its connection). Per round, both modes
in turn:

1. **single send**: ``--singles`` POSTs of one 1 KB message per mode, one at a time on a keep-alive
   connection each, the two modes alternating send by send (so a neighbour's load hits both alike); the p50
   and p99 of the 202;
2. **batch throughput**: ``--concurrency`` clients POST batches of ``--batch`` messages, one mode after the
   other in one-second slices for ``--seconds`` each; msgs/s.

It prints each round's figures, then per figure the median ratio replicated/local over the rounds and the
spread (lowest..highest round). Targets: single-send p50 ratio <= 1.5, batch throughput ratio >= 0.7.
A refused request (503: too few confirmations) is counted and printed, not retried. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.redis_server import stop_process
from bridge.embedded.sentinel import SentinelRedis

BODY = "x" * 1024
ENTITY = "bench-durability"
MODES = ("local", "replicated")


def serve(url: str, mode: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A ``bridge serve`` process in ``mode``; its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env.update(
        {
            "BRIDGE_REDIS_URL": url,
            "BRIDGE_INGRESS__DURABILITY": mode,
            "BRIDGE_INGRESS__WAIT_REPLICAS": "1" if mode == "replicated" else "0",
            "BRIDGE_INGRESS__WAIT_TIMEOUT": "1",
            "BRIDGE_JOURNAL__ENABLED": "false",
            "BRIDGE_LOG_LEVEL": "WARNING",
        }
    )
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli.main", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if not wait_listening("127.0.0.1", port, 30):
        proc.kill()
        raise SystemExit(f"bridge serve ({mode}) did not listen; see {log}")
    return proc, f"http://127.0.0.1:{port}"


def singles(bases: dict[str, str], count: int) -> dict[str, tuple[list[float], int]]:
    """Per mode, the latencies (s) of ``count`` one-at-a-time single sends and how many were refused; the
    modes alternate send by send."""
    out: dict[str, tuple[list[float], int]] = {mode: ([], 0) for mode in bases}
    clients = {mode: httpx.Client(timeout=10) for mode in bases}
    try:
        for _ in range(count):
            for mode, base in bases.items():
                started = time.perf_counter()
                answer = clients[mode].post(f"{base}/v1/entities/{ENTITY}/messages", json={"body": BODY})
                latencies, refused = out[mode]
                if answer.status_code == 202:
                    latencies.append(time.perf_counter() - started)
                else:
                    out[mode] = (latencies, refused + 1)
    finally:
        for client in clients.values():
            client.close()
    return out


def batches(base: str, seconds: float, concurrency: int, size: int) -> tuple[float, int]:
    """Messages per second stored by ``concurrency`` clients posting batches for ``seconds``; refusals."""
    stored = [0] * concurrency
    refused = [0] * concurrency
    payload = {"messages": [{"body": BODY} for _ in range(size)]}
    deadline = time.monotonic() + seconds

    def client_loop(slot: int) -> None:
        with httpx.Client(timeout=30) as client:
            while time.monotonic() < deadline:
                answer = client.post(f"{base}/v1/entities/{ENTITY}/messages:batch", json=payload)
                if answer.status_code == 202:
                    stored[slot] += size
                else:
                    refused[slot] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(slot,)) for slot in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(stored) / (time.monotonic() - started), sum(refused)


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def one_round(bases: dict[str, str], args: argparse.Namespace, index: int) -> dict[str, dict[str, float]]:
    """Both modes, interleaved; prints and returns their figures."""
    single = singles(bases, args.singles)
    stored = dict.fromkeys(bases, 0.0)
    refused = {mode: single[mode][1] for mode in bases}
    for _ in range(max(1, round(args.seconds))):
        for mode, base in bases.items():
            rate, count = batches(base, 1.0, args.concurrency, args.batch)
            stored[mode] += rate
            refused[mode] += count
    figures: dict[str, dict[str, float]] = {}
    for mode in bases:
        latencies = single[mode][0]
        figures[mode] = {
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "batch_msgs_s": stored[mode] / max(1, round(args.seconds)),
            "refused": refused[mode],
        }
        f = figures[mode]
        print(
            f"round {index + 1} {mode:10s} single p50 {f['p50_ms']:6.2f} ms  p99 {f['p99_ms']:6.2f} ms"
            f"  batch {f['batch_msgs_s']:8.0f} msgs/s  refused {int(f['refused'])}",
            flush=True,
        )
    return figures


def report(rounds: list[dict[str, dict[str, float]]]) -> None:
    """Median ratio replicated/local over the rounds, with the spread, against the targets."""
    rows = (("p50_ms", "single-send p50", "<= 1.5"), ("p99_ms", "single-send p99", "(info)"))
    rows += (("batch_msgs_s", "batch throughput", ">= 0.7"),)
    print(f"\nreplicated / local over {len(rounds)} rounds (median, spread):")
    for key, label, target in rows:
        ratios = [r["replicated"][key] / r["local"][key] for r in rounds if r["local"][key]]
        if not ratios:
            continue
        print(
            f"  {label:18s} {statistics.median(ratios):5.2f}x  ({min(ratios):.2f}..{max(ratios):.2f})"
            f"  target {target}"
        )


def main() -> None:
    """Run the benchmark (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-durability-"))
    group = SentinelRedis(base / "redis").start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        bases = {}
        for mode in MODES:
            proc, url = serve(group.url, mode, base / f"serve-{mode}.log")
            procs.append(proc)
            bases[mode] = url
        singles(bases, 20)  # warm-up: connections, the script load
        print(f"Redis under Sentinel, {group.binary}; data in {base}", flush=True)
        report([one_round(bases, args, index) for index in range(args.rounds)])
    finally:
        for proc in procs:
            stop_process(proc)
        group.stop()


if __name__ == "__main__":
    main()
