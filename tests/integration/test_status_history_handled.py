"""The status history's ``handled/s``: what a real receiver hands to its handler shows as a rate.

Everything real: redis-server, two local namespaces, a worker, a ``bridge serve`` that samples the history
every half second, and a ``bridge receive`` process with the shipped logging handler. Messages posted to the
ingress reach the namespace and the receiver; the history's ``handled`` series for the entity goes above 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.operations_support import start_serve
from tests.integration.receiver_support import FAST_RECEIVER

pytestmark = pytest.mark.timeout(180)

ORDERS = "orders"
MESSAGES = 20


def _history(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/status/history.json", timeout=10)
    answer.raise_for_status()
    data: dict[str, Any] = answer.json()
    return data


def _rates(url: str, series: str) -> list[float]:
    """The entity's ``series`` in the history, gaps left out."""
    return [v for v in _history(url)["entities"][ORDERS][series] if v is not None]


def test_a_receivers_messages_show_as_handled_per_second(tmp_path: Path) -> None:
    stack = LocalStack(
        tmp_path,
        entities={ORDERS: {"replication": "passive"}},
        settings={
            **FAST_RECEIVER,
            "BRIDGE_STATUS_HISTORY__INTERVAL": "0.5",
            "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
        },
    )
    stack.start()
    try:
        # Given a worker, a sampling ``bridge serve`` and a receiver with the shipped handler
        stack.start_worker()
        url = start_serve(stack)
        receiver = stack.start_bridge(
            "receive", "receive", ORDERS, "--handler", "bridge.embedded.handlers:log_message"
        )
        wait_until(lambda: len(_rates(url, "handled")) >= 2, 60, 0.25, "two samples")
        assert max(_rates(url, "handled")) == 0  # nothing handled yet

        # When messages are posted to the ingress
        with httpx.Client(base_url=url, timeout=10) as http:
            for n in range(MESSAGES):
                answer = http.post(f"/v1/entities/{ORDERS}/messages", json={"body": f"m{n}"})
                assert answer.status_code == 202, answer.text

        # Then the receiver handles them and the history shows handled/s above 0, as it shows sent/s
        try:
            wait_until(lambda: max(_rates(url, "handled")) > 0, 90, 0.5, "handled/s above 0")
        except TimeoutError:
            raise AssertionError(f"handled/s stayed 0; the receiver's log:\n{receiver.log_tail()}") from None
        assert max(_rates(url, "sent")) > 0
    finally:
        stack.stop()
