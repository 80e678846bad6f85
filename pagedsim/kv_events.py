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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from . import trace as tr

MEDIUM_GPU = "GPU"  # vLLM's medium for blocks in GPU memory


@dataclass
class BlockStored:
    block_hashes: list  # one hash per newly cached block, in prefix order
    parent_block_hash: object  # hash of the block before the first one (None: prompt start)
    token_ids: list  # block_size token ids per block, concatenated
    block_size: int  # tokens per block
    lora_id: int | None = None  # the LoRA adapter the blocks were computed with
    medium: str | None = MEDIUM_GPU  # where the blocks live
    lora_name: str | None = None  # vLLM's newer name for the adapter
    extra_keys: list | None = None  # per block: the extra keys hashed with it (see above)
    group_idx: int | None = None  # KV cache group of the blocks (0: the only one)
    kv_cache_spec_kind: str | None = None  # "full_attention" | "sliding_window"
    kv_cache_spec_sliding_window: int | None = None  # the window in tokens (sliding only)


@dataclass
class BlockRemoved:
    block_hashes: list  # hashes of blocks whose contents were evicted
    medium: str | None = MEDIUM_GPU  # where the blocks lived
    group_idx: int | None = None  # KV cache group the evicted block belonged to


OPTIONAL = ("extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")


@dataclass
class AllBlocksCleared:
    pass


EVENT_TYPES = {cls.__name__: cls for cls in (BlockStored, BlockRemoved, AllBlocksCleared)}
ARRAY_ORDER = {  # field order of vLLM's array-like encoding (older releases)
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name"),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def event_to_json(event) -> dict:
    """One event as vLLM's tagged JSON object (the optional fields left out while None,
    as msgspec's omit_defaults does; vLLM's other fields have no default)."""
    out = {"type": type(event).__name__}
    out.update({k: v for k, v in asdict(event).items() if k not in OPTIONAL or v is not None})
    return out


def event_from_json(obj):
    """An event from a tagged object or a tagged array; ValueError names what is wrong."""
    if isinstance(obj, list) and obj and isinstance(obj[0], str):
        kind, values = obj[0], obj[1:]
        if kind not in ARRAY_ORDER:
            raise ValueError(f"unknown event type {kind!r}")
        obj = {"type": kind, **dict(zip(ARRAY_ORDER[kind], values, strict=False))}
    if not isinstance(obj, dict) or obj.get("type") not in EVENT_TYPES:
        raise ValueError(f"not a KV cache event: {str(obj)[:60]}")
    cls = EVENT_TYPES[obj["type"]]
    names = set(cls.__dataclass_fields__)  # fields of other vLLM versions are read past
    fields_ = {k: v for k, v in obj.items() if k in names}
    if cls is AllBlocksCleared:
        return cls()
    if not isinstance(fields_.get("block_hashes"), list) or not fields_["block_hashes"]:
        raise ValueError(f"{obj['type']}: block_hashes must be a non-empty list")
    for h in fields_["block_hashes"]:
        _check_hash(h)
    if cls is BlockStored:
        _check_stored(fields_)
    return cls(**fields_)


def _check_hash(h) -> None:
    if isinstance(h, bool) or not isinstance(h, (int, str)):
        raise ValueError(f"a block hash must be an int or a hex string, got {h!r}")


def _check_stored(f: dict) -> None:
    bs = f.get("block_size")
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"BlockStored: block_size must be a positive int, got {bs!r}")
    tokens = f.get("token_ids")
    if not isinstance(tokens, list) or any(isinstance(t, bool) or not isinstance(t, int)
                                           for t in tokens):
        raise ValueError("BlockStored: token_ids must be a list of ints")
    if len(tokens) != bs * len(f["block_hashes"]):
        raise ValueError(f"BlockStored: {len(tokens)} token ids for {len(f['block_hashes'])} "
                         f"blocks of {bs}")
    if f.get("parent_block_hash") is not None:
        _check_hash(f["parent_block_hash"])


def read_stream(lines) -> list:
    """Events from JSON lines: each line a KVEventBatch (object or array) or one event."""
    out = []
    for number, line in enumerate(lines, 1):
        line = line.strip().lstrip("\ufeff")
        if not line:
            continue
        try:
            obj = json.loads(line)
            out.extend(_events_of(obj))
        except (json.JSONDecodeError, ValueError, TypeError) as e:
            raise ValueError(f"line {number}: {e}") from None
    return out


def _events_of(obj) -> list:
    if isinstance(obj, dict) and "events" in obj:  # a batch as an object
        batch = obj["events"]
    elif isinstance(obj, list) and len(obj) >= 2 and isinstance(obj[1], list) and \
            not isinstance(obj[0], str):  # a batch as an array: [ts, events, dp_rank]
        batch = obj[1]
    else:
        return [event_from_json(obj)]
    if not isinstance(batch, list):
        raise ValueError("a batch's events must be a list")
    return [event_from_json(e) for e in batch]


# ---- replay: a stream as snapshots ----------------------------------------------------------
@dataclass
class _Cache:
    stored: dict = field(default_factory=dict)  # hash -> (slot, parent hash, tokens)
    free: list = field(default_factory=list)  # slots given back, reused lowest first
    next_slot: int = 0
    block_size: int = 1


def replay(events) -> list:
    """One snapshot per event (plus the empty start), in pagedsim's Snapshot shape."""
    cache, states = _Cache(), []
    for k, event in enumerate(events, 1):
        states.append((k, _apply(cache, event, k), _chains(cache), dict(cache.stored)))
    num_blocks = max(cache.next_slot, 1)
    start = _snapshot(0, "an empty prefix cache", (), {}, num_blocks, cache.block_size)
    return [start] + [_snapshot(k, text, chains, stored, num_blocks, cache.block_size)
                      for k, text, chains, stored in states]


def _apply(cache: _Cache, event, k: int) -> str:
    if isinstance(event, AllBlocksCleared):
        n = len(cache.stored)
        cache.stored.clear()
        cache.free, cache.next_slot = list(range(cache.next_slot)), cache.next_slot
        return f"AllBlocksCleared: reset_prefix_cache() forgot all {n} cached blocks"
    if isinstance(event, BlockRemoved):
        gone = [h for h in event.block_hashes if h in cache.stored]
        for h in gone:
            cache.free.append(cache.stored.pop(h)[0])
        cache.free.sort()
        missing = len(event.block_hashes) - len(gone)
        return (f"BlockRemoved: {_names(gone)} evicted" +
                (f" ({missing} never stored here)" if missing else ""))
    cache.block_size = event.block_size
    parent, bs = event.parent_block_hash, event.block_size
    for i, h in enumerate(event.block_hashes):
        if h not in cache.stored:
            slot = cache.free.pop(0) if cache.free else cache.next_slot
            cache.next_slot = max(cache.next_slot, slot + 1)
            cache.stored[h] = (slot, parent, tuple(event.token_ids[i * bs:(i + 1) * bs]))
        parent = h
    after = "a prompt's start" if event.parent_block_hash is None else \
        f"block {_short(event.parent_block_hash)}"
    lora = f", LoRA {event.lora_id}" if event.lora_id is not None else ""
    return f"BlockStored: {_names(event.block_hashes)} cached after {after}{lora}"


def _chains(cache: _Cache) -> list:
    """(leaf hash, slots root first, tokens) for every cached block no cached block continues."""
    parents = {p for _, p, _ in cache.stored.values()}
    out = []
    for h in cache.stored:
        if h in parents:
            continue
        slots, tokens, node, seen = [], 0, h, set()
        while node in cache.stored and node not in seen:
            seen.add(node)
            slot, parent, block_tokens = cache.stored[node]
            slots.append(slot)
            tokens += len(block_tokens)
            node = parent
        out.append((h, tuple(reversed(slots)), tokens))
    return out


def _snapshot(k, text, chains, stored, num_blocks, bs) -> tr.Snapshot:
    refs, fill = [0] * num_blocks, [0] * num_blocks
    for _, slots, _ in chains:
        for s in slots:
            refs[s] += 1
    for slot, _, tokens in stored.values():
        fill[slot] = len(tokens)
    return tr.Snapshot(
        step=k, custom_caption=text, events=(), num_blocks=num_blocks, block_size=bs,
        free_list=tuple(s for s in range(num_blocks) if not refs[s]), ref_counts=tuple(refs),
        block_fill=tuple(fill),
        sequences=tuple(tr.SeqState(f"h{_short(h)}", slots, n) for h, slots, n in chains))


def _short(h) -> str:
    text = format(h & 0xFFFF, "04x") if isinstance(h, int) else str(h)[-4:]
    return text


def _names(hashes) -> str:
    hashes = list(hashes)
    return ("block " if len(hashes) == 1 else "blocks ") + ", ".join(map(_short, hashes))
