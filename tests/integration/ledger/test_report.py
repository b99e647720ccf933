"""``bridge report`` on a journal with known answers: lost, duplicated, dead-lettered, quarantined and
syphoned messages, a role swap and a paired failover.

The events go the real way: appended to the journal streams of a private Redis, the outbox snapshot taken
from it (one message is still in the outbox, one was accepted after the snapshot), rolled into Parquet by
the roll, then the Spark job — one shared ``local[2]`` session — computes the tables.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.core import journal as J
from bridge.core.journal_files import to_row
from bridge.core.ledger import price_table
from bridge.embedded.redis_server import RedisServer
from bridge.journal.roll import file_path, table_of, write_durably
from bridge.journal.store import JournalStore
from bridge.ledger.follow import follow
from bridge.ledger.html import SECTIONS
from bridge.ledger.job import ReportInputs, run_report
from bridge.ledger.live import roll_now, take_snapshot
from bridge.ledger.live_store import LedgerPaths
from bridge.outbox import keys as outbox_keys
from bridge.redis.connection import sync_client
from bridge.settings import load_settings
from tests.integration.ledger.live_journal import FOLLOW_OPTIONS
from tests.integration.report_render import inside, render_report

T = 1_790_000_000.0
P, S = "ns1", "ns2"  # the primary's and the secondary's namespace names
FOLLOWED = (
    "accepted",
    "delivered",
    "dead_lettered",
    "quarantined_messages",
    "handled",
    "open",
    "overdue",
    "broker_duplicates",
    "suppressed_duplicates",
)
"""What the follow test checks of the live ledger's publication."""

EXPECTED = {
    "orders": {
        "accepted": 8,
        "delivered": 3,
        "pending": 2,
        "pending_outbox": 2,
        "pending_backlog": 0,
        "dead_lettered": 1,
        "quarantined": 1,
        "handled": 3,
        "lost": 1,
        "unexpected": 0,
        "broker_duplicates": 1,
        "suppressed_duplicates": 1,
        "journal_overflow": 0,
    },
    "payments": {
        "accepted": 4,
        "delivered": 4,
        "pending": 1,
        "pending_outbox": 0,
        "pending_backlog": 1,
        "dead_lettered": 1,
        "quarantined": 0,
        "handled": 1,
        "lost": 0,
        "unexpected": 0,
        "broker_duplicates": 0,
        "suppressed_duplicates": 0,
        "journal_overflow": 0,
    },
}

# (entity, namespace, kind) -> operations, by the billing model of ``bridge.core.ledger``
EXPECTED_BILLING = {
    ("orders", P, "send"): 1,  # m1
    ("orders", S, "send"): 3,  # m2 (backup), m3 twice
    ("orders", P, "receive"): 1,  # measured: the receiver journaled its receives
    ("orders", S, "receive"): 3,
    ("payments", S, "backlog_send"): 3,  # p1, p2, p4
    ("payments", S, "backlog_receive"): 1,  # p1, syphoned
    ("payments", P, "syphon_send"): 1,  # p1
    ("payments", P, "send"): 1,  # p3
    ("payments", P, "receive_implied"): 2,  # p1 and p3 reached the primary; no receiver events
    ("payments", P, "ping"): 2,
    ("~backlog:ns1", S, "syphon_poll"): 5,
}


def orders_events() -> list[J.JournalEvent]:
    """Passive replication: a swap, a duplicate, a loss, a dead letter, a quarantined entry."""
    sent = J.sent
    return [
        J.accepted("m1", T + 0, door="http", size=100),
        sent("m1", T + 0.010, namespace=P, role="primary", path="direct", batch="b1"),
        J.received("m1", T + 0.1, namespace=P, role="primary"),
        J.handled("m1", T + 0.2),
        J.accepted("m2", T + 1, door="rest", size=100),
        J.send_failed("m2", T + 1.005, namespace=P, role="primary", error_class="outage", batch="b2"),
        sent("m2", T + 1.050, namespace=S, role="secondary", path="backup", batch="b3"),
        J.role_swapped(T + 1.05, from_role="primary", to_role="secondary", epoch=1, reason="outage"),
        J.received("m2", T + 1.2, namespace=S, role="secondary"),
        J.handled("m2", T + 1.3),
        J.accepted("m3", T + 2, door="producer", size=100),
        sent("m3", T + 2.020, namespace=S, role="secondary", path="direct", batch="b4"),
        J.received("m3", T + 2.05, namespace=S, role="secondary"),
        J.handled("m3", T + 2.1),
        sent(
            "m3", T + 2.5, namespace=S, role="secondary", path="direct", batch="b5"
        ),  # worker died before ack
        J.received("m3", T + 2.55, namespace=S, role="secondary"),
        J.duplicate_suppressed("m3", T + 2.6, namespace=S, role="secondary"),
        J.accepted("m4", T + 3, door="redis-door", size=100),  # still in the outbox
        J.accepted("m5", T + 4, door="http", size=100),  # LOST: no trace after acceptance
        J.accepted("m6", T + 5, door="http", size=999_999),
        J.dead_lettered("m6", T + 5.01, where="local", reason="message_too_large"),
        J.accepted("m7", T + 6, door="http", size=100),
        J.quarantined("m7", T + 6.01, reason="corrupt_entry"),
    ]


def payments_events() -> list[J.JournalEvent]:
    """Paired mode: failover to the backlog, pings, the syphon, a message expired in the backlog."""
    sent = J.sent
    return [
        J.failover_engaged(T + 10, reason="failover_interval passed"),
        J.accepted("p1", T + 10.5, door="http", size=100),
        sent("p1", T + 10.6, namespace=S, role="secondary", path="backlog", batch="c1", queue="3"),
        J.backlog_rotation_changed(T + 10.9, queue="1", result="removed", reason="send failed"),
        J.accepted("p2", T + 11, door="http", size=100),
        sent("p2", T + 11.05, namespace=S, role="secondary", path="backlog", batch="c2", queue="3"),
        J.accepted("p4", T + 12, door="http", size=100),
        sent("p4", T + 12.1, namespace=S, role="secondary", path="backlog", batch="c3", queue="3"),
        J.ping(T + 20, namespace=P, ok=False, error_class="outage"),
        J.ping(T + 30, namespace=P, ok=True),
        J.failover_ended(T + 30, reason="ping accepted"),
        sent("p1", T + 31, namespace=P, role="primary", path="syphon", batch="c4", queue="3"),
        J.syphoned("p1", T + 31.1, namespace=S, queue="3"),
        J.handled("p1", T + 32),
        J.dead_lettered("p4", T + 35, where="backlog", reason="expired_in_backlog"),
        J.accepted("p3", T + 40, door="http", size=100),
        sent("p3", T + 40.01, namespace=P, role="primary", path="direct", batch="c5"),
    ]


@dataclass
class Scenario:
    journal: Path
    snapshot: tuple[Path, Path]
    depths: dict[str, int]
    out: Path
    summary: dict[str, Any]


def run(
    spark: Any, scenario_journal: Path, snapshot: tuple[Path, Path], depths: dict[str, int], out: Path
) -> dict[str, Any]:
    inputs = ReportInputs(
        journal=scenario_journal,
        out=out,
        prices=price_table(),
        snapshot=snapshot,
        live_depths=depths,
        master="local[2]",
    )
    return run_report(spark, inputs)


@pytest.fixture(scope="module")
def scenario(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    root = tmp_path_factory.mktemp("ledger")
    server = RedisServer(data_dir=root / "redis")
    server.start()
    try:
        client = sync_client(server.url)
        settings = load_settings(redis_url=server.url)
        store = JournalStore(client, settings.journal)
        store.append("orders", orders_events())
        store.append("payments", payments_events())
        store.append(
            "~backlog:ns1",
            [
                J.syphon_receive(T + 50, namespace=S, queue="0", calls=5, empty=True),
                J.syphon_receive(T + 31, namespace=S, queue="3", calls=1, empty=False),
            ],
        )
        # m4 is still in the outbox (the snapshot reads only the ids of its entries)
        client.xadd(outbox_keys.outbox("orders", 0), {"v": "1", "id": "m4", "b": "x"})
        client.hset(outbox_keys.stats("orders"), mapping={"messages": 1, "bytes": 10})
        snapshot = take_snapshot(client, settings, ["orders", "payments"])
        # m8 arrives after the snapshot: too recent to judge, so pending, not lost
        store.append("orders", [J.accepted("m8", T + 7, door="http", size=100)])
        journal = root / "journal"
        rolled = roll_now(client, settings, journal, ["orders", "payments"])
        assert rolled.events == len(orders_events()) + len(payments_events()) + 2 + 1
        assert store.length("orders") == 0
        client.close()
        paths = snapshot.write(root / "inputs")
        out = root / "report"
        yield Scenario(journal, paths, snapshot.depths, out, run(spark, journal, paths, snapshot.depths, out))
    finally:
        server.close()


def _nearest_rank(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``fraction`` of all at or below it."""
    ordered = sorted(values)
    return ordered[min(max(1, math.ceil(len(ordered) * fraction)), len(ordered)) - 1]


def _table(folder: Path) -> list[dict[str, Any]]:
    return pq.read_table(folder).to_pylist()


def test_reconciliation_has_exactly_the_known_answers(scenario: Scenario) -> None:
    rows = {row["entity"]: row for row in _table(scenario.out / "tables" / "reconciliation")}

    assert set(rows) == set(EXPECTED)
    for entity, expected in EXPECTED.items():
        assert {key: rows[entity][key] for key in expected} == expected, entity
    summary = scenario.summary
    for key in ("accepted", "delivered", "pending", "dead_lettered", "quarantined", "handled", "lost"):
        assert summary[key] == sum(e[key] for e in EXPECTED.values()), key
    assert summary["broker_duplicates"] == 1 and summary["suppressed_duplicates"] == 1
    assert summary["outbox_checked"] is True
    assert summary["entities"]["orders"]["lost_ids"] == ["m5"]
    assert summary["entities"]["orders"]["live_outbox_depth"] == 1


def test_lost_and_duplicate_tables_name_the_messages(scenario: Scenario) -> None:
    lost = _table(scenario.out / "tables" / "lost")
    duplicates = _table(scenario.out / "tables" / "duplicates")

    assert [(r["entity"], r["message_id"]) for r in lost] == [("orders", "m5")]
    assert [(r["entity"], r["message_id"], r["copies"], r["suppressed"]) for r in duplicates] == [
        ("orders", "m3", 2, 1)
    ]


def test_latency_percentiles_per_entity_and_path(scenario: Scenario) -> None:
    rows = {(r["entity"], r["measure"], r["path"]): r for r in _table(scenario.out / "tables" / "latency")}
    to_service_bus = {
        ("orders", "direct"): [10.0, 20.0],
        ("orders", "backup"): [50.0],
        ("orders", "all"): [10.0, 20.0, 50.0],
        ("payments", "backlog+syphon"): [100.0, 50.0, 100.0],
        ("payments", "direct"): [10.0],
    }

    for (entity, path), values in to_service_bus.items():
        row = rows[(entity, "service_bus", path)]
        assert row["count"] == len(values)
        for name, fraction in (("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99)):
            assert row[name] == pytest.approx(_nearest_rank(values, fraction), abs=0.01), (entity, path, name)
        assert row["max_ms"] == pytest.approx(max(values), abs=0.01)
    handler = rows[("orders", "handler", "all")]
    assert (handler["count"], handler["max_ms"]) == (3, pytest.approx(300.0, abs=0.01))
    assert rows[("payments", "handler", "backlog+syphon")]["max_ms"] == pytest.approx(21_500.0, abs=0.01)


def test_failover_timeline(scenario: Scenario) -> None:
    orders = scenario.summary["entities"]["orders"]["failover"]
    payments = scenario.summary["entities"]["payments"]["failover"]

    assert (orders["swaps"], orders["failovers"]) == (1, 0)
    assert orders["seconds_on_secondary"] == pytest.approx(7 - 1.05, abs=0.001)  # until m8, the last event
    # payments' first event is the failover itself, so its story starts in the backlog
    assert [(s["active"], s["failed_over"]) for s in payments["segments"]] == [
        ("primary", True),
        ("primary", False),
    ]
    assert (payments["failovers"], payments["rotation_changes"]) == (1, 1)
    assert payments["seconds_failed_over"] == pytest.approx(20.0, abs=0.001)


def test_billable_operations_and_cost_of_resilience(scenario: Scenario) -> None:
    rows = _table(scenario.out / "tables" / "billing")

    assert {(r["entity"], r["namespace"], r["kind"]): r["operations"] for r in rows} == EXPECTED_BILLING
    cost = scenario.summary["cost"]
    total = sum(EXPECTED_BILLING.values())
    delivered = EXPECTED["orders"]["delivered"] + EXPECTED["payments"]["delivered"]
    assert (cost["operations"], cost["baseline_operations"]) == (total, 2 * delivered)
    assert cost["resilience_ratio"] == pytest.approx(total / (2 * delivered), abs=1e-4)  # one price for all
    assert cost["estimated_cost"] == pytest.approx(total * 1.0 / 1_000_000)


def test_a_rewritten_partition_does_not_double_count(spark: Any, scenario: Scenario, tmp_path: Path) -> None:
    # Given the journal folder with every file written a second time, under another name and in a
    # different hour folder
    journal = tmp_path / "journal"
    shutil.copytree(scenario.journal, journal)
    for index, path in enumerate(sorted(journal.rglob("*.parquet"))):
        shutil.copy(path, path.with_name(f"j-copy-{index}.parquet"))
        other = journal / "date=2030-01-01" / "hour=00"
        other.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, other / f"j-again-{index}.parquet")

    summary = run(spark, journal, scenario.snapshot, scenario.depths, tmp_path / "report")

    for entity, expected in EXPECTED.items():
        assert {key: summary["entities"][entity][key] for key in expected} == expected, entity
    assert summary["cost"]["operations"] == scenario.summary["cost"]["operations"]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    return subprocess.run([chromium, *flags, *args], capture_output=True, text=True, timeout=120, check=False)


def test_the_html_report_opens_in_headless_chromium(scenario: Scenario, tmp_path: Path) -> None:
    report = scenario.out / "report.html"
    shot = tmp_path / "report.png"

    taken = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2600", report.as_uri())
    dom = _chromium(tmp_path, "--dump-dom", report.as_uri())

    assert taken.returncode == 0, taken.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 2600)
    assert len(data) > 20_000  # a blank page of that size compresses to a few KB
    assert dom.returncode == 0, dom.stderr[-2000:]
    for section in SECTIONS:
        assert f'id="{section}"' in dom.stdout, section
    assert dom.stdout.count("<svg") >= 4  # reconciliation, latency, timeline, operations
    assert "m5" in dom.stdout.split('id="lost"')[1].split("</section>")[0]
    assert "http://" not in report.read_text().replace("http://www.w3.org/2000/svg", "")  # self-contained


def _drawn(section: str, entity: str, series: str) -> list[tuple[float, float]]:
    """The (seconds after T, value) points of one line of one entity's charts, as rendered."""
    charts = section.split(f'data-entity="{entity}"')[1].split("data-entity=", maxsplit=1)[0]
    found = re.search(rf'data-series="{series}" data-values="([^"]*)"', charts)
    assert found, f"no {series} line for {entity}"
    pairs = (pair.split(":") for pair in found.group(1).split())
    return [(float(at) - T, float(value)) for at, value in pairs]


def test_the_report_draws_lines_across_the_outage_with_its_bands(scenario: Scenario, tmp_path: Path) -> None:
    dom = _chromium(tmp_path, "--dump-dom", (scenario.out / "report.html").as_uri()).stdout
    section = dom.split('id="over-time"')[1].split("</section>")[0]
    bands = {
        (kind, label, round(float(start) - T, 3), round(float(end) - T, 3))
        for kind, label, start, end in re.findall(
            r'class="band (\w+)"[^>]*data-label="([^"]+)" data-start="([\d.]+)" data-end="([\d.]+)"', section
        )
    }
    # The primary failed from m2's refused send (second 1) until the ping it took (second 30): one band,
    # named by role; payments sent to the backlog from second 10 to 30, orders sat on the secondary
    assert ("outage", "primary (ns1)", 1.0, 30.0) in bands
    assert ("failover", "payments in backlog", 10.0, 30.0) in bands
    assert any(kind == "failover" and label == "orders on secondary" for kind, label, _, _ in bands)
    assert not any(label.startswith("secondary") for kind, label, _, _ in bands if kind == "outage")
    # Payments' messages kept being accepted inside the outage, and its delivered line went on (to the
    # backlog): the lines move across the band instead of stopping at it
    accepted = _drawn(section, "payments", "accepted")
    assert [round(at, 1) for at, n in accepted if 1 <= at <= 30 and n > 0] == [10.5, 11.5, 12.5]
    assert sum(n for _, n in _drawn(section, "payments", "delivered")) == 4  # p1, p2, p4, p3: 1 s buckets
    # Orders' open messages end at what is still open: m4 (outbox), m5 (lost) and m8
    assert _drawn(section, "orders", "open")[-1][1] == 3
    assert section.count("<svg") == 6  # three charts for each of the two entities
    assert pq.read_table(scenario.out / "tables" / "series").num_rows == 2 * 41  # seconds 0..40 (p3 at 40)


def test_the_rendered_report_draws_each_line_through_the_outage_band(
    scenario: Scenario, tmp_path: Path
) -> None:
    # Given the report laid out by Chromium on a 1,366-px laptop screen, measured by the browser itself
    seen = render_report(scenario.out / "report.html", tmp_path)

    # Then a screenshot was taken and no chart is wider than the screen
    assert _png_size(seen.screenshot.read_bytes()) == (1366, 2600)
    assert seen.page_width <= seen.viewport == 1366
    # and each entity, by name, has its three charts, each drawing something a person sees: lines of real
    # length, and a dot for a value between two gaps (a polyline of one point draws nothing)
    assert {c["entity"] for c in seen.charts} == {"orders", "payments"}
    for chart in seen.charts:
        where = f"{chart['entity']}: {chart['title']}"
        assert chart["shown"] and 0 < chart["box"]["left"] < chart["box"]["right"] <= 1366, where
        assert chart["lines"], where
        for line in chart["lines"]:
            assert line["shown"] and line["length"] > 0, f"{where}: {line['series']} draws nothing"
        assert all(dot["shown"] and dot["box"]["width"] >= 4 for dot in chart["dots"]), where
    latency = next(c for c in seen.of("payments") if c["title"] == "Acceptance to Service Bus (ms)")
    assert [dot["series"] for dot in latency["dots"]] == ["p50", "p99"]  # p3's, alone at second 40
    rates = next(c for c in seen.of("payments") if c["title"] == "Messages per second")
    # The primary's outage is one visible band, named by role, drawn from second 1 to second 30 of 40
    (band,) = [b for b in rates["bands"] if b["kind"] == "outage"]
    assert band["label"] == "primary (ns1)" and band["shown"] and band["opacity"] > 0
    plot = rates["box"]["width"]
    assert 0.15 * plot < band["box"]["width"] < 0.85 * plot, (band["box"], rates["box"])
    # And payments' accepted line has points drawn inside the band, at more than one height: it moves
    # across the outage (three messages at seconds 10 to 12, none in the other seconds of the band)
    (accepted,) = [line for line in rates["lines"] if line["series"] == "accepted"]
    within = inside(accepted["points"], band)
    assert len(within) >= 20, within
    assert len({round(y) for _, y in within}) >= 2, within
    assert any(x < band["box"]["left"] for x, _ in accepted["points"])  # and it began before the band
    assert any(x > band["box"]["right"] for x, _ in accepted["points"])  # and goes on after it
    # The failover band is there too, and every namespace is named by its role in the shown text
    assert any(b["label"] == "payments in backlog" and b["shown"] for b in rates["bands"])
    assert "primary (ns1)" in seen.text and "secondary (ns2)" in seen.text


def test_the_report_reads_as_a_person_reads_it(scenario: Scenario, tmp_path: Path) -> None:
    dom = _chromium(tmp_path, "--dump-dom", (scenario.out / "report.html").as_uri()).stdout
    body = re.sub(r"<style>.*?</style>", " ", dom, flags=re.S)
    shown = " ".join(re.sub(r"<[^>]+>", " ", body).split())  # the page's text, as rendered

    # Numbers are never in exponent form (the scenario's costs are millionths) and flags are words
    assert not re.search(r"\d(\.\d+)?e[-+]?\d", shown), re.findall(r"\S*\de[-+]?\d\S*", shown)
    assert "True" not in shown and "False" not in shown
    assert "0.000023 USD" in shown  # 23 operations at the placeholder price, not 2.3e-05
    # Namespaces by role, readable column names with their units
    assert "primary (ns1)" in shown and "secondary (ns2)" in shown
    for heading in ("dead-lettered", "extra copies", "suppressed copies", "p99 (ms)", "length (s)"):
        assert heading in shown, heading
    # No price was set, so the report says its costs are placeholders, and for which kinds
    placeholders = scenario.summary["cost"]["placeholder_prices"]
    assert placeholders == sorted({kind for (_, _, kind) in EXPECTED_BILLING})
    assert "Prices are placeholders" in shown


def test_a_piped_terminal_summary_keeps_every_column_whole(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BRIDGE_CONFIG", raising=False)
    # Given output that is not a terminal (CliRunner captures it, as a pipe would)
    args = ["report", "--offline", "--journal", str(scenario.journal), "--out", str(tmp_path / "r")]
    result = CliRunner().invoke(app, [*args, "--price", "send=0.05"])
    assert result.exit_code == 0, result.output
    # Then no heading or number is cut to fit 80 columns
    assert "…" not in result.stdout
    for heading in ("accepted", "dead-lettered", "quarantined", "extra copies", "suppressed copies"):
        assert heading in result.stdout, result.stdout
    # And the unpriced kinds are named, the priced one is not
    warning = next(line for line in result.stdout.splitlines() if line.startswith("prices are placeholders"))
    named = warning.removeprefix("prices are placeholders for ").split(":")[0].split(", ")
    assert "receive" in named and "send" not in named, named


def test_summary_json_is_written_next_to_the_report(scenario: Scenario) -> None:
    written = json.loads((scenario.out / "summary.json").read_text())

    assert written["lost"] == 1
    assert set(written["tables"]) >= {
        "reconciliation",
        "lost",
        "duplicates",
        "latency",
        "billing",
        "failover",
    }


def _atomic_copy(source: Path, target: Path) -> None:
    # The live view lists the folder while we write: a file must appear whole (as the roll makes them).
    partial = target.with_name(f".{target.name}.tmp")
    shutil.copy(source, partial)
    os.replace(partial, target)


def test_follow_keeps_the_live_ledger_current_without_counting_repeats(
    spark: Any, scenario: Scenario, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    shutil.copytree(scenario.journal, journal)
    originals = sorted(journal.rglob("*.parquet"))
    phase = {"copied": False}

    def on_update(ledger: dict[str, Any]) -> bool:
        entities = ledger.get("entities", {})
        if not phase["copied"]:
            if (
                entities.get("orders", {}).get("accepted") == 8
                and entities.get("payments", {}).get("accepted") == 4
            ):
                # When every file is rolled a second time and one new event arrives (m4 handled)
                for index, path in enumerate(originals):
                    _atomic_copy(path, path.with_name(f"j-again-{index}.parquet"))
                row = to_row("orders", "1790000008000-0", J.handled("m4", T + 8))
                write_durably(
                    table_of([row], time.time()),
                    file_path(journal, "orders", "1790000008000-0", "1790000008000-0"),
                )
                phase["copied"] = True
            return False
        return bool(entities["orders"]["handled"] == 4)

    options = FOLLOW_OPTIONS
    ledger = follow(
        spark, journal, LedgerPaths(tmp_path / "ledger"), options, duration=300, on_update=on_update
    )

    # Then the new event counts, the repeated ones do not
    assert phase["copied"]
    orders = ledger["entities"]["orders"]
    assert {key: orders[key] for key in FOLLOWED} == {
        "accepted": 8,
        "delivered": 3,
        "dead_lettered": 1,
        "quarantined_messages": 1,
        "handled": 4,
        "open": 2,  # m5 (lost) and m8 (recent): both overdue, the journal being years old
        "overdue": 2,
        "broker_duplicates": 1,
        "suppressed_duplicates": 1,
    }
    assert (ledger["entities"]["payments"]["accepted"], ledger["entities"]["payments"]["open"]) == (4, 0)
