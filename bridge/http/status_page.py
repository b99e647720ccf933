"""The HTML of ``/status``: one static page; its script (``static/status/page.js``) polls ``status.json``
every two seconds and ``status/history.json`` once per sampling interval.

No build step and no outside resource: the charting library (uPlot, MIT) and the page's script and styles
are files of this package served under ``/status/assets``, so the page works on a machine with no network.
Every value is written with ``textContent`` (never ``innerHTML``), so an error text cannot inject markup.
When the ingress requires an API key, open ``/status#key=<API key>``: the script sends it as
``x-api-key`` and the fragment never reaches a server log.

The page opens with a one-line health summary (``#summary``, class ``ok`` / ``degraded`` / ``down``),
then the open and resolved errors, each once (``#errors li[data-state]``, short code, full text in a
``details``), the charts of the history (``figure.chart[data-chart]``: a uPlot canvas, the bands as
``.band[data-kind=outage|failover]`` elements over it, each with ``data-points``: the samples drawn
inside it), the entity table and each backlog queue's state.

Stable hooks for tests and scrapers: each entity row is ``tr[data-entity=<name>]``, each cell
``td[data-field=<field>]``; a namespace cell has the class ``up`` or ``down``, and so has the ``barriers``
cell when a restore barrier is lost (``docs/paired.md``). A last error that carries a trace id shows it as
``.trace[data-trace-id]`` in its cell: a link (``a``, opening in a new tab) when the ``trace_url`` setting
names a trace viewer (``docs/tracing.md``), else text. The Redis row is ``#redis tbody tr`` with cells
``role``, ``topology``, ``durability`` (class ``down`` when ``replicated`` lacks connected replicas), ``aof``,
``replicas`` and ``replication_lag``. The live ledger's block (``#ledger-section``,
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
<link rel="stylesheet" href="status/assets/uplot/uPlot.min.css">
<link rel="stylesheet" href="status/assets/status/page.css">
</head>
<body>
<h1>Service Bus bridge <span id="names" class="muted"></span></h1>
<div id="summary" class="ok" role="status">loading&hellip;</div>
<div id="banner" class="muted"></div>
<section id="errors-section" hidden>
  <h2>Errors</h2>
  <ul id="errors"></ul>
</section>
<section id="charts-section">
  <h2>History <span id="history-note" class="muted"></span>
    <span class="muted"><i class="key outage"></i>namespace down<i class="key failover"></i>failed over</span>
  </h2>
  <div id="charts" class="grid"></div>
</section>
<h2>Entities</h2>
<table id="entities">
  <thead><tr>
    <th>entity</th><th>mode</th><th>active</th>
    <th id="th-primary">primary</th><th id="th-secondary">secondary</th>
    <th>outbox</th><th>oldest</th><th>dead-letter</th><th>quarantine</th>
    <th>last failover</th><th>last error</th><th>restore</th><th>receiver</th><th>operations</th>
  </tr></thead>
  <tbody></tbody>
</table>
<h2>Redis</h2>
<table id="redis">
  <thead><tr>
    <th>role</th><th>topology</th><th>durability</th><th>AOF</th><th>replicas</th><th>replication lag</th>
  </tr></thead>
  <tbody><tr></tr></tbody>
</table>
<div id="backlog-section" hidden>
  <h2>Backlog queues <span id="backlog-namespace" class="muted"></span></h2>
  <table id="backlog">
    <thead><tr>
      <th>queue</th><th>state</th><th>in rotation</th><th>messages</th><th>measured</th><th>syphon</th>
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
<script src="status/assets/uplot/uPlot.iife.min.js"></script>
<script src="status/assets/status/page.js"></script>
</body>
</html>
"""
