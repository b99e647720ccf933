"""The HTML of ``/status``: one static page whose script polls ``/status.json`` every two seconds.

Plain HTML and a little JavaScript, no build step and no outside resource, so it works on a machine with
no network. Every value is written with ``textContent`` (never ``innerHTML``), so an error text cannot
inject markup. When the ingress requires an API key, open ``/status#key=<API key>``: the script sends it
as ``x-api-key`` and the fragment never reaches a server log.

Stable hooks for tests and scrapers: each entity row is ``tr[data-entity=<name>]``, each cell
``td[data-field=<field>]``; a namespace cell has the class ``up`` or ``down``, and so has the ``barriers``
cell when a restore barrier is lost (``docs/paired.md``). A last error that carries a trace id shows it as
``.trace[data-trace-id]`` in its cell: a link (``a``, opening in a new tab) when the ``trace_url`` setting
names a trace viewer (``docs/tracing.md``), else text. The live ledger's block (``#ledger-section``,
shown when ``ledger`` in the status is not null) holds ``#ledger-verdict`` and a row
``tr[data-ledger-entity=<name>]`` per entity with its overdue count and oldest overdue MessageIds.
"""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Service Bus bridge: status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.4em; margin: 0 0 .2em; }
  h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; width: 100%; }
  th, td { border: 1px solid #ccc; padding: .3em .5em; text-align: left; vertical-align: top; }
  th { background: #f3f3f3; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .up { background: #e6f6e6; }
  .down { background: #fbe3e3; font-weight: bold; }
  .muted { color: #777; font-size: .9em; }
  .trace { font: .9em ui-monospace, monospace; }
  #banner.error { color: #a00; font-weight: bold; }
</style>
</head>
<body>
<h1>Service Bus bridge</h1>
<div id="banner" class="muted">loading&hellip;</div>
<h2>Entities</h2>
<table id="entities">
  <thead><tr>
    <th>entity</th><th>mode</th><th>active</th><th>primary</th><th>secondary</th>
    <th>outbox</th><th>oldest</th><th>dead-letter</th><th>quarantine</th>
    <th>last failover</th><th>last error</th><th>restore</th><th>receiver</th><th>operations</th>
  </tr></thead>
  <tbody></tbody>
</table>
<div id="backlog-section" hidden>
  <h2>Backlog queues <span id="backlog-namespace" class="muted"></span></h2>
  <table id="backlog">
    <thead><tr>
      <th>queue</th><th>in rotation</th><th>messages</th><th>measured</th><th>syphon</th>
    </tr></thead>
    <tbody></tbody>
  </table>
</div>
<div id="ledger-section" hidden>
  <h2>Live ledger: <span id="ledger-verdict"></span> <span id="ledger-age" class="muted"></span></h2>
  <div id="ledger-reasons" class="muted"></div>
  <table id="ledger">
    <thead><tr><th>entity</th><th>overdue</th><th>pending</th><th>oldest overdue MessageIds</th></tr></thead>
    <tbody></tbody>
  </table>
</div>
<script>
"use strict";
const POLL_MS = 2000;
const key = new URLSearchParams(location.hash.slice(1)).get("key");

function when(epoch) {
  if (epoch === null || epoch === undefined) return "";
  return new Date(epoch * 1000).toISOString().replace("T", " ").replace(/\\.\\d+Z$/, "Z");
}
function age(seconds) {
  if (!seconds) return "0 s";
  if (seconds < 120) return seconds.toFixed(1) + " s";
  if (seconds < 7200) return (seconds / 60).toFixed(1) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}
function cell(row, field, text, cls) {
  const td = document.createElement("td");
  td.dataset.field = field;
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}
function namespaceCell(row, field, ns) {
  const state = ns.available ? "available" : "UNAVAILABLE";
  const since = ns.since ? " since " + when(ns.since) : "";
  const td = cell(row, field, state + since, ns.available ? "up" : "down");
  if (!ns.available && ns.last_error) td.title = ns.last_error;
  return td;
}
function restoreCell(row, barriers) {
  const lost = barriers.filter((b) => b.state === "lost");
  if (lost.length) {
    const text = lost.map((b) => "BARRIER LOST: shard " + b.shard + " queue " + b.queue +
      " (re-sent " + b.resends + "x, last " + when(b.sent_at) + ")").join("; ");
    return cell(row, "barriers", text, "down");
  }
  return cell(row, "barriers", barriers.length ? "waiting for " + barriers.length + " barrier(s)" : "");
}
function errorCell(row, err) {
  const td = cell(row, "last_error", err ? when(err.at) + " " + err.namespace + ": " + err.error : "");
  if (!err || !err.trace_id) return td;
  const url = err.trace_url || "";
  const web = url.startsWith("http://") || url.startsWith("https://");
  const trace = document.createElement(web ? "a" : "span");
  trace.className = "trace";
  trace.dataset.traceId = err.trace_id;
  trace.textContent = "trace " + err.trace_id;
  if (web) {
    trace.href = url;
    trace.target = "_blank";
    trace.rel = "noopener noreferrer";
  }
  td.appendChild(document.createElement("br"));
  td.appendChild(trace);
  return td;
}
function counters(obj) {
  return Object.entries(obj || {}).filter(([k]) => k !== "total").map(([k, v]) => k + "=" + v).join(" ");
}
function render(data) {
  const body = document.querySelector("#entities tbody");
  body.replaceChildren();
  for (const e of data.entities) {
    const row = document.createElement("tr");
    row.dataset.entity = e.name;
    cell(row, "name", e.name);
    cell(row, "replication", e.replication);
    cell(row, "active", e.active + (e.paired && e.paired.failed_over ? " (backlog)" : ""));
    namespaceCell(row, "primary", e.namespaces.primary);
    namespaceCell(row, "secondary", e.namespaces.secondary);
    cell(row, "outbox_depth", e.outbox_depth, "num");
    cell(row, "outbox_oldest_age", age(e.outbox_oldest_age), "num");
    const full = e.problem_streams_full || [];
    const problem = (field, which, depth) => {
      const held = full.includes(which);
      cell(row, field, depth + (held ? " FULL" : ""), held ? "num down" : "num");
    };
    problem("dead_letter_depth", "deadletter", e.dead_letter_depth);
    problem("quarantine_depth", "quarantine", e.quarantine_depth);
    const fo = e.last_failover;
    cell(row, "last_failover", fo ? when(fo.at) + " " + fo.kind + (fo.reason ? ": " + fo.reason : "") : "");
    errorCell(row, e.last_error);
    restoreCell(row, (e.paired && e.paired.barriers) || []);
    cell(row, "receiver", counters(e.receiver));
    cell(row, "cost", e.cost.total, "num");
    body.appendChild(row);
  }
  const section = document.getElementById("backlog-section");
  const backlog = data.backlog;
  if (backlog && backlog.queues) {
    section.hidden = false;
    const label = document.getElementById("backlog-namespace");
    label.textContent = "(primary namespace " + backlog.namespace + ")";
    const rows = document.querySelector("#backlog tbody");
    rows.replaceChildren();
    const inRotation = new Set(backlog.in_rotation);
    const running = (data.syphon && data.syphon.running) || {};
    backlog.queues.forEach((queue, index) => {
      const row = document.createElement("tr");
      row.dataset.queue = queue;
      cell(row, "queue", queue);
      const removed = backlog.removed[String(index)];
      const out = "no" + (removed && removed.error ? ": " + removed.error : "");
      cell(row, "in_rotation", inRotation.has(index) ? "yes" : out, inRotation.has(index) ? "up" : "down");
      const depth = (backlog.depths || {})[queue];
      cell(row, "messages", depth ? (depth.messages === null ? "?" : depth.messages) : "", "num");
      cell(row, "measured_at", depth ? when(depth.measured_at) + (depth.error ? " " + depth.error : "") : "");
      const idle = data.syphon && data.syphon.enabled ? "idle" : "off";
      cell(row, "syphon", running[queue] ? "running (" + running[queue] + ")" : idle);
      rows.appendChild(row);
    });
  } else {
    section.hidden = true;
  }
  renderLedger(data.ledger, data.generated_at);
  const banner = document.getElementById("banner");
  banner.className = "muted";
  const total = data.cost.total;
  banner.textContent = "updated " + when(data.generated_at) + " \\u00b7 billable operations " + total;
}
function renderLedger(ledger, now) {
  const section = document.getElementById("ledger-section");
  section.hidden = !ledger;
  if (!ledger) return;
  const verdict = document.getElementById("ledger-verdict");
  verdict.textContent = ledger.verdict;
  verdict.className = ledger.verdict === "ok" ? "up" : "down";
  const published = age(now - ledger.published_at);
  document.getElementById("ledger-age").textContent = "(published " + published + " ago)";
  document.getElementById("ledger-reasons").textContent = (ledger.reasons || []).join("; ");
  const rows = document.querySelector("#ledger tbody");
  rows.replaceChildren();
  for (const [name, e] of Object.entries(ledger.entities || {})) {
    const row = document.createElement("tr");
    row.dataset.ledgerEntity = name;
    cell(row, "entity", name);
    cell(row, "overdue", e.overdue, e.overdue ? "num down" : "num");
    cell(row, "pending", e.pending, "num");
    const ids = (e.overdue_ids || []).map((m) => m.message_id + " (" + age(m.age) + ")");
    cell(row, "overdue_ids", ids.join(", "));
    rows.appendChild(row);
  }
}
async function poll() {
  try {
    const headers = key ? {"x-api-key": key} : {};
    const answer = await fetch("status.json", {headers, cache: "no-store"});
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    render(await answer.json());
  } catch (error) {
    const banner = document.getElementById("banner");
    banner.className = "error";
    banner.textContent = "cannot read status: " + error.message;
  }
  setTimeout(poll, POLL_MS);
}
poll();
</script>
</body>
</html>
"""
