"""Read back a trace written by `pagedsim tour --json` (or `Trace.to_dict`): snapshots again.

`Trace.to_dict()` stores every snapshot with its events as plain JSON (event `kind`
in snake case, tuples as lists). `snapshots_from_dict` rebuilds frozen `Snapshot`s
with typed events, so the renderer and the playground draw a loaded trace exactly
like a live one. Bad input raises ValueError naming the first thing that is wrong.
Core module: no matplotlib.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from .. import trace as tr

EVENT_TYPES = {cls.__name__: cls for cls in (
    tr.SequenceAdded, tr.TokensAppended, tr.SequenceForked, tr.SequenceFreed, tr.BlockAllocated,
    tr.BlockShared, tr.BlockReleased, tr.CopyOnWrite, tr.AllocationFailed)}
KINDS = {tr._snake(name): cls for name, cls in EVENT_TYPES.items()}
TUPLE_FIELDS = ("free_list", "ref_counts", "block_fill", "cached_blocks")


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def event_from_dict(d: dict) -> tr.Event:
    kind = d.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    cls = KINDS[kind]
    try:
        return cls(**{f.name: _tuples(d[f.name]) for f in fields(cls)})
    except KeyError as e:
        raise ValueError(f"event {kind!r} lacks field {e.args[0]!r}") from None


def snapshot_from_dict(d: dict) -> tr.Snapshot:
    try:
        values = {f.name: d[f.name] for f in fields(tr.Snapshot) if f.name in d}
        values.setdefault("custom_caption", None)  # absent: the step is told from its events
        values["events"] = tuple(event_from_dict(e) for e in d.get("events", ()))
        values["sequences"] = tuple(tr.SeqState(s["seq_id"], tuple(s["blocks"]), s["num_tokens"])
                                    for s in d["sequences"])
        values["pending_copies"] = tuple(tuple(p) for p in d.get("pending_copies", ()))
        for name in TUPLE_FIELDS:
            if name in values:
                values[name] = tuple(values[name])
        snap = tr.Snapshot(**values)
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a snapshot: missing or malformed {e}") from None
    if len(snap.ref_counts) != snap.num_blocks or len(snap.block_fill) != snap.num_blocks:
        raise ValueError(f"snapshot {snap.step}: ref_counts/block_fill do not have {snap.num_blocks} entries")
    return snap


def snapshots_from_dict(d: dict) -> list[tr.Snapshot]:
    if not isinstance(d, dict) or not d.get("snapshots"):
        raise ValueError("not a pagedsim trace: expected an object with a non-empty 'snapshots' list")
    snaps = [snapshot_from_dict(s) for s in d["snapshots"]]
    if len({(s.num_blocks, s.block_size) for s in snaps}) != 1:
        raise ValueError("the snapshots disagree on the pool's size")
    return snaps


def load_snapshots(path) -> list[tr.Snapshot]:
    """The snapshots of a JSON trace file (from `pagedsim tour --json > FILE`)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    return snapshots_from_dict(data)
