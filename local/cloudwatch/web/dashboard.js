// The local dashboard page: draws /_dashboard/api/board (the synthesized widgets with their series)
// on CloudWatch's 24-column grid, with uPlot for charts and marked for text widgets, and polls it
// every POLL_MS while "live" is checked. window.shardlineDashboard exposes what the browser test
// reads: renders, the last server and render times, and each widget's non-empty point count.
"use strict";

const POLL_MS = 2000;
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"];
const state = { charts: new Map(), renders: 0, lastServerMs: null, lastRenderMs: null, openAlarm: null };
window.shardlineDashboard = state;

const $ = (id) => document.getElementById(id);

async function refresh() {
  const query = new URLSearchParams({ range: $("range").value, period: $("period").value });
  const fetched = performance.now();
  const response = await fetch(`/_dashboard/api/board?${query}`, { cache: "no-store" });
  const board = await response.json();
  const began = performance.now();
  state.lastFetchMs = began - fetched;
  $("board-name").textContent = board.name;
  drawAlarms(board.alarms, board.not_evaluated, board.access_denied || []);
  drawWidgets(board);
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));  // until drawn
  state.lastServerMs = board.server_ms;
  state.lastRenderMs = performance.now() - began;
  state.renders += 1;
  $("timing").textContent =
    `server ${board.server_ms} ms · page ${state.lastRenderMs.toFixed(1)} ms · period ${board.period}` +
    (board.period === "widget" ? "" : " s");
}

function drawAlarms(alarms, notEvaluated, denied) {
  const strip = $("alarms");
  strip.replaceChildren();
  for (const denial of denied) {  // a missing grant: the principal stalls on it until it is granted
    const badge = document.createElement("span");
    badge.className = "alarm";
    badge.dataset.alarmState = "ALARM";
    badge.dataset.accessDenied = denial.action;
    badge.title = `${denial.message}\nwould allow it: ${JSON.stringify(denial.would_allow)}`;
    badge.textContent = `● access denied ×${denial.count}: ${denial.who}: ${denial.action} on ${denial.resource}`;
    strip.append(badge);
  }
  for (const alarm of alarms) {
    const badge = document.createElement("button");
    badge.className = "alarm";
    badge.dataset.alarmState = alarm.state;
    badge.dataset.alarmId = alarm.id;
    badge.title = `${alarm.rule}\n${alarm.reason}`;
    badge.textContent = `${alarm.state === "ALARM" ? "● " : ""}${alarm.name}: ${alarm.state}`;
    badge.onclick = () => { state.openAlarm = state.openAlarm === alarm.id ? null : alarm.id; refresh(); };
    strip.append(badge);
    if (state.openAlarm === alarm.id) {
      const detail = document.createElement("div");
      detail.className = "alarm-detail";
      const history = alarm.history.map((t) =>
        `${new Date(t.at * 1000).toLocaleTimeString()}  ${t.old} → ${t.new}: ${t.reason}`).join("\n");
      detail.textContent = `${alarm.metric}\n${alarm.rule}\nnow: ${alarm.reason}\n\nhistory:\n${history || "(none)"}` +
        (alarm.description ? `\n\n${alarm.description}` : "");
      strip.append(detail);
    }
  }
  for (const reason of notEvaluated) {
    const note = document.createElement("span");
    note.className = "alarm";
    note.textContent = `not evaluated: ${reason}`;
    strip.append(note);
  }
}

function widgetBox(widget) {
  let box = document.querySelector(`[data-widget-index="${widget.index}"]`);
  if (!box) {
    box = document.createElement("div");
    box.className = "widget";
    box.dataset.widgetIndex = widget.index;
    box.style.gridColumn = `${widget.x + 1} / span ${widget.width}`;
    box.style.gridRow = `${widget.y + 1} / span ${widget.height}`;
    const title = document.createElement("h2");
    const body = document.createElement("div");
    body.className = "body";
    box.append(title, body);
    $("grid").append(box);
  }
  box.dataset.kind = widget.kind;
  box.dataset.type = widget.type;
  box.querySelector("h2").textContent = widget.title;
  box.querySelector("h2").hidden = !widget.title;
  return box;
}

function drawWidgets(board) {
  for (const widget of board.widgets) {
    const box = widgetBox(widget);
    const body = box.querySelector(".body");
    if (widget.kind === "chart") drawChart(widget, body, box);
    else if (widget.kind === "text") body.innerHTML = marked.parse(widget.markdown);
    else if (widget.kind === "log") drawLog(widget.rows, body, box);
    else body.textContent = `Not drawn locally: ${widget.reason}`;
  }
}

// Gaps are spanned, so only a series with one datapoint (a burst within one period) has no line:
// uPlot hides points when the range holds many periods, and that one would not be drawn at all.
function lonePoint(u, seriesIdx, show) {
  if (show) return null;
  const at = [];
  for (const [i, y] of u.data[seriesIdx].entries()) {
    if (y !== null && y !== undefined && at.push(i) > 1) return null;
  }
  return at.length ? at : null;
}

function drawChart(widget, body, box) {
  const visible = widget.series.filter((s) => s.visible !== false);
  const times = visible.length ? visible[0].points.map((p) => p[0]) : [];
  const data = [times, ...visible.map((s) => s.points.map((p) => p[1]))];
  const points = data.slice(1).reduce((n, ys) => n + ys.filter((y) => y !== null).length, 0);
  box.dataset.points = points;
  const key = `${widget.index}:${visible.map((s) => s.label).join("|")}`;
  let chart = state.charts.get(widget.index);
  if (chart && chart.key !== key) { chart.plot.destroy(); chart = null; }
  const width = Math.max(body.clientWidth - 4, 100);
  const legendRows = Math.ceil(visible.length / Math.max(1, Math.floor(width / 260)));
  const height = Math.max(body.clientHeight - 22 - 18 * legendRows, 60);
  if (!chart) {
    body.replaceChildren();
    const series = [{}, ...visible.map((s, i) => ({
      label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5, spanGaps: true,  // as CloudWatch joins the datapoints it has
      points: { size: 6, filter: lonePoint },
    }))];
    const axes = [{}, { size: 64 }];  // room for "100,000"
    const options = { width, height, series, axes, scales: { x: { time: true } }, legend: { live: false } };
    const plot = new uPlot(options, data, body);
    chart = { plot, key };
    state.charts.set(widget.index, chart);
  } else {
    chart.plot.setData(data);
    if (chart.plot.width !== width || chart.plot.height !== height) chart.plot.setSize({ width, height });
  }
}

function drawLog(rows, body, box) {
  box.dataset.rows = rows.length;
  if (!rows.length) { body.innerHTML = '<p class="empty">No log events match the query in this range.</p>'; return; }
  const columns = Object.keys(rows[0]);
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  for (const column of columns) head.append(Object.assign(document.createElement("th"), { textContent: column }));
  const tbody = table.createTBody();
  for (const row of rows) {
    const tr = tbody.insertRow();
    for (const column of columns) tr.insertCell().textContent = row[column] ?? "";
  }
  body.replaceChildren(table);
}

// The page's libraries are files of the installed package: a missing one is named, not blamed on the runtime.
function missingLibrary() {
  if (typeof uPlot === "undefined") return "uPlot.iife.min.js";
  if (typeof marked === "undefined") return "marked.umd.js";
  return null;
}

async function loop() {
  const missing = missingLibrary();
  if (missing) {
    $("timing").textContent = `the page's ${missing} did not load (GET /_dashboard/assets/${missing}): ` +
      "this installation of shardline lacks it; reinstall shardline[local]";
    return;
  }
  try { await refresh(); } catch (error) { $("timing").textContent = `cannot reach the runtime: ${error}`; }
  setTimeout(() => { if ($("live").checked) loop(); else waitForLive(); }, POLL_MS);
}

function waitForLive() {
  $("live").addEventListener("change", () => loop(), { once: true });
}

// ?range=3600&period=1 preselects the pickers (a shared link, the browser test).
for (const [name, value] of new URLSearchParams(location.search)) {
  const select = $(name);
  if (select && [...select.options].some((o) => o.value === value)) select.value = value;
}
$("range").addEventListener("change", refresh);
$("period").addEventListener("change", refresh);
loop();
