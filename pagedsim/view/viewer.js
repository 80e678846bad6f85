// pagedsim's trace viewer: replays the per-step differences in #trace-data and draws one
// step at a time. Plain JS, no framework, no build step, no request. The data format is
// described in pagedsim/view/diffs.py, the DOM contract in pagedsim/view/__init__.py.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("trace-data").textContent);
  const UI = D.ui, NB = D.nb, BS = D.bs, STEPS = D.steps, N = STEPS.length;
  // a full copy of the state every EVERY steps: going back replays < EVERY. A stream's step
  // changes a few blocks, so a long stream on many tiles keeps fewer copies (~2M slots in all)
  const EVERY = D.stream ? Math.max(16, Math.ceil(N * NB / 2e6)) : 16;
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
  function stateAt(i) { // forwards from the shown step when that is the shorter replay
    if (state && i > cur && i - cur <= Math.max(1, i % EVERY)) {
      for (let j = cur + 1; j <= i; j++) apply(state, STEPS[j], j);
      return state;
    }
    const s = clone(checkpoints[Math.floor(i / EVERY)]);
    for (let j = Math.floor(i / EVERY) * EVERY + 1; j <= i; j++) apply(s, STEPS[j], j);
    return s;
  }

  // ---- the page ------------------------------------------------------------------------
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, k === "title" ? plain(attrs[k]) : attrs[k]); // a tooltip is text
    if (text !== undefined) e.textContent = plain(text); // any text: see plain() below
    return e;
  }
  // Text from a trace is shown as text: never parsed as HTML, and the characters that would
  // act on the text around them or hide (bidi overrides and isolates, zero-width and other
  // invisible format characters, C0/C1 controls) are shown as their code point, e.g. "<U+202E>",
  // so a caption cannot reorder or hide what follows, nor two names look alike.
  const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb]/g;
  function plain(t) {
    return String(t).replace(CONTROL, (c) => "<U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + ">");
  }
  // Block text shows its whitespace (a space as "·", a newline as "↵") and may wrap after it.
  const WS = { " ": "\u00b7", "\n": "\u21b5", "\t": "\u2192" };
  function spaces(t) { return t.replace(/[ \n\t]/g, (c) => WS[c] + "\u200b"); }
  function esc(t) {
    return plain(t).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
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
  const headline = el("p", { id: "headline" }); // presentation mode's caption: two lines at most
  const whyEl = el("p", { id: "why" });
  const changes = el("nav", { id: "changes", hidden: "" });
  story.append(marks, captionEl, headline, whyEl, changes);
  const main = el("main");
  const tablesPane = el("section", { id: "tables-pane" });
  const tablesEl = el("div", { id: "tables" });
  tablesPane.append(el("h2", {}, UI["block tables (logical \u2192 physical)"]), tablesEl);
  const timeline = el("section", { id: "timeline", hidden: "" });
  const kernelEl = el("section", { id: "kernel", hidden: "" });
  tablesPane.append(timeline, kernelEl);
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
  const legend = el("ul", { id: "legend" });
  const hostEl = el("section", { id: "host", hidden: "" });
  poolPane.append(blocksHead, wrap, freeHead, freeEl, hostEl);
  tablesPane.append(legend); // the left column has room to spare: the tiles keep theirs
  main.append(tablesPane, poolPane);
  const info = el("aside", { id: "info", hidden: "" });
  const keys = el("footer", { id: "keys" }, UI.keys);
  body.append(top, story, main, info, keys);

  // A big pool is laid out in rows of ROW blocks, each row a box the browser may skip while
  // it is off screen (content-visibility), so a step change lays out only what is visible.
  // A big pool's tile holds its id and badge only; the fill bar and text, which only
  // projector mode shows there, are added when projector mode is first turned on (fewer
  // elements to restyle and lay out when a jump changes every tile in the window).
  const BIG = NB > 256, ROW = BIG ? 32 : NB;
  const TEXTS = '<span class="bar"><i></i></span><span class="txt"></span>';
  const blockEls = [], bidEls = [], badgeEls = []; // a tile, its id and its badge
  for (let r = 0; r < NB; r += ROW) {
    const row = el("div", { class: "row" });
    row.rowIndex = blocksEl.childElementCount;
    for (let b = r; b < Math.min(NB, r + ROW); b++) {
      const e = el("div", { class: "block free", "data-block": String(b), "data-ref": "0", "data-fill": "0" });
      e.innerHTML = '<span class="bid">' + b + '</span><span class="badge"></span>' + (BIG ? "" : TEXTS);
      blockEls.push(e); bidEls.push(e.firstChild); badgeEls.push(e.children[1]); row.append(e);
    }
    blocksEl.append(row);
  }
  let texts = !BIG; // whether every tile has its fill bar and text
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
  const INK = D.palette.map(inkOn);
  // A tile with one owner, and a sequence's table row, take their colours from a class
  // (a tile "o3", a row "t3": a tile's class change then restyles no cells), not an inline
  // style or a custom property, so elements that look alike share one computed style.
  const owned = el("style");
  owned.textContent = D.palette.map((c, k) => ".block.o" + k + ", .hb.o" + k + ", .table.t" + k +
    " .cell, .table.t" + k + " .seq { background: " + c + "; color: " + INK[k] + "; }").join("\n");
  document.head.append(owned);
  // Each block's owners at a step, in admission order, with no allocation per block:
  // firstOwner[b] is the first (-1: none); the returned map holds the whole list of a
  // block with several owners (a shared block) only.
  const firstOwner = new Int32Array(NB);
  function owners(s) {
    firstOwner.fill(-1);
    const many = new Map();
    for (const q of s.order) {
      for (const b of s.tables.get(q).blocks) {
        if (b < 0) continue;
        const first = firstOwner[b];
        if (first < 0) { firstOwner[b] = q; continue; }
        const list = many.get(b);
        if (list === undefined) { if (first !== q) many.set(b, [first, q]); }
        else if (list[list.length - 1] !== q) list.push(q);
      }
    }
    return many;
  }
  const ownersOf = (b, many) => many.get(b) || (firstOwner[b] < 0 ? [] : [firstOwner[b]]);
  const sameList = (a, b) => a !== null && a.length === b.length && a.every((x, j) => x === b[j]);
  function background(who) {
    if (who.length < 2) return colourOf(who[0]);
    const w = 100 / who.length;
    return "linear-gradient(90deg," + who.map((q, j) =>
      colourOf(q) + " " + (j * w) + "% " + ((j + 1) * w) + "%").join(",") + ")";
  }
  // Every step change writes only what differs from what is shown: the page keeps the shown
  // value of every block, free-list slot and table cell, and compares numbers, not strings.
  // A block's look is drawn now if its row is on screen, else when the row scrolls into view
  // (content-visibility tells); its data-ref / data-fill are always written at once.
  const shRef = new Int32Array(NB).fill(-1), shFill = new Int32Array(NB).fill(-1);
  const shFlags = new Int8Array(NB).fill(-1); // cached | head << 1 | touched << 2
  // the owner shown: a sequence, -1 none, -2 several (their list in shWho), -3 not drawn yet
  const shOwner = new Int32Array(NB).fill(-3), shWho = new Array(NB).fill(null);
  const shLabel = new Array(NB).fill(""), shHash = new Array(NB).fill("");
  const shBg = new Array(NB).fill(""); // the inline background of a tile with several owners
  // what each tile's element holds now (its class and badge), so a look that comes out the
  // same is not written again; a class string is made once per look
  const shClass = new Array(NB).fill("block free"), shBadge = new Array(NB).fill("");
  const shKids = new Int8Array(NB).fill(-1); // shared | free << 1, as the children show it
  const classes = new Map();
  function classOf(ref, flags, owner) {
    const k = (ref === 0 ? 1 : ref > 1 ? 2 : 0) | (flags << 2) | ((owner + 2) << 5);
    let c = classes.get(k);
    if (c === undefined) {
      c = "block" + (ref === 0 ? " free" : "") + (flags & 1 ? " cached" : "") +
        (ref > 1 ? " shared" : "") + (flags & 2 ? " head" : "") + (flags & 4 ? " touched" : "") +
        (owner >= 0 ? " o" + D.colour[owner] : "");
      classes.set(k, c);
    }
    return c;
  }
  const rowOf = (b) => (b / ROW) | 0;
  // a big pool's rows count as hidden until the observer first reports them
  const hidden = new Uint8Array(Math.ceil(NB / ROW)).fill(BIG ? 1 : 0), stale = new Uint8Array(NB);
  const touchedAt = new Int32Array(NB).fill(-1); // the step index whose events named the block
  function drawLook(b) {
    stale[b] = 0;
    const ref = shRef[b], fill = shFill[b], flags = shFlags[b], owner = shOwner[b];
    const e = blockEls[b];
    const cls = classOf(ref, flags, owner);
    if (shClass[b] !== cls) { shClass[b] = cls; e.className = cls; }
    const bg = owner === -2 ? background(shWho[b]) : "";
    if (shBg[b] !== bg) { shBg[b] = bg; e.style.background = bg; }
    // the badge: a stream's hash on a cached tile, else the ref count of a used tile (a big
    // pool's only above 1); empty, it is not drawn
    const badge = D.stream ? (flags & 1 ? shHash[b] : "") : ref > (BIG ? 1 : 0) ? String(ref) : "";
    if (shBadge[b] !== badge) { shBadge[b] = badge; badgeEls[b].textContent = badge; }
    const kids = (ref > 1 ? 1 : 0) | (ref === 0 ? 2 : 0);
    if (shKids[b] === kids && !texts) return;
    const bar = texts ? badgeEls[b].nextSibling : null, txt = texts ? bar.nextSibling : null;
    if (shKids[b] !== kids) {
      shKids[b] = kids;
      if (!BIG) bidEls[b].className = kids & 1 ? "bid chip" : "bid"; // a big pool's ids are always on one
      if (texts) { bar.className = kids & 2 ? "bar off" : "bar"; txt.className = kids & 1 ? "txt chip" : "txt"; }
    }
    if (!texts) return;
    const label = shLabel[b], hash = shHash[b] ? "#" + plain(shHash[b]) : "";
    const width = (100 * fill / BS) + "%";
    if (bar.firstChild.style.width !== width) bar.firstChild.style.width = width;
    setText(txt, spaces(plain(label)) || (ref ? fill + "/" + BS : (flags & 1 ? UI.cached : "")) + (hash && !label ? " " + hash : ""));
  }
  function setText(e, t) { if (e.textContent !== t) e.textContent = t; }
  function drawBlocks(s, d, many) {
    const head = s.free.length ? s.free[0] : -1;
    for (const b of d.e || []) touchedAt[b] = cur;
    for (let b = 0; b < NB; b++) {
      const who = many.get(b), owner = who === undefined ? firstOwner[b] : -2;
      const flags = s.cached[b] | (b === head ? 2 : 0) | (touchedAt[b] === cur ? 4 : 0);
      const ref = s.ref[b], fill = s.fill[b];
      if (ref === shRef[b] && fill === shFill[b] && flags === shFlags[b] && owner === shOwner[b] &&
          (owner !== -2 || sameList(shWho[b], who)) && s.labels[b] === shLabel[b] &&
          s.hashes[b] === shHash[b]) continue;
      const e = blockEls[b];
      if (ref !== shRef[b]) e.setAttribute("data-ref", String(ref));
      if (fill !== shFill[b]) e.setAttribute("data-fill", String(fill));
      shRef[b] = ref; shFill[b] = fill; shFlags[b] = flags; shOwner[b] = owner; shWho[b] = who || null;
      shLabel[b] = s.labels[b]; shHash[b] = s.hashes[b];
      if (hidden[rowOf(b)]) stale[b] = 1; else drawLook(b);
    }
  }
  // A row is "hidden" while no part of it is in the window (the browser's own margin for
  // content-visibility is wider, so it would draw rows the reader cannot see).
  const watch = new IntersectionObserver((seen) => {
    for (const ev of seen) {
      const r = ev.target.rowIndex;
      hidden[r] = ev.isIntersecting ? 0 : 1;
      if (!ev.isIntersecting) continue;
      for (let b = r * ROW; b < Math.min(NB, (r + 1) * ROW); b++) if (stale[b]) drawLook(b);
    }
  });
  const poolRows = [...blocksEl.children]; // (a folded pool puts marks between them)
  for (const row of poolRows) watch.observe(row);

  // The free list: a step that removes or inserts a few ids moves those elements only; a
  // change that moves many (a jump) rewrites the ids in place, element by element, so no
  // element is created or re-attached and the browser re-shapes only the changed texts.
  // When such a change shortens the list, the elements past its end stay, hidden and
  // without a data-block ("parked"), to be used again when it grows (no element is moved).
  const freeOf = new Array(NB).fill(null); // block -> the element that shows it
  const inOld = new Int32Array(NB), inNew = new Int32Array(NB);
  const FB = ["fb", "fb cached", "fb head", "fb cached head", "fb touched", "fb cached touched",
    "fb head touched", "fb cached head touched"];
  let freeShown = [], stamp = 0;
  function freeSpan(b) {
    const e = el("span", { class: "fb", "data-block": String(b) }, String(b));
    e.block = b; e.look = 0;
    return e;
  }
  function setFreeBlock(e, b) {
    if (e.block === b) return;
    if (e.block < 0) e.hidden = false;
    e.block = b; e.setAttribute("data-block", String(b)); e.firstChild.nodeValue = String(b);
  }
  function park(e) { e.block = -1; e.removeAttribute("data-block"); e.hidden = true; }
  function freeEdits(a, b) { // the moves a -> b needs, or -1 if the kept ids changed order
    stamp++;
    for (const x of a) inOld[x] = stamp;
    for (const x of b) inNew[x] = stamp;
    let i = 0, j = 0, kept = 0;
    for (;;) {
      while (i < a.length && inNew[a[i]] !== stamp) i++;
      while (j < b.length && inOld[b[j]] !== stamp) j++;
      if (i === a.length || j === b.length) break;
      if (a[i] !== b[j]) return -1;
      i++; j++; kept++;
    }
    return a.length + b.length - 2 * kept;
  }
  function drawFree(s) {
    const a = freeShown, b = s.free;
    if (a !== b) {
      const edits = freeEdits(a, b);
      if (edits >= 0 && edits <= 256) {
        for (const x of a) if (inNew[x] !== stamp) { freeOf[x].remove(); freeOf[x] = null; }
        let at = freeEl.firstChild;
        for (const x of b) {
          if (inOld[x] === stamp) { at = freeOf[x].nextSibling; continue; }
          freeOf[x] = freeSpan(x); freeEl.insertBefore(freeOf[x], at);
        }
      } else { // parked elements are used first; the missing ones come in one fragment
        let e = freeEl.firstChild, p = 0;
        for (; p < b.length && e !== null; p++, e = e.nextSibling) { setFreeBlock(e, b[p]); freeOf[b[p]] = e; }
        const more = document.createDocumentFragment();
        for (; p < b.length; p++) { freeOf[b[p]] = freeSpan(b[p]); more.append(freeOf[b[p]]); }
        freeEl.append(more);
        for (; e !== null && e.block >= 0; e = e.nextSibling) park(e);
      }
      freeShown = b;
    }
    let e = freeEl.firstChild;
    for (let p = 0, head = 2; p < b.length; p++, e = e.nextSibling, head = 0) {
      // the cached flag can change while the list stays
      const look = s.cached[e.block] | head | (touchedAt[e.block] === cur ? 4 : 0);
      if (e.look !== look) { e.look = look; e.className = FB[look]; }
    }
    freeHead.textContent = UI["free list, head first"] + " (" + b.length + " " + UI.free + ")";
    emptyFree.hidden = b.length > 0;
  }

  // The tables: one row per sequence, kept while the sequence lives; a changed table rewrites
  // the cells that differ (its colour is the row's, a CSS variable), and rows move only when
  // the admission order puts them elsewhere.
  const rows = new Map(); // seq -> {el, ntok, cells, list, t}
  let orderShown = null, lit = [];
  function makeRow(q) {
    const row = el("div", { class: "table t" + D.colour[q], "data-seq": D.seqs[q] });
    const ntok = el("span", { class: "ntok" }), list = el("span", { class: "cells" });
    row.append(el("span", { class: "seq" }, D.seqs[q]), ntok, list);
    return (row.row = { el: row, ntok: ntok, list: list, cells: [], t: null, look: "", seen: false });
  }
  function setCell(c, b) {
    if (c.block === b) return;
    c.block = b;
    c.setAttribute("data-block", String(b));
    c.className = b < 0 ? "cell dropped" : "cell";
    c.lastChild.nodeValue = b < 0 ? UI.dropped : String(b);
  }
  // A row's missing cells come in one HTML string (the parser makes thousands of cells after
  // a jump faster than one createElement each); cells already there are rewritten in place.
  function cellHtml(j, b) {
    return '<span class="cell' + (b < 0 ? " dropped" : "") + '" data-logical="' + j + '" data-block="' + b +
      '">' + (BIG ? "" : "<sub>" + j + "</sub>") + (b < 0 ? esc(UI.dropped) : b) + "</span>";
  }
  function fillRow(r, t) {
    r.t = t;
    setText(r.ntok, t.n + " " + UI.tokens);
    const blocks = t.blocks, cells = r.cells;
    // The height the row is given while it is skipped off screen, from its number of cells
    // (about ten to a line), so rows near the window are not unskipped and skipped in turn.
    const lines = Math.max(1, Math.ceil(blocks.length / 10));
    if (r.lines !== lines) { r.lines = lines; r.el.style.containIntrinsicBlockSize = "auto " + (8 + 26 * lines) + "px"; }
    while (cells.length > blocks.length) cells.pop().remove();
    for (let j = 0; j < cells.length; j++) setCell(cells[j], blocks[j]);
    if (cells.length === blocks.length) return;
    let html = "";
    for (let j = cells.length; j < blocks.length; j++) html += cellHtml(j, blocks[j]);
    r.list.insertAdjacentHTML("beforeend", html);
    for (let c = r.list.children[cells.length]; c; c = c.nextElementSibling) { c.block = blocks[cells.length]; cells.push(c); }
  }
  function groupOf(q) {
    return D.groups ? Math.max(0, D.groups.findIndex((g) => D.seqs[q].endsWith(":" + g))) : 0;
  }
  function drawTables(s, d) {
    unfold(); // before any row is rewritten: a row's list then holds its cells only
    for (const [q, r] of rows) if (!s.tables.has(q) && r.el.parentNode) r.el.remove();
    for (const q of s.order) {
      if (!rows.has(q)) rows.set(q, makeRow(q));
      const r = rows.get(q), t = s.tables.get(q);
      if (r.t !== t) fillRow(r, t);
    }
    if (s.order !== orderShown) {
      const at = groupEls.map((g) => (g.firstChild && g.firstChild.tagName === "H3" ? g.firstChild.nextSibling : g.firstChild));
      for (const q of s.order) {
        const g = groupOf(q), row = rows.get(q).el;
        if (at[g] === row) at[g] = row.nextSibling; else groupEls[g].insertBefore(row, at[g]);
      }
      orderShown = s.order;
      if (BIG) farRows(s);
    }
    emptyTables.hidden = s.order.length > 0;
    for (const c of lit) c.classList.remove("touched");
    lit = [];
    const light = (c) => { if (!c.classList.contains("touched")) { c.classList.add("touched"); lit.push(c); } };
    for (const [q, , keep, tail] of d.t || []) { // the cells the step wrote into a table
      if (keep < 0 || !s.tables.has(q)) continue;
      const cells = rows.get(q).cells;
      for (let j = keep; j < keep + tail.length && j < cells.length; j++) light(cells[j]);
    }
    if (d.e) { // the cells that show a block the step changed
      for (const q of s.order) {
        const blocks = s.tables.get(q).blocks, cells = rows.get(q).cells;
        for (let j = 0; j < blocks.length; j++) if (blocks[j] >= 0 && touchedAt[blocks[j]] === cur) light(cells[j]);
      }
    }
  }
  // A step whose changed cells do not fit the pane that scrolls the tables together folds
  // the tables, in three stages, each only when the one before was not enough:
  // - the tables between the first and the last changed one that show no changed cell fold,
  //   each run of them to one mark "\u2026N tables" (their names on hover);
  // - each table that does show one keeps its first cell, its last two and every changed
  //   cell with a neighbour each side, and each run of the others (three or more) becomes
  //   one mark "\u2026N" (their blocks on hover);
  // - when the changed cells themselves are more than the pane holds (a long prefill of small
  //   blocks, a fork of a long table), the tables' text is squeezed for the step, down to 0.6
  //   of its size (presentation mode: to 0.6 units, then with the request timeline at half
  //   its height), with each name on its cells' line, and at the least the cells leave out
  //   their logical index (the hover box has it).
  // Folded tables and cells stay in the DOM, hidden, so the tables' data-block lists are
  // whole. The next step unfolds and unsqueezes first. A big page folds on the steps it
  // reveals (one step, a link), in the frame after the change, not on a jump.
  let foldedCells = [], foldMarks = [];
  function quietRuns(lo, hi, quiet, least, fold) { // each run of `least` or more quiet indexes between lo and hi: fold(j, k), k excluded
    for (let j = lo + 1; j < hi;) {
      let k = j;
      while (k < hi && quiet(k)) k++;
      if (k - j >= least) fold(j, k);
      j = k + 1;
    }
  }
  function foldRun(run, tag, cls, title, text) { // hidden until the next step; one mark before them
    for (const x of run) { x.classList.add("folded"); foldedCells.push(x); }
    const mark = el(tag, { class: cls, title: title }, text);
    run[0].before(mark); foldMarks.push(mark);
  }
  function unfold() {
    for (const c of foldedCells) c.classList.remove("folded"); // cells, tables, rows of tiles
    for (const m of foldMarks) m.remove();
    foldedCells = []; foldMarks = [];
    unsqueezePool(); poolFolded = false;
    if (tablesEl.classList.contains("squeezed")) { // the class is the state
      tablesEl.classList.remove("squeezed", "bare"); tablesEl.style.removeProperty("--squeeze");
      body.classList.remove("tl-short");
    }
  }
  function litSpan() { // the changed cells' span and the room of the pane that scrolls them (CSS decides which); 0 when they fit
    if (!lit.length) return [0, 1];
    const box = presenting ? tablesEl : getComputedStyle(tablesPane).overflowY === "visible" ? null : tablesPane;
    if (box && box.scrollHeight <= box.clientHeight + 1) return [0, 1]; // nothing scrolls: all in view
    let top = Infinity, bottom = -Infinity;
    for (const c of lit) { const r = c.getBoundingClientRect(); top = Math.min(top, r.top); bottom = Math.max(bottom, r.bottom); }
    const room = (box ? box.clientHeight : innerHeight) - 12;
    return [bottom - top <= room ? 0 : bottom - top, room];
  }
  function litFits() { return litSpan()[0] === 0; }
  function litEnds() { // the first and the last changed cell in the tables' order (a step lights its writes first)
    let first = lit[0], last = lit[0];
    for (const c of lit) {
      if (first.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_PRECEDING) first = c;
      if (last.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING) last = c;
    }
    return [first, last];
  }
  function squeezeTables() {
    const least = presenting ? Math.min(1, 0.6 / tscale) : 0.6;
    let scale = 1, [span, room] = litSpan();
    if (!span) return;
    tablesEl.classList.add("squeezed");
    const shrink = () => {
      for (let k = 0; k < 6 && span && scale > least; k++) {
        scale = Math.max(least, scale * Math.min(0.92, Math.sqrt(room / span)));
        tablesEl.style.setProperty("--squeeze", scale.toFixed(3));
        [span, room] = litSpan();
      }
    };
    shrink();
    if (span && presenting && !timeline.hidden) { // the request timeline under the tables gives up half its height
      body.classList.add("tl-short");
      [span, room] = litSpan();
      shrink();
    }
    if (span) tablesEl.classList.add("bare"); // the last resort: cells without their logical index
  }
  function foldTables() {
    if (!state || litFits()) return;
    const on = new Set(lit), shown = new Set(lit.map((c) => c.closest(".table")));
    foldQuiet(shown);
    if (litFits()) return;
    for (const q of state.order) {
      const cells = rows.get(q).cells, n = cells.length, keep = new Uint8Array(n);
      if (!shown.has(rows.get(q).el)) continue;
      keep[0] = 1; keep[Math.max(0, n - 2)] = 1; keep[n - 1] = 1;
      for (let j = 0; j < n; j++) {
        if (on.has(cells[j])) keep[j] = keep[Math.max(0, j - 1)] = keep[Math.min(n - 1, j + 1)] = 1;
      }
      quietRuns(-1, n, (j) => !keep[j], 3, (j, k) => {
        const run = cells.slice(j, k);
        foldRun(run, "span", "fold", UI["folded blocks, unchanged this step"] + ": " +
          run.map((c) => c.block).join(", "), "\u2026" + run.length);
      });
    }
    squeezeTables();
  }
  function foldQuiet(shown) { // the tables between the changed ones that show no change
    for (const box of groupEls) {
      const tables = [...box.children].filter((e) => e.row);
      const first = tables.findIndex((e) => shown.has(e)), last = tables.findLastIndex((e) => shown.has(e));
      if (first < 0) continue;
      quietRuns(first, last, (j) => !shown.has(tables[j]), 1, (j, k) => {
        const run = tables.slice(j, k);
        foldRun(run, "div", "fold tables", UI["folded tables, unchanged this step"] + ": " +
          run.map((t) => t.dataset.seq).join(", "), "\u2026" + run.length + " " + UI.tables);
      });
    }
  }
  // A big page renders only the table rows in sight ("near": content-visibility visible);
  // the rest are not rendered at all ("far": hidden). The browser's own skipping
  // (content-visibility: auto) renders every row within half a window of the pane's edges,
  // three times the rows one sees, after a jump most of them new, and it draws a row that
  // scrolls in only frames after it is in sight. The rows in sight are told by an observer;
  // after a step change the rows at the places that were in sight (and two more each side)
  // are rendered in the same frame, and so is every row the observer last saw in sight
  // wherever it now is (the observer reports changes only: a row that was in sight and still
  // is would never be reported again, and stayed blank), and a row that comes into sight
  // later (a scroll, a shorter row above) is rendered when the observer tells. A row that leaves the window
  // stays rendered until the order next changes (then every row is placed again): turning it
  // off at once would cost a second frame per jump for rows that no change touches.
  // Until the observer has seen a row, the browser skips.
  let shownRows = [];
  function mark(r, look) { // "near", "far", or "" (the browser's content-visibility: auto)
    if (r.look === look) return;
    if (r.look) r.el.classList.remove(r.look);
    if (look) r.el.classList.add(look);
    r.look = look;
  }
  const rowWatch = BIG ? new IntersectionObserver((seen) => {
    for (const ev of seen) {
      const r = ev.target.row;
      r.seen = ev.isIntersecting;
      if (r.seen) mark(r, "near");
    }
  }, { rootMargin: "120px 0px", scrollMargin: "120px 0px" }) : null;
  function farRows(s) {
    let lo = -1, hi = -1;
    shownRows.forEach((r, k) => { if (r.seen) { if (lo < 0) lo = k; hi = k; } });
    const next = [];
    for (const box of groupEls) for (const e of box.children) if (e.row) next.push(e.row);
    next.forEach((r, k) => {
      if (!r.watched) { r.watched = true; rowWatch.observe(r.el); }
      mark(r, lo < 0 ? "" : r.seen || (k >= lo - 2 && k <= hi + 2) ? "near" : "far");
    });
    shownRows = next;
  }
  function unfar(cell) { // a far row is rendered before a cell in it is scrolled to
    const r = cell.closest(".table").row;
    if (r) mark(r, "near");
  }
  // ---- what the step changed: a strip of links by kind, and the change brought into view --
  const KIND = { a: "allocated", h: "hit", c: "copied", s: "shared", o: "swapped out",
    i: "swapped in", r: "released", x: "freed", v: "evicted", k: "hashed", f: "filled", t: "touched" };
  const LISTED = 12; // block links shown per kind; the rest are counted
  function drawChanges(d) {
    changes.textContent = "";
    const e = d.e || [], ek = d.ek || "";
    changes.hidden = e.length === 0;
    if (!e.length) return;
    const by = new Map();
    e.forEach((b, j) => { const k = ek[j] || "t"; if (!by.has(k)) by.set(k, []); by.get(k).push(b); });
    changes.append(el("span", { class: "lead" }, UI["changed this step"] + ":"));
    for (const [k, list] of by) {
      const g = el("span", { class: "chg k-" + k + (list.length > 3 ? " long" : ""), "data-kind": KIND[k] });
      g.append(el("b", {}, (k === "r" ? releasedBy(d, list) : UI[KIND[k]]) + (list.length > 1 ? " \u00d7" + list.length : "")));
      for (const b of list.slice(0, LISTED)) g.append(el("span", { class: "goto", "data-goto": String(b), tabindex: "0" }, String(b)));
      if (list.length > LISTED) g.append(el("span", { class: "more" }, "+" + (list.length - LISTED)));
      changes.append(g);
    }
  }
  function releasedBy(d, list) { // "released by r0.0": the owners that let go, when the data names them
    const rb = d.rb || [], of = new Set(list), who = [];
    for (let j = 0; j < rb.length; j += 2) if (of.has(rb[j]) && !who.includes(D.seqs[rb[j + 1]])) who.push(D.seqs[rb[j + 1]]);
    if (!who.length) return UI.released;
    return UI["released by {who}"].replace("{who}", () => who.slice(0, 3).join(", ") + (who.length > 3 ? " +" + (who.length - 3) : ""));
  }
  // The last changed tile and cell, then the first (the highest and lowest block ids; the
  // tables' last and first changed cells in their order), so both are in view if they fit;
  // a small pool folds and shrinks its tiles first where they do not (foldTiles).
  // A big pool scrolls in the next frame, so the layout it needs is the frame's own; when the
  // row of either end is off screen (the row observer knows without a layout), the rows
  // around it are drawn first and the last tile is centred. There, before it scrolls, the
  // tables fold (foldTables) and so does the pool: when the changed tiles span more than
  // the pane holds, each run of rows of tiles between them that holds no change becomes one
  // mark "\u2026 32\u2013127" (a fork that shares blocks 3 and 2,914 shows both).
  let revealing = 0;
  function reveal(d) {
    const e = d.e || [];
    const near = { block: "nearest", inline: "nearest" };
    const lo = e.length ? Math.min(...e) : -1, hi = e.length ? Math.max(...e) : -1;
    if (!BIG) {
      if (e.length) { foldTiles(e, lo, hi); blockEls[hi].scrollIntoView(near); blockEls[lo].scrollIntoView(near); }
      if (lit.length) { const [first, last] = litEnds(); last.scrollIntoView(near); first.scrollIntoView(near); }
      return;
    }
    cancelAnimationFrame(revealing);
    const away = e.length > 0 && (hidden[rowOf(lo)] === 1 || hidden[rowOf(hi)] === 1);
    if (away) { // the rows it brings into view are drawn now, not in a second pass when seen
      for (let b = Math.max(0, rowOf(lo) - 16) * ROW; b < Math.min(NB, (rowOf(hi) + 17) * ROW); b++) if (stale[b]) drawLook(b);
    }
    const scroll = (last) => {
      if (e.length) { blockEls[hi].scrollIntoView(last); blockEls[lo].scrollIntoView(near); }
      if (lit.length) for (const c of litEnds().reverse()) c.scrollIntoView(near);
    };
    revealing = requestAnimationFrame(() => {
      for (const c of lit) unfar(c);
      foldTables();
      if (e.length) foldPool(e, lo, hi);
      scroll(away ? { block: "center", inline: "nearest" } : near);
      // rows that the observers render after this frame (their own height, not the one
      // remembered while skipped) may move the change out of sight: once more, a frame later
      revealing = requestAnimationFrame(() => { if (e.length) foldPool(e, lo, hi); scroll(near); });
    });
  }
  function poolRoom() { // the height of what scrolls the pool (CSS decides which), less the outlines
    const box = presenting ? wrap : getComputedStyle(poolPane).overflowY === "visible" ? null : poolPane;
    return (box ? box.clientHeight : innerHeight) - 12;
  }
  function tileSpan(lo, hi) { return blockEls[hi].getBoundingClientRect().bottom - blockEls[lo].getBoundingClientRect().top; }
  function foldPool(e, lo, hi) {
    const room = poolRoom(), fits = () => tileSpan(lo, hi) <= room;
    if (fits()) return;
    if (poolFolded) { squeezePool(room, lo, hi); return; }
    poolFolded = true;
    const has = new Uint8Array(poolRows.length);
    for (const b of e) has[rowOf(b)] = 1;
    quietRuns(rowOf(lo), rowOf(hi), (r) => !has[r], 1, foldRows);
    if (!fits()) squeezePool(room, lo, hi);
  }
  // A small pool is one row of tiles that wraps. When a step's changed tiles span more than
  // the pane holds (a release of 71 blocks of 2 tokens), each run of three or more unchanged
  // tiles between them becomes one mark "\u2026 48\u201353", and where that is not enough the
  // tiles shrink for the step, down to 28 px (under 40 px their text is left to the hover box).
  function foldTiles(e, lo, hi) {
    const room = poolRoom(), fits = () => tileSpan(lo, hi) <= room;
    if (poolFolded || fits()) return; // once a step, as a big pool
    poolFolded = true;
    const has = new Uint8Array(NB);
    for (const b of e) has[b] = 1;
    quietRuns(lo, hi, (b) => !has[b], 3, (b, k) => {
      const span = b + "\u2013" + (k - 1);
      foldRun(blockEls.slice(b, k), "span", "fold tiles", UI["folded blocks, unchanged this step"] + ": " + span, "\u2026 " + span);
    });
    if (fits()) return;
    const st = blocksEl.style;
    poolSqueezed = ["", ""]; // a small pool has no --cols or --lines to give back
    blocksEl.classList.add("squeezed");
    let tile = blockEls[lo].offsetHeight;
    for (let k = 0; k < 8 && tile > 28; k++) {
      const span = tileSpan(lo, hi);
      if (span <= room) return;
      tile = Math.max(28, Math.floor(tile * Math.min(0.94, Math.sqrt(room / span))));
      st.setProperty("--block", tile + "px"); st.setProperty("--label", Math.max(9, Math.floor(0.26 * tile)) + "px");
      blocksEl.classList.toggle("tiny", tile < 40);
    }
  }
  function foldRows(r, k) { // rows r to k - 1, one mark
    const span = r * ROW + "\u2013" + (Math.min(NB, k * ROW) - 1);
    foldRun(poolRows.slice(r, k), "div", "fold rows", UI["folded blocks, unchanged this step"] + ": " + span, "\u2026 " + span);
  }
  // The changed rows, folded, that still span more than the pane: for the step, each row of
  // ROW tiles is one line, and the tiles and their ids shrink (not below 16 px) until the
  // rows and the marks between them fit the pane's width and height. The rows before and
  // after them fold too, so that no row the browser renders later (at its one-line height,
  // not the two-line one it remembered while skipped) moves the change out of sight.
  let poolSqueezed = null, poolFolded = false; // the --cols and --lines that the next step gives back
  function squeezePool(room, lo, hi) {
    const st = blocksEl.style, ws = getComputedStyle(wrap);
    if (st.getPropertyValue("--cols") === String(ROW)) return;
    const inner = wrap.clientWidth - parseFloat(ws.paddingLeft) - parseFloat(ws.paddingRight) - 2 * 6;
    const wide = Math.floor((inner + 3) / ROW - 3); // the squeezed rows' gaps (3 px, 6 px between lines) and padding (6 px): viewer.css
    if (wide < 16) return;
    blocksEl.classList.add("squeezed"); // first: the marks take their squeezed height
    const marksBefore = foldMarks.length, foldsBefore = foldedCells.length;
    if (rowOf(lo) > 0) foldRows(0, rowOf(lo));
    if (rowOf(hi) + 1 < poolRows.length) foldRows(rowOf(hi) + 1, poolRows.length);
    let lines = 0, marks = 0;
    for (let r = rowOf(lo); r <= rowOf(hi); r++) if (!poolRows[r].classList.contains("folded")) lines++;
    for (const m of foldMarks) {
      if (m.parentNode !== blocksEl) continue;
      const ms = getComputedStyle(m);
      marks += m.offsetHeight + parseFloat(ms.marginTop) + parseFloat(ms.marginBottom);
    }
    const tile = Math.min(wide, Math.floor((room - marks - 12) / lines - 6));
    if (tile < 16) { // no room even so: the pool stays as it was folded
      blocksEl.classList.remove("squeezed");
      for (const m of foldMarks.splice(marksBefore)) m.remove();
      for (const r of foldedCells.splice(foldsBefore)) r.classList.remove("folded");
      return;
    }
    poolSqueezed = [st.getPropertyValue("--cols"), st.getPropertyValue("--lines")];
    st.setProperty("--cols", String(ROW)); st.setProperty("--lines", "1");
    st.setProperty("--block", tile + "px"); st.setProperty("--label", Math.floor(0.42 * tile) + "px");
  }
  function unsqueezePool() {
    if (poolSqueezed === null) return;
    const st = blocksEl.style;
    blocksEl.classList.remove("squeezed", "tiny");
    st.setProperty("--cols", poolSqueezed[0]); st.setProperty("--lines", poolSqueezed[1]);
    st.removeProperty("--block"); st.removeProperty("--label");
    poolSqueezed = null;
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
  let marksShown = "";
  function drawMarks(d) {
    const x = d.x || [], html = (x.includes("oob") ? '<span class="mark oob">' + esc(UI.OutOfBlocks) + "</span>" : "") +
      (x.includes("pre") ? '<span class="mark pre">' + esc(UI.preempted) + "</span>" : "");
    if (html !== marksShown) { marksShown = html; marks.innerHTML = html; }
    story.classList.toggle("failed", x.includes("oob"));
  }

  let pinned = -1, linked = false, arrowsFrame = 0;
  function go(i) {
    i = Math.max(0, Math.min(N - 1, i | 0));
    if (i === cur && state) return;
    const was = cur;
    state = stateAt(i); cur = i;
    const d = STEPS[i], many = owners(state);
    stepText.textContent = "step " + d.n + " / " + LAST_N;
    const text = plain(d.c), title = text + (d.dt ? "\n" + UI.engine + ": " + plain(d.dt) : "");
    captionEl.textContent = text;
    headline.textContent = short(text);
    headline.title = title;
    captionEl.title = title;
    drawNow();
    whyEl.textContent = plain(d.w || "");
    drawMarks(d);
    drawBlocks(state, d, many);
    drawFree(state);
    drawTables(state, d);
    if (presenting && fitTables()) fitTiles(); // a widened column left the pool pane less room
    if (!BIG) foldTables();
    drawChanges(d);
    drawHost(i);
    drawKernel();
    // a big pool reveals on a single step and on a link (#step=N); a scrub or jump lists the
    // change in the strip instead, one click away (scrolling far costs a frame of new rows)
    if (!BIG || Math.abs(i - was) === 1 || linked) reveal(d);
    linked = false;
    // a big pool measures its arrows in the next frame, before its style and layout, so the
    // step change forces no layout of its own (a small page draws them at once)
    cancelAnimationFrame(arrowsFrame);
    if (BIG) arrowsFrame = requestAnimationFrame(() => drawArrows(STEPS[cur])); else drawArrows(d);
    scrub.value = String(i);
    body.setAttribute("data-step-index", String(i));
    bPrev.disabled = i === 0; bNext.disabled = i === N - 1;
    if (pinned >= 0) describe(pinned);
    try { history.replaceState(null, "", "#step=" + i + (presenting ? "&present" : "")); } catch (e) { /* a sandboxed frame */ }
    if (D.stream) drawEvent(d);
  }
  body.setAttribute("data-steps", String(N));

  // ---- a block's details, on hover or click ---------------------------------------------
  function describe(b) {
    const own = ownersOf(b, owners(state));
    const rows = [
      [UI.block, b], [UI["ref count"], state.ref[b]],
      [UI.owners, own.length ? own.map((q) => D.seqs[q]).join(", ") : (state.cached[b] ? UI.cached : UI.free)],
      [UI.fill, state.fill[b] + " / " + BS + " " + UI.tokens],
    ];
    if (state.hashes[b]) rows.push([UI.hash, state.hashes[b]]);
    if (state.labels[b]) rows.push([UI.text, JSON.stringify(state.labels[b])]);
    rows.push([UI["last changed at step"], state.last[b] >= 0 ? STEPS[state.last[b]].n : "\u2013"]);
    if (D.stream) rows.splice(0, rows.length, ...streamRows(b));
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
    const d = STEPS[cur];
    if (d && d.dt && ev.target.closest && ev.target.closest("#caption, #headline")) {
      info.innerHTML = "<dl><dt>" + esc(UI.engine) + "</dt><dd>" + esc(d.dt) + "</dd></dl>";
      info.removeAttribute("data-block"); info.hidden = false; return;
    }
    const b = blockOf(ev.target);
    if (b >= 0) describe(b); else if (pinned < 0) info.hidden = true; else describe(pinned);
  });
  document.addEventListener("click", (ev) => {
    const link = ev.target.closest && ev.target.closest("[data-goto]");
    if (link) { // a link in the "changed" strip: the block in view, its details pinned
      const g = parseInt(link.getAttribute("data-goto"), 10);
      blockEls[g].scrollIntoView({ block: "center", inline: "nearest" });
      pinned = g; describe(g); return;
    }
    const b = blockOf(ev.target);
    if (b >= 0) { pinned = pinned === b ? -1 : b; describe(b); }
  });

  // ---- the host pane (swap preemption): each swapped-out sequence's blocks, in its colour ----
  let hostShown = null;
  function drawHost(i) {
    if (!D.host) return;
    const row = D.host[i] || [], key = JSON.stringify(row);
    if (key === hostShown) return;
    hostShown = key;
    hostEl.textContent = "";
    hostEl.hidden = false;
    hostEl.append(el("h2", {}, UI["host memory (swapped out)"]));
    const list = el("div", { class: "host-blocks" });
    for (const [q, n] of row) {
      const k = D.seqs.indexOf(q);
      for (let j = 0; j < n; j++) {
        const t = el("span", { class: "hb" + (k >= 0 ? " o" + D.colour[k] : ""), "data-host-seq": q }, q + ":" + j);
        list.append(t);
      }
    }
    if (!row.length) list.append(el("span", { class: "empty-host" }, "\u2013"));
    hostEl.append(list);
    if (presenting) fit(); // the pane took or gave back room: the tiles are fitted again
  }

  // ---- the kernel's view (D.kernel): how paged attention reads the chosen sequence's blocks --
  // It shows the sequence the step wrote (else the first) until a sequence's name in the
  // tables is clicked; that choice is kept across steps while the sequence lives.
  // The partition sizes are cuda_kernels' choose_partition's, at build time (one launch for
  // the full-attention layers, one for the sliding-window layers, each over one length per
  // sequence); the ranges, bytes and waste follow from the state. Its words are the page's
  // language (kernel_view.toml). Drawn only when what it shows changes (a big page's step
  // change rebuilds nothing here unless the chosen table or the totals moved).
  // Presentation mode hides it; K shows it there (over the pool) and hides it again.
  let kernelSeq = null, kernelPicked = false, kernelKey = null, kernelStamp = 0;
  const kernelMark = D.kernel ? new Int32Array(NB) : null;
  function kw(key, f) { // a template of the panel in the page's language (English: the key), {fields} filled
    const w = D.kernel.words, text = Object.prototype.hasOwnProperty.call(w, key) ? w[key] : key;
    return text.replace(/\{(\w+)\}/g, (m, k) => String(f[k]));
  }
  if (D.kernel) keys.append(kw(", K kernel's view", {}));
  if (D.kernel && !BIG) poolPane.append(kernelEl); // a small pool leaves room under its free list
  // A big page builds the panel only while it is on screen (it sits under the tables), so a
  // jump elsewhere on the page creates none of its elements; it is drawn when scrolled to.
  let kernelOnScreen = true;
  if (D.kernel && BIG && "IntersectionObserver" in window) {
    const heading = () => [el("h2", {}, kw("kernel's view: paged attention, one decode step", {}))];
    kernelOnScreen = false; kernelEl.hidden = false; kernelEl.append(...heading());
    new IntersectionObserver((seen) => {
      kernelOnScreen = seen[seen.length - 1].isIntersecting;
      if (kernelOnScreen && state) drawKernel();
      else if (!kernelOnScreen) { kernelKey = null; kernelEl.replaceChildren(...heading()); } // nothing to lay out
    }).observe(kernelEl);
  }
  function line(parent, text, cls) { const p = el("p", cls ? { class: cls } : {}, text); parent.append(p); return p; }
  // A hybrid page's "A:full" and "A:window" are one sequence's two KV cache groups.
  const kernelBase = (q) => D.groups ? D.seqs[q].slice(0, D.seqs[q].lastIndexOf(":")) : D.seqs[q];
  // whether q's layers read a sliding window (its group's, or the whole page's)
  const slides = (q) => !!D.kernel.partWindow && (!D.groups || D.seqs[q].endsWith(":window"));
  // whether a decode step reading positions from..t.n-1 reads logical block j of table t,
  // and the blocks it reads, in order
  const readsBlock = (t, j, from) => t.blocks[j] >= 0 && Math.max(j * BS, from) <= Math.min(t.n, (j + 1) * BS) - 1;
  const readBlocks = (t, from) => t.blocks.filter((b, j) => readsBlock(t, j, from));
  function readFrom(q, t) { // the first position q's decode step reads (kernel_view.attended)
    if (!slides(q)) return 0;
    let lead = 0; // the window's tokens its table still holds (all it holds: no window known)
    while (lead < t.blocks.length && t.blocks[lead] < 0) lead++;
    return Math.max(D.kernel.window ? t.n - Math.min(D.kernel.window, t.n) : 0, Math.min(t.n, lead * BS));
  }
  function kernelTotals(s) { // the live sequences, contiguous (each at its longest) vs paged
    const K = D.kernel, tot = { reserved: 0, used: 0, held: 0, stored: 0, seqs: new Map() };
    kernelStamp++;
    for (const q of s.order) {
      const t = s.tables.get(q), base = kernelBase(q);
      const one = tot.seqs.get(base) || { q: q, reserved: 0, used: 0 };
      one.reserved += K.maxTokens[q] || 0; one.used += t.n; tot.seqs.set(base, one);
      tot.reserved += K.maxTokens[q] || 0; tot.used += t.n;
      for (const b of t.blocks) {
        if (b < 0 || kernelMark[b] === kernelStamp) continue; // a shared block is held once
        kernelMark[b] = kernelStamp; tot.held++; tot.stored += s.fill[b];
      }
    }
    return tot;
  }
  function kernelShape(K) {
    const [kv, hd, db, heads, layers] = K.shape, f = { heads: heads, kv: kv, hd: hd, dtype: db === 2 ? "float16" : "float32", layers: layers };
    return K.assumed ? kw("{heads} query head(s), {kv} KV head(s), head_dim {hd}, {dtype} K/V \u2014 an assumed small model (SMALL_DECODE): the trace names no model", f) :
      kw("{heads} query head(s), {kv} KV head(s), head_dim {hd}, {dtype} K/V \u2014 the served model's shape, one of its {layers} layers (each reads the same blocks)", f);
  }
  function drawKernel() {
    if (!D.kernel) return;
    const K = D.kernel, s = state;
    if (!kernelOnScreen) return;
    if (!kernelPicked) { // until a name is clicked, the sequence whose table this step wrote
      const moved = (STEPS[cur].t || []).map((x) => x[0]).filter((q) => s.tables.has(q));
      if (moved.length) kernelSeq = moved[0];
    }
    if (kernelSeq === null || !s.tables.has(kernelSeq)) kernelSeq = s.order.length ? s.order[0] : null;
    const t = kernelSeq === null ? null : s.tables.get(kernelSeq), tot = kernelTotals(s);
    const part = kernelSeq !== null && slides(kernelSeq) ? K.partWindow[cur] || 0 : K.part[cur] || 0;
    const key = [kernelSeq, part, t ? t.n + ":" + t.blocks.join(",") : "", tot.reserved, tot.used, tot.held, tot.stored, s.order.join(",")].join("|");
    if (key === kernelKey) return;
    kernelKey = key;
    kernelEl.hidden = false;
    // built apart, then only what differs is written into the panel: a step that adds a token
    // changes a few texts and widths, and a rebuild would restyle and lay out ~600 elements
    const next = el("section", {});
    next.append(el("h2", {}, kw("kernel's view: paged attention, one decode step", {})));
    line(next, kernelShape(K), "kshape");
    if (t === null) { kernelEl.removeAttribute("data-seq"); line(next, UI["(no sequences)"]); }
    else {
      kernelEl.setAttribute("data-seq", D.seqs[kernelSeq]);
      kernelEl.setAttribute("data-part", String(part));
      const grid = el("div", { class: "kgrid" });
      grid.append(kernelRead(K, s, t, part, tot), kernelMemory(K, s, tot));
      next.append(grid);
    }
    morphChildren(kernelEl, next);
  }
  // make `old`'s children look like `neu`'s: a child equal to its new self is kept, a box whose
  // own attributes are unchanged is patched inside, any other child is swapped whole (writing a
  // live node attribute by attribute costs more than swapping it)
  function morphChildren(old, neu) {
    const want = Array.from(neu.childNodes), have = Array.from(old.childNodes);
    want.forEach((b, i) => {
      const a = have[i];
      if (!a) old.append(b);
      else if (a.isEqualNode(b)) return;
      else if (a.nodeType === 1 && a.nodeName === b.nodeName && sameAttributes(a, b) && b.firstElementChild) morphChildren(a, b);
      else a.replaceWith(b);
    });
    for (const a of have.slice(want.length)) a.remove();
  }
  function sameAttributes(a, b) {
    return a.attributes.length === b.attributes.length && Array.from(b.attributes).every((x) => a.getAttribute(x.name) === x.value);
  }
  // the query -> its table row -> the blocks in read order, each cell in its partition's colour
  function kernelRead(K, s, t, part, tot) {
    const n = t.n, name = D.seqs[kernelSeq], full = BS * K.bytesPerToken, box = el("div", { class: "kread" });
    const from = readFrom(kernelSeq, t), read = readBlocks(t, from);
    const parts = part > 0 ? Math.ceil((n - from) / part) : 1, f = { name: name, token: n - 1, blocks: read.join(", "), parts: parts };
    line(box, parts > 1 ? kw("the query of {name} (token {token}) \u2192 its block table row \u2192 blocks {blocks}, read in this order, {parts} partitions side by side", f) :
      kw("the query of {name} (token {token}) \u2192 its block table row \u2192 blocks {blocks}, read in this order in one pass", f), "kquery");
    if (D.groups) box.append(kernelGroups(K, s, kernelBase(kernelSeq)));
    const row = el("div", { class: "krow" });
    row.append(el("span", { class: "kq", title: kw("the query: token {token} of {name}", f) }, "q"));
    let order = 0;
    t.blocks.forEach((b, j) => {
      const lo = j * BS, hi = Math.min(n, lo + BS) - 1, on = readsBlock(t, j, from), a = Math.max(lo, from);
      const p = part > 0 ? Math.floor((a - from) / part) : 0;
      const tokens = Math.max(0, hi - lo + 1), bytes = on ? (hi - a + 1) * K.bytesPerToken : 0;
      const c = { j: j, b: b, lo: lo, hi: hi, p: p, k: order + 1, bytes: bytes, full: full };
      const cell = el("span", {
        class: "kcell kp" + (p % 6) + (on ? "" : " kdrop"), "data-logical": String(j), "data-phys": String(b),
        "data-order": on ? String(order) : "", "data-partition": String(p), "data-tokens": lo + "-" + hi,
        "data-read": on ? a + "-" + hi : "", "data-bytes": String(bytes),
        title: on ? kw("logical block {j} \u2192 physical block {b}; tokens {lo}\u2013{hi}; partition {p}; read #{k}; {bytes} of {full} bytes", c) :
          b < 0 ? kw("logical block {j} \u2192 physical block none (outside the window: not read); tokens {lo}\u2013{hi}; partition {p}", c) :
            kw("logical block {j} \u2192 physical block {b}; tokens {lo}\u2013{hi}: outside the window, not read", c),
      });
      cell.append(el("span", { class: "klog" }, "L" + j), el("span", { class: "kphys" }, b >= 0 ? String(b) : "\u2013"),
        el("span", { class: "kord" }, on ? "#" + (order + 1) : ""));
      const bar = el("span", { class: "kfill" }), ink = el("i");
      ink.style.width = (100 * tokens / BS).toFixed(1) + "%";
      bar.append(ink);
      if (on && tokens < BS) { // where the read stops in the last, partly filled block
        const stop = el("b", { class: "kstop", title: kw("the read stops at byte {bytes} of {full}", { bytes: tokens * K.bytesPerToken, full: full }) });
        stop.style.left = ink.style.width; bar.append(stop);
      }
      cell.append(bar, el("span", { class: "kbytes" }, on ? bytes + " B" : ""));
      row.append(el("span", { class: "karrow" }, "\u2192"), cell);
      if (on) order++;
    });
    box.append(row);
    const plan = el("ol", { class: "kplan" });
    for (let p = 0, lo = from; lo < n; p++, lo += part) {
      const hi = Math.min(n, lo + part) - 1;
      const blocks = t.blocks.slice(Math.floor(lo / BS), Math.floor(hi / BS) + 1).filter((b) => b >= 0);
      const g = { p: p, ctas: K.ctas, lo: lo, hi: hi, blocks: blocks.join(", ") };
      plan.append(el("li", { class: "kp" + (p % 6), "data-partition": String(p), "data-tokens": lo + "-" + hi, "data-blocks": blocks.join(",") },
        K.ctas > 1 ? kw("partition {p} ({ctas} CTAs: one per KV head and head chunk): tokens {lo}\u2013{hi} \u2192 blocks {blocks}", g) :
          kw("partition {p} ({ctas} CTA): tokens {lo}\u2013{hi} \u2192 blocks {blocks}", g)));
      if (part <= 0) break;
    }
    box.append(plan);
    const pf = { part: part, seqs: tot.seqs.size, slots: K.slots, gpu: K.gpu, path: K.path };
    line(box, slides(kernelSeq) ? kw("cuda_kernels.attention.choose_partition: {part} tokens per partition for what the sliding-window layers read of this step's {seqs} sequence(s), on {slots} CTA slots ({gpu}), {path} path", pf) :
      kw("cuda_kernels.attention.choose_partition: {part} tokens per partition for the lengths of this step's {seqs} sequence(s), on {slots} CTA slots ({gpu}), {path} path", pf), "kplanline");
    const last = n - (t.blocks.length - 1) * BS, lastB = t.blocks[t.blocks.length - 1];
    line(box, kw("bytes per block: {full} ({bs} tokens \u00d7 {bpt} B of K and V); last block {b} holds {last} of {bs} tokens: the read stops at byte {stop} of {full}",
      { full: full, bs: BS, bpt: K.bytesPerToken, b: lastB, last: last, stop: last * K.bytesPerToken }), "kbyteline");
    return box;
  }
  // a hybrid page: what each KV cache group of the chosen sequence reads at this step
  function kernelGroups(K, s, base) {
    const list = el("ul", { class: "kgroups" });
    for (const q of s.order) {
      if (kernelBase(q) !== base) continue;
      const t = s.tables.get(q), from = readFrom(q, t), blocks = readBlocks(t, from);
      const f = { name: base, tokens: t.n - from, lo: from, hi: t.n - 1, blocks: blocks.join(", "), bytes: (t.n - from) * K.bytesPerToken };
      list.append(el("li", { "data-group": slides(q) ? "window" : "full", "data-read": from + "-" + (t.n - 1), "data-blocks": blocks.join(",") },
        slides(q) ? kw("{name}'s sliding-window layers read the last {tokens} tokens (positions {lo}\u2013{hi}): blocks {blocks} ({bytes} bytes); the blocks before them are not read", f) :
          kw("{name}'s full-attention layers read all {tokens} tokens: blocks {blocks} ({bytes} bytes)", f)));
    }
    return list;
  }
  // contiguous (each live sequence reserved at its longest length) beside paged, to one scale
  function kernelMemory(K, s, tot) {
    const box = el("div", { class: "kmem" }), slots = tot.held * BS, scale = Math.max(1, tot.reserved, slots);
    const pct = (x, of) => (of ? (100 * x / of).toFixed(0) : "0") + "%", w = (x) => (100 * x / scale).toFixed(2) + "%";
    const wasted = tot.reserved - tot.used, unfilled = Math.max(0, slots - tot.stored);
    box.append(el("h3", {}, kw("contiguous vs paged: the live sequences' token slots", {})));
    const contig = el("div", { class: "klayout", "data-layout": "contiguous", "data-sequences": String(tot.seqs.size),
      "data-reserved": String(tot.reserved), "data-used": String(tot.used), "data-wasted": String(wasted) });
    const cf = { seqs: tot.seqs.size, reserved: tot.reserved, used: tot.used, wasted: wasted, pct: pct(wasted, tot.reserved) };
    line(contig, D.groups ? kw("contiguous, each of {seqs} sequences reserved at its longest length in each of its KV cache groups: {reserved} slots, {used} used, {wasted} wasted ({pct})", cf) :
      kw("contiguous, each reserved at its longest length: {reserved} slots, {used} used, {wasted} wasted ({pct})", cf));
    const cbar = el("div", { class: "kbar" });
    for (const [base, one] of tot.seqs) {
      const seg = el("span", { class: "kseg", "data-kseq": base, title: kw("{name}: {n} of {max} reserved slots used", { name: base, n: one.used, max: one.reserved }) });
      seg.style.width = w(one.reserved);
      const used = el("i"); used.style.width = (one.reserved ? 100 * one.used / one.reserved : 0).toFixed(1) + "%";
      used.style.background = colourOf(one.q);
      seg.append(used);
      cbar.append(seg);
    }
    contig.append(cbar);
    const paged = el("div", { class: "klayout", "data-layout": "paged", "data-blocks": String(tot.held),
      "data-slots": String(slots), "data-stored": String(tot.stored), "data-unfilled": String(unfilled) });
    line(paged, kw("paged: {held} blocks = {slots} slots hold {stored} tokens (a shared block once), {unfilled} unfilled ({pct})",
      { held: tot.held, slots: slots, stored: tot.stored, unfilled: unfilled, pct: pct(unfilled, slots) }));
    const pbar = el("div", { class: "kbar" }), pseg = el("span", { class: "kseg", title: kw("{stored} of {slots} slots filled", { stored: tot.stored, slots: slots }) });
    pseg.style.width = w(slots);
    const filled = el("i"); filled.style.width = (slots ? 100 * tot.stored / slots : 0).toFixed(1) + "%";
    pseg.append(filled); pbar.append(pseg); paged.append(pbar);
    box.append(contig, paged);
    const saved = tot.reserved - slots;
    line(box, saved >= 0 ? kw("paging needs {saved} fewer slots here ({pct} of the contiguous reservation)", { saved: saved, pct: pct(saved, tot.reserved) }) :
      kw("paging holds {more} more slots here: its last blocks' unfilled slots outweigh the contiguous waste", { more: -saved }), "ksaved");
    return box;
  }
  document.addEventListener("click", (ev) => {
    const row = D.kernel && ev.target.closest && ev.target.closest("#tables [data-seq] .seq");
    if (!row) return;
    const q = D.seqs.indexOf(row.parentNode.getAttribute("data-seq"));
    if (q >= 0) { kernelSeq = q; kernelPicked = true; drawKernel(); }
  });
  document.addEventListener("keydown", (ev) => {
    if (D.kernel && (ev.key === "k" || ev.key === "K") && !ev.ctrlKey && !ev.metaKey && !ev.altKey) body.classList.toggle("kshow");
  });

  // ---- the request timeline (generate): scheduled, preempted, finished, and the step shown ----
  const tlNow = el("i", { class: "tl-now" });
  function drawTimeline() {
    if (!D.timeline || !D.timeline.length) return;
    timeline.hidden = false;
    timeline.append(el("h2", {}, UI.requests));
    const at = (i) => (100 * i / Math.max(1, N - 1)).toFixed(2) + "%";
    const rowsEl = el("div", { class: "tl-rows" });
    rowsEl.style.setProperty("--tl-n", String(D.timeline.length)); // presentation mode fits the rows
    for (const [q, first, pre, end] of D.timeline) {
      const row = el("div", { class: "tl-row", "data-request": q });
      const track = el("span", { class: "tl-track" });
      const run = el("i", { class: "tl-run", title: q + ": " + UI.running });
      run.style.left = at(first); run.style.width = "calc(" + at((end < 0 ? N - 1 : end) - first) + " + 2px)";
      const k = D.seqs.indexOf(q);
      if (k >= 0) run.style.background = colourOf(k);
      track.append(el("i", { class: "tl-arrived", title: q + " arrived" }), run);
      for (const p of pre) { const m = el("i", { class: "tl-pre", title: q + " " + UI.preempted + " @ " + STEPS[p].n }); m.style.left = at(p); track.append(m); }
      if (end >= 0) { const m = el("i", { class: "tl-end", title: q + " finished @ " + STEPS[end].n }); m.style.left = at(end); track.append(m); }
      row.append(el("span", { class: "tl-name" }, q), track);
      rowsEl.append(row);
    }
    rowsEl.append(tlNow);
    timeline.append(rowsEl);
  }
  function drawNow() { if (D.timeline) tlNow.style.left = "calc(5em + (100% - 5em) * " + (cur / Math.max(1, N - 1)).toFixed(4) + ")"; }

  // ---- the legend: what each look means ------------------------------------------------------
  function drawLegend() { // a stream has no owners, ref counts or free list: its legend says less
    const items = D.stream ? [
      ["cached", UI["cached by vLLM's prefix cache (chip: its hash)"]],
      ["free", UI.free],
      ["touched", UI["changed this step"]],
    ] : [
      ["owned", D.seqs.length ? UI["a sequence's colour"] : UI.owners],
      ["shared", UI["shared (ref count > 1)"]],
      ["free", UI.free],
      ["cached", UI["cached (free, prefix cache)"]],
      ["head", UI["free-list head"]],
      ["touched", UI["changed this step"]],
    ];
    for (const [k, text] of items) {
      const li = el("li", { "data-look": k });
      li.append(el("span", { class: "swatch " + k }), document.createTextNode(text));
      legend.append(li);
    }
    if (D.stream) { poolPane.append(legend); return; } // its left column is hidden
    const badge = el("li", { "data-look": "badge" });
    badge.append(el("span", { class: "swatch badge" }, "2"), document.createTextNode(UI["ref count"] + (BIG ? " (> 1)" : "")));
    legend.append(badge);
  }

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
  // ---- presentation mode (P, or #step=N&present): sizes follow the screen -----------------
  // One unit, --u, is 1% of the largest 16:9 box the window holds; text is sized in it. A pool
  // that fits on screen gets the largest tiles that fill the pool pane; a big one scrolls.
  let presenting = false;
  function present(on) {
    if (on === presenting) return;
    presenting = on;
    body.classList.toggle("projector", on); bProj.classList.toggle("on", on);
    if (on && !texts) { // a big pool's tiles get their fill bar and text, drawn now or when seen
      texts = true;
      shKids.fill(-1);
      for (let b = 0; b < NB; b++) {
        blockEls[b].insertAdjacentHTML("beforeend", TEXTS);
        if (hidden[rowOf(b)]) stale[b] = 1; else drawLook(b);
      }
    }
    fit();
    if (cur >= 0) {
      try { history.replaceState(null, "", "#step=" + cur + (on ? "&present" : "")); } catch (e) { /* sandboxed */ }
    }
  }
  function fit() {
    const root = document.documentElement.style;
    body.classList.remove("wide-tables");
    unfold(); // measured whole; folded again for the new size, and the change brought into view
    tablesFor = -1;
    if (!presenting) {
      for (const k of ["--u", "--fit", "--tscale"]) root.removeProperty(k);
      body.classList.remove("small-tiles");
      columns();
    } else {
      root.setProperty("--u", (Math.min(innerWidth, innerHeight * 16 / 9) / 100).toFixed(2) + "px");
      fitTables(); // first: it may widen the tables' column
      fitTiles();
    }
    if (!BIG) foldTables();
    if (cur >= 0) reveal(STEPS[cur]); // a big page folds in its frame
    arrowsShown = true; drawArrows(STEPS[cur] || {});
  }
  // Presentation mode's tile size, px; a tile under 4.5 units leaves its text to the hover box
  function setFit(px) {
    const root = document.documentElement.style;
    root.setProperty("--fit", px + "px");
    body.classList.toggle("small-tiles", px < 4.5 * parseFloat(root.getPropertyValue("--u")));
  }
  function fitTiles() {
    if (!BIG) {
      const root = document.documentElement.style;
      root.setProperty("--fit", "0px"); // measure the pane with the tiles out of the way
      const cs = getComputedStyle(wrap), gap = 14;
      const w = wrap.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 16;
      const h = wrap.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom) - 16;
      let best = 0;
      for (let c = 1; c <= NB; c++) {
        const r = Math.ceil(NB / c);
        best = Math.max(best, Math.min((w - (c - 1) * gap) / c, (h - (r - 1) * gap) / r));
      }
      setFit(Math.max(32, Math.floor(best - 2))); // 32 px still holds an id (small-tiles)
    }
    columns();
  }
  // Presentation mode: the tables' text takes the largest size, from 1.5 down to 0.8 units,
  // at which every table fits its column, so all of a step's changed cells can be in sight
  // at once. Tables that do not fit at 0.8 widen their column (from 26% to 38% of the
  // screen: fewer lines per table), once until the window's size changes, and the tiles are
  // fitted to the narrower pool pane; more than fit then scroll, to the change. A big
  // pool's tables never fit, and its tiles keep the room (at 1366x768, 16 columns, not 8
  // that showed a third as many). Measured when the tables' cell count changes.
  let tablesFor = -1, tscale = 1.5;
  function fitTables() { // true when it widened the column
    let cells = state ? state.order.length : 0;
    if (state) for (const q of state.order) cells += state.tables.get(q).blocks.length;
    if (!presenting || cells === tablesFor) return false;
    tablesFor = cells;
    const root = document.documentElement.style;
    const over = () => tablesEl.scrollHeight > tablesEl.clientHeight + 1;
    for (const widen of BIG ? [false] : [false, true]) {
      if (widen) {
        if (body.classList.contains("wide-tables")) return false;
        body.classList.add("wide-tables");
      }
      for (const tight of [false, true]) { // tight: no token counts, so a name and its cells share a line
        tablesEl.classList.toggle("tight", tight);
        tscale = 1.5;
        root.setProperty("--tscale", String(tscale));
        for (let k = 0; k < 4 && over() && tscale > 0.8; k++) {
          tscale = Math.max(0.8, tscale * Math.min(0.95, Math.sqrt(tablesEl.clientHeight / tablesEl.scrollHeight)));
          root.setProperty("--tscale", tscale.toFixed(3));
        }
        if (!over()) break;
      }
      if (!over()) return widen;
    }
    return !BIG;
  }
  // A big pool's rows of ROW tiles wrap in lines of ROW, ROW / 2, ... tiles, the most that fit
  // the pane, so no tile is off to the side and the ids stay aligned (a line starts at a
  // multiple of its length). Presented, the tiles shrink from 5.4 units to fill the pane's
  // width with the most columns whose tiles are 3.2 units or more (at 1920x1080, 16 columns
  // of 70 px where 8 of 104 px left 40% of the pane empty; at 1366x768, 16 of 44 px, their
  // text in the hover box, where 8 of 74 px held a third as many).
  function columns() {
    if (!BIG) return;
    const cs = getComputedStyle(blocksEl.firstChild), gap = parseFloat(cs.columnGap) || 0;
    const pad = (parseFloat(cs.paddingLeft) || 0) + (parseFloat(cs.paddingRight) || 0);
    const room = wrap.clientWidth + gap - pad;
    let cols = ROW;
    if (presenting) { // the pane's own padding (presentation mode's) is no room either
      const u = parseFloat(document.documentElement.style.getPropertyValue("--u"));
      const ws = getComputedStyle(wrap), inner = room - parseFloat(ws.paddingLeft) - parseFloat(ws.paddingRight);
      while (cols > 4 && inner / cols - gap < 3.2 * u) cols /= 2;
      setFit(Math.floor(Math.min(5.4 * u, inner / cols - gap)));
    } else {
      const tile = blockEls[0].offsetWidth + gap;
      while (cols > 4 && cols * tile > room) cols /= 2;
    }
    blocksEl.style.setProperty("--cols", String(cols));
    blocksEl.style.setProperty("--lines", String(ROW / cols));
  }
  // A long list in a caption becomes a count, details on hover (the full caption is #caption
  // and the headline's tooltip): "25 shared blocks (details on hover)".
  const LONG = [
    [/\bblocks ((?:\d+, ){5,}\d+)(?: \(counts? now [^)]*\))?/g, (m, list) => count(list) + " blocks"],
    [/(?:block \d+ stays \(count \d+\)(?:, |$)){6,}/g, (m) => count(m) + " blocks stay"],
    [/copy-on-write ((?:\d+ -> \d+, ){5,}\d+ -> \d+)/g, (m, list) => "copy-on-write of " + count(list) + " blocks"],
    [/ \((counts now [^)]{60,})\)/g, () => ""],
  ];
  function count(list) { return list.split(", ").filter((x) => x.trim()).length; }
  function short(t) {
    let out = t;
    for (const [re, to] of LONG) out = out.replace(re, to);
    return out === t ? t : out + " (details on hover)";
  }
  // The chrome (title, controls, keys) hides while presenting and shows on a mouse move.
  let chromeTimer = null;
  document.addEventListener("mousemove", () => {
    if (!presenting) return;
    body.classList.add("chrome");
    clearTimeout(chromeTimer);
    chromeTimer = setTimeout(() => body.classList.remove("chrome"), 2500);
  });
  function fullScreen() {
    const done = () => {};
    if (document.fullscreenElement) document.exitFullscreen().then(done, done);
    else if (document.documentElement.requestFullscreen) document.documentElement.requestFullscreen().then(done, done);
  }
  bPrev.addEventListener("click", () => go(cur - 1));
  bNext.addEventListener("click", () => go(cur + 1));
  bPlay.addEventListener("click", () => play(!timer));
  bProj.addEventListener("click", () => present(!presenting));
  speed.addEventListener("change", () => { if (timer) play(true); });
  scrub.addEventListener("input", () => go(parseInt(scrub.value, 10)));
  document.addEventListener("keydown", (ev) => {
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.target === speed) return;
    const moves = { ArrowRight: cur + 1, ArrowLeft: cur - 1, Home: 0, End: N - 1 };
    if (ev.key in moves) { ev.preventDefault(); go(moves[ev.key]); }
    else if (ev.key === " ") { ev.preventDefault(); play(!timer); }
    else if (ev.key === "p" || ev.key === "P") { ev.preventDefault(); present(!presenting); }
    else if (ev.key === "f" || ev.key === "F") { ev.preventDefault(); fullScreen(); }
  });
  function fromHash() {
    const m = /step=(\d+)/.exec(location.hash);
    return m ? parseInt(m[1], 10) : 0;
  }
  window.addEventListener("hashchange", () => {
    const i = fromHash(); // read before present() rewrites the hash
    present(/(^#|&)present\b/.test(location.hash)); linked = true; go(i);
  });
  window.addEventListener("resize", fit);
  window.pagedsimViewer = { go: go, index: () => cur, count: () => N };

  // ---- a vLLM KV event stream (D.stream, pagedsim/view/stream.py) ------------------------
  // Each step is one event; the panel shows it as vLLM sent it (type, seq, hashes, parent,
  // LoRA, medium, gaps), and the hover box shows the block on a tile at the shown step: its
  // full hash, short form, parent chain and token ids. No ref count: the stream has none.
  const kvEl = el("div", { id: "kv" });
  const slotRecs = [], byHash = new Map();
  if (D.stream) {
    body.classList.add("stream");
    story.append(kvEl);
    D.stream.recs.forEach((r, j) => {
      if (r.a !== undefined) Object.assign(r, D.stream.attrs[r.a]); // its event's fields, stored once
      (slotRecs[r.slot] = slotRecs[r.slot] || []).push(j);
      if (!byHash.has(r.h)) byHash.set(r.h, []);
      byHash.get(r.h).push(j);
    });
  }
  const liveAt = (r, n) => r.from <= n && (r.to == null || r.to > n); // null or missing: still cached
  function recOnSlot(b, n) {
    for (const j of slotRecs[b] || []) if (liveAt(D.stream.recs[j], n)) return D.stream.recs[j];
    return null;
  }
  function recOfHash(h, n) { // the block with hash h at event n: cached, else the last evicted
    let found = null;
    for (const j of byHash.get(h) || []) {
      const r = D.stream.recs[j];
      if (liveAt(r, n)) return [r, true];
      if (r.from <= n) found = r;
    }
    return [found, false];
  }
  function chainOf(r, n) {
    const out = [];
    for (let p = r.p, hops = 0; p != null; hops++) {
      if (hops === 12) { out.push("\u2026"); break; }
      const [q, cached] = recOfHash(p, n);
      if (q === null) { out.push(p.slice(-8) + " (never stored here)"); break; }
      out.push(q.s + (cached ? "" : " (evicted)"));
      p = q.p;
    }
    return out.length ? out.join(" \u2190 ") + (out[out.length - 1] === "\u2026" ? "" : " \u2190 prompt start") : "none: a prompt's first block";
  }
  function streamRows(b) {
    const n = STEPS[cur].n, r = recOnSlot(b, n);
    if (r === null) {
      const gone = (slotRecs[b] || []).map((j) => D.stream.recs[j]).filter((q) => q.to != null && q.to <= n).pop();
      return [["tile", b], ["cached", "no block cached on this tile"]].concat(gone ?
        [["last block here", gone.s + " (" + gone.h + ")"], ["removed at event", gone.to]] : []);
    }
    const rows = [["tile", b], ["block hash", r.h], ["short form", r.s],
      ["parent chain", chainOf(r, n)], ["token ids", JSON.stringify(r.tok)],
      ["stored at event", r.from + (r.to == null ? "" : ", removed at event " + r.to)]];
    if (r.lora != null) rows.push(["LoRA id", r.lora]);
    if (r.lora_name != null) rows.push(["LoRA name", r.lora_name]);
    if (r.medium != null) rows.push(["medium", r.medium]);
    if (r.group != null) rows.push(["group_idx", r.group]);
    if (r.kind != null) rows.push(["kv_cache_spec_kind", r.kind]);
    return rows;
  }
  function drawEvent(d) {
    kvEl.textContent = "";
    const kv = d.kv;
    if (!kv) { kvEl.append(el("span", { class: "kv-type" }, D.stream.events + " events")); return; }
    kvEl.append(el("span", { class: "kv-type" }, kv.t));
    const add = (k, v) => { if (v !== undefined && v !== null) kvEl.append(el("span", { class: "kv-field", "data-field": k }, k + " " + v)); };
    add("seq", kv.seq); add("ts", kv.ts); add("dp rank", kv.rank);
    if (kv.hashes) add("block_hashes", kv.hashes.join(", "));
    if (kv.t === "BlockStored") add("parent", kv.parent === null ? "none (prompt start)" : kv.parent);
    add("lora_id", kv.lora); add("lora_name", kv.lora_name); add("medium", kv.medium); add("group_idx", kv.group);
    for (const note of kv.notes) kvEl.append(el("span", { class: "kv-note" }, note));
    if (D.stream.live && cur === N - 1) {
      try { history.replaceState(null, "", "#follow"); } catch (e) { /* a sandboxed frame */ }
    }
  }
  drawLegend();
  drawTimeline();
  columns();
  present(/(^#|&)present\b/.test(location.hash));
  linked = true;
  go(D.stream && D.stream.live && /follow/.test(location.hash) ? N - 1 : fromHash());
})();
