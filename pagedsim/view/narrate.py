"""The `generate` page in plain words: one caption per engine step and a request timeline.

A step of `generate` is logged in engine notation ("batch r0.0[27:28] r1.0[15:16]": each
scheduled sequence and the token positions it computed). `narrate(frames, log)` reads that
log beside the manager's snapshot after each step (`engine.generate.step_frames`) and tells
the step the way a lecturer reads it aloud:

    r1.0 generated 'the' into block 6 (slot 12 of 16)
    r0.0 prefilled 27 tokens into blocks 0, 1, 2, 3
    r2.0 was preempted: its blocks went back to the free list
    r2.0 was preempted and swapped out: its 5 blocks were copied to host memory
    r2.0 was swapped back in: 5 blocks from host memory into blocks 2, 3, 4, 5, 0
    r0.0 finished: its blocks went back to the free list

A step's new blocks are named as the page's "changed" strip lists them (allocated, hit,
swapped in: a block free before the step and owned after it, the same ref counts decide
both): "r0.0 got new blocks 0, 1, 2", "generated 'the' into new block 7". A request the
v0 engine swaps out sits in the page's host pane (`Told.host`) until it is swapped back in.

The engine notation stays on the page as each step's detail (the caption's hover text).
Token text is shown with its whitespace visible (a space as "·", a newline as "↵").
A sequence that leaves the batch is "preempted" when it comes back later and "finished"
when it does not. The timeline gives each sequence the step it was first scheduled in,
the steps it was preempted in, and the step it finished in. The engine's own step stays
as it is: everything here is read from its log and the snapshots (vLLM v1's scheduler
output, told per request).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..engine.lockstep import seq_name

SPAN = re.compile(r"^(?P<seq>.+)\[(?P<start>\d+):(?P<end>\d+)\]$")
NEW_BLOCK = re.compile(r"into new block (\d+)")
VISIBLE = str.maketrans({" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"})


def visible(text: str) -> str:
    """`text` with its whitespace shown: a space as "·", a newline as "↵", a tab as "→"."""
    return text.translate(VISIBLE)


class Told(NamedTuple):
    captions: list  # one plain caption per step
    details: list  # the step in engine notation (the hover text)
    timeline: list  # [seq, first scheduled, [preempted at ...], finished or -1] per sequence
    host: list  # per step: [[seq, blocks], ...] swapped out to host memory (vLLM v0's swap)
    swaps: dict  # step -> ["out"] or ["in"] (or both): a sequence swapped out / back in


def _written(span: tuple, frame, before: tuple, owned: dict, labels: tuple, fresh=()) -> str:
    """One sequence's part of a step: what it wrote into which block. `before`: each block's
    text after the step before; `owned`: seq -> its table after the step before; `fresh`: the
    blocks the step gave it (a decode into one is told "into new block")."""
    seq, start, end = span
    table = {seq_name(s.seq_id): s.blocks for s in frame.sequences}.get(seq, ())
    bs = frame.block_size
    if end - start > 1:
        blocks = sorted(set(table[start // bs : (end - 1) // bs + 1]), key=table.index)
        where = "block" if len(blocks) == 1 else "blocks"
        said = ", ".join(str(b) for b in blocks)
        return f"{seq} prefilled {end - start} tokens into {where} {said}"
    logical = start // bs
    if logical >= len(table):  # it left the batch in this step: its table is gone
        return f"{seq} computed its last token ({start})"
    block = table[logical]
    new = labels[block] if block < len(labels) else ""
    src = _copies(frame).get(block)  # a copy-on-write copy holds its source's text, then more
    was = block if src is None else src
    old = before[was] if was < len(before) else ""
    if start % bs == 0:  # the first slot of a block: the block holds this token only
        token = new
    elif (src is not None or block in owned.get(seq, ())) and new.startswith(old):
        token = new[len(old) :]  # one more token after what the block (or its source) held
    else:
        token = ""
    said = f"generated '{visible(token)}' into" if token else f"wrote token {start} into"
    where = "new block" if block in fresh else "block"
    copied = "" if src is None else f", copied on write from block {src}"
    return f"{seq} {said} {where} {block} (slot {start % bs + 1} of {bs}){copied}"


def _copies(frame) -> dict:
    """dst -> src of the step's copy-on-write copies."""
    return {e.dst: e.src for e in frame.events if e.kind == "copy_on_write"}


def _new_blocks(prev, frame) -> dict:
    """seq -> the blocks of its table that were free before this step and are owned now, in
    table order: what the page's "changed" strip calls allocated, hit, evicted or swapped in
    (the same ref counts decide both, so the caption and the strip agree)."""
    was = prev.ref_counts if prev is not None else (0,) * frame.num_gpu_blocks
    copies = _copies(frame)  # a copy-on-write destination is told as copied, not new
    out = {}
    for s in frame.sequences:
        fresh = [
            b
            for b in dict.fromkeys(s.blocks)
            if b >= 0 and b not in copies and was[b] == 0 < frame.ref_counts[b]
        ]
        if fresh:
            out[seq_name(s.seq_id)] = fresh
    return out


def _got(new: dict, told: set) -> list:
    """ "r0.0 got new blocks 0, 1, 2" for the new blocks no other part of the caption names."""
    out = []
    for q, blocks in new.items():
        rest = [b for b in blocks if b not in told]
        if rest:
            where = "block" if len(rest) == 1 else "blocks"
            out.append(f"{q} got new {where} " + ", ".join(str(b) for b in rest))
    return out


def _departures(frames: list, spans: list) -> tuple[dict, dict, dict]:
    """(first step each sequence was scheduled in, the steps it was preempted in, the step it
    finished in): a sequence that leaves the live set (or runs in a step and is not live after
    it: a request whose prompt was all cached, done in one step) and is scheduled again later
    was preempted; one that is never scheduled again finished."""
    scheduled: dict = {}
    left: dict = {}
    live_before: set = set()
    for i, frame in enumerate(frames):
        live = {seq_name(s.seq_id) for s in frame.sequences}
        ran = {seq for seq, *_ in spans[i]}
        for seq, *_ in spans[i]:
            scheduled.setdefault(seq, i)
        for seq in sorted((live_before | ran) - live):
            left.setdefault(seq, []).append(i)
        live_before = live
    preempted, finished = {}, {}
    for seq, steps in left.items():
        again = any(s[0] == seq for row in spans[steps[-1] + 1 :] for s in row)
        preempted[seq] = steps if again else steps[:-1]
        if not again:
            finished[seq] = steps[-1]
    return scheduled, preempted, finished


def _live(frame) -> set:
    return {seq_name(s.seq_id) for s in frame.sequences}


def _swapped(frames: list, log: list, spans: list, preempted: dict) -> dict:
    """{(seq, step it left): (its blocks, the step it came back)} for each preemption that
    swapped the sequence out to host memory (vLLM v0's swap; v1 only recomputes). The
    engine's log counts a step's swaps ("preempted_swap") and recomputes; in a step that did
    both, a sequence that comes back decoding (one token, not from 0) was the swapped one."""
    out = {}
    for seq, steps in preempted.items():
        for i in steps:
            rec = log[i] if i < len(log) else {}
            back = next((j for j in range(i + 1, len(frames)) if seq in _live(frames[j])), None)
            if not rec.get("preempted_swap") or back is None:
                continue
            if rec.get("preempted_recompute"):
                first = next((x for x in spans[back] if x[0] == seq), None)
                if first is None or first[1] == 0 or first[2] - first[1] != 1:
                    continue
            before = {seq_name(s.seq_id): s.blocks for s in frames[i - 1].sequences} if i else {}
            out[(seq, i)] = (sum(1 for b in before.get(seq, ()) if b >= 0), back)
    return out


def _swap_parts(i: int, frame, swapped: dict) -> tuple[list, list, set, set]:
    """Step i's swap captions (those swapped back in, those swapped out), the sequences it
    swapped out (told here, not as sent back to the free list) and the blocks it swapped in."""
    tables = {seq_name(s.seq_id): s.blocks for s in frame.sequences}
    restored = {
        q: list(dict.fromkeys(tables.get(q, ())[:n]))
        for (q, _), (n, back) in sorted(swapped.items())
        if back == i
    }
    back_in = [
        f"{q} was swapped back in: {len(blocks)} blocks from host memory into blocks "
        + ", ".join(str(b) for b in blocks)
        for q, blocks in restored.items()
    ]
    gone = {q for (q, at) in swapped if at == i}
    out = [
        f"{q} was preempted and swapped out: its {n} blocks were copied to host memory"
        for (q, at), (n, _) in sorted(swapped.items())
        if at == i
    ]
    return back_in, out, gone, {b for blocks in restored.values() for b in blocks}


def narrate(frames: list, log: list) -> Told:
    """Plain captions, the engine-notation details and the request timeline of a run."""
    spans = [
        [x for x in map(_span, log[i].get("seqs", ()) if i < len(log) else ()) if x]
        for i in range(len(frames))
    ]
    scheduled, preempted, finished = _departures(frames, spans)
    swapped = _swapped(frames, log, spans, preempted)
    captions, details = [], []
    before: tuple = ()
    owned: dict = {}
    for i, frame in enumerate(frames):
        labels = tuple(getattr(frame, "block_labels", ()) or ())
        back_in, out, gone, told = _swap_parts(i, frame, swapped)
        new = _new_blocks(frames[i - 1] if i else None, frame)
        written = [_written(s, frame, before, owned, labels, new.get(s[0], ())) for s in spans[i]]
        told |= {int(b) for w in written for b in NEW_BLOCK.findall(w)}
        parts = back_in + _got(new, told) + written + out
        parts += [
            f"{q} was preempted: its blocks went back to the free list"
            for q in sorted(preempted)
            if i in preempted[q] and q not in gone
        ]
        parts += [
            f"{q} finished: its blocks went back to the free list"
            for q in sorted(finished)
            if finished[q] == i
        ]
        captions.append("; ".join(parts) or "nothing was scheduled")
        details.append("batch " + " ".join(log[i].get("seqs", ())) if i < len(log) else "")
        before, owned = labels, {seq_name(s.seq_id): s.blocks for s in frame.sequences}
    timeline = [[q, scheduled[q], preempted.get(q, []), finished.get(q, -1)] for q in scheduled]
    host = [
        [[q, n] for (q, at), (n, back) in sorted(swapped.items()) if at <= i < back]
        for i in range(len(frames))
    ]
    swaps: dict = {}
    for (_, at), (_, back) in swapped.items():
        swaps.setdefault(at, []).append("out")
        swaps.setdefault(back, []).append("in")
    return Told(captions, details, timeline, host, {i: sorted(set(v)) for i, v in swaps.items()})


def _span(text: str) -> tuple | None:
    m = SPAN.match(str(text))
    return (m["seq"], int(m["start"]), int(m["end"])) if m else None
