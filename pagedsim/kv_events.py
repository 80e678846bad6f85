"""KV cache events: what the prefix cache publishes, with vLLM v1's names and JSON shape.

The reference is vLLM's `vllm/distributed/kv_events.py` (read at commit 0181ea3):
`BlockStored`, `BlockRemoved`, `AllBlocksCleared`, in msgspec's JSON shape {"ts", "events",
"data_parallel_rank"}, events tagged by "type" (older releases: arrays, tag first; both
are read). Our hashes are Python's, not sha256. `timeline` replays a stream in one pass,
giving each stored block (a `BlockKey`) a tile; a stream carries no block ids.

A stream comes from another process, so every field is checked (`FIELD_RULES`), and a line
longer than MAX_LINE or nested deeper than MAX_DEPTH is refused before json's recursive
parser sees it; each is a ValueError naming the line.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import NamedTuple, TypeAlias, TypeGuard

from . import trace as tr
from .story import caption

MEDIUM_GPU = "GPU"  # vLLM's medium for blocks in GPU memory
BlockHash: TypeAlias = int | str  # a block's hash as a stream carries it: an int or a hex string


@dataclass
class BlockStored:
    block_hashes: list[BlockHash]  # one hash per newly cached block, in prefix order
    parent_block_hash: BlockHash | None  # the block before the first (None: prompt start)
    token_ids: list[int]  # block_size token ids per block, concatenated
    block_size: int  # tokens per block
    lora_id: int | None = None  # the LoRA adapter the blocks were computed with
    medium: str | None = MEDIUM_GPU  # where the blocks live
    lora_name: str | None = None  # vLLM's newer name for the adapter
    extra_keys: list[list[str | int] | None] | None = None  # per block: its extra keys

    group_idx: int | None = None  # KV cache group of the blocks (0: the only one)
    kv_cache_spec_kind: str | None = None  # "full_attention" | "sliding_window"
    kv_cache_spec_sliding_window: int | None = None  # the window in tokens (sliding only)
    locality: str | None = None  # vLLM 0.34: "LOCAL" | "REMOTE" to the publisher
    ownership: str | None = None  # vLLM 0.34: the offloading tier that sent it
    session_id: str | None = None  # vLLM 0.34: the request context that stored it
    lookahead_token_ids: list[list[int]] | None = None  # per block: tokens hashed past it


@dataclass
class BlockRemoved:
    block_hashes: list[BlockHash]  # hashes of blocks whose contents were evicted
    medium: str | None = MEDIUM_GPU  # where the blocks lived
    group_idx: int | None = None  # KV cache group the evicted block belonged to
    locality: str | None = None  # vLLM 0.34: "LOCAL" | "REMOTE" to the publisher
    ownership: str | None = None  # vLLM 0.34: the offloading tier that sent it


OPTIONAL = (  # fields msgspec leaves out when None (defaults; not in the array form)
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "session_id",
    "lookahead_token_ids",
)


@dataclass
class AllBlocksCleared:
    pass


KVEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared  # one event of a stream
EVENT_TYPES: dict[str, type[KVEvent]] = {
    cls.__name__: cls for cls in (BlockStored, BlockRemoved, AllBlocksCleared)
}
# field order of vLLM's array-like encoding (older releases): the fields before OPTIONAL's
ARRAY_ORDER = {
    name: tuple(f.name for f in fields(cls) if f.name not in OPTIONAL)
    for name, cls in EVENT_TYPES.items()
}
REQUIRED = {  # the fields without a default
    name: tuple(f.name for f in fields(cls) if f.default is MISSING)
    for name, cls in EVENT_TYPES.items()
}


def event_to_json(event: KVEvent) -> dict[str, object]:
    """One event as vLLM's tagged JSON object (None optional fields left out, as msgspec)."""
    out: dict[str, object] = {"type": type(event).__name__}
    out.update({k: v for k, v in asdict(event).items() if k not in OPTIONAL or v is not None})
    return out


def event_from_json(obj: object) -> KVEvent:
    """An event from a tagged object or array, every field checked (`FIELD_RULES`;
    unknown fields read past); ValueError names what is wrong."""
    if isinstance(obj, list) and obj and isinstance(obj[0], str):
        kind, values = obj[0], obj[1:]
        if kind not in ARRAY_ORDER:
            raise ValueError(f"unknown event type {_brief(kind)}")
        if len(values) > len(ARRAY_ORDER[kind]):
            raise ValueError(
                f"{kind}: {len(values)} values after the tag, at most {len(ARRAY_ORDER[kind])}"
            )
        obj = {"type": kind, **dict(zip(ARRAY_ORDER[kind], values, strict=False))}
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("type"), str)
        or obj["type"] not in EVENT_TYPES
    ):
        raise ValueError(f"not a KV cache event: {_brief(obj)}")
    cls = EVENT_TYPES[obj["type"]]
    names = set(cls.__dataclass_fields__)
    fields_ = {k: v for k, v in obj.items() if k in names}
    for name in cls.__dataclass_fields__:
        if name in fields_:
            _check_field(obj["type"], name, fields_[name])
        elif name in REQUIRED[obj["type"]]:
            raise ValueError(f"{obj['type']}: {name} is missing")
    event = cls(**fields_)
    if isinstance(event, BlockStored):
        _check_stored(event)
    return event


MAX_ID = (1 << 63) - 1  # token ids, LoRA ids: vLLM's int64 bound (errors.MAX_TOKEN_ID)
MAX_BLOCK_SIZE = 1 << 16  # tokens per block (vLLM's largest is 256)
MAX_GROUP_IDX = (1 << 31) - 1  # KV cache groups (vLLM has a handful)
MAX_WINDOW = 1 << 40  # a sliding window in tokens
SPEC_KINDS = ("full_attention", "sliding_window")  # the kinds pagedsim's managers cache
MAX_TEXT = 256  # characters in a name, a medium, a session id or one extra key


Check: TypeAlias = Callable[[object], bool]  # one field's test


def _is_int(v: object) -> TypeGuard[int]:
    return type(v) is int


def _hash_ok(h: object) -> bool:
    """vLLM's ExternalBlockHash: a u64 int (pagedsim's own: a signed 64-bit one) or bytes,
    which the msgpack reader turns into hex text."""
    return (_is_int(h) and -(1 << 63) <= h < 1 << 64) or (isinstance(h, str) and 0 < len(h) <= 256)


def _text_ok(v: object) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def _int_in(low: int, high: int) -> Check:
    return lambda v: _is_int(v) and low <= v <= high


def _optional(test: Check) -> Check:
    return lambda v: v is None or test(v)


def _key_ok(key: object, pair: bool = True) -> bool:
    """One extra key as vLLM 0.34 publishes it untagged: a LoRA name or cache salt (str), a
    prompt-embeds digest (bytes, read as hex text), an int, or a multimodal item's
    (identifier, offset) pair (a short array of those)."""
    if _is_int(key) or _text_ok(key):
        return True
    return pair and isinstance(key, list) and len(key) <= 4 and all(_key_ok(x, False) for x in key)


def _extra_keys_ok(keys: object) -> bool:
    """vLLM: one entry per block, each None or a tuple (a JSON array) of keys (`_key_ok`)."""
    return isinstance(keys, list) and all(
        k is None or (isinstance(k, list) and all(map(_key_ok, k))) for k in keys
    )


def _ids_ok(ids: object) -> bool:
    return isinstance(ids, list) and all(_is_int(t) and 0 <= t <= MAX_ID for t in ids)


FIELD_RULES: dict[str, tuple[Check, str]] = {  # field -> (check, what it must be)
    "block_hashes": (
        lambda v: isinstance(v, list) and len(v) > 0 and all(map(_hash_ok, v)),
        "a non-empty list of block hashes (64-bit ints or hex strings)",
    ),
    "parent_block_hash": (
        _optional(_hash_ok),
        "None or a block hash (a 64-bit int or a hex string)",
    ),
    "token_ids": (_ids_ok, f"a list of token ids, ints in [0, {MAX_ID}]"),
    "block_size": (_int_in(1, MAX_BLOCK_SIZE), f"an int in [1, {MAX_BLOCK_SIZE}]"),
    "lora_id": (
        _optional(_int_in(1, MAX_ID)),
        f"None or an int in [1, {MAX_ID}] (vLLM's LoRA ids start at 1)",
    ),
    "medium": (
        _optional(lambda v: isinstance(v, str) and 0 < len(v) <= 64),
        'None or a non-empty str such as "GPU" or "CPU"',
    ),
    "lora_name": (_optional(_text_ok), f"None or a str of at most {MAX_TEXT} characters"),
    "extra_keys": (
        _optional(_extra_keys_ok),
        "None or a list with, per block, None or a list of keys (str, int, bytes, or an "
        "[identifier, offset] pair)",
    ),
    "group_idx": (_optional(_int_in(0, MAX_GROUP_IDX)), f"None or an int in [0, {MAX_GROUP_IDX}]"),
    "kv_cache_spec_kind": (
        _optional(lambda v: isinstance(v, str) and v in SPEC_KINDS),
        f"None or one of {SPEC_KINDS}",
    ),
    "kv_cache_spec_sliding_window": (
        _optional(_int_in(1, MAX_WINDOW)),
        f"None or an int in [1, {MAX_WINDOW}] (tokens)",
    ),
    "locality": (_optional(_text_ok), f"None or a str of at most {MAX_TEXT} characters"),
    "ownership": (_optional(_text_ok), f"None or a str of at most {MAX_TEXT} characters"),
    "session_id": (_optional(_text_ok), f"None or a str of at most {MAX_TEXT} characters"),
    "lookahead_token_ids": (
        _optional(lambda v: isinstance(v, list) and all(map(_ids_ok, v))),
        f"None or a list with, per block, a list of token ids in [0, {MAX_ID}]",
    ),
}


def _check_field(kind: str, name: str, value: object) -> None:
    test, what = FIELD_RULES[name]
    if not test(value):
        got = _brief(value)
        if isinstance(value, list):  # name the first bad entry
            bad = next((i for i, x in enumerate(value) if not test([x])), None)
            if bad is not None:
                got = f"entry {bad}: {_brief(value[bad])}"
        raise ValueError(f"{kind}: {name} must be {what}, got {got}")


def _brief(value: object) -> str:
    """A value for an error message: its type and at most 60 characters of it."""
    if isinstance(value, (list, dict)):
        return f"a {type(value).__name__} of {len(value)}"
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _check_stored(e: BlockStored) -> None:
    """What one field cannot check alone: the lengths per block, the window's kind."""
    bs, n = e.block_size, len(e.block_hashes)
    if len(e.token_ids) != bs * n:
        raise ValueError(f"BlockStored: {len(e.token_ids)} token ids for {n} blocks of {bs}")
    for name in ("extra_keys", "lookahead_token_ids"):
        rows = getattr(e, name)
        if rows is not None and len(rows) != n:
            raise ValueError(f"BlockStored: {name} has {len(rows)} entries for {n} blocks")
    window = e.kv_cache_spec_sliding_window
    if window is not None and e.kv_cache_spec_kind != "sliding_window":
        raise ValueError(
            "BlockStored: kv_cache_spec_sliding_window is only for "
            "kv_cache_spec_kind 'sliding_window'"
        )


MAX_DEPTH = 32  # nesting of arrays and objects in one line (a batch of events needs 4)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _check_depth(line: str) -> None:
    """Refuse a line nested deeper than MAX_DEPTH (json's parser would recurse)."""
    depth = 0
    for m in _BRACKETS.finditer(_STRINGS.sub('""', line)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} arrays or objects")


@dataclass
class Batch:
    """One published KVEventBatch: its events, with what the wire says around them."""

    events: list[KVEvent]
    seq: int | None = None  # ZMQ's second frame (-1 ends a replay; None: not kept)
    ts: float | None = None
    data_parallel_rank: int | None = None
    topic: str | None = None  # the ZMQ topic
    replayed: bool = False  # came back through the replay socket
    refused: str | None = None  # why the message at this seq was refused (no events then)
    unread: list[str] = field(default_factory=list)  # "Type.field" of fields not known here


def batch_to_json(batch: Batch) -> dict[str, object]:
    """A batch as one JSON line: msgspec's object form plus "seq", "topic", "replayed"."""
    out: dict[str, object] = {
        "ts": batch.ts,
        "events": [event_to_json(e) for e in batch.events],
        "data_parallel_rank": batch.data_parallel_rank,
    }
    told = (batch.seq, batch.topic, batch.replayed or None, batch.refused, batch.unread or None)
    out.update((k, v) for k, v in zip(_TOLD, told, strict=True) if v is not None)
    return out


_TOLD = ("seq", "topic", "replayed", "refused", "unread")  # batch_to_json's keys past msgspec's


MAX_LINE = 16 << 20  # characters in one JSON line (a 128k-token BlockStored takes ~1 MiB)


def read_stream(lines: Iterable[str | bytes]) -> list[KVEvent]:
    """Events from JSON lines (str or UTF-8 bytes), each a KVEventBatch or one event;
    ValueError naming the line for anything malformed."""
    return [e for b in read_batches(lines) for e in b.events]


def read_batches(lines: Iterable[str | bytes]) -> list[Batch]:
    """`read_stream`, batch by batch: a line holding one bare event is a batch of one."""
    out: list[Batch] = []
    rank: int | None = None
    for number, raw in enumerate(lines, 1):
        try:
            if isinstance(raw, (str, bytes, bytearray)) and len(raw) > MAX_LINE:
                raise ValueError(f"over {MAX_LINE >> 20} MiB in one line")
            line = _text_of(raw).strip().lstrip("\ufeff")
            if not line:
                continue
            _check_depth(line)
            batch = batch_of(_json(line))
            rank = same_rank(batch, rank)
        except (ValueError, TypeError, RecursionError) as e:
            raise ValueError(f"line {number}: {e}") from None
        out.append(batch)
    return out


def same_rank(batch: Batch, rank: int | None) -> int | None:
    """The stream's data-parallel rank after `batch` (None: not told yet). Each rank of vLLM
    has its own pool and publisher, so a batch of another rank is a ValueError."""
    theirs = batch.data_parallel_rank
    if theirs is None:
        return rank
    if rank is not None and theirs != rank:
        raise ValueError(
            f"data_parallel_rank {theirs} in a stream of rank {rank} (each rank has its own "
            "pool: view each rank's stream on its own)"
        )
    return theirs


def _json(line: str) -> object:
    """One JSON value; an int too long for Python's reader is named plainly."""
    try:
        return json.loads(line)
    except ValueError as e:
        if "integer string conversion" in str(e):
            limit = sys.get_int_max_str_digits()
            raise ValueError(f"an integer of over {limit:,} digits") from None
        raise


def batch_of(obj: object) -> Batch:
    """A batch from decoded JSON or msgpack: an object, vLLM's array [ts, events,
    data_parallel_rank], or one bare event. ValueError if malformed."""
    if isinstance(obj, dict) and "events" in obj:
        batch = Batch(_events_of(obj["events"]), ts=obj.get("ts"))
        batch.data_parallel_rank = obj.get("data_parallel_rank")
        batch.seq, batch.topic = obj.get("seq"), obj.get("topic")
        batch.replayed = obj.get("replayed", False)
        batch.refused = obj.get("refused")
        told = obj.get("unread", [])
        if not isinstance(told, list):
            raise ValueError(f"unread must be a list of field names, got {_brief(told)}")
        batch.unread = told + _unread(obj["events"])
    elif (
        isinstance(obj, list)
        and len(obj) >= 2
        and isinstance(obj[1], list)
        and not isinstance(obj[0], str)
    ):  # vLLM's array-like EventBatch: [ts, events, data_parallel_rank]
        if len(obj) > 3:
            raise ValueError(f"a batch array has 2 or 3 elements, got {len(obj)}")
        batch = Batch(_events_of(obj[1]), ts=obj[0], unread=_unread(obj[1]))
        batch.data_parallel_rank = obj[2] if len(obj) > 2 else None
    else:
        return Batch([event_from_json(obj)], unread=_unread([obj]))
    _check_batch(batch)
    return batch


def _unread(events: list[object]) -> list[str]:
    """The fields of tagged events that no event type here has, as "Type.field" (a newer
    vLLM's; read past, as msgspec's decoder does, but named for the page)."""
    out = {
        f"{e['type']}.{k}"
        for e in events
        if isinstance(e, dict) and e.get("type") in EVENT_TYPES
        for k in e
        if k != "type" and k not in EVENT_TYPES[e["type"]].__dataclass_fields__
    }
    return sorted(out)


def _check_batch(b: Batch) -> None:
    if b.ts is not None and (type(b.ts) not in (int, float) or not math.isfinite(b.ts)):
        raise ValueError(f"a batch's ts must be a finite number, got {_brief(b.ts)}")
    if b.data_parallel_rank is not None and not _int_in(0, MAX_GROUP_IDX)(b.data_parallel_rank):
        raise ValueError(
            f"data_parallel_rank must be None or an int >= 0, got {_brief(b.data_parallel_rank)}"
        )
    if b.seq is not None and not _int_in(-1, MAX_ID)(b.seq):
        raise ValueError(f"seq must be an int in [-1, {MAX_ID}], got {_brief(b.seq)}")
    if b.topic is not None and not isinstance(b.topic, str):
        raise ValueError(f"topic must be text, got {_brief(b.topic)}")
    if type(b.replayed) is not bool:
        raise ValueError(f"replayed must be true or false, got {_brief(b.replayed)}")
    if not (isinstance(b.unread, list) and len(b.unread) <= 64 and all(map(_text_ok, b.unread))):
        raise ValueError("unread must be a list of at most 64 field names")
    if b.refused is not None and not (_text_ok(b.refused) and not b.events):
        raise ValueError("refused must be a short text on a batch with no events")


def _text_of(line: object) -> str:
    if isinstance(line, str):
        return line
    if isinstance(line, (bytes, bytearray)):
        try:
            return bytes(line).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    raise ValueError(f"expected a line of text, got {type(line).__name__}")


def _events_of(batch: object) -> list[KVEvent]:
    if not isinstance(batch, list):
        raise ValueError("a batch's events must be a list")
    return [event_from_json(e) for e in batch]


# ---- replay: a stream as a timeline, linear in its events (slots: the lowest free tile) ----


class BlockKey(NamedTuple):
    """What names one cached block in a stream. vLLM v1 caches a hash once per KV cache
    group (a hybrid model stores every prompt block in its full and its window group, and
    evicts them apart) and once per medium (an offloading tier stores GPU blocks again on
    the CPU). group None (streams before group_idx) is group 0, the only group."""

    group: int
    medium: str | None
    hash: BlockHash


def keys_of(event: BlockStored | BlockRemoved) -> list[BlockKey]:
    """The blocks an event names, in its order."""
    group = event.group_idx or 0
    return [BlockKey(group, event.medium, h) for h in event.block_hashes]


@dataclass
class Record:
    """One block a BlockStored made findable, for as long as it stayed cached."""

    hash: BlockHash
    parent: BlockHash | None  # the block before it (None: a prompt's first block)
    token_ids: tuple[int, ...]
    slot: int  # the tile it is drawn on
    stored: int  # the event that stored it (1 = the stream's first event)
    event: BlockStored  # that event (LoRA, medium, group, spec kind)
    removed: int | None = None  # the event that evicted or cleared it, if any


@dataclass
class Step:
    """What one event did: the records it added and removed, and its caption."""

    event: KVEvent
    text: str
    added: list[int]  # record ids, in the event's order
    removed: list[int]  # record ids
    unknown: int = 0  # blocks a BlockRemoved named that were not cached
    copies: int = 0  # blocks a BlockStored named that were cached already (another copy)


@dataclass
class Timeline:
    steps: list[Step] = field(default_factory=list)  # steps[k - 1] is event k
    records: list[Record] = field(default_factory=list)
    live: dict[BlockKey, list[int]] = field(default_factory=dict)  # block -> its copies' records
    free: list[int] = field(default_factory=list)  # a heap of slots given back: lowest first
    num_slots: int = 0
    block_size: int | None = None  # the largest BlockStored's (groups differ in vLLM 0.34)

    def cached_at(self, k: int) -> dict[BlockKey, Record]:
        """The cached blocks after event k (0 = the start), by `BlockKey` (of copies, the
        newest)."""
        return {
            BlockKey(r.event.group_idx or 0, r.event.medium, r.hash): r
            for r in self.records
            if r.stored <= k and (r.removed is None or r.removed > k)
        }


def timeline(events: Iterable[KVEvent]) -> Timeline:
    """Replay `events` in one pass. Every block an event names is applied, or counted in
    its step's `unknown` (a removal of a block not cached)."""
    out = Timeline()
    for k, event in enumerate(events, 1):
        if isinstance(event, BlockStored):
            out.block_size = max(out.block_size or 0, event.block_size)
        out.steps.append(_step(out, event, k))
    return out


def _step(t: Timeline, event: KVEvent, k: int) -> Step:
    if isinstance(event, AllBlocksCleared):
        gone = [r for copies in t.live.values() for r in copies]
        for r in gone:
            _drop(t, r, k)
        t.live.clear()
        text = f"AllBlocksCleared: reset_prefix_cache() forgot all {len(gone)} cached blocks"
        return Step(event, text, [], gone)
    if isinstance(event, BlockRemoved):
        return _removed(t, event, k)
    return _stored(t, event, k)


def _removed(t: Timeline, event: BlockRemoved, k: int) -> Step:
    """Each named block loses its earliest copy (the stream does not say which); a block
    not cached is counted in `unknown` (a stream joined mid-run, or a removal repeated)."""
    gone = []
    for key in keys_of(event):
        copies = t.live.get(key)
        if copies:
            r = copies.pop(0)
            if not copies:
                del t.live[key]
            _drop(t, r, k)
            gone.append(r)
    unknown = len(event.block_hashes) - len(gone)
    text = f"BlockRemoved: {_names(event.block_hashes)} evicted" + (
        f" ({unknown} not cached here)" if unknown else ""
    )
    return Step(event, text, [], gone, unknown)


def _stored(t: Timeline, event: BlockStored, k: int) -> Step:
    """Each named block gets a tile: a block already cached gets another copy, as vLLM 0.34
    caches one hash under each block that computed it (and removes them one by one)."""
    added, parent, bs, copies = [], event.parent_block_hash, event.block_size, 0
    for i, (key, h) in enumerate(zip(keys_of(event), event.block_hashes, strict=True)):
        slot = heapq.heappop(t.free) if t.free else t.num_slots
        t.num_slots = max(t.num_slots, slot + 1)
        held = t.live.setdefault(key, [])
        copies += bool(held)
        held.append(len(t.records))
        added.append(len(t.records))
        tokens = tuple(event.token_ids[i * bs : (i + 1) * bs])
        t.records.append(Record(h, parent, tokens, slot, k, event))
        parent = h
    after = (
        "a prompt's start"
        if event.parent_block_hash is None
        else f"block {short_hash(event.parent_block_hash)}"
    )
    lora = f", LoRA {event.lora_id}" if event.lora_id is not None else ""
    text = f"BlockStored: {_names(event.block_hashes)} cached after {after}{lora}" + (
        f" ({copies} already cached: another copy)" if copies else ""
    )
    return Step(event, text, added, [], copies=copies)


def _drop(t: Timeline, record: int, k: int) -> None:
    r = t.records[record]
    r.removed = k
    heapq.heappush(t.free, r.slot)


def replay(events: Iterable[KVEvent], frames: Iterable[int] | None = None) -> list[tr.Snapshot]:
    """Snapshots after each event (0 = the empty start), or only `frames`: cached blocks on
    their slots, every slot count 0 and free in slot order (a stream has no counts)."""
    t = timeline(events)
    wanted = range(len(t.steps) + 1) if frames is None else sorted(set(frames))
    num_gpu_blocks, block_size = max(t.num_slots, 1), t.block_size or 1  # the snapshot's pool
    fill = [0] * num_gpu_blocks
    out, k = [], 0
    for want in wanted:
        for step in t.steps[k:want]:
            for r in step.removed:
                fill[t.records[r].slot] = 0
            for r in step.added:
                fill[t.records[r].slot] = len(t.records[r].token_ids)
        k = max(k, want)
        out.append(
            tr.Snapshot(
                step=want,
                custom_caption=t.steps[want - 1].text if want else "an empty prefix cache",
                events=(),
                num_gpu_blocks=num_gpu_blocks,
                block_size=block_size,
                free_list=tuple(range(num_gpu_blocks)),  # no counts: every block drawn as ref 0
                ref_counts=(0,) * num_gpu_blocks,
                block_fill=tuple(fill),
                sequences=(),
                cached_blocks=tuple(b for b in range(num_gpu_blocks) if fill[b]),
            )
        )
    return out


def shown_frames(num_events: int, limit: int) -> list[int]:
    """Event numbers to draw (0 = the start): all up to `limit`, else the first and last half."""
    if num_events + 1 <= limit:
        return list(range(num_events + 1))
    half = max(limit // 2, 1)
    return list(range(half)) + list(range(num_events + 1 - half, num_events + 1))


def summarised(snap: tr.Snapshot, max_blocks: int) -> tr.Snapshot:
    """`snap` cut to its first `max_blocks` slots, captioned with what was left out."""
    n = snap.num_gpu_blocks
    if n <= max_blocks:
        return snap
    cached = len(snap.cached_blocks)
    note = f" [summary: {cached:,} cached blocks; showing slots 0-{max_blocks - 1} of {n:,}]"
    return replace(
        snap,
        custom_caption=caption(snap) + note,
        num_gpu_blocks=max_blocks,
        ref_counts=snap.ref_counts[:max_blocks],
        block_fill=snap.block_fill[:max_blocks],
        cached_blocks=tuple(b for b in snap.cached_blocks if b < max_blocks),
    )


def short_hash(h: BlockHash) -> str:
    """A hash as captions and tiles name it: its last 8 hex digits (or characters)."""
    return format(h & 0xFFFFFFFF, "08x") if isinstance(h, int) else h[-8:]


def _names(hashes: Iterable[BlockHash], most: int = 8) -> str:
    listed = list(hashes)
    shown = ", ".join(map(short_hash, listed[:most]))
    more = f" and {len(listed) - most:,} more" if len(listed) > most else ""
    return ("block " if len(listed) == 1 else "blocks ") + shown + more
