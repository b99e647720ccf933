"""``bridge status`` shows what it measured: the probe of namespaces without traffic.

Real processes: redis-server, two local namespaces, ``bridge worker`` and ``bridge beat``; the outage is
the namespace's fault control.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from bridge.embedded.stack import wait_until
from tests.integration.paired_support import cost
from tests.integration.worker_support import count_in, entity_status, make_stack, producer, receive_all

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(180)


def test_after_a_passive_failover_and_recovery_status_shows_the_old_primary_measured_available(
    make_stack: Any,
) -> None:
    stack = make_stack(
        {"orders": {"replication": "passive"}}, settings={"BRIDGE_WORKERS__PROBE_INTERVAL": "1"}
    )
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a passive failover: the primary went down and the roles swapped to the secondary
        stack.primary.control.outage()
        ids = [p.send("orders", f"m{i}".encode()) for i in range(5)]
        assert sorted(m.message_id for m in receive_all(stack.secondary, "orders", 5)) == sorted(ids)
        wait_until(lambda: entity_status(stack, "orders")["active"] == "secondary", 20, what="roles swapped")
        # While the old primary (now the backup) is down, its probes fail and say so, with their time
        status = wait_until(
            lambda: (s := entity_status(stack, "orders"))["namespaces"]["primary"]["check_ok"] is False and s,
            20,
            what="a failed probe of the old primary",
        )
        assert status["namespaces"]["primary"]["available"] is False
        assert status["namespaces"]["primary"]["check_error"]
        # When the old primary recovers, with no traffic going to it
        stack.primary.control.restore()
        restored_at = time.time()
        # Then the next probe measures it available again, and status says when it checked
        status = wait_until(
            lambda: (s := entity_status(stack, "orders"))["namespaces"]["primary"]["available"] and s,
            20,
            what="the probe finding the old primary available",
        )
        primary = status["namespaces"]["primary"]
        assert primary["check_ok"] is True and primary["checked_at"] >= restored_at
        # And nothing changed otherwise: the roles stay, no message went to the old primary (a probe that
        # met the outage or a loaded machine may leave its cancelled-never ping scheduled, never a message)
        assert status["active"] == "secondary"
        assert count_in(stack.primary, "orders", pings=False) == 0
        assert cost(stack, "orders").probes >= 4  # schedule + cancel per probe
