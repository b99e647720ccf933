"""The status page's history during a scripted outage, in headless Chromium.

One module-scoped run, everything real (redis-server, two local namespaces, a worker, a beat for the
paired ping, two ``bridge serve`` processes that both sample the history every half second):

1. steady traffic to a passive entity (``orders``) and a paired one (``payments``);
2. the primary namespace goes down: ``orders`` swaps to the secondary, ``payments`` fails over to its
   backlog; then the secondary goes down too and the outbox grows; the page is loaded and screenshotted;
3. both come back: the outbox drains; the page is loaded and screenshotted again.

The tests read the rendered DOM (not the HTML source): the summary line, the charts' canvases, the outage
and failover bands with the samples drawn inside them, the lines' ranges, the errors marked resolved; and
the history endpoint: one sample per slot although two processes sample.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.operations_support import chromium_binary, chromium_page, start_serves

pytestmark = pytest.mark.skipif(
    chromium_binary() is None, reason="chromium not installed (scripts/bootstrap installs it)"
)

ORDERS, PAYMENTS = "orders", "payments"
INTERVAL = 1.0
LAPTOP = "1366,1000"


@dataclass
class Run:
    """What the story left: the pages' DOMs, the screenshots, the history and when the outage was."""

    base: Path
    down_dom: str = ""
    after_dom: str = ""
    down_png: Path | None = None
    after_png: Path | None = None
    history: dict[str, Any] = field(default_factory=dict)
    primary_down_at: float = 0.0
    restored_at: float = 0.0
    names: dict[str, str] = field(default_factory=dict)
    cli_json: dict[str, Any] = field(default_factory=dict)
    cli_table: str = ""
    page_summary: dict[str, Any] = field(default_factory=dict)


class Traffic:
    """Posts a message to each entity every 100 ms on a thread, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self._stop.wait(0.1):
                for entity in (ORDERS, PAYMENTS):
                    answer = http.post(f"/v1/entities/{entity}/messages", json={"body": "tick"})
                    assert answer.status_code == 202, answer.text
                    self.sent += 1

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _status(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/status.json", timeout=10)
    answer.raise_for_status()
    data: dict[str, Any] = answer.json()
    return data


def _samples_since(url: str, since: float) -> int:
    """Samples in the history from ``since`` on (the rows that are not gaps)."""
    answer = httpx.get(f"{url}/status/history.json", timeout=10)
    answer.raise_for_status()
    data = answer.json()
    flags = data["namespaces"]["primary"]
    return sum(1 for t, v in zip(data["times"], flags, strict=True) if t >= since and v is not None)


def _wait_samples(url: str, since: float, count: int, what: str) -> None:
    """Wait until the samplers stored ``count`` samples from ``since`` on (a loaded machine may skip
    slots: the test waits for samples, not for seconds)."""
    wait_until(lambda: _samples_since(url, since) >= count, 60, 0.25, f"{count} samples {what}")


def _cli_status(stack: LocalStack, *args: str) -> str:
    """``bridge status ARGS`` run as a real process against the stack (output piped, as a script reads it)."""
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "status", *args],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _entity(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in status["entities"] if e["name"] == name)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    base = tmp_path_factory.mktemp("status-history")
    stack = LocalStack(
        base,
        entities={ORDERS: {"replication": "passive"}, PAYMENTS: {"replication": "paired"}},
        settings={
            "BRIDGE_STATUS_HISTORY__INTERVAL": str(INTERVAL),
            "BRIDGE_STATUS_HISTORY__WINDOW": "600",
            "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
            "BRIDGE_RETRY__ATTEMPT_DEADLINE": "2",
            "BRIDGE_PAIRED__FAILOVER_INTERVAL": "0",
            "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
            "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "1",
            "BRIDGE_PAIRED__BACKLOG_DEPTH_TTL": "1",
            # The primary carries no traffic for orders once swapped: a probe sees it back.
            "BRIDGE_WORKERS__PROBE_INTERVAL": "1",
        },
    )
    stack.start()
    result = Run(base)
    try:
        stack.start_worker()
        stack.start_beat()
        # Two samplers: the slot claim keeps one sample per slot.
        url, _ = start_serves(stack, "serve", "serve2")
        result.names = _status(url)["namespace_names"]
        with Traffic(url):
            _wait_samples(url, time.time(), 3, "of healthy traffic")  # 1. healthy: the lines start
            # 2. primary down, then both
            result.primary_down_at = time.time()
            stack.primary.control.outage()
            wait_until(
                lambda: (
                    (s := _status(url))
                    and _entity(s, ORDERS)["active"] == "secondary"
                    and _entity(s, PAYMENTS)["paired"]["failed_over"]
                ),
                30,
                0.25,
                "orders on the secondary and payments in the backlog",
            )
            _wait_samples(url, time.time(), 2, "with the primary down")
            stack.secondary.control.outage()
            wait_until(
                lambda: not _entity(_status(url), ORDERS)["namespaces"]["secondary"]["available"],
                30,
                0.25,
                "the secondary seen down",
            )
            _wait_samples(url, time.time(), 3, "with both down")
            result.down_png = base / "status-both-down.png"
            result.down_dom = chromium_page(f"{url}/status", result.down_png, window=LAPTOP)
            # the operator's terminal, meanwhile: ``bridge status``, as JSON and as a table
            result.page_summary = _status(url)["summary"]
            result.cli_json = json.loads(_cli_status(stack, "--json"))
            result.cli_table = _cli_status(stack)
            # 3. both back
            stack.secondary.control.restore()
            stack.primary.control.restore()
            result.restored_at = time.time()
            time.sleep(2)
        seen: dict[str, Any] = {}

        def back() -> bool:
            s = _status(url)
            seen.update(
                depth=sum(e["outbox_depth"] for e in s["entities"]),
                down=[
                    (e["name"], role)
                    for e in s["entities"]
                    for role, ns in e["namespaces"].items()
                    if not ns["available"]
                ],
            )
            return seen["depth"] == 0 and not seen["down"]

        try:
            wait_until(back, 30, 0.25, "outbox drained and both namespaces seen back")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last seen {seen}") from None
        time.sleep(2 * INTERVAL)
        result.after_png = base / "status-after-restore.png"
        result.after_dom = chromium_page(f"{url}/status", result.after_png, window=LAPTOP)
        (base / "status-both-down.html").write_text(result.down_dom)
        (base / "status-after-restore.html").write_text(result.after_dom)
        answer = httpx.get(f"{url}/status/history.json", timeout=10)
        answer.raise_for_status()
        result.history = answer.json()
    finally:
        stack.stop()
    yield result


# ---- reading the rendered DOM ---------------------------------------------------------------------------


def _attrs(tag: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag)}


def _figure(dom: str, chart: str) -> str:
    match = re.search(rf'<figure class="chart" data-chart="{chart}"[^>]*>.*?</figure>', dom, re.S)
    assert match is not None, f"no chart {chart}: {dom[-3000:]}"
    return match.group(0)


def _bands(figure: str, kind: str) -> list[dict[str, str]]:
    return [_attrs(tag) for tag in re.findall(rf'<div class="band" data-kind="{kind}"[^>]*>', figure)]


def _summary(dom: str) -> str:
    match = re.search(r'<div id="summary"[^>]*>([^<]*)</div>', dom)
    assert match is not None, dom[:3000]
    return html.unescape(match.group(1))


def test_the_summary_line_names_both_namespaces_down_and_the_outbox_growing(run: Run) -> None:
    summary = _summary(run.down_dom)
    primary, secondary = run.names["primary"], run.names["secondary"]
    assert re.search(rf"primary \({re.escape(primary)}\) DOWN for \d+ s", summary), summary
    assert re.search(rf"secondary \({re.escape(secondary)}\) DOWN for \d+ s", summary), summary
    assert "payments in backlog" in summary, summary
    assert re.search(r"outbox \d+ \u2191", summary), summary
    assert 'id="summary" class="down"' in run.down_dom


def _without_durations(text: str) -> str:
    """The summary's words with its numbers blanked (two readings a second apart differ in durations and
    in the outbox's depth)."""
    return re.sub(r"\d+", "N", re.sub(r"DOWN for [^\u00b7]*", "DOWN for N ", text))


def test_bridge_status_opens_with_the_pages_summary_line(run: Run) -> None:
    # Both namespaces down: ``bridge status --json`` carries the page's summary, level and parts
    summary = run.cli_json["summary"]
    primary, secondary = run.names["primary"], run.names["secondary"]
    assert summary["level"] == "down" == run.page_summary["level"]
    assert re.search(rf"primary \({re.escape(primary)}\) DOWN for \d+ s", summary["text"]), summary
    assert re.search(rf"secondary \({re.escape(secondary)}\) DOWN for \d+ s", summary["text"]), summary
    assert "payments in backlog" in summary["parts"], summary
    assert _without_durations(summary["text"]) == _without_durations(run.page_summary["text"])
    assert summary["text"] == " \u00b7 ".join(summary["parts"])
    # and the entities are still the contract's
    assert {e["name"] for e in run.cli_json["entities"]} == {ORDERS, PAYMENTS}
    # The table opens with the same line, whole, before the table's title
    first, *rest = run.cli_table.splitlines()
    assert _without_durations(first) == _without_durations(summary["text"]), run.cli_table[:1000]
    assert "bridge status" in rest[0], run.cli_table[:1000]


def test_every_chart_is_drawn_on_a_canvas(run: Run) -> None:
    charts = (
        "accepted",
        "sent",
        "handled",
        "depth",
        "oldest_age",
        "latency",
        "failovers",
        "namespaces",
        "redis",
    )
    for chart in charts:
        figure = _figure(run.down_dom, chart)
        assert "<canvas" in figure, figure[:500]
        points = int(_attrs(figure.split(">", 1)[0])["data-points"])
        # Latencies exist only where something was delivered: not while both namespaces are down.
        assert points >= (1 if chart == "latency" else 6), (chart, points)


def test_the_outage_band_holds_points_and_the_lines_move_across_it(run: Run) -> None:
    figure = _figure(run.down_dom, "depth")
    outages = _bands(figure, "outage")
    labels = {b["data-label"] for b in outages}
    assert f"primary ({run.names['primary']}) down" in labels, labels
    assert f"secondary ({run.names['secondary']}) down" in labels, labels
    primary = next(b for b in outages if b["data-label"].startswith("primary"))
    # The band starts near the fault and holds samples drawn during the outage
    assert run.primary_down_at - 2 <= float(primary["data-start"]) <= run.primary_down_at + 30
    assert int(primary["data-points"]) >= 5
    # Both outbox lines start at 0 before the outage and end above it: they rose across the outage
    caption = re.search(r'<p class="range">([^<]*)</p>', figure)
    assert caption is not None
    lines = re.findall(r"(\w+): (\d+) \u2192 (\d+) \(max (\d+)\)", html.unescape(caption.group(1)))
    assert {name for name, *_ in lines} == {ORDERS, PAYMENTS}, caption.group(1)
    assert all(first == "0" and int(last) > 0 for _, first, last, _ in lines), caption.group(1)
    # The failover bands name where the entities went
    failovers = {b["data-label"] for b in _bands(figure, "failover")}
    assert {"orders on secondary", "payments in backlog"} <= failovers, failovers


def test_after_the_restore_the_band_is_closed_and_the_errors_resolved(run: Run) -> None:
    figure = _figure(run.after_dom, "accepted")
    primary = next(b for b in _bands(figure, "outage") if b["data-label"].startswith("primary"))
    assert float(primary["data-end"]) <= run.restored_at + 30
    errors = re.findall(r'<li data-state="(\w+)" data-code="([^"]+)"', run.after_dom)
    assert errors and all(state == "resolved" for state, _ in errors), errors
    assert "<details>" in run.after_dom and "<summary>full text</summary>" in run.after_dom
    assert "all healthy" in _summary(run.after_dom) or "orders on secondary" in _summary(run.after_dom)


def test_one_sample_per_slot_although_two_processes_sample(run: Run) -> None:
    times = [
        t
        for t, v in zip(run.history["times"], run.history["namespaces"]["secondary"], strict=True)
        if v is not None
    ]
    assert len(times) == len(set(times)) and len(times) >= 12
    steps = {round(b - a, 3) for a, b in itertools.pairwise(times)}
    assert min(steps) >= INTERVAL, steps
    assert run.history["memory_bytes"] and run.history["memory_bytes"] > 0


def test_the_screenshots_are_written(run: Run) -> None:
    assert run.down_png is not None and run.down_png.stat().st_size > 20_000
    assert run.after_png is not None and run.after_png.stat().st_size > 20_000


def test_each_backlog_queue_shows_its_own_state(run: Run) -> None:
    for dom in (run.down_dom, run.after_dom):
        states = re.findall(
            r'<tr data-queue="[^"]+"><td data-field="queue">[^<]*</td><td data-field="state"[^>]*>([^<]*)<',
            dom,
        )
        assert len(states) == 1, dom[-3000:]
        assert re.fullmatch(r"holding \d+|empty|draining|out of rotation|unknown", states[0]), states
    heading = re.search(r'<span id="backlog-namespace"[^>]*>([^<]*)<', run.after_dom)
    assert heading is not None and f"secondary ({run.names['secondary']})" in heading.group(1)
