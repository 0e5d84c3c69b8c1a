// The explorer page: renders the frames embedded by `quiesce explore` (see _session.py for
// their shape). No library, no build step. The URL fragment holds the cursor (`#step=N`)
// and, once a step was taken by hand, the whole path as action indices (`#path=2.0.4&step=N`),
// so a reload or a link (served) comes back to the same place.
"use strict";

const data = JSON.parse(document.getElementById("data").textContent);
const frames = data.frames;
let violation = data.violation; // dropped once a hand step leaves the path before it
let handTaken = false; // has the path left the one the page was opened on?
let cursor = 0;

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

const text = (value) => (value === undefined || value === null ? "-" : JSON.stringify(value));
const classNames = (names) => names.filter(Boolean).join(" ");

function show(step) {
  cursor = Math.max(0, Math.min(frames.length - 1, step));
  const path = handTaken ? "path=" + frames.slice(1).map((frame) => frame.via).join(".") + "&" : "";
  history.replaceState(null, "", `#${path}step=${cursor}`);
  render();
}

// Take the `index`-th enabled action of the frame at the cursor: the next frame when the
// path already goes that way, else (served only) ask the server and cut the path there.
async function extend(index) {
  const next = frames[cursor + 1];
  if (next && next.via === index) return true;
  if (!data.served) return false;
  const response = await fetch("api/step", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ state: frames[cursor].id, action: index }),
  });
  if (!response.ok) {
    $("actions-note").textContent = "step refused: " + (await response.text());
    return false;
  }
  frames.splice(cursor + 1, frames.length, await response.json());
  if (violation && violation.step > cursor) violation = null;
  handTaken = true;
  return true;
}

async function take(index) {
  if (await extend(index)) show(cursor + 1);
}

async function fromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const path = params.get("path");
  if (path) {
    cursor = 0;
    for (const via of path.split(".").map(Number)) {
      if (!(await extend(via))) break;
      cursor += 1;
    }
  }
  // With no step asked for, a counterexample opens on its violating step.
  const opening = violation ? violation.step : 0;
  show(params.has("step") ? Number(params.get("step")) : opening);
}

function renderHeader(frame) {
  const params = Object.entries(data.params).map(([k, v]) => `${k}=${v}`).join(" ");
  $("title").textContent = data.title;
  $("origin").textContent = `${params} \u2014 ${data.origin}`;
  $("position").textContent = `step ${cursor} / ${frames.length - 1}`;
  const banner = $("banner");
  // At the violating step the step's own card says it (red): the banner would repeat it.
  banner.hidden = !violation || cursor === violation.step;
  if (violation) {
    const loop = violation.loop_from === null ? "" : `, looping back to step ${violation.loop_from}`;
    const where = `at step ${violation.step}${loop}`;
    banner.textContent = `${violation.property} violated (${violation.kind}) ${where}`;
    banner.className = cursor === violation.step ? "at" : "";
  }
}

function renderPath() {
  $("path").replaceChildren(
    ...frames.map((frame, i) => {
      const classes = [i === cursor && "current", violation && i === violation.step && "violation"];
      const label = i === 0 ? "initial state" : frame.action + (frame.fault ? " [fault]" : "");
      return el("li", { class: classNames(classes), onclick: () => show(i) }, label);
    }),
  );
}

function renderActions(frame) {
  const next = frames[cursor + 1];
  $("actions").replaceChildren(
    ...frame.actions.map((action, i) => {
      const taken = next !== undefined && next.via === i;
      const button = el("button", { class: classNames([taken && "taken", action.fault && "fault"]) },
        action.label);
      if (data.served || taken) button.addEventListener("click", () => take(i));
      else button.disabled = true;
      return el("li", {}, button);
    }),
  );
  const saved = "a saved page follows its path only; serve it (no --html) to step anywhere";
  $("actions-note").textContent = frame.actions.length === 0 ? "no action is enabled here"
    : data.served ? "" : saved;
}

// An always property holds or fails in each state; no_stall is judged on paths, so a state
// only shows whether it is a goal, a deadlock, or moving on (unknown), unless it is where
// the violation ends.
function statusOf(name, frame, violatedHere) {
  if (violatedHere) return "fails";
  if (name in frame.holds) return frame.holds[name] ? "holds" : "fails";
  return { goal: "holds", deadlock: "fails" }[frame.stall] || "unknown";
}

function renderProperties(frame) {
  $("properties").replaceChildren(
    ...data.properties.map((property) => {
      const here = violation && cursor === violation.step && violation.property === property.name;
      const always = property.name in frame.holds;
      const note = always ? "" : ` (${frame.stall})`;
      const status = classNames([statusOf(property.name, frame, here), here && "violated"]);
      return el("li", { class: status, "data-property": property.name },
        property.name + note, " ", el("span", { class: "doc" }, property.doc));
    }),
  );
}

// A value of the diff, short: keys unquoted, a space after each comma, so it wraps.
function short(value) {
  if (Array.isArray(value)) return "[" + value.map(short).join(", ") + "]";
  if (value && typeof value === "object") {
    return "{" + Object.entries(value).map(([key, inner]) => `${key}: ${short(inner)}`).join(", ") + "}";
  }
  return value === undefined ? "-" : JSON.stringify(value);
}

// One side of a changed field: a list one element a line, the elements the other side
// lacks marked (`mark` is "added" or "removed"), anything else as one short value.
function side(value, other, mark) {
  if (!Array.isArray(value) || value.length === 0) return el("td", {}, short(value));
  const theirs = new Set((Array.isArray(other) ? other : []).map(short));
  return el("td", {}, ...value.map((item) => {
    const shown = short(item);
    return el("div", { class: classNames(["item", !theirs.has(shown) && mark]) }, shown);
  }));
}

function renderChanges(frame) {
  const rows = frame.changes.map((change) => el("tr", { "data-field": change.field },
    el("td", {}, change.field), side(change.before, change.after, "removed"),
    side(change.after, change.before, "added")));
  const none = el("tr", {}, el("td", { class: "muted" }, cursor ? "nothing" : "the initial state"));
  $("changes").replaceChildren(...(rows.length ? rows : [none]));
}

const shownName = Object.fromEntries(data.instances.map((i) => [i.name, i.shown || i.name]));

// The instances the step into `cursor` moved: rows fired, or a control state changed.
function movedBy(frame) {
  const before = frames[cursor - 1];
  if (!before) return [];
  return data.instances.filter((i) => i.name in frame.fired
    || before.controls[i.name] !== frame.controls[i.name]);
}

function renderStep(frame) {
  const here = violation && cursor === violation.step;
  $("step").className = here ? "violating" : "";
  $("step-title").replaceChildren(`Step ${cursor}: `,
    el("span", { class: "action" }, cursor ? frame.action + (frame.fault ? " [fault]" : "")
      : "the initial state"));
  const verdict = $("verdict");
  verdict.hidden = !here;
  if (here) {
    const property = data.properties.find((p) => p.name === violation.property);
    verdict.textContent = `${violation.property} violated by this step` +
      (property ? `: ${property.doc}` : "");
  }
  const before = frames[cursor - 1];
  $("moves").replaceChildren(...movedBy(frame).map((instance) => {
    const from = before.controls[instance.name], to = frame.controls[instance.name];
    const rows = (frame.fired[instance.name] || []).map((row) => data.rows[instance.table][row]);
    return el("tr", { "data-instance": instance.name },
      el("td", { title: instance.name }, shownName[instance.name]),
      el("td", {}, `${from === null ? "(absent)" : from} \u2192 ${to === null ? "(absent)" : to}`),
      el("td", {}, rows.join("; ") || "(no row: the instance appeared or went)"));
  }));
}
function coveredRows() {
  const covered = {};
  for (const frame of frames.slice(1)) {
    for (const [name, rows] of Object.entries(frame.fired)) {
      covered[name] = covered[name] || new Set();
      rows.forEach((row) => covered[name].add(row));
    }
  }
  return covered;
}

// Which cards the reader opened or closed by hand: kept as they chose, step after step.
// (`toggle` fires later for the page's own changes too: those match `auto`, the last
// state the page set.)
const chosen = new Map();
const auto = new Map();

function renderTables(frame, covered) {
  const moved = new Set(movedBy(frame).map((instance) => instance.name));
  for (const instance of data.instances) {
    const card = document.querySelector(`.instance[data-instance="${CSS.escape(instance.name)}"]`);
    const current = frame.controls[instance.name];
    card.querySelector("summary b").textContent = current === null ? "(absent)" : current;
    card.classList.toggle("moved", moved.has(instance.name));
    card.style.order = moved.has(instance.name) ? 0 : 1;
    auto.set(instance.name, moved.has(instance.name) || (cursor === 0 && frames.length === 1));
    card.open = chosen.has(instance.name) ? chosen.get(instance.name) : auto.get(instance.name);
    card.querySelectorAll(".node").forEach((node) => {
      node.classList.toggle("current", node.dataset.state === current);
    });
    const fired = new Set(frame.fired[instance.name] || []);
    const seen = covered[instance.name] || new Set();
    card.querySelectorAll(".edge, .trunk").forEach((edge) => {
      const rows = edge.dataset.rows.split(" ").map(Number);
      edge.classList.toggle("fired", rows.some((row) => fired.has(row)));
      edge.classList.toggle("covered", rows.some((row) => seen.has(row)));
    });
  }
}

function renderCoverage(covered) {
  $("coverage").replaceChildren(
    el("tr", {}, el("th", {}, "instance"), el("th", {}, "rows fired"), el("th", {}, "which")),
    ...data.instances.map((instance) => {
      const all = data.rows[instance.table];
      const seen = [...(covered[instance.name] || [])].sort((a, b) => a - b);
      return el("tr", { "data-instance": instance.name },
        el("td", { title: instance.name }, shownName[instance.name]),
        el("td", {}, `${seen.length} / ${all.length}`),
        el("td", {}, seen.map((row) => `#${row} ${all[row]}`).join("\n")));
    }),
  );
}

function render() {
  const frame = frames[cursor];
  const covered = coveredRows();
  renderHeader(frame);
  renderPath();
  renderActions(frame);
  renderProperties(frame);
  renderStep(frame);
  renderChanges(frame);
  renderTables(frame, covered);
  renderCoverage(covered);
  $("state").textContent = JSON.stringify(frame.state, null, 1);
}

function buildTables() {
  $("tables").replaceChildren(
    ...data.instances.map((instance) => {
      const card = el("details", { class: "instance", "data-instance": instance.name },
        el("summary", { title: instance.name }, `${shownName[instance.name]} `,
          el("span", { class: "table" }, `(${instance.table})`), ": ", el("b")));
      card.insertAdjacentHTML("beforeend", data.diagrams[instance.table]);
      card.addEventListener("toggle", () => {
        if (chosen.has(instance.name) || card.open !== auto.get(instance.name)) {
          chosen.set(instance.name, card.open);
        }
      });
      return card;
    }),
  );
}

$("first").addEventListener("click", () => show(0));
$("back").addEventListener("click", () => show(cursor - 1));
$("forward").addEventListener("click", () => show(cursor + 1));
$("last").addEventListener("click", () => show(frames.length - 1));
document.addEventListener("keydown", (event) => {
  const moves = { ArrowLeft: cursor - 1, ArrowRight: cursor + 1, Home: 0, End: frames.length - 1 };
  if (event.key in moves) {
    event.preventDefault();
    show(moves[event.key]);
  }
});
window.addEventListener("hashchange", fromFragment);
buildTables();
fromFragment();
