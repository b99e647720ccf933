"""Passive failover decided by the connect probe: the primary refuses connections and the first messages go
to the secondary without waiting for the SDK's own retries (``bridge.core.reachability``).

The SDK's retry backoff is set to 10 s and the attempt deadline to 30 s, so the SDK alone would report the
refusal only after 10 s; the primary's recorded error says which part of the bridge decided.
"""

from __future__ import annotations

from typing import Any

from tests.integration.worker_support import entity_status, make_stack, producer, receive_all

__all__ = ["make_stack"]

SLOW_SDK = {
    "BRIDGE_RETRY__RETRY_BACKOFF_FACTOR": "5",
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
        # When the primary refuses connections
        stack.primary.control.outage()
        ids = [p.send("orders", f"m{i}".encode()) for i in range(10)]
        # Then the messages land in the secondary and the roles swapped ...
        got = receive_all(stack.secondary, "orders", 10, timeout=60)
        assert sorted(m.message_id for m in got) == sorted(ids)
        status = entity_status(stack, "orders")
        assert status["active"] == "secondary"
        # ... on the connect probe's word, not the SDK's error after its retries (nor the deadline)
        primary = status["namespaces"]["primary"]
        assert primary["available"] is False
        assert "connect probe" in (primary["last_error"] or ""), primary["last_error"]
