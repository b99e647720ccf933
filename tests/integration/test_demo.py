"""``bridge demo --fast --no-input`` (the README's first command) tells its whole story and loses nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.operations_support import chromium_binary
from tests.integration.report_render import inside, render_report


# The demo's own deadline (480 s) fails the test with its output; pytest-timeout's default (300 s) would
# cut it off first on a loaded machine (the suite runs on parallel workers).
@pytest.mark.timeout(540)
def test_bridge_demo_runs_end_to_end(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge.cli.main",
            "demo",
            "--fast",
            "--no-input",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=480,
    )
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    final = done.stdout.strip().splitlines()[-1]
    # The final line: nothing lost by the demo's own count (MessageIds accepted vs handed to the handlers),
    # nothing handled twice, and the PySpark ledger saw every accepted message and lost none.
    found = re.fullmatch(
        r"demo: lost=0 accepted=(\d+) handled=(\d+) handled_twice=0 ledger_accepted=(\d+) ledger_lost=0 "
        r"suppressed_duplicates=\d+ report=(\S+) status=(\S+) verdict=PASSED",
        final,
    )
    assert found, final
    accepted, handled, ledger_accepted, report, status = found.groups()
    assert int(accepted) > 100 and handled == accepted == ledger_accepted
    assert Path(report).is_file() and status.endswith("/status")
    # The ledger explains everything it counted: the paired restore's barriers and any ping a receiver got
    # are billed but are no messages, so nothing is "delivered without an acceptance" and no note is left.
    summary = json.loads((Path(report).parent / "summary.json").read_text())
    assert summary["unexpected"] == 0 and summary["notes"] == [], summary["notes"]
    assert summary["delivered"] == summary["accepted"] == int(ledger_accepted)
    assert any(op["kind"] == "barrier_send" for op in summary["operations"]), summary["operations"]
    # The report's charts mark the story's outages and failovers behind their lines
    page = Path(report).read_text()
    assert 'class="band outage"' in page and 'class="band failover"' in page
    assert page.count('class="series"') == 3 * len(summary["entities"])
    if chromium_binary() is not None:
        _assert_report_rendered(Path(report), set(summary["entities"]), tmp_path)
    # The story really happened: each mode failed over while the primary was down, both went down.
    assert "orders: active=secondary primary=DOWN secondary=up" in out
    assert "payments: active=secondary primary=DOWN secondary=up" in out
    assert "audit: active=primary primary=DOWN secondary=up" in out
    assert re.search(r"primary=DOWN secondary=DOWN outbox=[1-9]", out)
    assert "phase: ledger" in out


def _assert_report_rendered(report: Path, entities: set[str], workdir: Path) -> None:
    """The report of a real outage as Chromium lays it out: every entity's charts draw lines a person sees,
    each rates chart shows the outage bands of both namespaces, named by role, with points inside them."""
    seen = render_report(report, workdir)
    assert {c["entity"] for c in seen.charts} == entities
    assert seen.page_width <= seen.viewport  # nothing wider than the laptop screen
    for chart in seen.charts:
        where = f"{chart['entity']}: {chart['title']}"
        assert chart["shown"] and all(line["length"] > 0 for line in chart["lines"]), where
    for chart in (c for c in seen.charts if c["title"] == "Messages per second"):
        outages = [
            b for b in chart["bands"] if b["kind"] == "outage" and b["shown"] and b["box"]["width"] > 0
        ]
        labels = {b["label"].split(" (")[0] for b in outages}
        assert labels == {"primary", "secondary"}, (chart["entity"], [b["label"] for b in chart["bands"]])
        accepted = [p for line in chart["lines"] if line["series"] == "accepted" for p in line["points"]]
        primary = next(b for b in outages if b["label"].startswith("primary"))
        assert inside(accepted, primary), (chart["entity"], primary["box"])
