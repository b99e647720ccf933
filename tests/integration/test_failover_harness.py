"""The failover harness (``bench.failover``), compressed: one Sentinel failover per durability mode, and one
run of the ``disk-lost`` scenario under ``replicated``.

Real parts: a primary, a replica and three Sentinels, two local namespaces, ``bridge serve``, a worker, a
beat and a session receiver, all processes; the primary is killed (``kill -9``) mid-traffic at a seeded
random moment while a producer retries every refusal with the same MessageId. ``python -m bench.failover``
runs the same with many kills, Cluster masters, lagging replicas, Service Bus outages, double failovers and
lost disks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.failover import measure
from bench.failover_topology import SentinelTopology

pytestmark = [pytest.mark.xdist_group("sentinel"), pytest.mark.timeout(240)]


def harness_args(messages: int) -> argparse.Namespace:
    """One kill somewhere in ``messages`` messages at 60/s; no lag, no outage, no ledger report."""
    return argparse.Namespace(
        messages=messages,
        total_kills=1,
        rate=60.0,
        lag=False,
        outage=False,
        seed=7,
        settle=30.0,
        ledger=False,
    )


def run_once(tmp_path: Path, mode: str, messages: int, scenario: str = "kill") -> list[dict[str, object]]:
    topology = SentinelTopology(tmp_path, mode, scenario)
    try:
        return measure(topology, harness_args(messages), kills=1)
    finally:
        topology.stop()


def test_replicated_loses_no_acknowledged_message_and_keeps_each_session_in_order(tmp_path: Path) -> None:
    # When the primary is killed mid-traffic with `ingress.durability = "replicated"`
    rows = run_once(tmp_path, "replicated", 320)
    runs = [row for row in rows if row["run"] != "order"]
    # Then every message answered 202 is handed to the receiver, each session in the order it was sent
    assert sum(int(str(row["acked"])) for row in runs) == 320
    assert [row["lost"] for row in runs] == [0, 0], runs
    assert rows[-1]["keys_out_of_order"] == 0
    assert str(runs[1]["kill"]).startswith("primary")


def test_local_measures_what_a_failover_loses(tmp_path: Path) -> None:
    # When the primary is killed mid-traffic with `ingress.durability = "local"`
    rows = run_once(tmp_path, "local", 320)
    runs = [row for row in rows if row["run"] != "order"]
    # Then the door answers again after the failover (every message is acknowledged in the end), the
    # receiver is handed nothing that was not acknowledged, and each session keeps its order; how many
    # acknowledged messages are lost depends on how far the replica lagged at the kill: measured, printed
    assert sum(int(str(row["acked"])) for row in runs) == 320
    assert rows[-1]["unacknowledged_delivered"] == 0
    assert rows[-1]["keys_out_of_order"] == 0
    print("local failover:", [(row["acked"], row["lost"]) for row in runs])


@pytest.mark.slow  # the default suite keeps the one-kill runs of both modes above
def test_replicated_keeps_what_it_acknowledged_when_the_promoted_replica_loses_disk(tmp_path: Path) -> None:
    # When the primary is killed and comes back with its data directory deleted (it resyncs from the
    # promoted replica), and then the promoted replica is killed and loses its data directory the same way
    rows = run_once(tmp_path, "replicated", 320, scenario="disk-lost")
    runs = [row for row in rows if row["run"] != "order"]
    # Then every message answered 202 is still delivered, in order per session: each one was fsync'd by
    # both nodes, and one of them always kept it
    assert "lost its disk" in str(runs[1]["kill"])
    assert sum(int(str(row["acked"])) for row in runs) == 320
    assert [row["lost"] for row in runs] == [0, 0], runs
    assert rows[-1]["keys_out_of_order"] == 0
