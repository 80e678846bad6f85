"""A trace as per-step differences: the compact data behind the browser page (`pagedsim.view`).

A page must carry 2,000 steps of a 4,096-block pool in a few megabytes, so it cannot hold
a full snapshot per step (4,096 ref counts and a free list of up to 4,096 ids, each
step). `encode(snapshots)` keeps step 0 as a difference from an empty pool and every
later step as the difference from the step before; `viewer.js` replays them forwards
(and keeps a full copy every few steps, so going back is a short replay too).

One step, as a JSON object whose keys are left out when nothing of that kind changed:

    n    the snapshot's own step number (what "step 4 / 11" names)
    c    the caption, in the page's language            w   the "why" line, if any
    x    marks: "oob" (OutOfBlocks: the pool ran dry), "pre" (a sequence was preempted),
         "out" / "in" (a sequence was swapped out to the host / back in)
    fl   the free list, head first: {"a": [...]} the whole list, or {"r": [...], "i":
         [[pos, [ids]], ...]}: remove these ids, then insert runs at positions of the new list
    r    ref counts that changed, flattened [block, count, block, count, ...]
    f    fills that changed, flattened [block, tokens, ...]
    k    blocks that became cached-free (prefix cache)    ku  blocks that stopped being
    t    tables that changed: [seq, num_tokens, keep, [blocks after the first keep]];
         keep -1 means the sequence left (no list). `seq` indexes the page's `seqs`.
    q    the live sequences in admission order (seq indexes), when that order changed
    e    every block the step changed (what the page outlines and brings into view): those
         its events name, in order, then any other whose ref count, fill, cached flag, text
         or hash differs from the step before
    ek   what happened to each block of `e`, a code per block (`CHANGE_KINDS`): allocated,
         hit, shared, released, freed, copied, evicted, hashed, filled, swapped out / in
    rb   who released the released blocks, flattened [block, seq, ...] (seq indexes `seqs`;
         an owner the trace never showed is left out)
    cp   copy-on-write pairs (src, dst) this step made, for the copy kernel
    lb   text labels that changed, flattened [block, text, ...] (`generate`'s blocks)
    h    prefix-cache hashes that changed, flattened [block, hash or "", ...]

A table entry of -1 is a logical block a sliding window dropped (`NULL_BLOCK`). The
encoder reads only `Snapshot` fields (plus the optional `block_labels` and
`block_hashes` tuples a snapshot may carry), so it works the same for the tour, the
playground, a replayed KV event stream and a served model.
"""

from __future__ import annotations

# What a step did to a block, in the order a block is told (the first that applies).
CHANGE_KINDS = {
    "a": "allocated",  # free -> owned, taken fresh
    "h": "hit",  # free -> owned, a cached block found by the prefix cache
    "c": "copied",  # copy-on-write destination
    "s": "shared",  # one more owner
    "o": "swapped out",  # its owner went to the host (swap preemption)
    "i": "swapped in",  # taken again for a sequence back from the host
    "r": "released",  # one fewer owner, still owned (or an owner let go as another came)
    "x": "freed",  # back to the free list
    "v": "evicted",  # a cached block's hash forgotten, the block reused (or dropped)
    "k": "hashed",  # it got its prefix-cache hash
    "f": "filled",  # slots written (or its text changed)
    "t": "touched",  # named by an event, no visible change (e.g. a copy's source)
}


def touched_blocks(snap) -> list:
    """Blocks named by the step's events (allocated, shared, released, copied), in order."""
    out = []
    for e in snap.events:
        for name in ("block", "src", "dst"):
            b = getattr(e, name, None)
            if isinstance(b, int) and 0 <= b < snap.num_gpu_blocks and b not in out:
                out.append(b)
    return out


def free_list_diff(old: list, new: list) -> dict:
    """How `new` follows from `old`: removals then insertions, or the whole list."""
    new_set = set(new)
    removed = [b for b in old if b not in new_set]
    old_set = set(old)
    kept = [b for b in old if b in new_set]
    if [b for b in new if b in old_set] != kept:  # the kept ids moved: send the whole list
        return {"a": list(new)}
    inserts: list[list] = []
    run_start = 0
    run: list = []
    for pos, b in enumerate(new):
        if b in old_set:
            if run:
                inserts.append([run_start, run])
            run = []
            continue
        if not run:
            run_start = pos
        run.append(b)
    if run:
        inserts.append([run_start, run])
    out: dict[str, list] = {}
    if removed:
        out["r"] = removed
    if inserts:
        out["i"] = inserts
    if sum(len(r) for _, r in inserts) + len(removed) > len(new):  # cheaper whole
        return {"a": list(new)}
    return out


def _pairs(old, new, chunk: int = 64) -> list:
    """[i, new[i], ...] for every i where old and new differ (equal chunks skipped in C)."""
    out = []
    for start in range(0, len(new), chunk):
        if old[start : start + chunk] == new[start : start + chunk]:
            continue
        for b in range(start, min(start + chunk, len(new))):
            if old[b] != new[b]:
                out += [b, new[b]]
    return out


def _common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Encoder:
    """Turns snapshots into steps, one at a time (see the module docstring)."""

    def __init__(self, num_gpu_blocks: int):
        self.num_gpu_blocks = num_gpu_blocks
        self.seqs: list = []  # seq ids in first-seen order; a step names them by index
        self._index: dict = {}
        self.free: list = []
        self.refs = [0] * num_gpu_blocks
        self.fill = [0] * num_gpu_blocks
        self.cached: set = set()
        self.tables: dict = {}  # seq index -> (num_tokens, blocks)
        self.order: list = []
        self.labels = [""] * num_gpu_blocks
        self.hashes = [""] * num_gpu_blocks

    def seq(self, seq_id) -> int:
        if seq_id not in self._index:
            self._index[seq_id] = len(self.seqs)
            self.seqs.append(seq_id)
        return self._index[seq_id]

    def step(
        self, snap, caption: str, why: str | None = None, marks=(), labels=None, hashes=None
    ) -> dict:
        out: dict = {"n": snap.step, "c": caption}
        if why:
            out["w"] = why
        if marks:
            out["x"] = list(marks)
        free = list(snap.free_list)
        if free != self.free:
            out["fl"] = free_list_diff(self.free, free)
            self.free = free
        before = (self.refs, self.cached)
        self._counts(snap, out)
        self._tables(snap, out)
        if snap.pending_copies:
            out["cp"] = [list(p) for p in snap.pending_copies]
        self._texts(
            out, "lb", self.labels, getattr(snap, "block_labels", ()) if labels is None else labels
        )
        self._texts(
            out, "h", self.hashes, getattr(snap, "block_hashes", ()) if hashes is None else hashes
        )
        self._changed(snap, out, *before, swap=_swap(marks))
        return out

    def _changed(self, snap, out: dict, refs: list, cached: set, swap: str) -> None:
        """out["e"] / out["ek"]: every block the step changed and what happened to it."""
        blocks = dict.fromkeys(touched_blocks(snap))
        for key in ("r", "f", "lb", "h"):
            blocks.update(dict.fromkeys(out.get(key, [])[::2]))
        blocks.update(dict.fromkeys([*out.get("k", ()), *out.get("ku", ())]))
        if not blocks:
            return
        copied = {e.dst for e in snap.events if e.kind == "copy_on_write"}
        hashes = out.get("h", [])
        hashed = {b for b, h in zip(hashes[::2], hashes[1::2], strict=True) if h}
        rehashed = set(hashes[::2])  # a cached block taken with another hash was evicted
        written = set(out.get("f", [])[::2]) | set(out.get("lb", [])[::2])
        let_go = _let_go(snap)
        kinds = []
        for b in blocks:
            old, new = refs[b], self.refs[b]
            if b in copied:
                kinds.append("c")
            elif old == 0 < new:
                reused = "v" if b in rehashed else "h"
                kinds.append(reused if b in cached else "i" if swap == "i" else "a")
            elif new > old:
                kinds.append("s")
            elif old > 0 == new:
                kinds.append("o" if swap == "o" else "x")
            elif new < old:
                kinds.append("r")
            elif b in cached and b not in self.cached:
                kinds.append("v")
            elif b in hashed or (b in self.cached and b not in cached):
                kinds.append("k")
            elif b in written:
                kinds.append("f")
            elif b in let_go:  # its count dropped and rose again: one owner for another
                kinds.append("r")
            else:
                kinds.append("t")
        out["e"], out["ek"] = list(blocks), "".join(kinds)
        by = [
            x
            for b, k in zip(blocks, kinds, strict=True)
            if k == "r"
            for q in let_go.get(b, ())
            if q in self._index  # an owner the trace showed: the page can name it
            for x in (b, self._index[q])
        ]
        if by:
            out["rb"] = by

    def _counts(self, snap, out: dict) -> None:
        refs, fill = list(snap.ref_counts), list(snap.block_fill)
        if refs != self.refs:
            out["r"], self.refs = _pairs(self.refs, refs), refs
        if fill != self.fill:
            out["f"], self.fill = _pairs(self.fill, fill), fill
        cached = set(snap.cached_blocks)
        if cached != self.cached:
            if cached - self.cached:
                out["k"] = sorted(cached - self.cached)
            if self.cached - cached:
                out["ku"] = sorted(self.cached - cached)
            self.cached = cached

    def _tables(self, snap, out: dict) -> None:
        changes, order = [], []
        for s in snap.sequences:
            i = self.seq(s.seq_id)
            order.append(i)
            blocks = [int(b) for b in s.blocks]
            old = self.tables.get(i)
            if old == (s.num_tokens, blocks):
                continue
            keep = _common_prefix(old[1], blocks) if old else 0
            changes.append([i, s.num_tokens, keep, blocks[keep:]])
            self.tables[i] = (s.num_tokens, blocks)
        for i in [i for i in self.tables if i not in set(order)]:
            changes.append([i, 0, -1, None])
            del self.tables[i]
        if changes:
            out["t"] = changes
        if order != self.order:
            out["q"], self.order = order, order

    def _texts(self, out: dict, key: str, mine: list, values) -> None:
        values = values or ()
        if not values and not any(mine):  # no text, before or now: the usual case
            return
        new = [
            str(values[b]) if b < len(values) and values[b] is not None else ""
            for b in range(self.num_gpu_blocks)
        ]
        if new != mine:
            out[key] = _pairs(mine, new)
            mine[:] = new


def _let_go(snap) -> dict:
    """Block -> the owners that released it this step and left it owned (count above 0)."""
    out: dict = {}
    for e in snap.events:
        if e.kind == "block_released" and e.ref_count > 0:
            out.setdefault(e.block, {})[e.seq_id] = None
    return out


def _swap(marks) -> str:
    """ "o" for a step marked as swapping a sequence out to the host ("out"), "i" for one
    marked as swapping one back in ("in"), else ""."""
    return "o" if "out" in marks else "i" if "in" in marks else ""


def encode(snapshots, captions, whys=(), marks=None, labels=None, hashes=None, name=str) -> dict:
    """The steps and the sequence names of `snapshots`: captions[i] and whys[i] (if any) are
    step i's caption and why line, marks[i] its marks; labels[i] / hashes[i] (if given) the
    text and prefix-cache hash of each block after step i, instead of the snapshot's own;
    `name(seq_id)` the text the page names a sequence by."""
    enc = Encoder(snapshots[0].num_gpu_blocks)

    def nth(rows, i):
        return rows[i] if rows is not None and i < len(rows) else None

    steps = [
        enc.step(
            s, captions[i], nth(whys, i), (marks or {}).get(i, ()), nth(labels, i), nth(hashes, i)
        )
        for i, s in enumerate(snapshots)
    ]
    return {
        "nb": snapshots[0].num_gpu_blocks,
        "bs": snapshots[0].block_size,
        "seqs": [str(name(s)) for s in enc.seqs],
        "steps": steps,
    }
