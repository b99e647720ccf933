"""A message whose TTL ran out in the outbox is counted dead-lettered by the ledger, never lost."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.embedded.stack import wait_until
from tests.integration.worker_support import make_stack, outbox_depth, producer, receive_all

__all__ = ["make_stack"]


def test_a_message_expired_in_the_outbox_reconciles_as_dead_lettered_not_lost(
    spark: Any, make_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = make_stack({"orders": {"replication": "none"}})
    # Given one message that outlives the outbox wait and one that does not
    with producer(stack) as p:
        live = p.send("orders", b"live", time_to_live=600)
        p.send("orders", b"expired", time_to_live=1)
    time.sleep(2.5)
    # When a worker drains the outbox after the wait
    stack.start_worker()
    assert [m.message_id for m in receive_all(stack.primary, "orders", 1)] == [live]
    wait_until(lambda: outbox_depth(stack, "orders") == 0, 30, what="an empty outbox")
    # And ``bridge report`` reconciles the journal the worker wrote
    for name, value in stack.env().items():
        if name.startswith("BRIDGE_"):
            monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "report"), "--json"])
    assert result.exit_code == 0, result.output
    orders = json.loads(result.stdout)["entities"]["orders"]
    # Then the expired message counts as dead-lettered, and nothing is lost
    counts = ("accepted", "delivered", "dead_lettered", "pending", "lost")
    assert {key: orders[key] for key in counts} == {
        "accepted": 2,
        "delivered": 1,
        "dead_lettered": 1,
        "pending": 0,
        "lost": 0,
    }
