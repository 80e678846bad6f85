"""The `generate` page in plain words: one caption per engine step and a request timeline.

A step of `generate` is logged in engine notation ("batch r0.0[27:28] r1.0[15:16]": each
scheduled sequence and the token positions it computed). `narrate(frames, log)` reads that
log beside the manager's snapshot after each step (`engine.generate.step_frames`) and tells
the step the way a lecturer reads it aloud:

    r1.0 generated 'the' into block 6 (slot 12 of 16)
    r0.0 prefilled 27 tokens into blocks 0, 1, 2, 3
    r2.0 was preempted: its blocks went back to the free list
    r0.0 finished: its blocks went back to the free list

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
VISIBLE = str.maketrans({" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"})


def visible(text: str) -> str:
    """`text` with its whitespace shown: a space as "·", a newline as "↵", a tab as "→"."""
    return text.translate(VISIBLE)


class Told(NamedTuple):
    captions: list  # one plain caption per step
    details: list  # the step in engine notation (the hover text)
    timeline: list  # [seq, first scheduled, [preempted at ...], finished or -1] per sequence


def _written(span: tuple, frame, before: tuple, owned: dict, labels: tuple) -> str:
    """One sequence's part of a step: what it wrote into which block. `before`: each block's
    text after the step before; `owned`: seq -> its table after the step before."""
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
    old = before[block] if block < len(before) else ""
    if start % bs == 0:  # the first slot of a block: the block holds this token only
        token = new
    elif block in owned.get(seq, ()) and new.startswith(old):  # its own block, one more token
        token = new[len(old) :]
    else:
        token = ""
    said = f"generated '{visible(token)}' into" if token else f"wrote token {start} into"
    return f"{seq} {said} block {block} (slot {start % bs + 1} of {bs})"


def _departures(frames: list, spans: list) -> tuple[dict, dict, dict]:
    """(first step each sequence was scheduled in, the steps it was preempted in, the step it
    finished in): a sequence that leaves the live set and is scheduled again later was
    preempted; one that is never scheduled again finished."""
    scheduled: dict = {}
    left: dict = {}
    live_before: set = set()
    for i, frame in enumerate(frames):
        live = {seq_name(s.seq_id) for s in frame.sequences}
        for seq, *_ in spans[i]:
            scheduled.setdefault(seq, i)
        for seq in sorted(live_before - live):
            left.setdefault(seq, []).append(i)
        live_before = live
    preempted, finished = {}, {}
    for seq, steps in left.items():
        again = any(s[0] == seq for row in spans[steps[-1] + 1 :] for s in row)
        preempted[seq] = steps if again else steps[:-1]
        if not again:
            finished[seq] = steps[-1]
    return scheduled, preempted, finished


def narrate(frames: list, log: list) -> Told:
    """Plain captions, the engine-notation details and the request timeline of a run."""
    spans = [
        [x for x in map(_span, log[i].get("seqs", ()) if i < len(log) else ()) if x]
        for i in range(len(frames))
    ]
    scheduled, preempted, finished = _departures(frames, spans)
    captions, details = [], []
    before: tuple = ()
    owned: dict = {}
    for i, frame in enumerate(frames):
        labels = tuple(getattr(frame, "block_labels", ()) or ())
        parts = [_written(s, frame, before, owned, labels) for s in spans[i]]
        parts += [
            f"{q} was preempted: its blocks went back to the free list"
            for q in sorted(preempted)
            if i in preempted[q]
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
    return Told(captions, details, timeline)


def _span(text: str) -> tuple | None:
    m = SPAN.match(str(text))
    return (m["seq"], int(m["start"]), int(m["end"])) if m else None
