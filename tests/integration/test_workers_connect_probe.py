"""Passive failover decided by the connect probe: the primary refuses connections and the first messages go
to the secondary without waiting for the SDK's own retries (``bridge.core.reachability``).

The SDK's first retry waits 5 s and the attempt deadline is 30 s, so the SDK alone would report the refusal
only after 5 s; the roles' swap time and the primary's recorded error say which part decided. A batch read
ahead while the first one failed over carries the roles from before the swap: it must not try the primary
again (its error would then be the primary's last).
"""

from __future__ import annotations

import time
from typing import Any

from tests.integration.worker_support import entity_status, make_stack, producer, receive_all

__all__ = ["make_stack"]

SDK_FIRST_RETRY = 5.0
"""Seconds before the SDK's first retry with ``SLOW_SDK`` (its backoff factor)."""

SLOW_SDK = {
    "BRIDGE_RETRY__RETRY_BACKOFF_FACTOR": str(SDK_FIRST_RETRY),
    "BRIDGE_RETRY__RETRY_BACKOFF_MAX": "30",
    "BRIDGE_RETRY__ATTEMPT_DEADLINE": "30",
}


def test_a_refused_primary_fails_over_on_the_connect_probe_without_the_sdk_retries(make_stack: Any) -> None:
    stack = make_stack({"orders": {"replication": "passive"}}, settings=SLOW_SDK)
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a worker that sent to the primary (its address was seen accepting)
        warm = p.send("orders", b"warm")
        assert [m.message_id for m in receive_all(stack.primary, "orders", 1)] == [warm]
        # When the primary closes its connections and refuses new ones
        outage_at = time.time()
        stack.primary.control.outage()
        ids = [p.send("orders", f"m{i}".encode()) for i in range(10)]
        # Then the messages land in the secondary and the roles swapped ...
        got = receive_all(stack.secondary, "orders", 10, timeout=60)
        assert sorted(m.message_id for m in got) == sorted(ids)
        status = entity_status(stack, "orders")
        assert status["active"] == "secondary"
        # ... before the SDK's first retry could have come (its backoff here: 5 s), on the connect probe's
        # word or on the SDK's own report, at once and without a retry, of the connection the namespace
        # closed under the send in flight (which of the two comes first is a race inside the SDK)
        primary = status["namespaces"]["primary"]
        assert primary["available"] is False
        error = primary["last_error"] or ""
        assert "connect probe" in error or "unexpectedly closed connection" in error, error
        swapped_after = status["role_swapped_at"] - outage_at
        assert 0 <= swapped_after < SDK_FIRST_RETRY, (swapped_after, error)
