"""Counting a local namespace's queue through its management endpoint, for the benchmarks that measure by
what arrived (``bench.workers``, ``bench.ledger``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def queue_counter(ns: Any) -> Callable[[str], int]:
    """``count(queue)``: active messages in a queue of ``ns`` (0 while it does not exist)."""
    from bridge.errors import NamespaceEntityNotFoundError
    from bridge.servicebus.admin import NamespaceAdmin
    from bridge.settings import NamespaceSettings

    admin = NamespaceAdmin(
        NamespaceSettings(connection_string=ns.connection_string, certificate=ns.certificate)
    )

    def count(queue: str) -> int:
        try:
            return int(admin.queue_runtime_properties(queue).active_message_count or 0)
        except NamespaceEntityNotFoundError:
            return 0

    return count


def wait_count(count: Callable[[str], int], queue: str, target: int, timeout: float) -> float:
    """Poll until ``queue`` holds ``target`` messages; the perf_counter time it was first seen."""
    deadline = time.monotonic() + timeout
    while True:
        if count(queue) >= target:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise SystemExit(f"{queue}: only {count(queue)} of {target} messages after {timeout:.0f}s")
        time.sleep(0.05)
