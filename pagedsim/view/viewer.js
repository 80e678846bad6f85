// pagedsim's trace viewer: replays the per-step differences in #trace-data and draws one
// step at a time. Plain JS, no framework, no build step, no request. The data format is
// described in pagedsim/view/diffs.py, the DOM contract in pagedsim/view/__init__.py.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("trace-data").textContent);
  const UI = D.ui, NB = D.nb, BS = D.bs, STEPS = D.steps, N = STEPS.length;
  const EVERY = 16; // a full copy of the state every EVERY steps: going back replays < EVERY
  const LAST_N = STEPS[N - 1].n;

  // ---- the state after a step, rebuilt from the differences ------------------------------
  function emptyState() {
    return {
      free: [], ref: new Int32Array(NB), fill: new Int32Array(NB), cached: new Uint8Array(NB),
      tables: new Map(), order: [], labels: new Array(NB).fill(""),
      hashes: new Array(NB).fill(""), last: new Int32Array(NB).fill(-1),
    };
  }
  function clone(s) { // table arrays are never mutated, so the map is copied shallowly
    return {
      free: s.free, ref: s.ref.slice(), fill: s.fill.slice(), cached: s.cached.slice(),
      tables: new Map(s.tables), order: s.order, labels: s.labels.slice(),
      hashes: s.hashes.slice(), last: s.last.slice(),
    };
  }
  function pairs(list, into, last, i) {
    for (let j = 0; j < list.length; j += 2) { into[list[j]] = list[j + 1]; last[list[j]] = i; }
  }
  function applyFree(s, fl) {
    if (fl.a) { s.free = fl.a.slice(); return; }
    let free = s.free;
    if (fl.r) { const gone = new Set(fl.r); free = free.filter((b) => !gone.has(b)); }
    else free = free.slice();
    for (const [pos, run] of fl.i || []) free.splice(pos, 0, ...run);
    s.free = free;
  }
  function apply(s, d, i) {
    if (d.fl) applyFree(s, d.fl);
    if (d.r) pairs(d.r, s.ref, s.last, i);
    if (d.f) pairs(d.f, s.fill, s.last, i);
    for (const b of d.k || []) { s.cached[b] = 1; s.last[b] = i; }
    for (const b of d.ku || []) { s.cached[b] = 0; s.last[b] = i; }
    for (const [q, n, keep, tail] of d.t || []) {
      if (keep < 0) { s.tables.delete(q); continue; }
      const old = s.tables.get(q);
      s.tables.set(q, { n: n, blocks: (old ? old.blocks.slice(0, keep) : []).concat(tail) });
    }
    if (d.q) s.order = d.q;
    if (d.lb) pairs(d.lb, s.labels, s.last, i);
    if (d.h) pairs(d.h, s.hashes, s.last, i);
    for (const b of d.e || []) s.last[b] = i;
  }
  const checkpoints = [];
  (function replayAll() {
    const s = emptyState();
    for (let i = 0; i < N; i++) {
      apply(s, STEPS[i], i);
      if (i % EVERY === 0) checkpoints.push(clone(s));
    }
  })();
  let state = null, cur = -1;
  function stateAt(i) {
    if (state && i === cur + 1) { apply(state, STEPS[i], i); return state; }
    const s = clone(checkpoints[Math.floor(i / EVERY)]);
    for (let j = Math.floor(i / EVERY) * EVERY + 1; j <= i; j++) apply(s, STEPS[j], j);
    return s;
  }

  // ---- the page ------------------------------------------------------------------------
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function esc(t) {
    return String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }
  const body = document.body;
  if (NB > 256) body.classList.add("big");
  const top = el("header", { id: "top" });
  top.append(el("span", { id: "title" }, D.title), el("span", { id: "version" }, D.version));
  const controls = el("div", { id: "controls" });
  const bPrev = el("button", { id: "prev", title: "ArrowLeft" }, "\u25c0 " + UI.Prev);
  const bPlay = el("button", { id: "play", title: "Space" }, "\u25b6 " + UI.Play);
  const bNext = el("button", { id: "next", title: "ArrowRight" }, UI.Next + " \u25b6");
  const speed = el("select", { id: "speed", title: UI.speed });
  for (const v of [0.5, 1, 2, 4, 8, 16]) {
    const o = el("option", { value: String(v) }, v + "\u00d7"); if (v === 1) o.selected = true;
    speed.append(o);
  }
  const bProj = el("button", { id: "projector", title: "P" }, UI.Projector);
  const scrub = el("input", { id: "scrubber", type: "range", min: "0", max: String(N - 1), value: "0" });
  const stepText = el("span", { id: "step" });
  controls.append(bPrev, bPlay, bNext, speed, bProj, scrub, stepText);
  top.append(controls);
  const story = el("section", { id: "story" });
  const marks = el("div", { id: "marks" });
  const captionEl = el("p", { id: "caption" });
  const whyEl = el("p", { id: "why" });
  story.append(marks, captionEl, whyEl);
  const main = el("main");
  const tablesPane = el("section", { id: "tables-pane" });
  const tablesEl = el("div", { id: "tables" });
  tablesPane.append(el("h2", {}, UI["block tables (logical \u2192 physical)"]), tablesEl);
  const poolPane = el("section", { id: "pool-pane" });
  const blocksHead = el("h2", {}, UI["physical blocks"] + " (B = " + BS + ")");
  const wrap = el("div", { id: "blocks-wrap" });
  const blocksEl = el("div", { id: "blocks" });
  const svgNS = "http://www.w3.org/2000/svg";
  const arrows = document.createElementNS(svgNS, "svg");
  arrows.setAttribute("id", "arrows");
  wrap.append(blocksEl, arrows);
  const freeHead = el("h2", { id: "free-head" });
  const freeEl = el("div", { id: "free-list" });
  poolPane.append(blocksHead, wrap, freeHead, freeEl);
  main.append(tablesPane, poolPane);
  const info = el("aside", { id: "info", hidden: "" });
  const keys = el("footer", { id: "keys" }, UI.keys);
  body.append(top, story, main, info, keys);

  // A big pool is laid out in rows of ROW blocks, each row a box the browser may skip while
  // it is off screen (content-visibility), so a step change lays out only what is visible.
  const ROW = NB > 256 ? 32 : NB;
  const blockEls = [], shown = new Array(NB).fill(null);
  for (let r = 0; r < NB; r += ROW) {
    const row = el("div", { class: "row" });
    for (let b = r; b < Math.min(NB, r + ROW); b++) {
      const e = el("div", { class: "block free", "data-block": String(b), "data-ref": "0", "data-fill": "0" });
      e.innerHTML = '<span class="bid">' + b + '</span><span class="badge">0</span>' +
        '<span class="bar"><i></i></span><span class="txt"></span>';
      blockEls.push(e); row.append(e);
    }
    blocksEl.append(row);
  }
  const emptyFree = el("p", { class: "empty", hidden: "" }, UI["empty: the next allocate() fails"]);
  freeHead.after(emptyFree);
  const emptyTables = el("p", { class: "empty", hidden: "" }, UI["(no sequences)"]);
  tablesEl.before(emptyTables);
  const groupEls = (D.groups || [null]).map((g, k) => {
    const box = el("div", g === null ? {} : { class: "group", "data-group": String(k) });
    if (g !== null) {
      box.append(el("h3", {}, UI["KV cache group"] + " " + k + ": " +
        (g === "full" ? "full attention" : "sliding window")));
    }
    tablesEl.append(box);
    return box;
  });

  // ---- drawing one step: a pure function of the state -------------------------------------
  function inkOn(hex) {
    const c = [1, 3, 5].map((k) => parseInt(hex.substr(k, 2), 16) / 255);
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2] > 0.45 ? "#222222" : "#ffffff";
  }
  const colourOf = (q) => D.palette[D.colour[q]];
  function owners(s) {
    const out = new Map();
    for (const q of s.order) {
      for (const b of s.tables.get(q).blocks) {
        if (b < 0) continue;
        if (!out.has(b)) out.set(b, []);
        const list = out.get(b); if (list[list.length - 1] !== q) list.push(q);
      }
    }
    return out;
  }
  function background(who) {
    if (who.length < 2) return colourOf(who[0]);
    const w = 100 / who.length;
    return "linear-gradient(90deg," + who.map((q, j) =>
      colourOf(q) + " " + (j * w) + "% " + ((j + 1) * w) + "%").join(",") + ")";
  }
  // A block's look is drawn now if its row is on screen, else when the row scrolls into view
  // (content-visibility tells); its data-ref / data-fill are always written at once.
  const hidden = new Uint8Array(Math.ceil(NB / ROW)), dirty = new Map(); // row -> [block, key]
  let looks = null;
  function drawLook(b, key) {
    const [ref, fill, cached, head, touched, who, label, hashText] = looks(b);
    shown[b] = key;
    const e = blockEls[b];
    e.className = "block" + (ref === 0 ? " free" : "") + (cached ? " cached" : "") +
      (ref > 1 ? " shared" : "") + (head ? " head" : "") + (touched ? " touched" : "");
    e.style.background = who.length ? background(who) : "";
    e.style.color = who.length === 1 ? inkOn(colourOf(who[0])) : "";
    e.children[1].textContent = String(ref);
    e.children[2].firstChild.style.width = (100 * fill / BS) + "%";
    const hash = hashText ? "#" + hashText : "";
    e.children[3].textContent = label || (ref ? fill + "/" + BS : (cached ? UI.cached : "")) +
      (hash && !label ? " " + hash : "");
  }
  function drawBlocks(s, d, own) {
    const touched = new Set(d.e || []), head = s.free.length ? s.free[0] : -1;
    looks = (b) => [s.ref[b], s.fill[b], s.cached[b], b === head, touched.has(b), own.get(b) || [],
                    s.labels[b], s.hashes[b]];
    dirty.clear();
    for (let b = 0; b < NB; b++) {
      const who = own.get(b);
      const key = s.ref[b] + "|" + s.fill[b] + "|" + s.cached[b] + "|" + (b === head) + "|" +
        touched.has(b) + "|" + (who ? who.join(",") : "") + "|" + s.labels[b] + "|" + s.hashes[b];
      if (shown[b] === key) continue;
      const e = blockEls[b];
      e.setAttribute("data-ref", String(s.ref[b]));
      e.setAttribute("data-fill", String(s.fill[b]));
      const r = Math.floor(b / ROW);
      if (hidden[r]) { if (!dirty.has(r)) dirty.set(r, []); dirty.get(r).push([b, key]); }
      else drawLook(b, key);
    }
  }
  blocksEl.addEventListener("contentvisibilityautostatechange", (ev) => {
    const r = Array.prototype.indexOf.call(blocksEl.children, ev.target);
    if (r < 0) return;
    hidden[r] = ev.skipped ? 1 : 0;
    if (!ev.skipped && dirty.has(r)) { for (const [b, key] of dirty.get(r)) drawLook(b, key); dirty.delete(r); }
  });
  // The free list: moved element by element on a step forwards, rebuilt on a jump.
  const freeSpans = new Array(NB).fill(null);
  let freeShown = null, freeHeadEl = null;
  function freeSpan(b) {
    if (!freeSpans[b]) freeSpans[b] = el("span", { class: "fb", "data-block": String(b) }, String(b));
    return freeSpans[b];
  }
  function drawFree(s, d, forwards) {
    if (s.free === freeShown) return;
    if (forwards && d.fl && !d.fl.a) {
      for (const b of d.fl.r || []) freeSpan(b).remove();
      for (const [pos, run] of d.fl.i || []) {
        const before = freeEl.children[pos] || null;
        for (const b of run) freeEl.insertBefore(freeSpan(b), before);
      }
    } else {
      freeEl.replaceChildren(...s.free.map(freeSpan));
    }
    freeShown = s.free;
    for (const b of s.free.length < 64 ? s.free : (d.k || []).concat(d.ku || [])) {
      freeSpan(b).classList.toggle("cached", !!s.cached[b]);
    }
    if (freeHeadEl) freeHeadEl.classList.remove("head");
    freeHeadEl = s.free.length ? freeSpan(s.free[0]) : null;
    if (freeHeadEl) freeHeadEl.classList.add("head");
    freeHead.textContent = UI["free list, head first"] + " (" + s.free.length + " " + UI.free + ")";
    emptyFree.hidden = s.free.length > 0;
  }
  // The tables: a row is rebuilt only when its table changed (tables are never mutated, so
  // "changed" is "another object"); rows are put in admission order when that changed.
  const rows = new Map(), rowTable = new Map();
  let orderShown = null, lit = [];
  function rowHtml(s, q) {
    const t = s.tables.get(q), c = colourOf(q), ink = inkOn(c);
    const cells = t.blocks.map((b, j) => b < 0
      ? '<span class="cell dropped" data-block="-1" data-logical="' + j + '">' + esc(UI.dropped) + "</span>"
      : '<span class="cell" data-block="' + b + '" data-logical="' + j + '" style="background:' + c +
        ";color:" + ink + '"><sub>' + j + "</sub>" + b + "</span>").join("");
    return '<span class="seq" style="background:' + c + ";color:" + ink + '">' + esc(D.seqs[q]) +
      '</span><span class="ntok">' + t.n + " " + esc(UI.tokens) + '</span><span class="cells">' +
      cells + "</span>";
  }
  function groupOf(q) {
    return D.groups ? Math.max(0, D.groups.findIndex((g) => D.seqs[q].endsWith(":" + g))) : 0;
  }
  function drawTables(s, d) {
    for (const [q, row] of rows) {
      if (!s.tables.has(q)) { row.remove(); rows.delete(q); rowTable.delete(q); }
    }
    for (const q of s.order) {
      const t = s.tables.get(q);
      if (rowTable.get(q) === t) continue;
      if (!rows.has(q)) rows.set(q, el("div", { class: "table", "data-seq": D.seqs[q] }));
      rows.get(q).innerHTML = rowHtml(s, q);
      rowTable.set(q, t);
    }
    if (s.order !== orderShown) {
      for (const q of s.order) groupEls[groupOf(q)].append(rows.get(q));
      orderShown = s.order;
    }
    emptyTables.hidden = s.order.length > 0;
    for (const c of lit) c.classList.remove("touched");
    lit = [];
    for (const b of d.e || []) {
      for (const c of tablesEl.querySelectorAll('[data-block="' + b + '"]')) { c.classList.add("touched"); lit.push(c); }
    }
  }
  let arrowsShown = false;
  function drawArrows(d) {
    if (!d.cp && !arrowsShown) return; // nothing to draw or to clear: no layout forced
    while (arrows.firstChild) arrows.removeChild(arrows.firstChild);
    arrowsShown = !!d.cp;
    if (!d.cp) return;
    arrows.setAttribute("width", String(wrap.scrollWidth));
    arrows.setAttribute("height", String(wrap.scrollHeight));
    const defs = document.createElementNS(svgNS, "defs");
    defs.innerHTML = '<marker id="tip" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" ' +
      'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="' + D.accent + '"/></marker>';
    arrows.append(defs);
    const origin = wrap.getBoundingClientRect();
    for (const [src, dst] of d.cp) {
      const a = blockEls[src].getBoundingClientRect(), b = blockEls[dst].getBoundingClientRect();
      const x1 = a.left - origin.left + a.width / 2, y1 = a.bottom - origin.top;
      const x2 = b.left - origin.left + b.width / 2, y2 = b.bottom - origin.top;
      const dip = Math.max(y1, y2) + 26;
      const p = document.createElementNS(svgNS, "path");
      p.setAttribute("d", "M" + x1 + "," + y1 + " C" + x1 + "," + dip + " " + x2 + "," + dip + " " + x2 + "," + y2);
      p.setAttribute("class", "cow");
      p.setAttribute("data-copy", src + "->" + dst);
      p.setAttribute("marker-end", "url(#tip)");
      arrows.append(p);
      const label = document.createElementNS(svgNS, "text");
      label.setAttribute("x", String((x1 + x2) / 2));
      label.setAttribute("y", String(dip + 4));
      label.setAttribute("class", "cow-label");
      label.textContent = UI["copy-on-write"] + " " + src + "\u2192" + dst;
      arrows.append(label);
    }
  }
  function drawMarks(d) {
    const x = d.x || [];
    marks.innerHTML = (x.includes("oob") ? '<span class="mark oob">' + esc(UI.OutOfBlocks) + "</span>" : "") +
      (x.includes("pre") ? '<span class="mark pre">' + esc(UI.preempted) + "</span>" : "");
    story.classList.toggle("failed", x.includes("oob"));
  }

  let pinned = -1;
  function go(i) {
    i = Math.max(0, Math.min(N - 1, i | 0));
    if (i === cur && state) return;
    const forwards = state !== null && i === cur + 1;
    state = stateAt(i); cur = i;
    const d = STEPS[i], own = owners(state);
    stepText.textContent = "step " + d.n + " / " + LAST_N;
    captionEl.textContent = d.c;
    whyEl.textContent = d.w || "";
    drawMarks(d);
    drawBlocks(state, d, own);
    drawFree(state, d, forwards);
    drawTables(state, d);
    drawArrows(d);
    scrub.value = String(i);
    body.setAttribute("data-step-index", String(i));
    bPrev.disabled = i === 0; bNext.disabled = i === N - 1;
    if (pinned >= 0) describe(pinned);
    try { history.replaceState(null, "", "#step=" + i); } catch (e) { /* a sandboxed frame */ }
  }
  body.setAttribute("data-steps", String(N));

  // ---- a block's details, on hover or click ---------------------------------------------
  function describe(b) {
    const own = owners(state).get(b) || [];
    const rows = [
      [UI.block, b], [UI["ref count"], state.ref[b]],
      [UI.owners, own.length ? own.map((q) => D.seqs[q]).join(", ") : (state.cached[b] ? UI.cached : UI.free)],
      [UI.fill, state.fill[b] + " / " + BS + " " + UI.tokens],
    ];
    if (state.hashes[b]) rows.push([UI.hash, state.hashes[b]]);
    if (state.labels[b]) rows.push([UI.text, JSON.stringify(state.labels[b])]);
    rows.push([UI["last changed at step"], state.last[b] >= 0 ? STEPS[state.last[b]].n : "\u2013"]);
    info.innerHTML = "<dl>" + rows.map(([k, v]) => "<dt>" + esc(k) + "</dt><dd>" + esc(v) + "</dd>").join("") + "</dl>";
    info.setAttribute("data-block", String(b));
    info.hidden = false;
  }
  function blockOf(target) {
    const e = target.closest && target.closest("[data-block]");
    const b = e ? parseInt(e.getAttribute("data-block"), 10) : -1;
    return b >= 0 && b < NB && e !== info ? b : -1;
  }
  document.addEventListener("mouseover", (ev) => {
    const b = blockOf(ev.target);
    if (b >= 0) describe(b); else if (pinned < 0) info.hidden = true; else describe(pinned);
  });
  document.addEventListener("click", (ev) => {
    const b = blockOf(ev.target);
    if (b >= 0) { pinned = pinned === b ? -1 : b; describe(b); }
  });

  // ---- controls ---------------------------------------------------------------------------
  let timer = null;
  function play(on) {
    if (timer) { clearInterval(timer); timer = null; }
    if (on) {
      if (cur === N - 1) go(0);
      timer = setInterval(() => { go(cur + 1); if (cur >= N - 1) play(false); },
        1000 / parseFloat(speed.value));
    }
    bPlay.textContent = timer ? "\u23f8 " + UI.Pause : "\u25b6 " + UI.Play;
    bPlay.classList.toggle("on", !!timer);
  }
  function projector() {
    body.classList.toggle("projector"); bProj.classList.toggle("on");
    arrowsShown = true; drawArrows(STEPS[cur]); // the blocks moved: draw the arrows again
  }
  bPrev.addEventListener("click", () => go(cur - 1));
  bNext.addEventListener("click", () => go(cur + 1));
  bPlay.addEventListener("click", () => play(!timer));
  bProj.addEventListener("click", projector);
  speed.addEventListener("change", () => { if (timer) play(true); });
  scrub.addEventListener("input", () => go(parseInt(scrub.value, 10)));
  document.addEventListener("keydown", (ev) => {
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.target === speed) return;
    const moves = { ArrowRight: cur + 1, ArrowLeft: cur - 1, Home: 0, End: N - 1 };
    if (ev.key in moves) { ev.preventDefault(); go(moves[ev.key]); }
    else if (ev.key === " ") { ev.preventDefault(); play(!timer); }
    else if (ev.key === "p" || ev.key === "P") { ev.preventDefault(); projector(); }
  });
  function fromHash() {
    const m = /step=(\d+)/.exec(location.hash);
    return m ? parseInt(m[1], 10) : 0;
  }
  window.addEventListener("hashchange", () => go(fromHash()));
  window.addEventListener("resize", () => { arrowsShown = true; drawArrows(STEPS[cur]); });
  window.pagedsimViewer = { go: go, index: () => cur, count: () => N };
  go(fromHash());
})();
