// Opens the local dashboard in headless Chromium (Debian's, driven by playwright-core) and reports
// what a person would see, as JSON on stdout:
//   node dashboard.mjs <url> <screenshot.png> <until> <timeout s> [chart title|chart title...]
// <until>: "traffic" (every chart named has MIN_POINTS datapoints or more), "alarm" (an alarm in ALARM), "render"
// (five renders), "message" (the status line's first words, for a page that cannot render). The report: each widget (kind, title, points, rows, coloured pixels of its chart), the alarms' states, the
// renders' page and server times, and the browser's console errors.
import { chromium } from "playwright-core";

const [url, screenshot, until, timeoutS, charts = ""] = process.argv.slice(2);
const wanted = charts ? charts.split("|") : [];
const MIN_POINTS = 3;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const errors = [];
const report = { url, until, met: false };
watch: try {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1400 } });
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith("http://127.0.0.1")) errors.push(`left loopback: ${r.url()}`); });
  const opened = Date.now();
  await page.goto(url, { waitUntil: "load" });
  if (until === "message") {  // a page that never renders: what its status line tells the user
    await page.waitForFunction(() => document.getElementById("timing").textContent.trim(), null, { timeout: 30_000 });
    report.message = await page.evaluate(() => document.getElementById("timing").textContent);
    report.met = true;
    await page.screenshot({ path: screenshot, fullPage: true });
    report.screenshot = screenshot;
    break watch;  // nothing else to wait for
  }
  await page.waitForFunction(() => (window.shardlineDashboard || {}).renders >= 1, null, { timeout: 30_000 });
  report.first_render_s = (Date.now() - opened) / 1000;
  const deadline = Date.now() + Number(timeoutS) * 1000;
  const renders = [];
  let seen = 0;
  while (Date.now() < deadline) {
    const state = await page.evaluate(() => {
      // Pixels of a colour (a series' line or point), not the grays of the grid, axes and text.
      const colored = (canvas) => {
        if (!canvas) return 0;
        const { data } = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
        let n = 0;
        for (let i = 0; i < data.length; i += 4) {
          if (data[i + 3] > 0 && Math.max(data[i], data[i + 1], data[i + 2]) - Math.min(data[i], data[i + 1], data[i + 2]) > 60) n++;
        }
        return n;
      };
      const s = window.shardlineDashboard;
      const widgets = [...document.querySelectorAll(".widget")].map((w) => ({
        index: Number(w.dataset.widgetIndex), kind: w.dataset.kind, type: w.dataset.type,
        title: w.querySelector("h2").textContent, points: Number(w.dataset.points || 0),
        rows: Number(w.dataset.rows || 0), canvas: !!w.querySelector("canvas"),
        colored: colored(w.querySelector("canvas")),
        text: w.querySelector(".body").textContent.slice(0, 200),
      }));
      const alarms = [...document.querySelectorAll("[data-alarm-id]")].map((a) => ({
        id: a.dataset.alarmId, state: a.dataset.alarmState, text: a.textContent }));
      return { renders: s.renders, page_ms: s.lastRenderMs, server_ms: s.lastServerMs, fetch_ms: s.lastFetchMs, widgets, alarms };
    });
    if (state.renders > seen) {
      seen = state.renders;
      renders.push({ page_ms: state.page_ms, server_ms: state.server_ms, fetch_ms: state.fetch_ms });
    }
    Object.assign(report, { widgets: state.widgets, alarms: state.alarms });
    const byTitle = new Map(state.widgets.map((w) => [w.title, w]));
    if (until === "traffic") report.met = wanted.every((t) => (byTitle.get(t) || {}).points >= MIN_POINTS);
    else if (until === "alarm") report.met = state.alarms.some((a) => a.state === "ALARM");
    else report.met = renders.length >= 5;
    if (report.met) break;
    await page.waitForTimeout(500);
  }
  report.renders = renders;
  await page.screenshot({ path: screenshot, fullPage: true });
  report.screenshot = screenshot;
} finally {
  report.errors = errors;
  await browser.close();
  console.log(JSON.stringify(report));
}
