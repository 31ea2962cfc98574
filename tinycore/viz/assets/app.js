// The VIZ page: lists of schedules and kernels, a kernel's passes, a pass's graph (laid out by dagre in a web
// worker, drawn on a canvas with only the visible part painted), the source, the linear program and the timeline.
"use strict";

const state = {
  summary: null, kernels: new Map(), schedules: new Map(),
  kernel: null, schedule: null, pass: 0, tab: "graph",
  drawing: null, layoutRequest: 0, timelineView: null,
};
const $ = (id) => document.getElementById(id);
const WORKER_URL = "/assets/layout.worker.js";
let worker = new Worker(WORKER_URL), workerBusy = false;

function idleWorker() {
  // a layout still running is for a graph no longer wanted: stop it rather than queue behind it
  if (workerBusy) {
    worker.terminate();
    worker = new Worker(WORKER_URL);
  }
  return worker;
}

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

// ---- lists ----

function listItem(text, count, onClick) {
  const item = document.createElement("li");
  item.textContent = text;
  item.title = text;
  if (count !== undefined && count !== null) {
    const badge = document.createElement("span");
    badge.className = "count";
    badge.textContent = count;
    item.prepend(badge);
  }
  item.addEventListener("click", onClick);
  return item;
}

function renderLists() {
  const filter = $("filter").value.trim().toLowerCase();
  const kernels = $("kernels"), schedules = $("schedules");
  kernels.replaceChildren();
  schedules.replaceChildren();
  for (const schedule of state.summary.schedules) {
    if (filter && !schedule.name.toLowerCase().includes(filter)) continue;
    const item = listItem(schedule.name, null, () => selectSchedule(schedule.id));
    item.className = "schedule" + (state.schedule === schedule.id ? " selected" : "");
    item.dataset.id = schedule.id;
    schedules.append(item);
  }
  for (const kernel of state.summary.kernels) {
    if (filter && !kernel.name.toLowerCase().includes(filter)) continue;
    const item = listItem(kernel.name, kernel.passes.length, () => selectKernel(kernel.id));
    item.className = "kernel" + (state.kernel === kernel.id ? " selected" : "");
    item.dataset.id = kernel.id;
    item.dataset.name = kernel.name;
    kernels.append(item);
  }
}

function visibleKernelIds() {
  return [...document.querySelectorAll("#kernels li.kernel")].map((item) => Number(item.dataset.id));
}

// ---- kernels and passes ----

async function loadKernel(id) {
  if (!state.kernels.has(id)) state.kernels.set(id, await getJSON(`/api/kernel/${id}`));
  return state.kernels.get(id);
}

async function selectKernel(id, passIndex) {
  const kernel = await loadKernel(id);
  state.kernel = id;
  state.schedule = null;
  renderLists();
  $("steps-title").textContent = `passes of ${kernel.name}`;
  const passes = $("passes");
  passes.replaceChildren();
  kernel.passes.forEach((step, index) => {
    const fired = step.rules.reduce((total, rule) => total + rule[1], 0);
    const item = listItem(step.name, fired ? `${fired} rule${fired === 1 ? "" : "s"}` : `${step.nodes.length} nodes`,
                          () => selectPass(index));
    item.className = "pass";
    item.dataset.index = index;
    item.dataset.nodes = step.nodes.length;
    passes.append(item);
  });
  $("source").innerHTML = highlight(kernel.source || "(no source recorded)");
  $("linear").textContent = kernel.linear.join("\n") || "(no linear program recorded)";
  const index = passIndex ?? Math.min(state.pass, kernel.passes.length - 1);
  selectPass(Math.max(0, index));
}

function selectPass(index) {
  if (state.kernel === null) return;
  const kernel = state.kernels.get(state.kernel);
  if (index < 0 || index >= kernel.passes.length) return;
  state.pass = index;
  document.querySelectorAll("#passes li.pass").forEach((item) => {
    item.classList.toggle("selected", Number(item.dataset.index) === index);
    if (Number(item.dataset.index) === index) item.scrollIntoView({ block: "nearest" });
  });
  const step = kernel.passes[index];
  const rules = step.rules.map(([rule, count]) => `${String(count).padStart(5)}  ${rule}`).join("\n");
  $("rules").textContent = `${step.name}: ${step.nodes.length} nodes, ${step.changed.length} changed, ` +
    `${step.ms} ms\n` + (rules ? `rules fired:\n${rules}` : "no rules fired");
  drawGraph(step, [], `${kernel.name} / ${step.name}`);
}

// ---- schedules ----

async function selectSchedule(id) {
  if (!state.schedules.has(id)) state.schedules.set(id, await getJSON(`/api/schedule/${id}`));
  const schedule = state.schedules.get(id);
  state.schedule = id;
  state.kernel = null;
  renderLists();
  $("steps-title").textContent = schedule.name;
  const passes = $("passes");
  passes.replaceChildren();
  schedule.items.forEach((item) => {
    const entry = listItem(item.name, item.kind, () => { if (item.kernel !== null) selectKernel(item.kernel); });
    entry.className = "item";
    passes.append(entry);
  });
  $("rules").textContent = "the tensor graph as scheduled; each kernel's part is outlined";
  drawGraph(schedule.graph, schedule.groups, schedule.name);
  showTab("graph");
}

// ---- graph: layout in the worker, drawing on the canvas ----

const canvas = $("graph");
const context = canvas.getContext("2d");
const FONT = "11px ui-monospace, monospace";
const LINE = 13;

function labelLines(node) {
  return node.arg ? [node.op, node.dtype, node.arg] : [node.op, node.dtype];
}

function colourOf(text, lightness) {
  let hash = 0;
  for (const character of text) hash = (hash * 31 + character.charCodeAt(0)) | 0;
  return `hsl(${Math.abs(hash) % 360}, 35%, ${lightness}%)`;
}

function drawGraph(graph, groups, title) {
  const changed = new Set(graph.changed);
  context.font = FONT;
  const sized = graph.nodes.map((node) => {
    const lines = labelLines(node);
    const width = Math.max(...lines.map((line) => context.measureText(line).width)) + 12;
    return { ...node, lines, width, height: lines.length * LINE + 8, changed: changed.has(node.id) };
  });
  const edges = [];
  for (const node of graph.nodes) for (const source of node.src) edges.push([source, node.id]);
  const id = ++state.layoutRequest;
  canvas.dataset.state = "layout";
  $("graph-info").textContent = `${title}: laying out ${sized.length} nodes...`;
  const layout = idleWorker();
  layout.onmessage = (event) => {
    workerBusy = false;
    if (event.data.id !== id) return;  // a later graph was asked for meanwhile
    const placed = new Map(event.data.nodes.map((node) => [node.id, node]));
    for (const node of sized) Object.assign(node, placed.get(node.id));
    const byId = new Map(sized.map((node) => [node.id, node]));
    state.drawing = { nodes: sized, edges: event.data.edges, groups: outlines(groups, byId), title,
                      width: event.data.width, height: event.data.height, selected: null };
    fitGraph();
    canvas.dataset.nodes = sized.length;
    canvas.dataset.edges = event.data.edges.length;
    canvas.dataset.state = "ready";
    $("graph-info").textContent = `${title}: ${sized.length} nodes, ${changed.size} changed (orange)` +
      (event.data.engine === "dagre" ? "" : " (large graph: layered layout, straight edges)");
  };
  workerBusy = true;
  layout.postMessage({ id, nodes: sized.map(({ id: node, width, height }) => ({ id: node, width, height })),
                       edges });
}

function outlines(groups, byId) {
  return (groups || []).map((group) => {
    const members = group.nodes.map((id) => byId.get(id)).filter(Boolean);
    if (!members.length) return null;
    const left = Math.min(...members.map((node) => node.x - node.width / 2)) - 8;
    const right = Math.max(...members.map((node) => node.x + node.width / 2)) + 8;
    const top = Math.min(...members.map((node) => node.y - node.height / 2)) - 16;
    const bottom = Math.max(...members.map((node) => node.y + node.height / 2)) + 8;
    const kernel = group.kernel === undefined || group.kernel === null ? null :
      state.summary.kernels[group.kernel];
    return { left, right, top, bottom, label: kernel ? kernel.name : "kernel", kernel: group.kernel };
  }).filter(Boolean);
}

function resizeCanvas() {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, canvas.clientWidth * ratio);
  canvas.height = Math.max(1, canvas.clientHeight * ratio);
}

function fitGraph() {
  const drawing = state.drawing;
  resizeCanvas();
  const ratio = window.devicePixelRatio || 1;
  const scale = Math.min(canvas.width / (drawing.width + 40), canvas.height / (drawing.height + 40), 1.5 * ratio);
  drawing.scale = Math.max(scale, 0.02);
  drawing.x = (canvas.width - drawing.width * drawing.scale) / 2;
  drawing.y = 20 * ratio;
  paint();
}

function paint() {
  const drawing = state.drawing;
  context.setTransform(1, 0, 0, 1, 0, 0);
  context.fillStyle = "#15171c";
  context.fillRect(0, 0, canvas.width, canvas.height);
  if (!drawing) return;
  context.setTransform(drawing.scale, 0, 0, drawing.scale, drawing.x, drawing.y);
  // the visible region in graph coordinates: nodes and edges outside it are not painted
  const view = { left: -drawing.x / drawing.scale, top: -drawing.y / drawing.scale,
                 right: (canvas.width - drawing.x) / drawing.scale, bottom: (canvas.height - drawing.y) / drawing.scale };
  for (const group of drawing.groups) {
    context.strokeStyle = colourOf(group.label, 65);
    context.setLineDash([6, 4]);
    context.lineWidth = 2;
    context.strokeRect(group.left, group.top, group.right - group.left, group.bottom - group.top);
    context.setLineDash([]);
    context.fillStyle = colourOf(group.label, 70);
    context.font = FONT;
    context.fillText(group.label, group.left + 4, group.top + 11);
  }
  context.strokeStyle = "#59606e";
  context.lineWidth = 1;
  context.beginPath();
  for (const edge of drawing.edges) {
    const points = edge.points;
    if (!points.some((point) => point.x >= view.left && point.x <= view.right && point.y >= view.top &&
                                 point.y <= view.bottom)) continue;
    context.moveTo(points[0].x, points[0].y);
    for (const point of points.slice(1)) context.lineTo(point.x, point.y);
  }
  context.stroke();
  const showText = drawing.scale > 0.25;
  context.font = FONT;
  context.textBaseline = "top";
  for (const node of drawing.nodes) {
    const left = node.x - node.width / 2, top = node.y - node.height / 2;
    if (left > view.right || left + node.width < view.left || top > view.bottom || top + node.height < view.top) {
      continue;
    }
    context.fillStyle = colourOf(node.op, 24);
    context.fillRect(left, top, node.width, node.height);
    context.lineWidth = node.changed ? 3 : 1;
    context.strokeStyle = node === drawing.selected ? "#ffffff" : node.changed ? "#ff9e3d" : colourOf(node.op, 50);
    context.strokeRect(left, top, node.width, node.height);
    if (showText) {
      node.lines.forEach((line, number) => {
        context.fillStyle = number === 0 ? "#f0f2f6" : "#aab1bf";
        context.fillText(line, left + 6, top + 4 + number * LINE);
      });
    }
  }
  context.textBaseline = "alphabetic";
}

function graphPoint(event) {
  const ratio = window.devicePixelRatio || 1;
  const bounds = canvas.getBoundingClientRect();
  return { x: (event.clientX - bounds.left) * ratio, y: (event.clientY - bounds.top) * ratio };
}

let dragging = null;
canvas.addEventListener("mousedown", (event) => {
  if (!state.drawing) return;
  const point = graphPoint(event);
  dragging = { x: point.x, y: point.y, moved: false };
});
window.addEventListener("mousemove", (event) => {
  if (!dragging || !state.drawing) return;
  const point = graphPoint(event);
  state.drawing.x += point.x - dragging.x;
  state.drawing.y += point.y - dragging.y;
  dragging.moved = dragging.moved || Math.abs(point.x - dragging.x) + Math.abs(point.y - dragging.y) > 2;
  dragging.x = point.x;
  dragging.y = point.y;
  paint();
});
window.addEventListener("mouseup", (event) => {
  if (dragging && !dragging.moved && state.drawing) pickNode(graphPoint(event));
  dragging = null;
});
canvas.addEventListener("wheel", (event) => {
  if (!state.drawing) return;
  event.preventDefault();
  const drawing = state.drawing, point = graphPoint(event);
  const factor = Math.exp(-event.deltaY * 0.0015);
  drawing.x = point.x - (point.x - drawing.x) * factor;
  drawing.y = point.y - (point.y - drawing.y) * factor;
  drawing.scale *= factor;
  paint();
}, { passive: false });

function pickNode(point) {
  const drawing = state.drawing;
  const x = (point.x - drawing.x) / drawing.scale, y = (point.y - drawing.y) / drawing.scale;
  const node = drawing.nodes.find((candidate) => Math.abs(candidate.x - x) <= candidate.width / 2 &&
                                                 Math.abs(candidate.y - y) <= candidate.height / 2);
  drawing.selected = node || null;
  if (node) {
    $("graph-info").textContent = `node ${node.id}: ${node.op} ${node.dtype} ${node.arg} ` +
      `src [${node.src.join(", ")}]${node.changed ? " (changed by this pass)" : ""}`;
  }
  paint();
}

// ---- source highlighting ----

const KEYWORDS = new Set(("if else for while do return break continue switch case default goto struct union " +
  "typedef static const inline extern volatile restrict sizeof fn let var loop kernel __kernel __global__ " +
  "__device__ __shared__ __local __global __restrict__ __attribute__ extern_c").split(" "));
const TYPES = /^(void|bool|char|short|int|long|float|double|half|unsigned|signed|size_t|u?int\d+_t|bfloat16|__half|__bf16|[a-z]+\d+(_u)?|f16|f32|i32|u32|vec\d\w*|array|ptr)$/;

function escapeHTML(text) {
  return text.replace(/[&<>"]/g, (character) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[character]);
}

function highlight(source) {
  const token = /(\/\/[^\n]*|\/\*[\s\S]*?\*\/)|("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|(^[ \t]*#[^\n]*)|(\b(?:0x[0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?)[fuUlLh]*\b)|([A-Za-z_]\w*)/gm;
  let html = "", last = 0;
  for (const match of source.matchAll(token)) {
    html += escapeHTML(source.slice(last, match.index));
    const [text, comment, string, preprocessor, number, word] = match;
    const kind = comment ? "co" : string ? "st" : preprocessor ? "pp" : number ? "nu" :
      word && KEYWORDS.has(word) ? "kw" : word && TYPES.test(word) ? "ty" : null;
    html += kind ? `<span class="${kind}">${escapeHTML(text)}</span>` : escapeHTML(text);
    last = match.index + text.length;
  }
  return html + escapeHTML(source.slice(last));
}

// ---- timeline ----

const SVG = "http://www.w3.org/2000/svg";
const LANE = 26, LABEL = 150;

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  return element;
}

function renderTimeline() {
  const svg = $("timeline"), events = state.summary.timeline;
  svg.replaceChildren();
  svg.dataset.bars = events.length;
  if (!events.length) {
    $("timeline-info").textContent = "no timeline: run with PROFILE=1 as well as VIZ=1";
    return;
  }
  const lanes = [...new Set(events.map((event) => `${event.device} ${event.queue}`))].sort();
  if (!state.timelineView) {
    const start = Math.min(...events.map((event) => event.start_us));
    const end = Math.max(...events.map((event) => event.end_us));
    state.timelineView = { start, end: end > start ? end : start + 1 };
  }
  const view = state.timelineView, width = Math.max(svg.clientWidth - LABEL - 10, 100);
  const scale = width / (view.end - view.start);
  svg.setAttribute("height", lanes.length * LANE + 30);
  lanes.forEach((lane, number) => {
    svg.append(svgElement("rect", { x: 0, y: number * LANE, width: LABEL + width + 10, height: LANE - 2,
                                    fill: number % 2 ? "#1b1e24" : "#1f232a" }));
    const label = svgElement("text", { x: 6, y: number * LANE + 16 });
    label.textContent = lane;
    svg.append(label);
  });
  for (const event of events) {
    const lane = lanes.indexOf(`${event.device} ${event.queue}`);
    const x = LABEL + (event.start_us - view.start) * scale;
    const barWidth = Math.max((event.end_us - event.start_us) * scale, 1.5);
    const bar = svgElement("rect", { class: "bar", x, y: lane * LANE + 3, width: barWidth, height: LANE - 8,
                                     fill: colourOf(event.name, 55) });
    bar.dataset.kernel = event.kernel ?? "";
    const title = svgElement("title", {});
    title.textContent = `${event.name} on ${event.device} ${event.queue}: ` +
      `${(event.end_us - event.start_us).toFixed(2)} us` + (event.kernel === null ? "" : " (click: its kernel)");
    bar.append(title);
    if (event.kernel !== null && event.kernel !== undefined) {
      bar.addEventListener("click", () => { showTab("graph"); selectKernel(event.kernel); });
    }
    svg.append(bar);
    if (barWidth > 60) {
      const text = svgElement("text", { x: x + 3, y: lane * LANE + 16 });
      text.textContent = event.name;
      svg.append(text);
    }
  }
  $("timeline-info").textContent = `${events.length} commands on ${lanes.length} lanes, ` +
    `${(view.end - view.start).toFixed(1)} us shown (wheel: zoom, drag: pan)`;
}

let timelineDrag = null;
$("timeline").addEventListener("wheel", (event) => {
  if (!state.timelineView) return;
  event.preventDefault();
  const view = state.timelineView, svg = $("timeline");
  const width = Math.max(svg.clientWidth - LABEL - 10, 100);
  const at = view.start + (event.offsetX - LABEL) / width * (view.end - view.start);
  const factor = Math.exp(event.deltaY * 0.0015);
  view.start = at - (at - view.start) * factor;
  view.end = at + (view.end - at) * factor;
  renderTimeline();
}, { passive: false });
$("timeline").addEventListener("mousedown", (event) => { timelineDrag = event.clientX; });
window.addEventListener("mouseup", () => { timelineDrag = null; });
window.addEventListener("mousemove", (event) => {
  if (timelineDrag === null || !state.timelineView) return;
  const view = state.timelineView, width = Math.max($("timeline").clientWidth - LABEL - 10, 100);
  const shift = (timelineDrag - event.clientX) / width * (view.end - view.start);
  view.start += shift;
  view.end += shift;
  timelineDrag = event.clientX;
  renderTimeline();
});

// ---- tabs, keys, start ----

function showTab(tab) {
  state.tab = tab;
  document.querySelectorAll("#tabs button").forEach((button) =>
    button.classList.toggle("active", button.dataset.tab === tab));
  document.querySelectorAll(".pane").forEach((pane) => pane.classList.toggle("active", pane.id === `pane-${tab}`));
  if (tab === "timeline") renderTimeline();
  if (tab === "graph" && state.drawing) { resizeCanvas(); paint(); }
}

document.querySelectorAll("#tabs button").forEach((button) =>
  button.addEventListener("click", () => showTab(button.dataset.tab)));
$("filter").addEventListener("input", renderLists);
window.addEventListener("resize", () => { if (state.drawing) fitGraph(); if (state.tab === "timeline") renderTimeline(); });
document.addEventListener("keydown", (event) => {
  if (event.target instanceof HTMLInputElement) return;
  if (event.key === "ArrowUp" || event.key === "ArrowDown") {
    event.preventDefault();
    selectPass(state.pass + (event.key === "ArrowUp" ? -1 : 1));
  } else if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
    event.preventDefault();
    const ids = visibleKernelIds();
    if (!ids.length) return;
    const at = ids.indexOf(state.kernel);
    const next = at < 0 ? 0 : Math.min(Math.max(at + (event.key === "ArrowLeft" ? -1 : 1), 0), ids.length - 1);
    selectKernel(ids[next]);
  }
});

async function start() {
  state.summary = await getJSON("/api/summary");
  const { kernels, schedules, errors } = state.summary;
  $("status").textContent = `${kernels.length} kernels, ${schedules.length} schedules, ` +
    `${state.summary.timeline.length} timed commands` + (errors.length ? `, ${errors.length} recording errors` : "");
  if (errors.length) $("status").title = errors.join("\n");
  renderLists();
  document.body.dataset.ready = "1";
  if (kernels.length) await selectKernel(kernels[0].id, 0);
}

start().catch((error) => { $("status").textContent = `failed to load the recording: ${error.message}`; });
