// The replay view: every recorded run of yours, each run's episodes, and an episode
// (or two side by side: ?b=RUN/EPISODE) stepped through frame by frame, each action
// drawn on the frame it was taken on. Position k shows the screen before step k+1
// and that step's action; the last position shows the screen after the last step.
"use strict";

const $ = (id) => document.getElementById(id);
const q = new URLSearchParams(location.search);
const enc = encodeURIComponent;

async function getJson(path) {
  const r = await fetch(path);
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    if (r.status === 401) location.href = "/login";
    throw new Error(data.error || r.statusText);
  }
  return data;
}

function showError(e) { $("error").hidden = !e; $("error").textContent = e ? String(e.message || e) : ""; }

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  for (const c of children) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}

// What the view shows, for people and for the console's tests and benches.
const state = { position: 0, panes: [], shownMs: 0 };
window.deskgymReplay = state;

async function listRuns() {
  const { runs } = await getJson("/api/runs");
  $("title").textContent = "recorded runs";
  $("list").replaceChildren(runs.length ? el("table", { class: "runs" },
    el("tr", {}, el("th", {}, "run"), el("th", {}, "status")),
    ...runs.map((r) => el("tr", { "data-run": r.run },
      el("td", {}, el("a", { href: `/replay?run=${enc(r.run)}` }, r.run)), el("td", {}, r.status))))
    : el("p", {}, "No recordings yet: create a pool with record=NAME."));
}

async function listEpisodes(run) {
  const { episodes } = await getJson(`/api/runs/${enc(run)}/episodes`);
  $("title").textContent = `run ${run}`;
  $("list").replaceChildren(episodes.length ? el("table", { class: "runs" },
    el("tr", {}, ...["episode", "task", "steps", "return", "end", "instruction"].map((h) => el("th", {}, h))),
    ...episodes.map((e) => el("tr", { "data-episode": e.episode_id },
      el("td", {}, el("a", { href: `/replay?run=${enc(run)}&episode=${enc(e.episode_id)}` }, e.episode_id)),
      el("td", {}, e.task), el("td", {}, e.length), el("td", {}, e.episode_return),
      el("td", {}, e.termination), el("td", {}, e.instruction))))
    : el("p", {}, "No episode of this run has ended yet."));
}

async function loadPane(run, episode) {
  const [{ episodes }, { steps }] = await Promise.all([
    getJson(`/api/runs/${enc(run)}/episodes`),
    getJson(`/api/runs/${enc(run)}/steps?episode=${enc(episode)}`),
  ]);
  const ep = episodes.find((e) => e.episode_id === episode) || { episode_id: episode, instruction: "" };
  // hashes[k]: the screen at position k.
  const hashes = steps.map((s) => s.frame_hash_before);
  const last = steps[steps.length - 1];
  if (last) hashes.push(last.frame_hash_after || last.frame_hash_before);
  const img = el("img", { alt: `frame of ${episode}` });
  const canvas = el("canvas", {});
  const info = el("pre", {});
  const node = el("section", { class: "pane", "data-run": run, "data-episode": episode },
    el("div", {}, el("strong", {}, `${run} · ${episode}`), ` · ${ep.task || ""} · return ${ep.episode_return ?? "?"} · ${ep.termination || ""}`),
    el("div", { class: "muted" }, ep.instruction || ""),
    el("div", { class: "stage", style: "position: relative" }, img, canvas), info);
  return { run, episode, steps, hashes, img, canvas, info, node, cache: new Map() };
}

function drawAction(pane, action, w, h) {
  const c = pane.canvas;
  c.width = w; c.height = h;
  const g = c.getContext("2d");
  g.clearRect(0, 0, w, h);
  if (!action) return;
  g.strokeStyle = g.fillStyle = "#e0421e";
  g.lineWidth = 3;
  if (action.x !== undefined) {
    g.beginPath(); g.arc(action.x, action.y, 14, 0, 2 * Math.PI); g.stroke();
    g.beginPath(); g.arc(action.x, action.y, 3, 0, 2 * Math.PI); g.fill();
  }
  if (action.to_x !== undefined) {
    g.beginPath(); g.moveTo(action.x, action.y); g.lineTo(action.to_x, action.to_y); g.stroke();
  }
  const words = action.text !== undefined ? `⌨ ${action.text}` : action.keys !== undefined ? `⌨ ${action.keys}` : "";
  if (words) {
    g.font = "18px system-ui, sans-serif";
    g.fillStyle = "#000b"; g.fillRect(8, h - 36, g.measureText(words).width + 16, 28);
    g.fillStyle = "#fff"; g.fillText(words, 16, h - 16);
  }
}

function frameUrl(pane, hash) { return `/api/runs/${enc(pane.run)}/frames/${hash}`; }

async function show(k) {
  const started = performance.now();
  const max = Math.max(...state.panes.map((p) => p.hashes.length - 1), 0);
  k = Math.max(0, Math.min(k, max));
  state.position = k;
  $("position").value = String(k);
  $("where").textContent = `position ${k} of ${max}`;
  history.replaceState(null, "", `${location.pathname}?${new URLSearchParams({ ...Object.fromEntries(q), k: String(k) })}`);
  await Promise.all(state.panes.map(async (pane) => {
    const at = Math.min(k, pane.hashes.length - 1);
    const hash = pane.hashes[at];
    const step = pane.steps[at]; // undefined at the last position
    if (hash === undefined) { pane.info.textContent = "(no steps recorded)"; return; }
    if (pane.img.dataset.hash !== hash) {
      await new Promise((ok) => { pane.img.onload = ok; pane.img.onerror = ok; pane.img.src = frameUrl(pane, hash); });
      pane.img.dataset.hash = hash;
    }
    drawAction(pane, step && step.action, pane.img.naturalWidth, pane.img.naturalHeight);
    pane.info.textContent = step
      ? `step ${step.step} (${step.actor}): ${JSON.stringify(step.action)}\nreward ${step.reward}` +
        `${step.terminated ? " · terminated" : ""}${step.truncated ? " · truncated" : ""}` +
        `${step.error_code ? ` · error ${step.error_code}` : ""}`
      : "the screen after the last step";
    // The neighbours load ahead, so stepping through is immediate.
    for (const n of [at + 1, at - 1]) {
      const h = pane.hashes[n];
      if (h && !pane.cache.has(h)) { const i = new Image(); i.src = frameUrl(pane, h); pane.cache.set(h, i); }
    }
  }));
  state.shownMs = performance.now() - started;
  state.shown = k;
}

async function player(run, episode) {
  const specs = [[run, episode]];
  if (q.get("b")) {
    const b = q.get("b");
    const cut = b.indexOf("/");
    // An episode id is `<env>/<n>`: the run is up to the first slash.
    specs.push([b.slice(0, cut), b.slice(cut + 1)]);
  }
  state.panes = await Promise.all(specs.map(([r, e]) => loadPane(r, e)));
  $("title").textContent = state.panes.length > 1 ? "two episodes side by side" : `run ${run}`;
  $("panes").replaceChildren(...state.panes.map((p) => p.node));
  $("player").hidden = false;
  const max = Math.max(...state.panes.map((p) => p.hashes.length - 1), 0);
  $("position").max = String(max);
  $("position").oninput = () => show(Number($("position").value));
  $("prev").onclick = () => show(state.position - 1);
  $("next").onclick = () => show(state.position + 1);
  document.addEventListener("keydown", (ev) => {
    const to = { ArrowLeft: state.position - 1, ArrowRight: state.position + 1, Home: 0, End: max }[ev.key];
    if (to !== undefined) { ev.preventDefault(); show(to); }
  });
  await show(Number(q.get("k") || 0));
}

(async () => {
  try {
    const run = q.get("run"), episode = q.get("episode");
    if (run && episode) await player(run, episode);
    else if (run) await listEpisodes(run);
    else await listRuns();
  } catch (e) { showError(e); }
})();
