// The run report: a Jepsen-style timeline (one lane per participant) and charts over
// training steps, drawn as inline SVG from REPORT (the RunRecorder's document). No network.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = {
  phase: "#4c78a8", admission: "#9aa3b5", restore: "#8e44ad", fence: "#e39c37",
  running: "#59a14f", parked: "#3d7dd8", frozen: "#17becf",
  outcome: "#2f3b52", fault: "#d62728", restart: "#ff7f0e", crash: "#111111",
  kill: "#a50026",
};
const PHASE_COLORS = {
  closing_admission: "#9ecae9", flushing_acks: "#6baed6", preparing: "#4c78a8",
  committing: "#2f6690", capturing: "#72b7b2", validating: "#54a24b", publishing: "#3b8b3b",
  releasing: "#88d27a", aborting: "#e45756", abort_pending: "#b3261e",
  release_pending: "#f58518", stopped: "#000000",
};
const OUTCOME_COLORS = { completed: "#2ca02c", skipped: "#9aa3b5", failed: "#d62728" };
const CAUSE_COLORS = ["#d62728", "#e377c2", "#ff7f0e", "#8c564b", "#bcbd22", "#7f7f7f"];
const LEFT = 132, RIGHT = 16, AXIS = 22;
const LANE_H = { controller: 64, agent: 50, other: 28 };

const items = [];  // every drawn event, by data-i: its tooltip
let view = { t0: 0, t1: Math.max(REPORT.end, 1e-6) };

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function fmt(v) {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
  if (Array.isArray(v)) return v.length ? v.join(", ") : "-";
  if (v === null || v === undefined) return "-";
  return String(v);
}

function register(node, title, tip) {
  node.classList.add("ev");
  node.dataset.i = String(items.length);
  items.push({ title: title, tip: tip });
  el("title", {}, node).textContent = title;
  return node;
}

function showTip(index, x, y) {
  const box = document.getElementById("tip");
  const item = items[index];
  box.replaceChildren();
  const head = document.createElement("b");
  head.textContent = item.title;
  box.appendChild(head);
  const lines = Object.entries(item.tip).map(([k, v]) => k + ": " + fmt(v));
  box.appendChild(document.createTextNode("\n" + lines.join("\n")));
  box.style.display = "block";
  box.style.left = Math.min(x + 12, window.innerWidth - 470) + "px";
  box.style.top = (y + 14) + "px";
  box.dataset.shown = String(index);
}

function hideTip() { document.getElementById("tip").style.display = "none"; }

function laneHeight(lane) {
  return LANE_H[lane.role] || (lane.role === "agent" ? LANE_H.agent : LANE_H.other);
}

function drawTimeline() {
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  const width = Math.max(svg.clientWidth || 1200, 700);
  const lanes = REPORT.lanes;
  const tops = {};
  let y = AXIS;
  for (const lane of lanes) { tops[lane.name] = y; y += laneHeight(lane) + 6; }
  const height = y + 4;
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("height", String(height));
  const span = view.t1 - view.t0;
  const x = (t) => LEFT + ((t - view.t0) / span) * (width - LEFT - RIGHT);
  const visible = (t0, t1) => t1 >= view.t0 && t0 <= view.t1;
  const clampX = (t) => Math.max(LEFT, Math.min(width - RIGHT, x(t)));

  // The axis: about 10 ticks of a round step.
  const axis = el("g", { class: "axis" }, svg);
  const raw = span / 10, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const tick = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  for (let t = Math.ceil(view.t0 / tick) * tick; t <= view.t1; t += tick) {
    el("line", { x1: x(t), x2: x(t), y1: AXIS - 4, y2: height }, axis);
    el("text", { x: x(t) + 2, y: 12 }, axis).textContent = (+t.toFixed(6)) + " s";
  }

  // Lanes: a name column and a light background.
  const laneGroups = {};
  lanes.forEach((lane, i) => {
    const g = el("g", { class: "lane", "data-lane": lane.name, "data-role": lane.role }, svg);
    const top = tops[lane.name], h = laneHeight(lane);
    el("rect", { x: 0, y: top - 3, width: width, height: h + 6, fill: i % 2 ? "#fff" : "#f6f7f9" }, g);
    el("text", { class: "lane-name", x: 8, y: top + 13 }, g).textContent = lane.name;
    el("text", { class: "lane-role", x: 8, y: top + 26 }, g).textContent = lane.role;
    laneGroups[lane.name] = g;
  });

  // Admission-closed windows shade every lane (Jepsen shades faults the same way).
  const shade = el("g", { class: "shade" }, svg);
  for (const s of REPORT.spans) {
    if (s.kind !== "admission" || !visible(s.t0, s.t1)) continue;
    el("rect", { x: clampX(s.t0), y: AXIS, width: Math.max(clampX(s.t1) - clampX(s.t0), 1),
                 height: height - AXIS, fill: COLORS.admission, opacity: 0.16 }, shade);
  }

  // Rows inside a lane: [y offset, height].
  const rows = {
    phase: [2, 14], admission: [19, 7], restore: [30, 14],
    fence: [2, 12], running: [17, 9], parked: [28, 9], frozen: [39, 9],
  };
  for (const s of REPORT.spans) {
    if (!visible(s.t0, s.t1) || !(s.lane in laneGroups)) continue;
    const [dy, h] = rows[s.kind] || [2, 10];
    const x0 = clampX(s.t0), w = Math.max(clampX(s.t1) - x0, 2);
    const fill = s.kind === "phase" ? (PHASE_COLORS[s.label] || COLORS.phase) : COLORS[s.kind];
    const rect = el("rect", { x: x0, y: tops[s.lane] + dy, width: w, height: h, fill: fill, rx: 1,
                              "data-kind": s.kind,
                              opacity: s.kind === "restore" ? 0.85 : 1 }, laneGroups[s.lane]);
    register(rect, s.kind + ": " + s.label + " (" + s.t0.toFixed(3) + "–" + s.t1.toFixed(3) + " s)",
             s.tip);
    if (s.kind === "restore" && w > 60) {
      el("text", { x: x0 + 3, y: tops[s.lane] + dy + 11, fill: "#fff", "pointer-events": "none" },
         laneGroups[s.lane]).textContent = "restore " + s.label;
    }
  }

  for (const m of REPORT.marks) {
    if (m.t < view.t0 || m.t > view.t1 || !(m.lane in laneGroups)) continue;
    const g = laneGroups[m.lane], top = tops[m.lane], mx = x(m.t);
    let node;
    if (m.kind === "fault") {
      node = el("path", { d: `M${mx - 5},${top + 1} L${mx + 5},${top + 1} L${mx},${top + 11} Z`,
                          fill: COLORS.fault }, g);
    } else if (m.kind === "restart") {
      node = el("circle", { cx: mx, cy: top + 8, r: 6, fill: COLORS.restart,
                            stroke: "#fff", "stroke-width": 1.5 }, g);
    } else if (m.kind === "kill") {
      const h = laneHeight(lanes.find((lane) => lane.name === m.lane) || { role: "other" });
      el("line", { x1: mx, x2: mx, y1: top - 2, y2: top + h + 2, stroke: COLORS.kill,
                   "stroke-width": 2, "stroke-dasharray": "3 2", "pointer-events": "none" }, g);
      node = el("path", { d: `M${mx},${top} l4,6 l-3,0 l4,8 l-8,-9 l3,0 l-3,-5 Z`,
                          fill: COLORS.kill, stroke: "#fff", "stroke-width": 0.8 }, g);
      const hit = el("rect", { x: mx - 7, y: top - 1, width: 14, height: 18, fill: "transparent" }, g);
      register(hit, "SIGKILL " + m.lane + " at " + m.t.toFixed(3) + " s", m.tip)
        .setAttribute("data-kind", "kill-hit");
    } else if (m.kind === "crash") {
      el("line", { x1: mx, x2: mx, y1: AXIS, y2: height, stroke: COLORS.crash,
                   "stroke-dasharray": "4 3", "pointer-events": "none" }, svg);
      node = el("path", { d: `M${mx - 7},${top + 47} l14,14 m0,-14 l-14,14`,
                          stroke: COLORS.crash, "stroke-width": 3, fill: "none" }, g);
      const hit = el("rect", { x: mx - 8, y: top + 46, width: 16, height: 16, fill: "transparent" }, g);
      register(hit, "controller crash", m.tip).setAttribute("data-kind", "crash-hit");
    } else {
      const color = OUTCOME_COLORS[m.label] || COLORS.outcome;
      node = el("path", { d: `M${mx},${top + 48} l5,7 l-5,7 l-5,-7 Z`, fill: color }, g);
    }
    node.setAttribute("data-kind", m.kind);
    register(node, m.kind + ": " + m.label + " at " + m.t.toFixed(3) + " s", m.tip);
  }
  // A kind the run could not measure is said so where it would be drawn, never faked.
  const unmeasured = REPORT.unmeasured || {};
  if ("running" in unmeasured) {
    for (const lane of lanes) {
      if (lane.role !== "agent") continue;
      el("text", { class: "unmeasured", x: LEFT + 6, y: tops[lane.name] + 34, fill: "#8a90a0",
                   "font-style": "italic" }, laneGroups[lane.name]).textContent =
        "executions running / parked / frozen: " + unmeasured.running;
    }
  }
  document.getElementById("timeline").dataset.lanes = String(lanes.length);
}

// ------------------------------------------------------------------ charts over steps

function chart(title, id, bars, unit, keys) {
  const box = document.createElement("div");
  box.className = "chart";
  box.id = id;
  const h3 = document.createElement("h3");
  h3.textContent = title;
  box.appendChild(h3);
  const W = 300, H = 150, L = 34, B = 18, T = 6;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" }, box);
  const max = Math.max(1e-9, ...bars.map((b) => b.parts.reduce((a, p) => a + p.value, 0)));
  const bw = (W - L - 4) / Math.max(bars.length, 1);
  el("line", { x1: L, x2: W, y1: H - B, y2: H - B, stroke: "#ccd" }, svg);
  el("text", { x: 2, y: T + 8 }, svg).textContent = fmt(+max.toPrecision(3));
  el("text", { x: 2, y: H - B }, svg).textContent = "0";
  bars.forEach((bar, i) => {
    let base = H - B;
    for (const part of bar.parts) {
      const h = (part.value / max) * (H - B - T);
      const rect = el("rect", { class: "bar", x: L + i * bw + 2, y: base - h,
                                width: Math.max(bw - 4, 1), height: Math.max(h, part.value ? 1 : 0),
                                fill: part.color, "data-step": bar.step }, svg);
      register(rect, `step ${bar.step}: ${part.name} ${fmt(part.value)}${unit}`, bar.tip);
      rect.addEventListener("click", () => zoomToStep(bar.step));
      base -= h;
    }
    el("text", { x: L + i * bw + bw / 2 - 3, y: H - 4 }, svg).textContent = String(bar.step);
  });
  if (keys) {
    const legend = document.createElement("div");
    legend.className = "keys";
    for (const [name, color] of keys) {
      const key = document.createElement("span");
      const sw = document.createElement("i");
      sw.style.background = color;
      key.append(sw, name);
      legend.appendChild(key);
    }
    box.appendChild(legend);
  }
  document.getElementById("charts").appendChild(box);
}

function drawCharts() {
  document.getElementById("charts").replaceChildren();
  const steps = REPORT.steps;
  const tip = (s) => ({ step: s.step, from_s: s.t0, to_s: s.t1, checkpoint_s: s.checkpoint_s,
                        admission_closed_s: s.admission_closed_s, completed: s.completed,
                        skipped: s.skipped, failed: Object.entries(s.failed).map(([c, n]) => c + " " + n),
                        items_trained: s.items, goodput_items_per_s: s.goodput });
  chart("checkpoint seconds", "chart-checkpoint", steps.map((s) => ({ step: s.step, tip: tip(s),
        parts: [{ name: "checkpoint", value: s.checkpoint_s, color: COLORS.phase }] })), " s");
  chart("admission closed (s)", "chart-admission", steps.map((s) => ({ step: s.step, tip: tip(s),
        parts: [{ name: "admission closed", value: s.admission_closed_s, color: COLORS.admission }] })), " s");
  const causes = [...new Set(steps.flatMap((s) => Object.keys(s.failed)))].sort();
  chart("attempts: completed / failed by cause", "chart-attempts", steps.map((s) => ({
        step: s.step, tip: tip(s),
        parts: [{ name: "completed", value: s.completed, color: OUTCOME_COLORS.completed },
                { name: "skipped", value: s.skipped, color: OUTCOME_COLORS.skipped },
                ...causes.map((c, i) => ({ name: "failed " + c, value: s.failed[c] || 0,
                                           color: CAUSE_COLORS[i % CAUSE_COLORS.length] }))] })), "",
        [["completed", OUTCOME_COLORS.completed], ["skipped", OUTCOME_COLORS.skipped],
         ...causes.map((c, i) => [c, CAUSE_COLORS[i % CAUSE_COLORS.length]])]);
  chart("goodput (items trained / s)", "chart-goodput", steps.map((s) => ({ step: s.step, tip: tip(s),
        parts: [{ name: "goodput", value: s.goodput, color: COLORS.running }] })), " /s");
}

function zoomToStep(step) {
  const s = REPORT.steps.find((row) => row.step === step);
  if (!s) return;
  const pad = (s.t1 - s.t0) * 0.05;
  view = { t0: Math.max(0, s.t0 - pad), t1: s.t1 + pad };
  redraw();
}

// ------------------------------------------------------------------ page

function drawHeader() {
  document.getElementById("title").textContent = REPORT.title;
  document.getElementById("clock").textContent = "Times: " + REPORT.clock + ".";
  const parts = REPORT.headline;
  const box = document.getElementById("summary");
  box.replaceChildren();
  parts.forEach(([k, v], i) => {
    if (i) box.appendChild(document.createTextNode(" · "));
    box.appendChild(document.createTextNode(k + " "));
    const b = document.createElement("b");
    b.textContent = fmt(v);
    if (k === "verdict" && v !== "ok") b.className = "bad";
    box.appendChild(b);
  });
  const legend = document.getElementById("legend");
  legend.replaceChildren();
  const names = { phase: "checkpoint phase", admission: "admission closed", restore: "restore",
                  fence: "fence not idle", running: "executions running", parked: "executions parked",
                  frozen: "executions frozen", outcome: "attempt outcome", fault: "injected fault",
                  restart: "restart", crash: "controller crash", kill: "SIGKILL" };
  const unmeasured = REPORT.unmeasured || {};
  for (const kind of REPORT.kinds) {
    const item = document.createElement("span");
    item.dataset.kind = kind;
    const sw = document.createElement("i");
    sw.style.background = COLORS[kind];
    item.append(sw, names[kind] || kind);
    if (kind in unmeasured) {
      // Listed, greyed, with why: the page never draws what the run did not measure.
      item.className = "unmeasured";
      item.dataset.unmeasured = "yes";
      item.title = unmeasured[kind];
    }
    legend.appendChild(item);
  }
  const byReason = new Map();
  for (const kind of REPORT.kinds) {
    if (!(kind in unmeasured)) continue;
    const reason = unmeasured[kind];
    if (!byReason.has(reason)) byReason.set(reason, []);
    byReason.get(reason).push(names[kind] || kind);
  }
  const note = document.getElementById("unmeasured");
  note.replaceChildren();
  for (const [reason, kinds] of byReason) {
    const line = document.createElement("div");
    const what = document.createElement("b");
    what.textContent = kinds.join(", ") + ": ";
    line.append(what, reason);
    note.appendChild(line);
  }
}

function redraw() {
  hideTip();
  drawTimeline();
  drawCharts();
}

function fromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("t0") && params.has("t1")) view = { t0: +params.get("t0"), t1: +params.get("t1") };
  if (params.has("step")) zoomToStep(+params.get("step")); else redraw();
  // `#tip=KIND` (or KIND.N) shows the details of the first (N-th) drawn event of KIND, as
  // a hover would.
  const wanted = params.get("tip");
  if (wanted) {
    const [kind, nth] = wanted.split(".");
    const node = document.querySelectorAll(`[data-kind="${kind}"].ev`)[+(nth || 0)];
    if (node) {
      const box = node.getBoundingClientRect();
      showTip(+node.dataset.i, box.left, box.top);
    }
  }
}

function wire() {
  const svg = document.getElementById("timeline");
  document.addEventListener("mouseover", (e) => {
    const node = e.target.closest ? e.target.closest(".ev") : null;
    if (node) showTip(+node.dataset.i, e.clientX, e.clientY); else hideTip();
  });
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const box = svg.getBoundingClientRect();
    const width = box.width - LEFT - RIGHT;
    const at = view.t0 + ((e.clientX - box.left - LEFT) / width) * (view.t1 - view.t0);
    const factor = e.deltaY > 0 ? 1.25 : 0.8;
    view = { t0: Math.max(0, at - (at - view.t0) * factor), t1: at + (view.t1 - at) * factor };
    drawTimeline();
  }, { passive: false });
  let drag = null;
  svg.addEventListener("mousedown", (e) => { drag = { x: e.clientX, view: { ...view } }; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const width = svg.getBoundingClientRect().width - LEFT - RIGHT;
    const dt = ((e.clientX - drag.x) / width) * (drag.view.t1 - drag.view.t0);
    view = { t0: drag.view.t0 - dt, t1: drag.view.t1 - dt };
    drawTimeline();
  });
  svg.addEventListener("dblclick", () => { view = { t0: 0, t1: Math.max(REPORT.end, 1e-6) }; drawTimeline(); });
  window.addEventListener("resize", drawTimeline);
  window.addEventListener("hashchange", fromHash);
}

drawHeader();
wire();
fromHash();
if (document.body.dataset.rendered !== "error") document.body.dataset.rendered = "ok";
