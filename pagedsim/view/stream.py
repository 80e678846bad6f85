"""A vLLM KV event stream as a page: one step per event, vLLM's own identifiers on every tile.

`page_data(batches, ...)` replays the stream once (`kv_events.timeline`, linear in the
events) and writes each step as the difference it made, in `diffs.py`'s step format:

    k / ku   slots whose block was stored / evicted or cleared
    h        the short hash on each changed slot (`kv_events.short_hash`; "" when emptied)
    e        the slots the event named (the page outlines them)
    kv       the event itself: {"t": type, "seq", "ts", "rank", "notes": [...], "lora",
             "medium", "group", "hashes": [short, ...], "parent": short or None}

The page's "stream" object holds every block a BlockStored made findable, once, in "recs":
{"h": full hash as text, "s": short form, "p": parent's full hash, "tok": token ids, "slot",
"from": step, "to": step it left, "a": its event's fields}, each left out when None; "attrs"
holds each distinct set of those event fields once ({"lora", "lora_name", "medium", "group",
"kind"}): nothing an event says once is written once a block, so a page is at most 24 times
its stream plus the viewer (about 19 at worst: one event of many one-token blocks with
small hashes, then a clear). The hover box finds a slot's block at the shown step from it
and walks the parent chain. A stream has no reference counts, owners or free queue, so the
page shows none (no badge counts anything): the badge on a tile is the block's short
hash.

`every=N` keeps every Nth event as a step (and the last), each step carrying the changes
of the events it stands for; the page says so in its version line. Nothing else is cut.
"""

from __future__ import annotations

from typing import Any

from .. import kv_events as ke
from ..kv_stream import sequence_notes
from ..palette import ACCENT, ALERT, FREE
from ..palette import SEQ_COLOURS as PALETTE
from . import _ui

VERSION = "vLLM v1 KV cache events (BlockStored / BlockRemoved / AllBlocksCleared)"


def _flatten(batches) -> tuple[list, list]:
    """The events in order, and per event (batch, notes that belong before it)."""
    events, where, pending = [], [], []
    for batch, notes in sequence_notes(batches):
        pending += notes
        for e in batch.events:
            events.append(e)
            where.append((batch, pending))
            pending = []
    if pending and where:  # notes after the last event (a replay's end) go on it
        where[-1] = (where[-1][0], where[-1][1] + pending)
    return events, where


def _record(r: ke.Record, attrs: dict) -> dict:
    """One stored block for the hover box; fields that are None are left out (the page
    reads a missing one as null), which keeps a 60,000-block page small. What the block's
    event says of all its blocks (LoRA, medium, group, kind) is in the stream's "attrs",
    each distinct set once; "a" is its index (so a long lora_name on an event of many
    blocks is stored once, not once a block)."""
    e = r.event
    shared = {
        "lora": e.lora_id,
        "lora_name": e.lora_name,
        "medium": e.medium,
        "group": e.group_idx,
        "kind": e.kv_cache_spec_kind,
    }
    shared = {k: v for k, v in shared.items() if v is not None}
    out = {
        "h": str(r.hash),
        "s": ke.short_hash(r.hash),
        "p": None if r.parent is None else str(r.parent),
        "tok": list(r.token_ids),
        "slot": r.slot,
        "from": r.stored,
        "to": r.removed,
    }
    if shared:
        out["a"] = attrs.setdefault(tuple(shared.items()), len(attrs))
    return {k: v for k, v in out.items() if v is not None}


def _kv(event, batch, notes) -> dict:
    out: dict[str, Any] = {"t": type(event).__name__, "notes": list(notes)}
    if batch.seq is not None:
        out["seq"] = batch.seq
    if batch.ts is not None:
        out["ts"] = batch.ts
    if batch.data_parallel_rank is not None:
        out["rank"] = batch.data_parallel_rank
    if isinstance(event, (ke.BlockStored, ke.BlockRemoved)):
        out["hashes"] = [ke.short_hash(h) for h in event.block_hashes]
        out["medium"] = event.medium
        out["group"] = event.group_idx
    if isinstance(event, ke.BlockStored):
        p = event.parent_block_hash
        out["parent"] = None if p is None else ke.short_hash(p)
        out["lora"], out["lora_name"] = event.lora_id, event.lora_name
    return out


def _steps(t: ke.Timeline, where: list, every: int) -> list[dict]:
    steps: list[dict] = [{"n": 0, "c": "the stream's start: no block cached yet"}]
    k_set: dict[int, str] = {}  # slot -> short hash, for the pending step
    ku: set[int] = set()
    touched: list[int] = []
    notes: list[str] = []
    for k, step in enumerate(t.steps, 1):
        for r in step.removed:
            slot = t.records[r].slot
            k_set.pop(slot, None)
            ku.add(slot)
            touched.append(slot)
        for r in step.added:
            rec = t.records[r]
            k_set[rec.slot] = ke.short_hash(rec.hash)
            touched.append(rec.slot)
        notes += where[k - 1][1]
        if k % every and k != len(t.steps):
            continue
        kv = _kv(step.event, where[k - 1][0], notes)
        caption = f"event {k}: {step.text}"
        if every > 1:
            first = k - (k - 1) % every
            caption = f"events {first}-{k} (every {every}th shown), last: {step.text}"
        d: dict[str, Any] = {"n": k, "c": caption, "kv": kv}
        gone = sorted(ku - set(k_set))
        if k_set:
            d["k"] = sorted(k_set)
        if gone:
            d["ku"] = gone
        pairs: list = []
        for slot in sorted(set(k_set) | ku):
            pairs += [slot, k_set.get(slot, "")]
        if pairs:
            d["h"] = pairs
        if touched:
            d["e"] = list(dict.fromkeys(touched))
        steps.append(d)
        k_set, ku, touched, notes = {}, set(), [], []
    return steps


def page_data(
    batches: list[ke.Batch],
    *,
    lang: str = "en",
    title: str = "pagedsim: a vLLM KV event stream",
    every: int = 1,
    live: float = 0,
) -> dict[str, Any]:
    """The page's data for a stream (a list of `kv_events.Batch`); `live` > 0 makes the page
    reload itself every `live` seconds (the file is being rewritten)."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    events, where = _flatten(batches)
    t = ke.timeline(events)
    attrs: dict = {}  # each distinct set of a record's event fields -> its index
    version = VERSION + (f" · every {every}th of {len(events):,} events shown" if every > 1 else "")
    return {
        "nb": max(t.num_slots, 1),
        "bs": t.block_size or 1,
        "seqs": [],
        "steps": _steps(t, where, every),
        "colour": [],
        "title": title,
        "version": version,
        "lang": lang,
        "groups": None,
        "palette": list(PALETTE),
        "free": FREE,
        "accent": ACCENT,
        "alert": ALERT,
        "ui": _ui(lang),
        "stream": {
            "events": len(events),
            "every": every,
            "live": live,
            "recs": [_record(r, attrs) for r in t.records],
            "attrs": [dict(a) for a in attrs],
        },
    }
