// looplift dashboard: fetches /v1/dashboard/* with the admin token and draws every chart as SVG.
// No library, no build step, nothing loaded from elsewhere. `window.__dashboard` tells tests when the
// first load finished ({ready, errors, charts: {name: number of data marks}}).
"use strict";

const NS = "http://www.w3.org/2000/svg";
// No red: red means a rollback or an error on this page, never "this app" or "this version".
const PALETTE = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#4f46e5",
                 "#0d9488", "#ca8a04", "#6b7280", "#7c3aed"];
const state = { token: null, window: "24h", charts: {}, errors: [] };
window.__dashboard = { ready: false, errors: state.errors, charts: state.charts };

// ---- small helpers -------------------------------------------------------------------------------
function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  for (const k of kids) if (k !== null && k !== undefined) n.append(k instanceof Node ? k : String(k));
  return n;
}
function s(tag, attrs, ...kids) {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) n.setAttribute(k, v);
  for (const k of kids) if (k !== null && k !== undefined) n.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return n;
}
function title(node, text) { node.append(s("title", {}, text)); return node; }
const pct = (x) => (x === null || x === undefined) ? "–" : `${Math.round(x * 100)}%`;
const num = (x, d = 0) => (x === null || x === undefined) ? "–" : Number(x).toFixed(d);
const secs = (x) => (x === null || x === undefined) ? "–" : (x < 1 ? `${Math.round(x * 1000)} ms` : `${x.toFixed(2)} s`);
function colorOf(name) {
  const m = /-v(\d+)$/.exec(name || "");
  if (m) return PALETTE[Number(m[1]) % PALETTE.length];
  let h = 0;
  for (const c of String(name)) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length];
}
function when(iso) {
  const d = new Date(iso.endsWith("Z") || iso.includes("+") ? iso : iso + "Z");
  return d.toISOString().slice(5, 16).replace("T", " ");
}
function slot(name) { return document.querySelector(`[data-chart="${name}"]`); }
function put(name, ...nodes) {
  const host = slot(name);
  host.replaceChildren(...nodes);
  state.charts[name] = host.querySelectorAll(".mark").length;
}
function empty(name, text) { put(name, el("div", { class: "empty" }, text)); }
function fail(name, text) { put(name, el("div", { class: "empty error" }, text)); }
function legend(items) {
  return el("div", { class: "legend" }, ...items.map(([c, t]) => el("span", {}, el("i", { style: `background:${c}` }), t)));
}

// ---- charts --------------------------------------------------------------------------------------
// Horizontal bars of rates in [0, 1] with a 95% interval whisker; `rows`: {label, rate, ci, note, color}.
function rateBars(rows) {
  const rowH = 26, left = 150, right = 150, width = 640, height = rows.length * rowH + 24;
  const x = (v) => left + v * (width - left - right);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const grid = s("g", { class: "grid" });
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    grid.append(s("line", { x1: x(t), x2: x(t), y1: 0, y2: height - 18 }));
    grid.append(s("text", { x: x(t), y: height - 4, "text-anchor": "middle", class: "tick" }, `${t * 100}%`));
  }
  svg.append(grid);
  rows.forEach((r, i) => {
    const y = i * rowH + 4;
    svg.append(s("text", { x: left - 8, y: y + 14, "text-anchor": "end" }, r.label));
    if (r.rate !== null && r.rate !== undefined) {
      svg.append(title(s("rect", { class: "mark", x: left, y, width: Math.max(1, x(r.rate) - left), height: rowH - 8,
                                   rx: 3, fill: r.color || "#2563eb" }), `${r.label}: ${pct(r.rate)}`));
      if (r.ci) {
        const cy = y + (rowH - 8) / 2;
        svg.append(s("line", { x1: x(r.ci[0]), x2: x(r.ci[1]), y1: cy, y2: cy, stroke: "#111827", "stroke-width": 1.5 }));
        for (const v of r.ci) svg.append(s("line", { x1: x(v), x2: x(v), y1: cy - 5, y2: cy + 5, stroke: "#111827" }));
      }
    }
    svg.append(s("text", { x: width - right + 8, y: y + 14 }, r.note || ""));
  });
  return svg;
}

// Plain horizontal bars of counts; `rows`: {label, value, color, note}.
function countBars(rows) {
  const rowH = 24, left = 150, right = 170, width = 640, height = rows.length * rowH + 6;
  const max = Math.max(1, ...rows.map((r) => r.value));
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  rows.forEach((r, i) => {
    const y = i * rowH + 3, w = (r.value / max) * (width - left - right);
    svg.append(s("text", { x: left - 8, y: y + 13, "text-anchor": "end" }, r.label));
    svg.append(title(s("rect", { class: r.value > 0 ? "mark" : "", x: left, y, width: Math.max(r.value > 0 ? 2 : 0, w),
                                 height: rowH - 8, rx: 3, fill: r.color || "#2563eb" }), `${r.label}: ${r.value}`));
    svg.append(s("text", { x: left + w + 6, y: y + 13 }, r.note !== undefined ? r.note : r.value));
  });
  return svg;
}

// Axes for time charts: x in ms since epoch, y in [0, 1] (percent) or [0, ymax].
function timeFrame(width, height, t0, t1, ymax, fmtY) {
  const m = { l: 44, r: 16, t: 10, b: 26 };
  const x = (t) => m.l + ((t - t0) / Math.max(1, t1 - t0)) * (width - m.l - m.r);
  const y = (v) => height - m.b - (v / ymax) * (height - m.t - m.b);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const g = s("g", { class: "grid" });
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4;
    g.append(s("line", { x1: m.l, x2: width - m.r, y1: y(v), y2: y(v) }));
    g.append(s("text", { x: m.l - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, fmtY(v)));
  }
  for (let i = 0; i <= 4; i++) {
    const t = t0 + ((t1 - t0) * i) / 4;
    g.append(s("text", { x: x(t), y: height - 8, "text-anchor": "middle", class: "tick" }, when(new Date(t).toISOString())));
  }
  svg.append(g);
  return { svg, x, y, m };
}

// ---- panels --------------------------------------------------------------------------------------
function drawVersions(v) {
  const runs = (v.runs || []).filter((r) => r.candidate_success !== null && r.candidate_success !== undefined);
  const gw = v.gateway || {};
  const history = gw.history || [];
  const serving = gw.serving;
  document.getElementById("serving").textContent = `serving: ${serving || "?"}`;
  if (gw.error) state.errors.push(`gateway: ${gw.error}`);
  const times = [...runs.map((r) => Date.parse(r.finished_at || r.at)), ...history.map((h) => Date.parse(h.at))];
  if (!times.length) return empty("versions", gw.error ? `no gate figures yet; ${gw.error}` : "no retrain run and no swap yet");
  let t0 = Math.min(...times), t1 = Math.max(...times, Date.parse(v.now));
  const pad = Math.max(60e3, (t1 - t0) * 0.05); t0 -= pad; t1 += pad;
  const { svg, x, y, m } = timeFrame(980, 300, t0, t1, 1, (p) => `${Math.round(p * 100)}%`);
  const marker = { promote: "#16a34a", rollback: "#dc2626", canary: "#d97706", load: "#9ca3af", restore: "#6b7280", unload: "#e5e7eb" };
  let row = 0;
  for (const h of history) {
    if (h.action === "unload") continue;
    const hx = x(Date.parse(h.at)), c = marker[h.action] || "#6b7280";
    svg.append(title(s("line", { class: h.action === "load" ? "" : "mark", x1: hx, x2: hx, y1: m.t, y2: 300 - m.b, stroke: c,
                                 "stroke-width": h.action === "load" ? 1 : 2, "stroke-dasharray": h.action === "promote" ? "" : "4 3" }),
                     `${when(h.at)} ${h.action}${h.canary ? ` ${h.canary}` : ""} ${h.version}${h.previous ? ` (was ${h.previous})` : ""}${h.detail ? `: ${h.detail}` : ""}`));
    // Along the bottom, staggered: the points (high success) sit near the top.
    if (h.action !== "load") svg.append(s("text", { x: hx + 3, y: 300 - m.b - 6 - 13 * (row++ % 4), fill: c }, `${h.action}${h.canary ? ` ${h.canary}` : ""} ${h.version}`));
  }
  // The held-out success of whatever served, as a step line: the gate's report split (which never selects),
  // else, for runs recorded before the split existed, the figure the gate decided on.
  const steps = [];
  for (const r of runs) {
    const at = x(Date.parse(r.finished_at || r.at));
    const served = r.status === "promoted" ? (r.candidate_report_success ?? r.candidate_success)
                                           : (r.serving_report_success ?? r.serving_success);
    if (served !== null && served !== undefined) steps.push([at, y(served)]);
  }
  if (steps.length) {
    let d = `M${steps[0][0]},${steps[0][1]}`;
    for (let i = 1; i < steps.length; i++) d += ` H${steps[i][0]} V${steps[i][1]}`;
    d += ` H${x(t1 - pad)}`;
    svg.append(s("path", { d, fill: "none", stroke: "#111827", "stroke-width": 1.5, opacity: 0.35 }));
  }
  for (const r of runs) {
    const at = x(Date.parse(r.finished_at || r.at));
    for (const [side, dx] of [["serving", -5], ["candidate", 5]]) {
      const rate = r[`${side}_success`], ci = r[`${side}_ci`], ver = r[side];
      if (rate === null || rate === undefined) continue;
      if (ci) svg.append(s("line", { x1: at + dx, x2: at + dx, y1: y(ci[0]), y2: y(ci[1]), stroke: colorOf(ver), "stroke-width": 2 }));
      const filled = side === "serving" || r.status === "promoted";
      const g = r.gate || {};
      svg.append(title(s("circle", { class: "mark", cx: at + dx, cy: y(rate), r: 5, fill: filled ? colorOf(ver) : "#fff",
                                     stroke: colorOf(ver), "stroke-width": 2 }),
        `${ver} (${side}) ${pct(rate)}${ci ? ` [${pct(ci[0])}–${pct(ci[1])}]` : ""} on ${g.n ?? "?"} tasks; run ${r.run_id}: ` +
        `${r.status}${g.p_value !== undefined ? `, b=${g.b} c=${g.c} p=${Number(g.p_value).toPrecision(2)}` : ""}`));
      if (side === "candidate") svg.append(s("text", { x: at + 9, y: y(rate) - 6 }, `${ver} ${pct(rate)}`));
    }
  }
  put("versions", svg, legend([["#16a34a", "promote"], ["#dc2626", "rollback"], ["#d97706", "canary"],
    ["#111827", "gate-measured success of the serving version (filled: serving/promoted, hollow: refused candidate; bars: 95% interval)"]]));
}

function drawLive(live) {
  document.getElementById("live-window").textContent = `last ${state.window}: ${live.total.n} episodes, ${pct(live.total.success_rate)} success`;
  const rows = (items) => items.map((g) => ({
    label: g.key, rate: g.success_rate, ci: g.ci, color: colorOf(g.key),
    note: `${g.successes}/${g.with_outcome}` + (g.with_feedback ? ` · fb ${num(g.mean_feedback, 2)} (${g.with_feedback})` : ""),
  }));
  for (const [name, items] of [["live-version", live.by_version], ["live-app", live.by_app], ["live-group", live.by_task_group]]) {
    if (!items.length) empty(name, `no episodes in the last ${state.window}`);
    else put(name, rateBars(rows(items)));
  }
  const series = {};
  for (const p of live.series) if (p.success_rate !== null) (series[p.key] = series[p.key] || []).push(p);
  const keys = Object.keys(series);
  if (!keys.length) return empty("live-series", `no verified episodes in the last ${state.window}`);
  const parse = (b) => b * 1000;
  const all = live.series.map((p) => parse(p.t));
  const step = live.bucket_s * 1000;
  const { svg, x, y } = timeFrame(640, 240, Math.min(...all) - step / 2, Math.max(...all) + step / 2, 1, (p) => `${Math.round(p * 100)}%`);
  for (const k of keys) {
    const pts = series[k].map((p) => [x(parse(p.t)), y(p.success_rate), p]);
    svg.append(s("polyline", { points: pts.map((q) => `${q[0]},${q[1]}`).join(" "), fill: "none", stroke: colorOf(k), "stroke-width": 2 }));
    for (const [px, py, p] of pts) {
      svg.append(title(s("circle", { class: "mark", cx: px, cy: py, r: 3 + Math.min(4, Math.log10(1 + p.with_outcome) * 2), fill: colorOf(k) }),
                       `${k} ${p.bucket}: ${pct(p.success_rate)} of ${p.with_outcome}`));
    }
  }
  put("live-series", svg, legend(keys.map((k) => [colorOf(k), k])));
}

function drawRuns(runs) {
  if (!runs.length) return empty("runs", "no retrain run recorded yet (`trainer run`, `trainer schedule`, `looplift up --retrain`)");
  const rows = runs.slice().reverse().slice(0, 20).map((r) => {
    const g = r.gate || {};
    const vs = r.candidate ? `${r.candidate} ${pct(r.candidate_success)} vs ${r.serving || "?"} ${pct(r.serving_success)}` : "–";
    return el("tr", { class: "mark" },
      el("td", {}, when(r.finished_at || r.at)), el("td", {}, r.trigger || ""),
      el("td", {}, el("span", { class: `badge ${r.status}` }, r.status)), el("td", {}, vs),
      el("td", { class: "num" }, g.n ?? "–"), el("td", { class: "num" }, g.b !== undefined ? `${g.b}/${g.c}` : "–"),
      el("td", { class: "num" }, g.p_value !== undefined ? Number(g.p_value).toPrecision(2) : "–"),
      el("td", { class: "num" }, r.exported ?? "–"), el("td", {}, r.reason || ""));
  });
  const head = el("tr", {}, ...["finished", "trigger", "decision", "candidate vs serving", "n", "b/c", "p", "exported", "reason"].map((h) => el("th", {}, h)));
  put("runs", el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
}

function drawData(d) {
  // Stacked bars: one bar per day, one colour per app.
  const days = [...new Set(d.per_app_day.map((r) => r.day))].sort();
  const apps = [...new Set(d.per_app_day.map((r) => r.app))].sort();
  if (!days.length) empty("per-day", "no trajectories in the last 30 days");
  else {
    const width = 640, height = 220, m = { l: 44, r: 10, t: 10, b: 26 };
    const totals = {};
    for (const r of d.per_app_day) totals[r.day] = (totals[r.day] || 0) + r.n;
    const max = Math.ceil(Math.max(...Object.values(totals)) / 4) * 4;  // integer ticks
    const bw = Math.min(48, (width - m.l - m.r) / days.length - 4);
    const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    const y = (v) => height - m.b - (v / max) * (height - m.t - m.b);
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4;
      svg.append(s("line", { x1: m.l, x2: width - m.r, y1: y(v), y2: y(v), stroke: "#e5e7eb" }));
      svg.append(s("text", { x: m.l - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, Math.round(v)));
    }
    days.forEach((day, i) => {
      const x0 = m.l + 4 + i * ((width - m.l - m.r) / days.length);
      let acc = 0;
      for (const app of apps) {
        const r = d.per_app_day.find((q) => q.day === day && q.app === app);
        if (!r) continue;
        svg.append(title(s("rect", { class: "mark", x: x0, y: y(acc + r.n), width: bw, height: y(acc) - y(acc + r.n), fill: colorOf(app) }),
                         `${day} ${app}: ${r.n}`));
        acc += r.n;
      }
      if (days.length <= 15 || i % Math.ceil(days.length / 10) === 0) {
        svg.append(s("text", { x: x0 + bw / 2, y: height - 8, "text-anchor": "middle", class: "tick" }, day.slice(5)));
      }
    });
    put("per-day", svg, legend(apps.map((a) => [colorOf(a), a])));
  }
  const sources = Object.entries(d.score_sources || {}).map(([k, v], i) => ({ label: k, value: v, color: PALETTE[i % PALETTE.length] }));
  if (!sources.some((r) => r.value > 0)) empty("score-sources", "nothing stored yet");
  else put("score-sources", countBars(sources),
           el("div", { class: "legend" }, `${d.total} trajectories, ${d.with_outcome} with a verifier outcome, ${d.feedback} feedback` +
              (d.quality_model ? `; quality model AUC ${num(d.quality_model.auc, 3)}` : "")));
  const pii = Object.entries(d.pii || {}).map(([k, v]) => ({ label: k, value: v, color: "#9333ea" }));
  if (!pii.length) empty("pii", "no personal data found in the last 30 days");
  else put("pii", countBars(pii), el("div", { class: "legend" }, `${d.trajectories_with_pii} trajectories had something replaced`));
  const ex = (d.exports || []).slice(-8);
  if (!ex.length) empty("exports", "no export yet (`collector export`, or a retrain run)");
  else put("exports", countBars(ex.map((e) => ({
    label: `${when(e.at)} ${e.format}`, value: e.count, color: "#0891b2",
    note: `${e.count} of ${e.matched}` + (e.dropped && Object.keys(e.dropped).length ? ` (−${Object.values(e.dropped).reduce((a, b) => a + b, 0)})` : ""),
  }))));
}

function drawHealth(h) {
  const gw = h.gateway || {};
  const pill = document.getElementById("gw-status");
  pill.textContent = `gateway: ${gw.status || "?"}`;
  pill.className = `pill ${gw.status === "ok" ? "ok" : gw.status === "not configured" ? "" : "bad"}`;
  const lf = h.langfuse || {};
  const tiles = el("div", { class: "tiles" },
    el("div", { class: "tile" }, el("b", { class: gw.status === "ok" ? "good" : "bad" }, gw.status || "?"), el("span", {}, "gateway")),
    el("div", { class: "tile" }, el("b", {}, gw.metrics ? num(gw.metrics.upstream_errors) : "–"), el("span", {}, "upstream errors")),
    el("div", { class: "tile" }, el("b", {}, lf.enabled ? `${lf.traces} / ${lf.dropped}` : "off"),
       el("span", {}, lf.enabled ? "Langfuse traces / dropped" : "Langfuse export")));
  // Capture, canary and drop families as tiles (a drop above 0 in red); replicas have their own table below.
  const replicas = gw.replicas || [];
  const extra = ((gw.metrics || {}).other || []).filter((o) => !(replicas.length && o.name.includes("replica")))
    .map((o) => el("div", { class: "tile" }, el("b", { class: /drop/.test(o.name) && o.value > 0 ? "bad" : "" }, num(o.value)),
      el("span", {}, `${o.name.replace("looplift_gateway_", "")} ${Object.values(o.labels).join(" ")}`)));
  tiles.append(...extra);
  const versions = Object.entries((gw.metrics || {}).by_version || {});
  const bars = versions.map(([k, v]) => ({ label: k, value: v.requests, color: colorOf(k),
    note: `${num(v.requests)} req · ${num(v.in_flight || 0)} in flight${v.errors ? ` · ${num(v.errors)} err` : ""}` }));
  if (gw.error) state.errors.push(`gateway health: ${gw.error}`);
  put("gateway", tiles, bars.length ? countBars(bars) : el("div", { class: "empty" }, gw.error || "no gateway metrics"));
  drawReplicas(replicas, gw);
  drawPools((h.latency || {}).by_app || []);
  const lat = (h.latency || {}).by_app || [];
  if (!lat.length) return empty("latency", "no steps recorded in this window");
  const rows = [];
  for (const a of lat) {
    rows.push({ label: `${a.app} model`, value: a.generate_p50 || 0, color: "#2563eb", note: `${secs(a.generate_p50)} / ${secs(a.generate_p95)}` });
    rows.push({ label: `${a.app} sandbox`, value: a.execute_p50 || 0, color: "#d97706",
                note: `${secs(a.execute_p50)} / ${secs(a.execute_p95)}${a.env_errors ? ` · ${a.env_errors} env errors` : ""}` });
  }
  put("latency", countBars(rows), el("div", { class: "legend" },
    lat.map((a) => `${a.app}: ${a.steps} steps in ${a.episodes} episodes`).join(" · ") + ` (newest ${h.latency.sample} episodes)`));
}

function drawReplicas(replicas, gw) {
  if (!replicas.length) return empty("replicas", gw.error || (gw.status === "not configured" ? "no gateway configured" : "the gateway listed no replica"));
  const rows = replicas.map((r) => el("tr", { class: "mark" },
    el("td", {}, r.url), el("td", {}, el("span", { class: `badge ${r.healthy ? "promoted" : "failed"}` }, r.healthy ? "healthy" : "down")),
    el("td", { class: "num" }, num(r.in_flight)), el("td", { class: "num" }, num(r.restarts || 0)),
    el("td", {}, (r.versions || []).join(", ") || "–"), el("td", {}, r.detail || "")));
  const head = el("tr", {}, ...["replica", "health", "in flight", "restarts", "versions", "why out"].map((t) => el("th", {}, t)));
  const load = replicas.reduce((a, r) => a + (r.in_flight || 0), 0);
  put("replicas", el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)),
      el("div", { class: "legend" }, `${replicas.filter((r) => r.healthy).length} of ${replicas.length} healthy, ${load} requests in flight`));
}

// One stacked bar per app: its sandbox pool's size split into in use / idle / resetting / starting.
function drawPools(apps) {
  const pools = apps.filter((a) => a.pool);
  if (!pools.length) return empty("sandboxes", "no step carried a sandbox pool snapshot (environments on a SandboxPool record one)");
  const parts = [["in_use", "#d97706", "in use"], ["idle", "#16a34a", "idle"], ["resetting", "#2563eb", "resetting"], ["starting", "#9ca3af", "starting"]];
  const rowH = 30, left = 120, right = 250, width = 640, height = pools.length * rowH + 6;
  const max = Math.max(1, ...pools.map((a) => a.pool.size));
  const x = (v) => (v / max) * (width - left - right);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  pools.forEach((a, i) => {
    const p = a.pool, y = i * rowH + 4;
    svg.append(s("text", { x: left - 8, y: y + 14, "text-anchor": "end" }, a.app));
    svg.append(s("rect", { x: left, y, width: x(p.size), height: rowH - 12, rx: 3, fill: "none", stroke: "#d1d5db" }));
    let acc = 0;
    for (const [k, c, label] of parts) {
      const v = p[k] || 0;
      if (v <= 0) continue;
      svg.append(title(s("rect", { class: "mark", x: left + x(acc), y, width: x(v), height: rowH - 12, fill: c }), `${a.app}: ${v} ${label} of ${p.size}`));
      acc += v;
    }
    const trouble = (p.start_failures ? ` · ${p.start_failures} failed starts` : "") + (p.replaced ? ` · ${p.replaced} replaced` : "");
    svg.append(s("text", { x: width - right + 8, y: y + 14 }, `${p.in_use || 0}/${p.size} in use · exec ${secs(a.execute_p50)} / ${secs(a.execute_p95)}${trouble}`));
  });
  put("sandboxes", svg, legend(parts.map(([, c, label]) => [c, label]).concat([["#d1d5db", "pool size (outline)"]])));
}

// ---- loading -------------------------------------------------------------------------------------
async function get(path) {
  const r = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` }, cache: "no-store" });
  if (r.status === 401 || r.status === 503) {
    const body = await r.json().catch(() => ({}));
    const err = new Error((body.error && body.error.message) || `HTTP ${r.status}`);  // the OpenAI error shape
    err.auth = true;
    throw err;
  }
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

async function load() {
  const w = encodeURIComponent(state.window);
  const panels = [
    ["/v1/dashboard/versions", drawVersions, ["versions"]],
    [`/v1/dashboard/live?window=${w}`, drawLive, ["live-version", "live-series", "live-app", "live-group"]],
    ["/v1/dashboard/runs", drawRuns, ["runs"]],
    ["/v1/dashboard/data", drawData, ["per-day", "score-sources", "pii", "exports"]],
    [`/v1/dashboard/health?window=${w}`, drawHealth, ["gateway", "latency", "replicas", "sandboxes"]],
  ];
  state.errors.length = 0;
  let authError = null;
  await Promise.all(panels.map(async ([path, draw, names]) => {
    try {
      draw(await get(path));
    } catch (e) {
      if (e.auth) authError = e.message;
      state.errors.push(`${path}: ${e.message}`);
      for (const n of names) fail(n, `could not load: ${e.message}`);
    }
  }));
  if (authError) return showLogin(authError);
  document.getElementById("updated").textContent = `updated ${new Date().toISOString().slice(11, 19)} UTC`;
  window.__dashboard.ready = true;
}

function showLogin(message) {
  document.getElementById("main").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  window.__dashboard.ready = true;
}

function start() {
  const w = /(?:^#|&)window=(\d+[mhd])/.exec(location.hash);
  if (w) {
    state.window = w[1];
    const sel = document.getElementById("window");
    if (![...sel.options].some((o) => o.value === w[1])) sel.append(el("option", { value: w[1] }, w[1]));
    sel.value = w[1];
  }
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("looplift-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);  // the token leaves the address bar
  }
  state.token = sessionStorage.getItem("looplift-token");
  document.getElementById("window").addEventListener("change", (e) => { state.window = e.target.value; load(); });
  document.getElementById("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("looplift-token", document.getElementById("token").value.trim());
    location.reload();
  });
  if (!state.token) return showLogin("");
  load();
  setInterval(() => { if (!document.hidden) load(); }, 15000);
}

start();
