"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, nothing fetched).

Sections, each an element with a stable ``id`` so tools and tests can find it: ``summary``, ``over-time``,
``reconciliation``, ``lost``, ``duplicates``, ``latency``, ``failover``, ``cost``, ``notes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any

from bridge.core.ledger import DEFAULT_PRICE_PER_MILLION, LABELS, SUMMARY_KEYS
from bridge.ledger.svg import Bar, Line, Shade, Span, bars, series_chart, timeline

if TYPE_CHECKING:
    from bridge.ledger.over_time import OverTime

SECTIONS = (
    "summary",
    "over-time",
    "reconciliation",
    "lost",
    "duplicates",
    "latency",
    "failover",
    "cost",
    "notes",
)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.bad { color: #b00020; font-weight: bold; } .ok { color: #2e7d32; font-weight: bold; }
.empty { color: #777; } code { font-size: 12px; }
"""

RECONCILIATION_COLUMNS = (
    "accepted",
    "delivered",
    "pending",
    "dead_lettered",
    "quarantined",
    "handled",
    "lost",
    "unexpected",
    "broker_duplicates",
    "suppressed_duplicates",
    "journal_overflow",
)


def decimal(value: float) -> str:
    """A number as a person reads it: thousands separated, two decimals, small ones with up to six and
    never in exponent form (``0.000004``, not ``4e-06``)."""
    size = abs(value)
    if value == 0:
        return "0"
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 0.01:
        return f"{value:,.2f}"
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text if text.strip("-") != "0" else ("< 0.000001" if value > 0 else "> -0.000001")


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return decimal(value)
    if isinstance(value, int):
        return f"{value:,}"
    return escape("" if value is None else str(value))


def _namespace(name: str, roles: Mapping[str, str]) -> str:
    """``primary (contoso-east)``: the role first, as the status page names namespaces."""
    role = roles.get(name)
    return f"{role} ({name})" if role else name


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _when(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render(
    summary: Mapping[str, Any],
    latency_rows: Sequence[Mapping[str, Any]],
    billing_rows: Sequence[Mapping[str, Any]],
    failover_rows: Sequence[Mapping[str, Any]],
    over: OverTime | None = None,
) -> str:
    """The whole report as one HTML document."""
    entities: Mapping[str, Mapping[str, Any]] = summary["entities"]
    lost = int(summary.get("lost") or 0)
    verdict = '<span class="ok">lost = 0</span>' if lost == 0 else f'<span class="bad">lost = {lost:,}</span>'
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<title>bridge report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Service Bus bridge — ledger report</h1>",
        '<section id="summary"><h2>Summary</h2>',
        f"<p>{verdict}; {summary.get('events', 0):,} journal events, {len(entities)} entities"
        f"{', outbox checked' if summary.get('outbox_checked') else ', outbox NOT checked'}.</p>",
        _table([LABELS[key] for key in SUMMARY_KEYS], [[summary.get(key, 0) for key in SUMMARY_KEYS]]),
        "</section>",
        '<section id="over-time"><h2>Over time</h2>',
        _over_time(over),
        "</section>",
        '<section id="reconciliation"><h2>Reconciliation per entity</h2>',
        _table(
            ["entity", *(LABELS[c] for c in RECONCILIATION_COLUMNS)],
            [
                [name, *(record.get(c, 0) for c in RECONCILIATION_COLUMNS)]
                for name, record in entities.items()
            ],
        ),
        bars(
            [
                Bar(name, column, float(record.get(column) or 0))
                for name, record in entities.items()
                for column in ("accepted", "delivered", "pending", "dead_lettered", "quarantined", "lost")
            ],
            "Messages per entity",
        ),
        "</section>",
        '<section id="lost"><h2>Lost messages</h2>',
        _lost(entities),
        "</section>",
        '<section id="duplicates"><h2>Duplicates</h2>',
        "<p>Copies Service Bus accepted beyond the first (backlog copies excluded: the syphon moves "
        "them) and copies receivers suppressed by MessageId.</p>",
        _table(
            ["entity", "duplicated messages", "broker duplicates", "suppressed by receivers"],
            [
                [
                    name,
                    r.get("duplicated_messages", 0),
                    r.get("broker_duplicates", 0),
                    r.get("suppressed_duplicates", 0),
                ]
                for name, r in entities.items()
            ],
        ),
        "</section>",
        '<section id="latency"><h2>Latency</h2>',
        "<p>Milliseconds from acceptance by the bridge to the first Service Bus acceptance, and to the "
        "application's handler, per entity and path.</p>",
        _latency(latency_rows),
        "</section>",
        '<section id="failover"><h2>Failover timeline</h2>',
        _failover(entities, failover_rows),
        "</section>",
        '<section id="cost"><h2>Billable operations and cost</h2>',
        _cost(summary, billing_rows),
        "</section>",
        '<section id="notes"><h2>Notes</h2>',
        "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in summary.get("notes", [])) + "</ul>"
        if summary.get("notes")
        else "<p>None.</p>",
        "</section></body></html>",
    ]
    return "\n".join(parts)


def _over_time(over: OverTime | None) -> str:
    """Per entity: messages per second, open messages and time to Service Bus, on one time axis, with the
    namespaces' outages (red) and the entity's failovers (blue) shaded behind."""
    if over is None or not over.entities:
        return '<p class="empty">No events with a time: nothing to draw.</p>'
    times = over.times()
    outages = [Shade(b.kind, b.label, b.start, b.end) for b in over.outages]
    parts = [
        f'<p>One point per {over.step} s. Shaded: <span style="color:#e15759">a namespace failing</span> '
        "(from a failed send or ping it did not take to the next one it took) and "
        '<span style="color:#4e79a7">the entity failed over</span> (on its secondary, or to the backlog '
        "queues). Times are UTC.</p>"
    ]
    for name, lines in over.entities.items():
        shades = outages + [Shade(b.kind, b.label, b.start, b.end) for b in over.failovers.get(name, [])]
        charts = (
            ("Messages per second", [Line("accepted", lines.accepted), Line("delivered", lines.delivered)]),
            ("Open messages (accepted, not yet delivered)", [Line("open", [float(n) for n in lines.open])]),
            ("Acceptance to Service Bus (ms)", [Line("p50", lines.p50_ms), Line("p99", lines.p99_ms)]),
        )
        parts.append(f'<div class="entity-series" data-entity="{escape(name)}"><h3>{escape(name)}</h3>')
        parts += [series_chart(title, times, over.step, chart, shades) for title, chart in charts]
        parts.append("</div>")
    return "".join(parts)


def _lost(entities: Mapping[str, Mapping[str, Any]]) -> str:
    rows = [[name, mid] for name, record in entities.items() for mid in record.get("lost_ids", [])]
    if not rows:
        return "<p class=ok>No message was lost.</p>"
    return _table(["entity", "message_id"], rows) + "<p>All of them: the <code>lost</code> table.</p>"


def _latency(rows: Sequence[Mapping[str, Any]]) -> str:
    headers = ["entity", "measure", "path", "messages", "p50 (ms)", "p95 (ms)", "p99 (ms)", "max (ms)"]
    table = _table(
        headers,
        [
            [
                r["entity"],
                r["measure"],
                r["path"],
                r["count"],
                r["p50_ms"],
                r["p95_ms"],
                r["p99_ms"],
                r["max_ms"],
            ]
            for r in rows
        ],
    )
    chart = bars(
        [
            Bar(f"{r['entity']} · {r['path']}", name, float(r[key] or 0))
            for r in rows
            if r["measure"] == "service_bus"
            for name, key in (("p50", "p50_ms"), ("p95", "p95_ms"), ("p99", "p99_ms"))
        ],
        "Acceptance to Service Bus (ms)",
        " ms",
    )
    return table + chart


def _failover(entities: Mapping[str, Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> str:
    summary_rows = []
    for name, record in entities.items():
        story = record.get("failover") or {}
        summary_rows.append(
            [
                name,
                story.get("swaps", 0),
                story.get("failovers", 0),
                story.get("seconds_on_secondary", 0.0),
                story.get("seconds_failed_over", 0.0),
                story.get("rotation_changes", 0),
            ]
        )
    table = _table(
        [
            "entity",
            "role swaps",
            "paired failovers",
            "time on secondary (s)",
            "time in backlog (s)",
            "rotation changes",
        ],
        summary_rows,
    )
    segments = _table(
        ["entity", "from", "to", "length (s)", "active namespace", "in backlog"],
        [
            [r["entity"], _when(r["start"]), _when(r["end"]), r["seconds"], r["active"], r["failed_over"]]
            for r in rows
        ],
    )
    spans = [
        Span(r["entity"], r["start"], r["end"], r["active"] + (", backlog" if r["failed_over"] else ""))
        for r in rows
    ]
    return table + timeline(spans, "Active namespace over time") + segments


def _money(value: Any, currency: str) -> str:
    return f"{decimal(float(value or 0))} {currency}"


def _cost(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    cost = summary.get("cost") or {}
    roles: Mapping[str, str] = summary.get("namespaces") or {}
    named = str(cost.get("currency", ""))
    currency = escape(named)
    ratio = cost.get("resilience_ratio")
    operations = int(cost.get("operations", 0))
    baseline = int(cost.get("baseline_operations", 0))
    shown = "-" if ratio is None else f"{ratio:.3f} times"
    placeholders = list(cost.get("placeholder_prices") or [])
    warning = (
        f'<p class="bad">Prices are placeholders ({decimal(DEFAULT_PRICE_PER_MILLION)} per million '
        "operations) for "
        f"{escape(', '.join(placeholders))}: the costs below are not money. Set your tier's prices in "
        "<code>journal.prices</code> (or <code>--price KIND=PRICE</code>).</p>"
        if placeholders
        else ""
    )
    head = (
        warning + f"<p>{operations:,} billable operations, estimated "
        f"{_money(cost.get('estimated_cost'), currency)}; the same messages without replication: "
        f"{baseline:,} operations, {_money(cost.get('baseline_cost'), currency)}. "
        f"Cost of resilience: <b>{shown}</b>.</p>"
        "<p>Billable operations: a copy sent is one operation and its receive another; a message through a "
        "backlog queue costs four (backlog send, syphon receive, syphon send, receive); pings, restore "
        "barriers and the syphon's empty receive calls count too. Prices per million operations: "
        "<code>journal.prices</code>.</p>"
    )
    per_kind: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (_namespace(r["namespace"], roles), r["kind"])
        per_kind[key] = per_kind.get(key, 0) + int(r["operations"])
    table = _table(
        [
            "entity",
            "namespace",
            "kind",
            "operations",
            f"price per million ({named})",
            f"estimated cost ({named})",
        ],
        [
            [
                r["entity"],
                _namespace(r["namespace"], roles),
                r["kind"],
                r["operations"],
                ("placeholder " if r.get("placeholder_price") else "") + decimal(r["price_per_million"]),
                r["estimated_cost"],
            ]
            for r in rows
        ],
    )
    chart = bars(
        [Bar(namespace, kind, float(n)) for (namespace, kind), n in sorted(per_kind.items())],
        "Operations per namespace and kind",
    )
    return head + chart + table
