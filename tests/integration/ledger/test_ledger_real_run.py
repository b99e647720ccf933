"""A real run with a failover, journaled by the real bridge processes, reconciles to lost = 0, and the
ledger's copies are exactly what the raw SDK finds on the namespaces."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.embedded.stack import wait_until
from bridge.settings import NamespaceSettings
from tests.integration.worker_support import make_stack, outbox_depth, producer, receive_all

__all__ = ["make_stack"]


def _sent_copies(journal: Path) -> Counter[tuple[str, str]]:
    """(message id, namespace) of every ``sent`` event in the rolled journal, each event id once."""
    rows = {
        row["event_id"]: row
        for path in journal.rglob("*.parquet")
        if not path.name.startswith(".")
        for row in pq.read_table(path).to_pylist()
        if row["kind"] == "sent"
    }
    return Counter((row["message_id"], row["namespace"]) for row in rows.values())


def test_a_run_with_a_failover_reconciles_to_lost_zero(
    spark: Any, make_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = make_stack({"orders": {"replication": "passive"}})
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given 30 messages delivered to the primary, then the primary down and 30 more
        first = [p.send("orders", f"a{i}".encode()) for i in range(30)]
        on_primary = receive_all(stack.primary, "orders", 30)
        stack.primary.control.outage()
        second = [p.send("orders", f"b{i}".encode()) for i in range(30)]
        on_secondary = receive_all(stack.secondary, "orders", 30)
    wait_until(lambda: outbox_depth(stack, "orders") == 0, 30, what="an empty outbox")
    assert {m.message_id for m in on_primary + on_secondary} == set(first + second)

    # When ``bridge report`` runs against the stack's Redis (rolling the journal the processes wrote)
    for name, value in stack.env().items():
        if name.startswith("BRIDGE_"):
            monkeypatch.setenv(name, value)
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)

    # Then nothing is lost, everything is delivered, and one role swap is on the timeline
    orders = summary["entities"]["orders"]
    assert (orders["accepted"], orders["delivered"], orders["pending"], orders["lost"]) == (60, 60, 0, 0)
    assert orders["failover"]["swaps"] == 1
    paths = {row["path"] for row in orders["latency"] if row["measure"] == "service_bus"}
    assert {"direct", "all"} <= paths
    # And the journal's copies are the copies the namespaces held, namespace by namespace
    names = {
        ns: NamespaceSettings(connection_string=ns.connection_string).namespace_name
        for ns in (stack.primary, stack.secondary)
    }
    journaled = _sent_copies(out / "journal")
    found = Counter((m.message_id, names[stack.primary]) for m in on_primary)
    found += Counter((m.message_id, names[stack.secondary]) for m in on_secondary)
    assert journaled == found
    copies = Counter(m.message_id for m in on_primary + on_secondary)
    assert orders["broker_duplicates"] == sum(copies.values()) - len(copies)
