// The deskgym console's pages: fleet (pools, envs, thumbnails), env (live screen,
// action log, take-over) and login. No framework, no build step: the server embeds
// this file as it is.
"use strict";

const $ = (id) => document.getElementById(id);

// Every POST carries the header the server requires of actions (no cross-site form
// or simple request can send it).
async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "content-type": "application/json", "x-deskgym-console": "1" },
    body: JSON.stringify(body),
  };
  const r = await fetch(path, init);
  const text = await r.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch (_) { data = { error: text }; }
  if (!r.ok) {
    if (r.status === 401 && location.pathname !== "/login") location.href = "/login";
    throw new Error(data.error || r.statusText);
  }
  return data;
}

function showError(e) {
  const el = $("error");
  if (!el) return;
  el.hidden = !e;
  el.textContent = e ? String(e.message || e) : "";
}

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") n.className = v; else n.setAttribute(k, v);
  }
  for (const c of children) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}

const fmt = (x) => (Math.round(x * 1000) / 1000).toString();

// ---- fleet ----------------------------------------------------------------------

async function fleetPage() {
  const thumbs = new Map(); // env id -> <img>, kept across refreshes
  async function refresh() {
    let f;
    try { f = await api("/api/fleet"); showError(null); } catch (e) { showError(e); return; }
    $("who").textContent = `as ${f.principal}`;
    const s = f.server;
    $("server").textContent = `${s.envs}/${s.max_envs} desktops · ${s.steps} steps ` +
      `(${fmt(s.step_mean_ms)} ms mean) · ${s.resets} resets · ` +
      (s.errors === undefined ? "" : `${s.errors} errors · `) +
      `cache ${s.cache_hits} hits / ${s.cache_misses} misses`;
    $("empty").hidden = f.pools.length > 0;
    const root = $("pools");
    root.replaceChildren(...f.pools.map((p) => {
      const cards = p.envs.map((e) => {
        let img = thumbs.get(e.id);
        if (!img) {
          img = el("img", { alt: `screen of ${e.id}`, "data-env": e.id });
          thumbs.set(e.id, img);
        }
        return el("a", { class: "envcard", href: `/env/${encodeURIComponent(e.id)}`, "data-env": e.id },
          img,
          el("div", { class: "meta" },
            el("div", {}, el("strong", {}, e.id), " ",
              el("span", { class: `state-${e.state}` }, e.state),
              e.held_by ? el("span", { class: "held" }, ` · held by ${e.held_by}`) : ""),
            el("div", { class: "muted" },
              `episode ${e.episode} · step ${e.step} · last reward ${fmt(e.last_reward)} · return ${fmt(e.episode_return)}`),
            el("div", { class: "muted" }, e.instruction || "")));
      });
      return el("section", { class: "pool", "data-pool": p.id },
        el("h2", {}, `${p.id} `, el("span", { class: "muted" },
          `${p.task} · ${p.profile} · ${p.screen[0]}x${p.screen[1]} · ${p.envs.length} envs` +
          (p.recording ? " · recording" : ""))),
        el("div", { class: "envs" }, ...cards));
    }));
  }
  // Thumbnails at 1 fps at most, one at a time per env (a slow capture never piles up).
  async function thumbLoop() {
    for (;;) {
      const started = performance.now();
      await Promise.all([...thumbs.entries()].filter(([, img]) => img.isConnected).map(async ([id, img]) => {
        try {
          const r = await fetch(`/api/envs/${encodeURIComponent(id)}/thumb.jpg`, { cache: "no-store" });
          if (!r.ok) return;
          const url = URL.createObjectURL(await r.blob());
          const old = img.src;
          img.src = url;
          if (old.startsWith("blob:")) URL.revokeObjectURL(old);
        } catch (_) { /* the next round tries again */ }
      }));
      await new Promise((ok) => setTimeout(ok, Math.max(0, 1000 - (performance.now() - started))));
    }
  }
  // Demonstrations: pick a task, get a desktop of your own, held by you.
  api("/api/tasks").then(({ tasks }) => {
    $("demo-task").replaceChildren(...tasks.map((t) => el("option", { value: t.id }, t.id)));
  }).catch(showError);
  $("demo").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try { const d = await api("/api/demos", { task: $("demo-task").value }); location.href = d.url; } catch (e) { showError(e); }
  });
  await refresh();
  setInterval(refresh, 1000);
  thumbLoop();
}

// ---- env --------------------------------------------------------------------------

// What the live view has shown, for people and for the console's tests and benches.
const live = { frames: 0, bytes: 0, seq: -1, hash: "", codec: "", width: 0, height: 0, latencies: [], painted: [] };
window.deskgymLive = live;

async function envPage() {
  const id = decodeURIComponent(location.pathname.split("/").pop());
  const screen = $("screen"), overlay = $("overlay");
  const ctx = screen.getContext("2d"), octx = overlay.getContext("2d");
  let env, holding = false, geometry = null; // geometry: {screen:[w,h], source:[x,y,w,h]}
  const marks = []; // recent actions drawn over the screen: {at, draw}
  let outlined = null; // the tree element hovered: its bounds on the screen

  try { env = await api(`/api/envs/${encodeURIComponent(id)}`); } catch (e) { showError(e); return; }
  $("title").textContent = `${env.id} · ${env.task} · ${env.profile}`;
  $("who").textContent = `as ${env.you}`;
  $("instruction").textContent = env.instruction || "(no episode yet)";
  screen.width = overlay.width = env.screen[0];
  screen.height = overlay.height = env.screen[1];
  const setHeld = (by) => {
    holding = by === env.you;
    $("takeover").hidden = holding;
    $("release").hidden = !holding;
    $("hint").hidden = !holding;
    $("next-episode").hidden = !(holding && env.demo);
    $("finish").hidden = !(holding && env.demo);
    screen.classList.toggle("held", holding);
    $("control").textContent = by ? `held by ${by}` : "driven by its agent";
    if (holding) screen.focus();
  };
  setHeld(env.held_by);
  const status = (e) => {
    $("status").textContent = `episode ${e.episode} · step ${e.step} · ${e.state}` +
      (e.episode_return !== undefined ? ` · return ${fmt(e.episode_return)}` : "");
  };
  status(env);

  // Screen pixels -> canvas pixels (the live frames may be scaled).
  const toCanvas = (x, y) => {
    if (!geometry) return [x, y];
    const [sx, sy, sw, sh] = geometry.source;
    return [(x - sx) * screen.width / sw, (y - sy) * screen.height / sh];
  };
  const toScreen = (ev) => {
    const r = screen.getBoundingClientRect();
    const cx = (ev.clientX - r.left) * screen.width / r.width;
    const cy = (ev.clientY - r.top) * screen.height / r.height;
    if (!geometry) return [Math.floor(cx), Math.floor(cy)];
    const [sx, sy, sw, sh] = geometry.source;
    return [sx + Math.floor(cx * sw / screen.width), sy + Math.floor(cy * sh / screen.height)];
  };

  function mark(a, human) {
    const color = human ? "#e08a1e" : "#2f80ed";
    const draw = (alpha) => {
      octx.globalAlpha = alpha;
      octx.strokeStyle = octx.fillStyle = color;
      octx.lineWidth = 3;
      octx.font = "16px system-ui, sans-serif";
      if (a.x !== undefined && a.to_x === undefined) {
        const [x, y] = toCanvas(a.x, a.y);
        octx.beginPath(); octx.arc(x, y, 12, 0, 2 * Math.PI); octx.stroke();
        octx.beginPath(); octx.arc(x, y, 3, 0, 2 * Math.PI); octx.fill();
      }
      if (a.to_x !== undefined) {
        const [x0, y0] = toCanvas(a.x, a.y), [x1, y1] = toCanvas(a.to_x, a.to_y);
        octx.beginPath(); octx.moveTo(x0, y0); octx.lineTo(x1, y1); octx.stroke();
        const t = Math.atan2(y1 - y0, x1 - x0);
        octx.beginPath(); octx.moveTo(x1, y1);
        octx.lineTo(x1 - 12 * Math.cos(t - 0.4), y1 - 12 * Math.sin(t - 0.4));
        octx.lineTo(x1 - 12 * Math.cos(t + 0.4), y1 - 12 * Math.sin(t + 0.4));
        octx.fill();
      }
      const words = a.text !== undefined ? `⌨ ${a.text}` : a.keys !== undefined ? `⌨ ${a.keys}` : "";
      if (words) {
        octx.fillStyle = "#000a"; octx.fillRect(8, screen.height - 34, octx.measureText(words).width + 16, 26);
        octx.fillStyle = "#fff"; octx.fillText(words, 16, screen.height - 15);
      }
      octx.globalAlpha = 1;
    };
    marks.push({ at: performance.now(), draw });
  }
  (function paintMarks() {
    octx.clearRect(0, 0, overlay.width, overlay.height);
    const now = performance.now();
    while (marks.length && now - marks[0].at > 1500) marks.shift();
    for (const m of marks) m.draw(1 - (now - m.at) / 1500);
    if (outlined) {
      const [x, y, w, h] = outlined;
      const [x0, y0] = toCanvas(x, y), [x1, y1] = toCanvas(x + w, y + h);
      octx.strokeStyle = "#d81b60"; octx.lineWidth = 3;
      octx.strokeRect(x0, y0, x1 - x0, y1 - y0);
    }
    requestAnimationFrame(paintMarks);
  })();

  function logEntry(e) {
    const log = $("log");
    let item;
    if (e.kind === "step") {
      const a = e.action || {};
      const what = [a.verb, a.x !== undefined ? `(${a.x}, ${a.y})` : "",
        a.to_x !== undefined ? `→ (${a.to_x}, ${a.to_y})` : "",
        a.text !== undefined ? JSON.stringify(a.text) : "", a.keys || ""].filter(Boolean).join(" ");
      item = el("li", { class: e.actor === "human" ? "human" : "" },
        `#${e.step} ${e.actor === "human" ? "[human] " : ""}${what}`,
        e.error ? el("span", { class: "err" }, ` ✗ ${e.error}`) : "",
        e.reward ? el("span", { class: "reward" }, ` reward ${fmt(e.reward)}`) : "",
        e.terminated ? el("span", { class: "reward" }, " · done") : "",
        e.truncated ? " · truncated" : "");
      mark(a, e.actor === "human");
      if (!e.error) status({ episode: e.episode, step: e.step, state: e.terminated || e.truncated ? "done" : "running" });
    } else if (e.kind === "reset") {
      $("instruction").textContent = e.instruction;
      item = el("li", {}, el("strong", {}, `reset: episode ${e.episode} (seed ${e.seed})`));
      status({ episode: e.episode, step: 0, state: "running" });
    } else if (e.kind === "takeover" || e.kind === "release") {
      setHeld(e.kind === "takeover" ? e.by : null);
      item = el("li", { class: "human" }, e.kind === "takeover" ? `taken over by ${e.by}` : `given back by ${e.by}`);
    } else if (e.kind === "missed") {
      item = el("li", { class: "muted" }, `(${e.entries} entries missed)`);
    }
    if (item) { log.append(item); log.scrollTop = log.scrollHeight; }
  }
  // The tree beside the screen: the last one read while you watched (its agent's, or
  // with your take-over and actions). Hovering an element outlines it on the screen.
  let treeTimer = null;
  async function loadTree() {
    const r = await fetch(`/api/envs/${encodeURIComponent(id)}/tree`);
    const data = await r.json().catch(() => ({}));
    if (!r.ok || !data.tree) { $("tree-note").textContent = data.error ? "(none yet)" : ""; return; }
    $("tree-note").textContent = holding ? "(as you left it)" : "(as last read)";
    $("tree").replaceChildren(...data.tree.elements.map((e) => {
      const li = el("li", { "data-ref": e.ref, style: `padding-left: ${e.depth * 12}px` },
        `${e.role}${e.name ? ` "${e.name}"` : ""}`);
      li.addEventListener("mouseenter", () => { outlined = e.bounds; });
      li.addEventListener("mouseleave", () => { outlined = null; });
      return li;
    }));
  }
  const treeSoon = () => { clearTimeout(treeTimer); treeTimer = setTimeout(() => loadTree().catch(() => {}), 200); };
  treeSoon();
  const feed = new EventSource(`/api/envs/${encodeURIComponent(id)}/feed`);
  feed.onmessage = (m) => {
    const e = JSON.parse(m.data);
    if (e.kind === "hello") { setHeld(e.env.held_by); status(e.env); } else { logEntry(e); treeSoon(); }
  };

  // Live frames: a streamed body of [u32 len][JSON][u32 len][pixels] records, the
  // pixels H.264 (decoded with WebCodecs) where the browser can, else JPEG. `?codec=`
  // on the page's URL picks one.
  async function pickCodec() {
    const asked = new URLSearchParams(location.search).get("codec");
    if (asked) return asked;
    if (!window.VideoDecoder) return "jpeg";
    try {
      const s = await VideoDecoder.isConfigSupported({ codec: "avc1.42E01F", optimizeForLatency: true });
      return s.supported ? "h264" : "jpeg";
    } catch (_) { return "jpeg"; }
  }
  const shown = (head, w, h) => {
    geometry = head.source ? { screen: head.screen, source: head.source } : null;
    live.frames += 1; live.seq = head.seq; live.hash = head.frame_hash;
    live.width = w; live.height = h; live.codec = head.codec;
    requestAnimationFrame(() => {
      const ms = Date.now() - head.captured_unix_ms;
      live.latencies.push(ms);
      if (live.latencies.length > 1000) live.latencies.shift();
      live.painted.push({ seq: head.seq, hash: head.frame_hash, at: Date.now() });
      if (live.painted.length > 100) live.painted.shift();
    });
  };
  const fit = (w, h) => {
    if (screen.width !== w || screen.height !== h) {
      screen.width = overlay.width = w;
      screen.height = overlay.height = h;
    }
  };
  async function watch() {
    const codec = await pickCodec();
    for (;;) {
      let decoder = null, decoding = "";
      const pending = []; // heads of access units sent to the decoder, in order
      try {
        const r = await fetch(`/api/envs/${encodeURIComponent(id)}/live?fps=30&codec=${codec}`, { cache: "no-store" });
        if (!r.ok) {
          const err = await r.json().catch(() => ({}));
          $("live").textContent = `live view unavailable: ${err.error || r.statusText}`;
          await new Promise((ok) => setTimeout(ok, 3000));
          continue;
        }
        $("live").textContent = `live (${codec === "h264" ? "H.264" : "JPEG"})`;
        const reader = r.body.getReader();
        let buf = new Uint8Array(0);
        const need = async (n) => {
          while (buf.length < n) {
            const { value, done } = await reader.read();
            if (done) throw new Error("the live view ended");
            const b = new Uint8Array(buf.length + value.length);
            b.set(buf); b.set(value, buf.length); buf = b;
          }
        };
        const take = async () => {
          await need(4);
          const n = new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0);
          await need(4 + n);
          const part = buf.slice(4, 4 + n);
          buf = buf.slice(4 + n);
          return part;
        };
        for (;;) {
          const head = JSON.parse(new TextDecoder().decode(await take()));
          const pixels = await take();
          live.bytes += 8 + pixels.length + JSON.stringify(head).length;
          if (head.codec === "jpeg") {
            const bmp = await createImageBitmap(new Blob([pixels], { type: "image/jpeg" }));
            fit(bmp.width, bmp.height);
            ctx.drawImage(bmp, 0, 0);
            bmp.close();
            shown(head, head.width, head.height);
            continue;
          }
          if (!decoder || decoder.state === "closed" || decoding !== head.codec) {
            if (!head.keyframe) continue; // the server starts each viewer at a keyframe
            if (decoder && decoder.state !== "closed") decoder.close();
            decoder = new VideoDecoder({
              output: (frame) => {
                const h = pending.shift();
                fit(frame.displayWidth, frame.displayHeight);
                ctx.drawImage(frame, 0, 0);
                frame.close();
                if (h) shown(h, h.width, h.height);
              },
              error: (e) => { $("live").textContent = `decoder: ${e.message}`; },
            });
            decoder.configure({ codec: head.codec, optimizeForLatency: true });
            decoding = head.codec;
          }
          pending.push(head);
          decoder.decode(new EncodedVideoChunk({ type: head.keyframe ? "key" : "delta", timestamp: head.seq * 33333, data: pixels }));
        }
      } catch (e) {
        if (decoder && decoder.state !== "closed") decoder.close();
        $("live").textContent = `reconnecting (${e.message})`;
        await new Promise((ok) => setTimeout(ok, 1000));
      }
    }
  }
  watch();

  // Take-over: the person's input becomes deskgym actions.
  async function act(a) {
    try { await api(`/api/envs/${encodeURIComponent(id)}/act`, a); showError(null); treeSoon(); } catch (e) { showError(e); }
  }
  $("takeover").onclick = async () => {
    try { const r = await api(`/api/envs/${encodeURIComponent(id)}/takeover`, {}); setHeld(r.held_by); showError(null); treeSoon(); } catch (e) { showError(e); }
  };
  $("next-episode").onclick = async () => {
    try { await api(`/api/envs/${encodeURIComponent(id)}/reset`, {}); showError(null); screen.focus(); } catch (e) { showError(e); }
  };
  $("finish").onclick = async () => {
    try { const r = await api(`/api/demos/${encodeURIComponent(env.pool)}/finish`, {}); location.href = `/replay?run=${encodeURIComponent(r.run)}`; } catch (e) { showError(e); }
  };
  $("release").onclick = async () => {
    try { await api(`/api/envs/${encodeURIComponent(id)}/release`, {}); setHeld(null); showError(null); } catch (e) { showError(e); }
  };
  // The hold lasts while this page lives: renewed well within its lease.
  setInterval(() => { if (holding) api(`/api/envs/${encodeURIComponent(id)}/takeover`, {}).catch(showError); }, 10000);

  let down = null;
  screen.addEventListener("contextmenu", (ev) => { if (holding) ev.preventDefault(); });
  screen.addEventListener("mousedown", (ev) => { if (holding) { down = { at: toScreen(ev), button: ev.button }; ev.preventDefault(); } });
  screen.addEventListener("mouseup", (ev) => {
    if (!holding || !down) return;
    const [x, y] = down.at, [tx, ty] = toScreen(ev);
    const button = ["left", "middle", "right"][down.button] || "left";
    down = null;
    if (Math.abs(tx - x) + Math.abs(ty - y) > 4 && button === "left") act({ verb: "drag", x, y, to_x: tx, to_y: ty });
    // Two clicks in quick succession reach the app as a double click, as they would
    // from a mouse: no separate double-click action.
    else act({ verb: "click", x, y, button });
  });
  screen.addEventListener("wheel", (ev) => {
    if (!holding) return;
    ev.preventDefault();
    const [x, y] = toScreen(ev);
    act({ verb: "scroll", x, y, dx: Math.sign(ev.deltaX), dy: Math.sign(ev.deltaY) });
  }, { passive: false });
  screen.addEventListener("keydown", (ev) => {
    if (!holding) return;
    ev.preventDefault();
    const mods = ["ctrl", "alt", "meta"].filter((m) => ev[`${m}Key`]);
    if (["Control", "Alt", "Shift", "Meta"].includes(ev.key)) return;
    if (ev.key.length === 1 && mods.length === 0) { act({ verb: "type_text", text: ev.key }); return; }
    const key = ev.key.length === 1 ? ev.key.toLowerCase() : ev.key.replace(/^Arrow/, "").toLowerCase();
    if (ev.shiftKey && ev.key.length !== 1) mods.push("shift");
    act({ verb: "key", keys: [...mods.map((m) => (m === "meta" ? "super" : m)), key === " " ? "space" : key].join("+") });
  });
}

// ---- login ------------------------------------------------------------------------

function loginPage() {
  $("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try { await api("/api/login", { token: $("token").value }); location.href = "/"; } catch (e) { showError(e); }
  });
}

const page = document.body.dataset.page;
if (page === "fleet") fleetPage();
else if (page === "env") envPage();
else if (page === "login") loginPage();
