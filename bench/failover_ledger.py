"""The bridge's own ledger over a failover run, beside the harness's count.

After a topology's traffic has settled, ``bridge report --json`` runs on the stack's settings (it rolls the
live journal out of Redis into ``<base>/journal`` and checks the outbox) and its ``accepted``,
``delivered``, ``pending`` and ``lost`` are printed beside what the producer and the receiver saw. The two
disagree exactly where a failover took a message's journal ``accepted`` event with it: the ledger can only
count messages it saw accepted, so a message lost with its trace is lost to the ledger's ``lost`` too. To
show that numerically the rolled journal is also read directly (pyarrow): how many MessageIds the
producer had answered 202 have no ``accepted`` event at all, and how many of the harness's lost ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.dataset as ds

from bridge.embedded.stack import LocalStack

REPORT_TIMEOUT = 900.0
"""Seconds ``bridge report`` may take (Spark on a loaded two-core machine starts slowly)."""


@dataclass(frozen=True)
class LedgerCount:
    """What ``bridge report`` counted, and the acknowledged messages it could not see."""

    accepted: int
    delivered: int
    handled: int
    pending: int
    lost: int
    unexpected: int
    acked_unseen: int
    """Acknowledged (202) MessageIds with no ``accepted`` event in the journal."""
    lost_unseen: int
    """The harness's lost MessageIds with no ``accepted`` event: lost to the ledger's eyes too."""
    error: str = ""


def accepted_ids(journal: Path) -> set[str]:
    """Every MessageId with an ``accepted`` event in the rolled journal folder."""
    dataset = ds.dataset(journal, format="parquet", partitioning="hive")
    table = dataset.to_table(columns=["message_id"], filter=ds.field("kind") == "accepted")
    return {m for m in table.column("message_id").to_pylist() if m}


def ledger_count(stack: LocalStack, out: Path, acked: set[str], lost: set[str]) -> LedgerCount:
    """Run ``bridge report --json`` over the stack's journal into ``out``; compare with the harness."""
    journal = out / "journal"
    command = [sys.executable, "-m", "bridge.cli.main", "report", "--out", str(out), "--json"]
    command += ["--journal", str(journal), "--master", "local[1]"]
    done = subprocess.run(
        command, env=stack.env(), capture_output=True, text=True, timeout=REPORT_TIMEOUT, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return LedgerCount(0, 0, 0, 0, 0, 0, 0, 0, error=(done.stderr or done.stdout)[-2000:])
    summary = json.loads(lines[-1])
    seen = accepted_ids(journal)
    return LedgerCount(
        accepted=int(summary.get("accepted") or 0),
        delivered=int(summary.get("delivered") or 0),
        handled=int(summary.get("handled") or 0),
        pending=int(summary.get("pending") or 0),
        lost=int(summary.get("lost") or 0),
        unexpected=int(summary.get("unexpected") or 0),
        acked_unseen=len(acked - seen),
        lost_unseen=len(lost - seen),
    )


def ledger_row(topology: str, count: LedgerCount) -> dict[str, object]:
    """The ledger's row of the harness's table."""
    return {"topology": topology, "run": "ledger", **count.__dict__}
