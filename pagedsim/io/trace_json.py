"""A trace as JSON (`pagedsim tour --json`), and read back: snapshots again.

`to_dict(trace)` stores every snapshot with its events as plain JSON (event `kind` in snake
case, each snapshot's English `caption` beside its step); `snapshots_from_dict` rebuilds
frozen `Snapshot`s with typed events. Bad input raises ValueError naming the first wrong
thing: every number's type and range is checked, so nothing downstream meets a block that
does not exist. A UTF-8 byte-order mark is accepted.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, fields
from typing import Any

from .. import trace as tr
from ..story import caption

KINDS = {tr._snake(cls.__name__): cls for cls in tr.Event.__subclasses__()}  # every event

# a JSON object, as json.loads returns it and json.dumps takes it: its values are any JSON
# (json's own functions type them Any); validate() checks a loaded one before it is used
JSONObject = dict[str, Any]
TUPLE_FIELDS = ("free_list", "ref_counts", "block_fill", "cached_blocks")
# traces saved before issue 41 gave these numbers vLLM's names: (where, old key) -> new key;
# such a file is read as saved, and written back with the new keys
RENAMED = {
    ("snapshot", "num_blocks"): "num_gpu_blocks",
    ("prefix_cache_reset", "num_blocks"): "num_forgotten",
}


def _renamed(d: JSONObject, where: str) -> JSONObject:
    """`d` with the keys a trace saved before issue 41 used renamed (one key never shadows
    another: a dict holding both names is left for validation to judge)."""
    old = {o: n for (w, o), n in RENAMED.items() if w == where and o in d and n not in d}
    return {old.get(k, k): v for k, v in d.items()} if old else d


def snapshot_to_dict(snapshot: tr.Snapshot) -> JSONObject:
    """JSON-ready: every field, plus `caption` in English (`custom_caption` only if set)."""
    out: JSONObject = {"step": snapshot.step, "caption": caption(snapshot)}
    out.update(
        (f.name, getattr(snapshot, f.name))
        for f in fields(snapshot)
        if f.name not in ("step", "custom_caption")
    )
    out["events"] = [e.to_dict() for e in snapshot.events]
    out["sequences"] = [asdict(s) for s in snapshot.sequences]
    if snapshot.custom_caption is not None:
        out["custom_caption"] = snapshot.custom_caption
    return out


def to_dict(trace: tr.Trace) -> JSONObject:
    """The whole trace, JSON-ready: its events, then one `snapshot_to_dict` per step."""
    return {
        "events": [e.to_dict() for e in trace.events],
        "snapshots": [snapshot_to_dict(s) for s in trace.snapshots],
    }


def _tuples(value: Any) -> Any:
    """A JSON value with its lists made tuples (an event's fields are tuples)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def event_from_dict(d: JSONObject) -> tr.Event:
    kind = d.get("kind")
    d = _renamed(d, str(kind))
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    cls = KINDS[kind]
    try:
        values = {f.name: d[f.name] for f in fields(cls)}
    except KeyError as e:
        raise ValueError(f"event {kind!r} lacks field {e.args[0]!r}") from None
    for f in fields(cls):
        _field(f"event {kind!r}: {f.name}", str(f.type), values[f.name])
    return cls(**{name: _tuples(v) for name, v in values.items()})


def _field(what: str, kind: str, value: object) -> None:
    """An event field of the type `trace.py` declares (its annotation, as text): a whole
    number, a list of them, text, or a sequence id (text or a whole number)."""
    if kind == "int":
        _whole(value, what, -1)  # -1: a position before the first (none here is lower)
    elif kind == "tuple[int, ...]":
        if not isinstance(value, (list, tuple)):  # JSON arrays, or to_dict() tuples
            raise ValueError(f"{what} must be a list of whole numbers, got {value!r}"[:200])
        for v in value:
            _whole(v, f"{what} entry", -1)
    elif kind == "str" and not isinstance(value, str):
        raise ValueError(f"{what} must be text, got {value!r}"[:200])
    elif kind == "object" and (isinstance(value, bool) or not isinstance(value, (str, int))):
        raise ValueError(f"{what} must be a sequence id (text or a whole number)"[:200])


# the largest whole number a browser's JSON.parse keeps exact: a page never shows a rounded one
MAX_SAFE = (1 << 53) - 1


def _whole(value: object, what: str, low: int = 0, high: int | None = MAX_SAFE) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a whole number, got {value!r}"[:200])
    if value < low or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{what} must be {span}, got {value}")
    return value


def _blocks(
    values: object, what: str, num_gpu_blocks: int, *, distinct: bool = False, low: int = 0
) -> None:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{what} must be a list of block ids, got {values!r}"[:200])
    for v in values:
        _whole(v, f"{what} entry", low, num_gpu_blocks - 1)
    if distinct and len(set(values)) != len(values):
        raise ValueError(f"{what} names a block twice: {list(values)}"[:200])


def validate(d: object) -> None:
    """Refuse a snapshot whose numbers cannot describe a pool (before anything is built)."""
    if not isinstance(d, dict):
        raise ValueError(f"a snapshot must be an object, got {type(d).__name__}")
    step = d.get("step")
    _whole(step, "step")
    where = f"snapshot {step}"
    n = _whole(d.get("num_gpu_blocks"), f"{where}: num_gpu_blocks", 1, 1 << 20)
    bs = _whole(d.get("block_size"), f"{where}: block_size", 1, 1 << 16)
    _blocks(d.get("free_list", ()), f"{where}: free_list", n, distinct=True)
    _blocks(d.get("cached_blocks", ()), f"{where}: cached_blocks", n, distinct=True)
    for name, high in (("ref_counts", MAX_SAFE), ("block_fill", bs)):
        values = d.get(name, ())
        if not isinstance(values, (list, tuple)):
            raise ValueError(f"{where}: {name} must be a list, got {values!r}"[:200])
        for v in values:
            _whole(v, f"{where}: {name} entry", 0, high)
    for name in ("sequences", "events", "pending_copies"):
        if not isinstance(d.get(name, []), (list, tuple)):  # JSON arrays, or to_dict() tuples
            raise ValueError(f"{where}: {name} must be a list, got {d.get(name)!r}"[:200])
    if not all(isinstance(e, dict) for e in d.get("events", [])):
        raise ValueError(f"{where}: every event must be an object")
    if not isinstance(d.get("caption", ""), str):
        raise ValueError(f"{where}: caption must be text")
    if not isinstance(d.get("custom_caption", ""), (str, type(None))):
        raise ValueError(f"{where}: custom_caption must be text or null")
    for s in d.get("sequences", ()):
        if not isinstance(s, dict):
            raise ValueError(f"{where}: a sequence must be an object, got {s!r}"[:200])
        if isinstance(s.get("seq_id"), bool) or not isinstance(s.get("seq_id"), (str, int)):
            raise ValueError(f"{where}: a seq_id must be text or a whole number"[:200])
        # -1: NULL_BLOCK, a logical block a sliding window dropped (block_table.py)
        _blocks(s.get("blocks", ()), f"{where}: table of {s.get('seq_id')!r}", n, low=-1)
        _whole(s.get("num_tokens"), f"{where}: num_tokens of {s.get('seq_id')!r}", 0)
    for pair in d.get("pending_copies", ()):
        _blocks(pair, f"{where}: pending copy", n)


def snapshot_from_dict(d: JSONObject) -> tr.Snapshot:
    if isinstance(d, dict):
        d = _renamed(d, "snapshot")
    validate(d)
    try:
        values = {f.name: d[f.name] for f in fields(tr.Snapshot) if f.name in d}
        values.setdefault("custom_caption", None)  # absent: the step is told from its events
        values["events"] = tuple(event_from_dict(e) for e in d.get("events", ()))
        values["sequences"] = tuple(
            tr.SeqState(s["seq_id"], tuple(s["blocks"]), s["num_tokens"]) for s in d["sequences"]
        )
        values["pending_copies"] = tuple(tuple(p) for p in d.get("pending_copies", ()))
        for name in TUPLE_FIELDS:
            if name in values:
                values[name] = tuple(values[name])
        snap = tr.Snapshot(**values)
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a snapshot: missing or malformed {e}") from None
    if len(snap.ref_counts) != snap.num_gpu_blocks or len(snap.block_fill) != snap.num_gpu_blocks:
        raise ValueError(
            f"snapshot {snap.step}: ref_counts/block_fill do not have {snap.num_gpu_blocks} entries"
        )
    return snap


def snapshots_from_dict(d: JSONObject) -> list[tr.Snapshot]:
    if not isinstance(d, dict) or not isinstance(d.get("snapshots"), list) or not d["snapshots"]:
        raise ValueError(
            "not a pagedsim trace: expected an object with a non-empty 'snapshots' list"
        )
    snaps = [snapshot_from_dict(s) for s in d["snapshots"]]
    if len({(s.num_gpu_blocks, s.block_size) for s in snaps}) != 1:
        raise ValueError("the snapshots disagree on the pool's size")
    return snaps


# a trace file larger is refused before it is read (a 2,000-step trace on 4,096 blocks, the
# largest the course draws, is far smaller); a page is at most 6x its trace plus the viewer
MAX_BYTES = 256 << 20


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def read_bounded(path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    """A file's bytes, read only up to `max_bytes`: a larger file (a trace, a stream, a
    script) is a ValueError before the rest of it is read."""
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"larger than {max_bytes:,} bytes, the most a {what} may be")
    return raw


def load_json(path: str | os.PathLike[str], max_bytes: int | None = None) -> Any:
    """The JSON document in a trace file of at most `max_bytes` (default MAX_BYTES), or a
    ValueError naming the file: too large, not UTF-8, not JSON (nor NaN), too deep."""
    try:
        raw = read_bounded(path, MAX_BYTES if max_bytes is None else max_bytes, "trace")
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return json_of(raw, path)


def json_of(raw: bytes, path: str | os.PathLike[str]) -> Any:
    """The JSON document in `raw`, the bytes `read_bounded` read from `path`, or a ValueError
    naming the file: not UTF-8, not JSON (nor NaN), too deep."""
    try:
        return json.loads(raw.decode("utf-8-sig"), parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a trace") from None
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None


def load_snapshots(path: str | os.PathLike[str]) -> list[tr.Snapshot]:
    """The snapshots of a JSON trace file (from `pagedsim tour --json > FILE`)."""
    return snapshots_from_dict(load_json(path))
