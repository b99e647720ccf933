// The status page's script (bridge/http/status_page.py): polls status.json and status/history.json and
// draws the summary, the errors (each once), the history charts (uPlot) with their bands, and the tables.
"use strict";
const POLL_MS = 2000;
const key = new URLSearchParams(location.hash.slice(1)).get("key");
const headers = key ? {"x-api-key": key} : {};
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const CHARTS = [
  {id: "accepted", title: "accepted /s", keys: ["accepted"]},
  {id: "sent", title: "sent /s", keys: ["sent"]},
  {id: "handled", title: "handled /s", keys: ["handled"]},
  {id: "depth", title: "outbox depth (messages)", keys: ["depth"]},
  {id: "oldest_age", title: "oldest in outbox (s)", keys: ["oldest_age"]},
  {id: "latency", title: "send latency p50 / p99 (s)", keys: ["latency_p50", "latency_p99"]},
  {id: "failovers", title: "failovers in the window", keys: ["failovers"]},
  {id: "namespaces", title: "namespace available (share of entities)", namespaces: true},
  {id: "redis", title: "Redis memory (MB) and AOF", redis: true},
];
const charts = {};
const openDetails = new Set();
let names = {primary: null, secondary: null};
let historyEvery = 5000;

function when(epoch) {
  if (epoch === null || epoch === undefined) return "";
  return new Date(epoch * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
function clock(epoch) {
  return epoch ? new Date(epoch * 1000).toISOString().slice(11, 19) + "Z" : "";
}
function age(seconds) {
  if (!seconds) return "0 s";
  if (seconds < 120) return seconds.toFixed(1) + " s";
  if (seconds < 7200) return (seconds / 60).toFixed(1) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}
function roleName(role) {
  return names[role] ? role + " (" + names[role] + ")" : role;
}
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function cell(row, field, text, cls) {
  const td = document.createElement("td");
  td.dataset.field = field;
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

// ---- summary and errors ------------------------------------------------------------------------------
function renderSummary(data) {
  const box = document.getElementById("summary");
  const summary = data.summary || {text: "", level: "ok"};
  box.textContent = summary.text;
  box.className = summary.level;
  box.dataset.level = summary.level;
}
function traceLink(trace) {
  const url = trace.trace_url || "";
  const web = url.startsWith("http://") || url.startsWith("https://");
  const node = el(web ? "a" : "span", "trace " + trace.trace_id, "trace");
  node.dataset.traceId = trace.trace_id;
  if (web) {
    node.href = url;
    node.target = "_blank";
    node.rel = "noopener noreferrer";
  }
  return node;
}
function renderErrors(errors) {
  const section = document.getElementById("errors-section");
  const list = document.getElementById("errors");
  section.hidden = !errors.length;
  list.replaceChildren();
  for (const err of errors) {
    const id = err.role + "|" + err.text;
    const li = document.createElement("li");
    li.dataset.state = err.resolved ? "resolved" : "open";
    li.dataset.code = err.code;
    li.append(el("code", err.code), " " + roleName(err.role) + " \u00b7 " + err.entities.join(", "));
    li.append(" \u00b7 " + clock(err.first_at) + (err.last_at !== err.first_at ? "\u2013" + clock(err.last_at) : ""));
    if (err.resolved) li.append(el("strong", " \u00b7 resolved " + clock(err.resolved_at)));
    const details = document.createElement("details");
    details.open = openDetails.has(id);
    details.addEventListener("toggle", () => (details.open ? openDetails.add(id) : openDetails.delete(id)));
    details.append(el("summary", "full text"), el("pre", err.text));
    for (const trace of err.traces) details.append(traceLink(trace), " ");
    li.append(" ", details);
    list.appendChild(li);
  }
}

// ---- charts ------------------------------------------------------------------------------------------
function seriesOf(spec, history) {
  const out = [];
  if (spec.namespaces) {
    ["primary", "secondary"].forEach((role, i) => {
      out.push({label: roleName(role), values: history.namespaces[role], color: COLORS[i]});
    });
  } else if (spec.redis) {
    const mb = (v) => (v === null ? null : v / 1048576);
    out.push({label: "used", values: history.redis.used_memory.map(mb), color: COLORS[0]});
    out.push({label: "maxmemory", values: history.redis.maxmemory.map((v) => (v ? mb(v) : null)), color: COLORS[1]});
    out.push({label: "AOF ok (1/0)", values: history.redis.aof_ok, color: COLORS[2], scale: "flag"});
  } else {
    Object.keys(history.entities).sort().forEach((entity, i) => {
      spec.keys.forEach((k, j) => {
        const label = entity + (spec.keys.length > 1 ? " " + k.replace("latency_", "") : "");
        out.push({label, values: history.entities[entity][k], color: COLORS[i % COLORS.length], dash: j ? [4, 3] : null});
      });
    });
  }
  return out;
}
function pointsIn(times, lines, start, end) {
  let n = 0;
  times.forEach((t, i) => {
    if (t >= start && t <= end && lines.some((s) => s.values[i] !== null && s.values[i] !== undefined)) n++;
  });
  return n;
}
function drawBands(u, chart) {
  const layer = chart && chart.bands;
  if (!layer) return;
  layer.replaceChildren();
  const times = u.data[0];
  if (!times.length) return;
  const [lo, hi] = [u.scales.x.min, u.scales.x.max];
  for (const band of chart.history.bands) {
    const start = Math.max(band.start, lo), end = Math.min(band.end, hi);
    if (end <= start) continue;
    const div = el("div", null, "band");
    div.dataset.kind = band.kind;
    div.dataset.label = band.label;
    div.dataset.start = band.start;
    div.dataset.end = band.end;
    div.dataset.points = pointsIn(times, chart.lines, band.start, band.end);
    div.title = band.label + ": " + clock(band.start) + "\u2013" + clock(band.end);
    const left = u.valToPos(start, "x");
    div.style.left = left + "px";
    div.style.width = Math.max(1, u.valToPos(end, "x") - left) + "px";
    layer.appendChild(div);
  }
}
function describe(lines) {
  return lines.map((s) => {
    const known = s.values.filter((v) => v !== null && v !== undefined);
    if (!known.length) return s.label + ": no data";
    const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Number(v.toPrecision(3)).toString());
    return s.label + ": " + fmt(known[0]) + " \u2192 " + fmt(known[known.length - 1]) + " (max " + fmt(Math.max(...known)) + ")";
  }).join("; ");
}
function makeChart(spec, figure, lines) {
  const width = Math.max(240, figure.clientWidth);
  const opts = {
    width, height: 130,
    legend: {show: true, live: false},
    cursor: {points: {show: false}},
    scales: {x: {time: true}, flag: {range: [0, 1.05]}},
    axes: [{size: 28}, {size: 46}, ...(lines.some((s) => s.scale === "flag")
      ? [{scale: "flag", side: 1, size: 24, splits: () => [0, 1], grid: {show: false}}] : [])],
    series: [{}, ...lines.map((s) => ({
      label: s.label, stroke: s.color, width: 1.5, spanGaps: false, scale: s.scale || "y",
      dash: s.dash || undefined, points: {show: false},
    }))],
    hooks: {draw: [(u) => drawBands(u, charts[spec.id])]},
  };
  if (spec.namespaces) opts.scales.y = {range: [-0.05, 1.05]};
  const plot = figure.querySelector(".plot");
  plot.replaceChildren();
  return new uPlot(opts, [[]], plot);
}
function renderChart(spec, history) {
  const container = document.getElementById("charts");
  let chart = charts[spec.id];
  if (!chart) {
    const figure = el("figure", null, "chart");
    figure.dataset.chart = spec.id;
    figure.append(el("figcaption", spec.title), el("div", null, "plot"), el("p", null, "range"));
    container.appendChild(figure);
    chart = charts[spec.id] = {figure, uplot: null, signature: "", bands: null, lines: [], history};
  }
  const lines = seriesOf(spec, history);
  chart.lines = lines;
  chart.history = history;
  const signature = lines.map((s) => s.label).join("|");
  if (!chart.uplot || signature !== chart.signature) {
    if (chart.uplot) chart.uplot.destroy();
    chart.uplot = makeChart(spec, chart.figure, lines);
    chart.bands = el("div", null, "bands");
    chart.uplot.over.appendChild(chart.bands);
    chart.signature = signature;
  }
  chart.uplot.setData([history.times, ...lines.map((s) => s.values)]);
  const points = history.times.filter((_, i) => lines.some((s) => s.values[i] !== null)).length;
  chart.figure.dataset.points = points;
  chart.figure.dataset.from = history.times[0] || "";
  chart.figure.dataset.to = history.times[history.times.length - 1] || "";
  chart.figure.querySelector("p.range").textContent = describe(lines);
}
function renderHistory(history) {
  const note = document.getElementById("history-note");
  const minutes = Math.round(history.window / 60);
  const memory = history.memory_bytes ? ", " + Math.round(history.memory_bytes / 1024) + " KiB in Redis" : "";
  note.textContent = history.enabled
    ? "last " + minutes + " min every " + history.interval + " s (" + history.times.length + " samples" + memory + ")"
    : "sampling is off (status_history.enabled)";
  historyEvery = Math.max(1000, history.interval * 1000);
  for (const spec of CHARTS) renderChart(spec, history);
}

// ---- tables ------------------------------------------------------------------------------------------
function namespaceCell(row, field, ns) {
  const state = ns.available ? "available" : "UNAVAILABLE";
  const since = ns.since ? " since " + when(ns.since) : "";
  return cell(row, field, state + since, ns.available ? "up" : "down");
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
function errorCell(row, err, codes) {
  // The short code only: the full text is in the error list above, once.
  const code = err ? codes[err.namespace + "|" + err.error] || "error" : "";
  const td = cell(row, "last_error", err ? code + " " + roleName(err.namespace) + " " + clock(err.at) : "");
  if (err && err.trace_id) {
    td.appendChild(document.createElement("br"));
    td.appendChild(traceLink(err));
  }
  return td;
}
function counters(obj) {
  return Object.entries(obj || {}).filter(([k]) => k !== "total").map(([k, v]) => k + "=" + v).join(" ");
}
function entityRow(e, codes) {
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
  cell(row, "last_failover", fo ? when(fo.at) + " " + fo.kind : "");
  errorCell(row, e.last_error, codes);
  restoreCell(row, (e.paired && e.paired.barriers) || []);
  cell(row, "receiver", counters(e.receiver));
  cell(row, "cost", e.cost.total, "num");
  return row;
}
function queueState(inRotation, depth, running) {
  if (running) return "draining";
  if (!inRotation) return "out of rotation";
  if (!depth || depth.messages === null || depth.messages === undefined) return "unknown";
  return depth.messages ? "holding " + depth.messages : "empty";
}
function renderBacklog(data) {
  const section = document.getElementById("backlog-section");
  const backlog = data.backlog;
  if (!(backlog && backlog.queues)) {
    section.hidden = true;
    return;
  }
  section.hidden = false;
  document.getElementById("backlog-namespace").textContent =
    "(on " + roleName("secondary") + ", named after " + roleName("primary") + ")";
  const rows = document.querySelector("#backlog tbody");
  rows.replaceChildren();
  const inRotation = new Set(backlog.in_rotation);
  const running = (data.syphon && data.syphon.running) || {};
  backlog.queues.forEach((queue, index) => {
    const row = document.createElement("tr");
    row.dataset.queue = queue;
    const removed = backlog.removed[String(index)];
    const depth = (backlog.depths || {})[queue];
    const state = queueState(inRotation.has(index), depth, running[queue]);
    cell(row, "queue", queue);
    cell(row, "state", state, state === "out of rotation" ? "down" : state === "empty" ? "up" : "");
    const out = "no" + (removed && removed.error ? ": " + removed.error : "");
    cell(row, "in_rotation", inRotation.has(index) ? "yes" : out, inRotation.has(index) ? "up" : "down");
    cell(row, "messages", depth ? (depth.messages === null ? "?" : depth.messages) : "", "num");
    cell(row, "measured_at", depth ? when(depth.measured_at) + (depth.error ? " " + depth.error : "") : "");
    const idle = data.syphon && data.syphon.enabled ? "idle" : "off";
    cell(row, "syphon", running[queue] ? "running (" + running[queue] + ")" : idle);
    rows.appendChild(row);
  });
}
function renderRedis(data) {
  const row = document.querySelector("#redis tbody tr");
  row.replaceChildren();
  const redis = data.redis;
  const durability = data.durability || {mode: "local", wait_replicas: 0};
  const plural = durability.wait_replicas === 1 ? " replica" : " replicas";
  const wanted = durability.wait_replicas ? " (" + durability.wait_replicas + plural + " confirm)" : "";
  if (!redis) {
    cell(row, "role", "?");
    cell(row, "topology", "cluster or INFO refused");
    cell(row, "durability", durability.mode + wanted);
    return;
  }
  cell(row, "role", redis.role);
  cell(row, "topology", redis.topology);
  const short = durability.mode === "replicated" && redis.connected_replicas < durability.wait_replicas;
  cell(row, "durability", durability.mode + wanted, short ? "down" : "up");
  const aofOk = redis.aof_enabled && redis.aof_last_write_ok;
  const aof = redis.aof_enabled ? (redis.aof_last_write_ok ? "on" : "write failing") : "off";
  cell(row, "aof", aof, aofOk ? "up" : "down");
  cell(row, "replicas", redis.connected_replicas, "num");
  const lags = (redis.replicas || []).map(
    (r) => r.address + " " + r.state + " " + r.lag_bytes + " B / " + r.lag_seconds + " s");
  cell(row, "replication_lag", lags.join(", ") || "-");
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
function render(data) {
  names = data.namespace_names || names;
  document.getElementById("names").textContent =
    "\u2014 " + roleName("primary") + " \u00b7 " + roleName("secondary");
  document.getElementById("th-primary").textContent = roleName("primary");
  document.getElementById("th-secondary").textContent = roleName("secondary");
  renderSummary(data);
  renderErrors(data.errors || []);
  const codes = {};
  for (const err of data.errors || []) codes[err.role + "|" + err.text] = err.code;
  const body = document.querySelector("#entities tbody");
  body.replaceChildren(...data.entities.map((e) => entityRow(e, codes)));
  renderBacklog(data);
  renderRedis(data);
  renderLedger(data.ledger, data.generated_at);
  const banner = document.getElementById("banner");
  banner.className = "muted";
  banner.textContent = "updated " + when(data.generated_at) + " \u00b7 billable operations " + data.cost.total;
}

// ---- polling -----------------------------------------------------------------------------------------
async function fetchJson(url) {
  const answer = await fetch(url, {headers, cache: "no-store"});
  if (!answer.ok) throw new Error("HTTP " + answer.status);
  return answer.json();
}
async function poll() {
  try {
    render(await fetchJson("status.json"));
  } catch (error) {
    const banner = document.getElementById("banner");
    banner.className = "error";
    banner.textContent = "cannot read status: " + error.message;
  }
  setTimeout(poll, POLL_MS);
}
async function pollHistory() {
  try {
    renderHistory(await fetchJson("status/history.json"));
  } catch (error) {
    document.getElementById("history-note").textContent = "cannot read the history: " + error.message;
  }
  setTimeout(pollHistory, historyEvery);
}
window.addEventListener("resize", () => {
  for (const chart of Object.values(charts)) {
    if (chart.uplot) chart.uplot.setSize({width: Math.max(240, chart.figure.clientWidth), height: 130});
  }
});
poll();
pollHistory();
