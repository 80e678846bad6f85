"""KV cache events: what the prefix cache publishes, with vLLM v1's names and JSON shape.

vLLM v1's block pool queues an event whenever the set of cached blocks changes
(`vllm/distributed/kv_events.py`; `BlockPool.take_events()` drains the queue, the
engine publishes them over ZMQ in `KVEventBatch`es):

    BlockStored       full blocks were hashed and became findable: their block_hashes,
                      the parent_block_hash they chain from (None at the start of a
                      prompt), their token_ids (block_size per block), lora_id, medium,
                      lora_name, then the optional extra_keys, group_idx,
                      kv_cache_spec_kind and kv_cache_spec_sliding_window
    BlockRemoved      cached blocks were evicted (their contents are overwritten):
                      block_hashes, medium, group_idx
    AllBlocksCleared  reset_prefix_cache() forgot every cached block

Fields, names and order are those of vLLM's kv_events.py (read at commit 0181ea3).
group_idx is the KV cache group whose block it was, on stores and removals alike: 0 for
the only group, 0 or 1 under the hybrid allocator (policies/hybrid.py), as vLLM's
`BlockRemoved(..., group_idx=get_group_id(block_hash))` says which group lost a block.
kv_cache_spec_kind is "full_attention" or "sliding_window" (with the window in tokens
in kv_cache_spec_sliding_window), vLLM's `KVCacheSpecKind` values. extra_keys stays
None: vLLM sends each block's own extra keys (cache_salt on the first block, the LoRA
name, multimodal hashes), while pagedsim chains a prompt's extra keys from its root
(policies/prefix_cache.py), so it has no per-block list to send.

`PrefixCachingManager(..., enable_kv_cache_events=True)` queues the same events, and
`take_events()` hands them over. Ours differ in the hash values only (Python's hash
of (parent hash, tokens) instead of sha256), so a stream cannot be mixed with a real
server's, but it reads the same.

The JSON shape is what msgspec makes of a published `KVEventBatch`: an object
{"ts": ..., "events": [...], "data_parallel_rank": ...} whose events are objects
tagged by "type" ({"type": "BlockStored", "block_hashes": [...], ...}); older vLLM
releases encoded each struct as an array, tag first (["BlockStored", [...], ...]), and
`event_from_json` reads both. `read_stream` takes JSON lines, each a batch or a bare
event. `replay` turns a stream into snapshots for the playground and the figures: each
stored block gets a slot, and each chain of cached blocks (from a block nobody
continues back to its first cached ancestor) is drawn as one table, so prefixes that
several chains share show up as shared blocks.

A stream comes from another process, so every field is checked (`FIELD_RULES`: types,
token ids in [0, 2**63 - 1], LoRA ids from 1, group_idx from 0, the spec kinds pagedsim
knows, a window only on a sliding-window block, one extra_keys entry per block), a
`block_size` that changes mid-stream is refused (a pool's block size is fixed), and a
line nested deeper than MAX_DEPTH is refused before json's recursive parser sees it.
Each is a ValueError naming the line. `replay(events, frames)` snapshots only the frames
asked for, and `summarised` cuts a snapshot to a drawable size, so a 50,000-block event
or 3,000 events print and draw in seconds (`pagedsim play --events`).
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TypeAlias, TypeGuard

from . import trace as tr
from .story import caption

MEDIUM_GPU = "GPU"  # vLLM's medium for blocks in GPU memory
BlockHash: TypeAlias = int | str  # a block's hash as a stream carries it: an int or a hex string


@dataclass
class BlockStored:
    block_hashes: list[BlockHash]  # one hash per newly cached block, in prefix order
    parent_block_hash: (
        BlockHash | None
    )  # hash of the block before the first one (None: prompt start)
    token_ids: list[int]  # block_size token ids per block, concatenated
    block_size: int  # tokens per block
    lora_id: int | None = None  # the LoRA adapter the blocks were computed with
    medium: str | None = MEDIUM_GPU  # where the blocks live
    lora_name: str | None = None  # vLLM's newer name for the adapter
    extra_keys: list[list[str | int] | None] | None = (
        None  # per block: the extra keys hashed with it (see above)
    )
    group_idx: int | None = None  # KV cache group of the blocks (0: the only one)
    kv_cache_spec_kind: str | None = None  # "full_attention" | "sliding_window"
    kv_cache_spec_sliding_window: int | None = None  # the window in tokens (sliding only)


@dataclass
class BlockRemoved:
    block_hashes: list[BlockHash]  # hashes of blocks whose contents were evicted
    medium: str | None = MEDIUM_GPU  # where the blocks lived
    group_idx: int | None = None  # KV cache group the evicted block belonged to


OPTIONAL = ("extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")


@dataclass
class AllBlocksCleared:
    pass


KVEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared  # one event of a stream
EVENT_TYPES: dict[str, type[KVEvent]] = {
    cls.__name__: cls for cls in (BlockStored, BlockRemoved, AllBlocksCleared)
}
ARRAY_ORDER = {  # field order of vLLM's array-like encoding (older releases)
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def event_to_json(event: KVEvent) -> dict[str, object]:
    """One event as vLLM's tagged JSON object (the optional fields left out while None,
    as msgspec's omit_defaults does; vLLM's other fields have no default)."""
    out: dict[str, object] = {"type": type(event).__name__}
    out.update({k: v for k, v in asdict(event).items() if k not in OPTIONAL or v is not None})
    return out


def event_from_json(obj: object) -> KVEvent:
    """An event from a tagged object or a tagged array; ValueError names what is wrong.

    Every field is checked for type and range (see `FIELD_RULES`); fields that other vLLM
    versions added are read past."""
    if isinstance(obj, list) and obj and isinstance(obj[0], str):
        kind, values = obj[0], obj[1:]
        if kind not in ARRAY_ORDER:
            raise ValueError(f"unknown event type {_brief(kind)}")
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
REQUIRED = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size"),
    "BlockRemoved": ("block_hashes",),
    "AllBlocksCleared": (),
}


Check: TypeAlias = Callable[[object], bool]  # one field's test


def _is_int(v: object) -> TypeGuard[int]:
    return type(v) is int


def _hash_ok(h: object) -> bool:
    return _is_int(h) or (isinstance(h, str) and 0 < len(h) <= 256)


def _int_in(low: int, high: int) -> Check:
    return lambda v: _is_int(v) and low <= v <= high


def _optional(test: Check) -> Check:
    return lambda v: v is None or test(v)


def _extra_keys_ok(keys: object) -> bool:
    """vLLM: one entry per block, each None or a tuple (a JSON array) of str / int keys."""
    return isinstance(keys, list) and all(
        k is None or (isinstance(k, list) and all(_is_int(x) or isinstance(x, str) for x in k))
        for k in keys
    )


FIELD_RULES: dict[str, tuple[Check, str]] = {  # field -> (check, what it must be)
    "block_hashes": (
        lambda v: isinstance(v, list) and len(v) > 0 and all(map(_hash_ok, v)),
        "a non-empty list of block hashes (ints or hex strings)",
    ),
    "parent_block_hash": (_optional(_hash_ok), "None or a block hash (an int or a hex string)"),
    "token_ids": (
        lambda v: isinstance(v, list) and all(_is_int(t) and 0 <= t <= MAX_ID for t in v),
        f"a list of token ids, ints in [0, {MAX_ID}]",
    ),
    "block_size": (_int_in(1, MAX_BLOCK_SIZE), f"an int in [1, {MAX_BLOCK_SIZE}]"),
    "lora_id": (
        _optional(_int_in(1, MAX_ID)),
        f"None or an int in [1, {MAX_ID}] (vLLM's LoRA ids start at 1)",
    ),
    "medium": (
        _optional(lambda v: isinstance(v, str) and 0 < len(v) <= 64),
        'None or a non-empty str such as "GPU" or "CPU"',
    ),
    "lora_name": (_optional(lambda v: isinstance(v, str)), "None or a str"),
    "extra_keys": (
        _optional(_extra_keys_ok),
        "None or a list with, per block, None or a list of str / int keys",
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
    keys = e.extra_keys
    if keys is not None and len(keys) != n:
        raise ValueError(f"BlockStored: extra_keys has {len(keys)} entries for {n} blocks")
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
    """Refuse a line nested deeper than MAX_DEPTH before json parses it (its parser
    recurses, so `[[[[...` would be a RecursionError, not a clean refusal)."""
    depth = 0
    for m in _BRACKETS.finditer(_STRINGS.sub('""', line)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} arrays or objects")


def read_stream(lines: Iterable[str | bytes]) -> list[KVEvent]:
    """Events from JSON lines: each line a KVEventBatch (object or array) or one event.
    A line may be str or UTF-8 bytes (a file opened in binary mode, a socket's frames).

    ValueError, naming the line, for a malformed line, a field out of range or a
    block_size that differs from the stream's first."""
    out: list[KVEvent] = []
    block_size: int | None = None
    for number, raw in enumerate(lines, 1):
        try:
            line = _text_of(raw).strip().lstrip("\ufeff")
            if not line:
                continue
            _check_depth(line)
            events = _events_of(json.loads(line))
            block_size = _same_block_size(events, block_size)
        except (ValueError, TypeError, RecursionError) as e:
            raise ValueError(f"line {number}: {e}") from None
        out.extend(events)
    return out


def _text_of(line: object) -> str:
    if isinstance(line, str):
        return line
    if isinstance(line, (bytes, bytearray)):
        try:
            return bytes(line).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    raise ValueError(f"expected a line of text, got {type(line).__name__}")


def _same_block_size(events: Iterable[KVEvent], block_size: int | None) -> int | None:
    """The stream's block size after `events`; ValueError if one of them changes it (the
    pool's block size is fixed when the engine starts)."""
    for e in events:
        if isinstance(e, BlockStored):
            if block_size is not None and e.block_size != block_size:
                raise ValueError(
                    f"BlockStored: block_size {e.block_size} differs from the "
                    f"stream's {block_size} (a pool's block size never changes)"
                )
            block_size = e.block_size
    return block_size


def _events_of(obj: object) -> list[KVEvent]:
    if isinstance(obj, dict) and "events" in obj:  # a batch as an object
        batch = obj["events"]
    elif (
        isinstance(obj, list)
        and len(obj) >= 2
        and isinstance(obj[1], list)
        and not isinstance(obj[0], str)
    ):  # a batch as an array: [ts, events, dp_rank]
        batch = obj[1]
    else:
        return [event_from_json(obj)]
    if not isinstance(batch, list):
        raise ValueError("a batch's events must be a list")
    return [event_from_json(e) for e in batch]


# ---- replay: a stream as snapshots ----------------------------------------------------------
Stored: TypeAlias = tuple[int, BlockHash | None, tuple[int, ...]]  # (slot, parent hash, tokens)
Chain: TypeAlias = tuple[BlockHash, tuple[int, ...], int]  # (leaf hash, slots root first, tokens)


@dataclass
class _Cache:
    # hash -> (slot, parent hash, tokens)
    stored: dict[BlockHash, Stored] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)  # a heap of slots given back: lowest reused first
    next_slot: int = 0
    block_size: int = 1


def replay(events: Iterable[KVEvent], frames: Iterable[int] | None = None) -> list[tr.Snapshot]:
    """One snapshot per event (plus the empty start), in pagedsim's Snapshot shape; with
    `frames` (a collection of event numbers, 0 = the start), only those events' snapshots,
    so that a long stream costs one pass plus the frames asked for. ValueError if a
    BlockStored changes the stream's block_size."""
    cache = _Cache()
    states: list[tuple[int, str, list[Chain], dict[BlockHash, Stored]]] = []
    keep: Callable[[int], bool] = (
        (lambda k: True) if frames is None else frozenset(frames).__contains__
    )
    size: int | None = None
    for k, event in enumerate(events, 1):
        try:
            size = _same_block_size((event,), size)
        except ValueError as e:
            raise ValueError(f"event {k}: {e}") from None
        text = _apply(cache, event, k)
        if keep(k):
            states.append((k, text, _chains(cache), dict(cache.stored)))
    num_blocks = max(cache.next_slot, 1)
    start = [_snapshot(0, "an empty prefix cache", (), {}, num_blocks, cache.block_size)]
    return (start if keep(0) else []) + [
        _snapshot(k, text, chains, stored, num_blocks, cache.block_size)
        for k, text, chains, stored in states
    ]


def shown_frames(num_events: int, limit: int) -> list[int]:
    """The event numbers (0 = the start) worth showing of a stream: all of them up to
    `limit`, else the first and the last limit // 2 (a summary line stands for the rest)."""
    if num_events + 1 <= limit:
        return list(range(num_events + 1))
    half = max(limit // 2, 1)
    return list(range(half)) + list(range(num_events + 1 - half, num_events + 1))


def summarised(snap: tr.Snapshot, max_blocks: int, max_tables: int) -> tr.Snapshot:
    """`snap` cut to its first `max_blocks` slots and first `max_tables` chains, captioned
    with what was left out -- a picture or a text grid of 50,000 blocks shows nothing a
    reader can take in, and costs minutes and gigabytes to draw. Unchanged if it fits."""
    n, chains = snap.num_blocks, snap.sequences
    if n <= max_blocks and len(chains) <= max_tables:
        return snap
    kept = tuple(
        tr.SeqState(
            c.seq_id,
            tuple(b for b in c.blocks if b < max_blocks),
            min(c.num_tokens, sum(b < max_blocks for b in c.blocks) * snap.block_size),
        )
        for c in chains[:max_tables]
    )
    cached = sum(1 for r in snap.ref_counts if r)
    note = (
        f" [summary: {cached:,} cached blocks in {len(chains):,} chains; showing slots "
        f"0-{min(n, max_blocks) - 1} of {n:,} and {len(kept):,} of {len(chains):,} chains]"
    )
    m = min(n, max_blocks)
    return tr.Snapshot(
        step=snap.step,
        custom_caption=caption(snap) + note,
        events=(),
        num_blocks=m,
        block_size=snap.block_size,
        free_list=tuple(b for b in snap.free_list if b < m),
        ref_counts=snap.ref_counts[:m],
        block_fill=snap.block_fill[:m],
        sequences=kept,
    )


def _apply(cache: _Cache, event: KVEvent, k: int) -> str:
    if isinstance(event, AllBlocksCleared):
        n = len(cache.stored)
        cache.stored.clear()
        cache.free = list(range(cache.next_slot))  # sorted: a heap already
        return f"AllBlocksCleared: reset_prefix_cache() forgot all {n} cached blocks"
    if isinstance(event, BlockRemoved):
        gone: list[BlockHash] = []  # a hash named twice is evicted once
        for h in event.block_hashes:
            if h in cache.stored:
                heapq.heappush(cache.free, cache.stored.pop(h)[0])
                gone.append(h)
        missing = len(event.block_hashes) - len(gone)
        return f"BlockRemoved: {_names(gone)} evicted" + (
            f" ({missing} never stored here)" if missing else ""
        )
    cache.block_size = event.block_size
    parent, bs = event.parent_block_hash, event.block_size
    for i, h in enumerate(event.block_hashes):
        if h not in cache.stored:
            slot = heapq.heappop(cache.free) if cache.free else cache.next_slot
            cache.next_slot = max(cache.next_slot, slot + 1)
            cache.stored[h] = (slot, parent, tuple(event.token_ids[i * bs : (i + 1) * bs]))
        parent = h
    after = (
        "a prompt's start"
        if event.parent_block_hash is None
        else f"block {_short(event.parent_block_hash)}"
    )
    lora = f", LoRA {event.lora_id}" if event.lora_id is not None else ""
    return f"BlockStored: {_names(event.block_hashes)} cached after {after}{lora}"


def _chains(cache: _Cache) -> list[Chain]:
    """(leaf hash, slots root first, tokens) for every cached block no cached block continues."""
    parents = {p for _, p, _ in cache.stored.values()}
    out: list[Chain] = []
    for h in cache.stored:
        if h in parents:
            continue
        slots: list[int] = []
        node: BlockHash | None = h
        tokens, seen = 0, set[BlockHash]()
        while node is not None and node in cache.stored and node not in seen:
            seen.add(node)
            slot, parent, block_tokens = cache.stored[node]
            slots.append(slot)
            tokens += len(block_tokens)
            node = parent
        out.append((h, tuple(reversed(slots)), tokens))
    return out


def _snapshot(
    k: int,
    text: str,
    chains: Iterable[Chain],
    stored: Mapping[BlockHash, Stored],
    num_blocks: int,
    bs: int,
) -> tr.Snapshot:
    refs, fill = [0] * num_blocks, [0] * num_blocks
    for _, slots, _ in chains:
        for s in slots:
            refs[s] += 1
    for slot, _, tokens in stored.values():
        fill[slot] = len(tokens)
    return tr.Snapshot(
        step=k,
        custom_caption=text,
        events=(),
        num_blocks=num_blocks,
        block_size=bs,
        free_list=tuple(s for s in range(num_blocks) if not refs[s]),
        ref_counts=tuple(refs),
        block_fill=tuple(fill),
        sequences=tuple(tr.SeqState(f"h{_short(h)}", slots, n) for h, slots, n in chains),
    )


def _short(h: BlockHash) -> str:
    text = format(h & 0xFFFF, "04x") if isinstance(h, int) else str(h)[-4:]
    return text


def _names(hashes: Iterable[BlockHash], most: int = 8) -> str:
    listed = list(hashes)
    shown = ", ".join(map(_short, listed[:most]))
    more = f" and {len(listed) - most:,} more" if len(listed) > most else ""
    return ("block " if len(listed) == 1 else "blocks ") + shown + more
