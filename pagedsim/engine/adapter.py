"""The engine's only door into pagedsim's block manager (and its prefix cache).

Everything the engine asks of the manager goes through `BlockAdapter`, using public
calls only, so the manager can change behind it (see "Re-pointing" below):

    admit(seq, tokens)        add_sequence (with the prefix cache: match + add_sequence)
    append(seq, token)        append_tokens(seq, 1, token_ids) + drain_copies (CoW pairs)
    fork / free               fork, free_sequence (v0 sharing for beams and n > 1)
    swap_out / swap_in        block_table + free_sequence / restore_sequences (v0 swapping)
    slots / table             slot_mapping, block_table

Prefix caching here follows vLLM v1's rule that only *computed* blocks may be hit: the
manager registers a prompt's full blocks at admission, before their K/V exist, so the
adapter keeps `ready`: block -> the token prefix whose K/V it holds in full (set when
the engine finishes writing the block, dropped when it is reused). A hit counts only
while ready; a hit still being computed by a running sequence makes the admission wait
a step. Every appended token's id reaches the manager (`append_tokens(...,
token_ids=...)`), so blocks filled by generated text are named and hit too, as in v1:
a follow-up prompt that repeats a conversation hits its answers' blocks. The manager
applies v1's cap (a hit covers at most num_tokens - 1 tokens, in
whole blocks), so a fully cached, block-aligned prompt recomputes its last block. The
manager's `reclaimer` hook stays unused: the engine preempts by itself before asking
for blocks.
"""

from __future__ import annotations

import numpy as np

from ..block_table import blocks_needed
from ..errors import OutOfBlocks
from ..manager import KVCacheManager
from ..policies.preemption import HostPool
from ..policies.prefix_cache import PrefixCachingManager
from ..trace import BlockReleased


class BlockAdapter:
    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        enable_prefix_caching: bool = False,
        num_cpu_blocks: int = 0,
        trace: bool = False,
        manager: KVCacheManager | None = None,
    ):
        """`manager`: a block manager to serve from instead of a new KVCacheManager (the
        course's, driving a student's pool: course/ch03_kv_block/capstone.py); it must be
        empty, of num_gpu_blocks x block_size, and a PrefixCachingManager iff
        enable_prefix_caching."""
        if manager is None:
            cls = PrefixCachingManager if enable_prefix_caching else KVCacheManager
            manager = cls(num_gpu_blocks, block_size, trace=trace)
        elif not isinstance(manager, KVCacheManager):
            raise TypeError(f"manager must be a KVCacheManager, got {type(manager).__name__}")
        elif (manager.num_blocks, manager.block_size) != (num_gpu_blocks, block_size):
            raise ValueError(
                f"manager has {manager.num_blocks} blocks x {manager.block_size} tokens, "
                f"not {num_gpu_blocks} x {block_size}"
            )
        elif isinstance(manager, PrefixCachingManager) != enable_prefix_caching:
            raise ValueError(
                f"enable_prefix_caching is {enable_prefix_caching} but the manager is a "
                f"{type(manager).__name__}"
            )
        elif manager.seq_ids():
            raise ValueError("manager must start with no sequences")
        self.manager = manager
        self.block_size = block_size
        self.host = HostPool(num_cpu_blocks)  # the swap policy's host side (policies/preemption.py)
        self.swapped: dict = {}  # seq -> (host labels per logical block, num_tokens)
        self.ready: dict = {}  # block -> tuple of the tokens whose K/V it holds in full
        self._mark = 0  # trace events already counted by `events_since_mark`

    # ---- queries -------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.manager.num_free_blocks

    def table(self, seq) -> list:
        return list(self.manager.block_table(seq).blocks)

    def slots(self, seq, start: int, end: int, group: int = 0) -> np.ndarray:
        assert group == 0, "one KV cache group here"
        return self.manager.slot_mapping(seq)[start:end]

    def num_tokens(self, seq) -> int:
        return self.manager.num_tokens(seq)

    def check(self) -> None:
        self.manager.check_invariants()

    # ---- admission with prefix-cache hits --------------------------------------------
    def admit(self, seq, tokens: tuple):
        """Allocate blocks for all of `tokens`. Returns the number of leading tokens whose
        K/V is already in the cache (full ready blocks), or None (nothing changed) when
        blocks are short or a hit is still being computed by another sequence."""
        bs, pool = self.block_size, self.manager.pool
        # the manager, when it caches prefixes (enable_prefix_caching=True), else None
        cache = self.manager if isinstance(self.manager, PrefixCachingManager) else None
        hits = cache.match(tokens) if cache is not None else []
        ready = 0
        for i, b in enumerate(hits):
            if self.ready.get(b) != tuple(tokens[: (i + 1) * bs]):
                if pool.ref_count(b) > 0:
                    return None  # another sequence is computing it: wait for it
                break
            ready += 1
        need = blocks_needed(len(tokens), bs) - sum(1 for b in hits if pool.ref_count(b) > 0)
        if need > self.num_free:
            return None
        try:
            if cache is not None:
                cache.add_sequence(seq, len(tokens), tokens)
            else:
                self.manager.add_sequence(seq, len(tokens))
        except OutOfBlocks:
            return None
        table = self.table(seq)
        shared = next((i for i, b in enumerate(hits) if table[i] != b), len(hits))
        ready = min(ready, shared)  # a manager that caps its hits shares fewer blocks
        for b in table[ready:]:
            self.ready.pop(b, None)  # about to be (re)computed
        return ready * bs

    def written(self, seq, tokens, start: int, end: int) -> None:
        """The engine wrote K/V of positions [start, end): full blocks become ready."""
        bs, table = self.block_size, self.table(seq)
        for i in range(start // bs, -(-end // bs)):
            if (i + 1) * bs <= end:
                self.ready[table[i]] = tuple(tokens[: (i + 1) * bs])
            else:
                self.ready.pop(table[i], None)

    # ---- growth, sharing, release ------------------------------------------------------
    def append(self, seq, token: int):
        """One more slot for `seq`, holding `token`. Returns copy-on-write (src, dst) pairs,
        or None (no change) when the pool is short. The id reaches the prefix cache, which
        names a block of generated tokens as soon as it fills (v1 caches those too)."""
        before = self.table(seq)
        try:
            self.manager.append_tokens(seq, 1, token_ids=(int(token),))
        except OutOfBlocks:
            return None
        for b in set(self.table(seq)) - set(before):
            self.ready.pop(b, None)
        return self.manager.drain_copies()

    def fork(self, parent, child) -> None:
        self.manager.fork(parent, child)

    def free(self, seq) -> None:
        self.manager.free_sequence(seq)

    # ---- swapping (v0) -------------------------------------------------------------------
    def swap_out(self, seqs):
        """Free the sequences' blocks into the host pool. Returns (gpu, host) pairs for the
        copy, or None (no change) when the host pool is too small."""
        moved = self.host.swap_out(self.manager, seqs)
        if moved is None:
            return None
        pairs, saved = moved
        self.swapped.update(saved)
        return pairs

    def blocks_to_swap_in(self, seqs) -> int:
        return self.host.blocks_to_swap_in({s: self.swapped[s] for s in seqs})

    def swap_in(self, seqs, computed=None):
        """Bring swapped sequences back into fresh blocks, keeping their sharing. Returns
        (host, gpu) pairs, or None (no change) when blocks are short. `computed` maps a
        seq to (its tokens, how many hold K/V): the copy brings that K/V back, so those
        full blocks are ready to be hit again (the manager has named them again)."""
        pairs = self.host.swap_in(self.manager, {s: self.swapped[s] for s in seqs})
        if pairs is None:
            return None
        for s in seqs:
            del self.swapped[s]
        for _, b in pairs:
            self.ready.pop(b, None)
        for s, (tokens, end) in (computed or {}).items():
            self.written(s, tokens, 0, end)
        return pairs

    # ---- what happened, for the step log ---------------------------------------------------
    def events_since_mark(self) -> dict:
        """Counts of block events since the last call (needs trace=True)."""
        counts = dict.fromkeys(("allocated", "shared", "copied", "freed"), 0)
        trace = self.manager.trace
        if trace is None:
            return counts
        for e in trace.events[self._mark :]:
            if e.kind == "block_allocated":
                counts["allocated"] += 1
            elif e.kind == "block_shared":
                counts["shared"] += 1
            elif e.kind == "copy_on_write":
                counts["copied"] += 1
            elif isinstance(e, BlockReleased) and e.ref_count == 0:
                counts["freed"] += 1
        self._mark = len(trace.events)
        return counts
