"""The engine's door into the window manager and the hybrid allocator (vLLM v1).

A model whose layers all slide (Mistral v0.1, Phi-3) is served by one KV cache group,
`SlidingWindowPrefixCachingManager` (policies/sliding_window_cache.py); a model that
mixes full and sliding layers (Gemma 2 and 3, per-layer windows) by `HybridManager`
(policies/hybrid.py, after v1's HybridKVCacheCoordinator): group 0 for the full layers,
group 1 for the sliding ones, over one pool. Each layer reads and writes K/V through its
group's block table; a sliding group's table holds -1 (the null block) for blocks its
window left behind, and those blocks are back in the pool.

Both managers take v1's calls (get_computed_blocks, allocate_slots). The engine computes
a step's tokens *after* it asks for their slots, and v1 frees the blocks behind the window
of the tokens computed *before* the step (remove_skipped_blocks(num_computed_tokens)), so
every slot the step has not computed yet is asked for as a lookahead slot:

    admit   allocate_slots(seq, 0, lookahead = prompt - hit, prompt ids, the hit)
    append  allocate_slots(seq, 0, lookahead = 1, [the sampled token])
    written allocate_slots(seq, newly computed, lookahead = the rest)  -> the window slides

so a block leaves the table exactly when no later query can read it (v1's rule), and
blocks are named in the prefix cache only once their K/V is computed. The v0 mechanisms
(fork for n > 1 and beams, swapping) have no v1 counterpart here: such requests are
refused, and preemption recomputes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..block_table import NULL_BLOCK
from ..policies.hybrid import HybridManager
from ..policies.sliding_window_cache import SlidingWindowPrefixCachingManager


class WindowAdapter:
    supports_fork = False  # no v0 fork or swap: one sequence per request, preempt = recompute

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        sliding_window: int,
        hybrid: bool,
        enable_prefix_caching: bool = False,
        trace: bool = False,
    ):
        # HybridManager or SlidingWindowPrefixCachingManager: the same v1 calls, each with
        # its own ComputedBlocks type
        self.manager: Any
        self.groups: tuple[str, ...]
        if hybrid:
            self.manager = HybridManager(
                num_gpu_blocks, block_size, window=sliding_window, trace=trace
            )
            self.groups = ("full", "window")
        else:
            self.manager = SlidingWindowPrefixCachingManager(
                num_gpu_blocks, block_size, window=sliding_window, trace=trace
            )
            self.groups = ("window",)
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ready: dict = {}  # unused: v1 names a block only once its K/V is computed
        self._computed: dict = {}  # seq -> tokens whose K/V is written
        self._named: set = set()  # blocks the tables named at the last events_since_mark

    # ---- queries -------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.manager.num_free_blocks

    def _tables(self, seq) -> tuple:
        if isinstance(self.manager, HybridManager):
            return self.manager.block_tables(seq)
        return (self.manager.block_table(seq),)

    def table(self, seq, group: int = 0) -> list:
        return list(self._tables(seq)[group].blocks)

    def slots(self, seq, start: int, end: int, group: int = 0) -> np.ndarray:
        blocks = np.asarray(self.table(seq, group), np.int64)
        pos = np.arange(start, end)
        b = blocks[pos // self.block_size]
        return np.where(b == NULL_BLOCK, -1, b * self.block_size + pos % self.block_size)

    def num_tokens(self, seq) -> int:
        return self.manager.num_tokens(seq)

    def blocks_in_use(self) -> dict:
        """Blocks each group's tables name right now (the hybrid saving is read here)."""
        return {
            name: sum(sum(1 for b in self.table(s, g) if b != NULL_BLOCK) for s in self._computed)
            for g, name in enumerate(self.groups)
        }

    def check(self) -> None:
        self.manager.check_invariants()

    # ---- the v1 calls ---------------------------------------------------------------------
    def admit(self, seq, tokens: tuple):
        """Slots for all of `tokens`; the number of leading tokens a cache hit serves, or
        None (nothing changed) when blocks are short."""
        hit = self.manager.get_computed_blocks(tokens) if self.enable_prefix_caching else None
        done = hit.num_tokens if hit is not None else 0
        got = self.manager.allocate_slots(seq, 0, len(tokens) - done, tokens, hit)
        if got is None:
            return None
        self._computed[seq] = done
        return done

    def written(self, seq, tokens, start: int, end: int) -> None:
        """The engine wrote K/V of positions [start, end): they count as computed now, so
        the window slides past what no later query reads."""
        n = end - self._computed[seq]
        if n <= 0:
            return
        got = self.manager.allocate_slots(seq, n, self.num_tokens(seq) - end)
        assert got is not None, "computing tokens whose slots exist needs no block"
        self._computed[seq] = end

    def append(self, seq, token: int):
        """One more slot for `seq`, holding `token`: [] (no copy-on-write in v1), or None
        (no change) when the pool is short."""
        got = self.manager.allocate_slots(seq, 0, 1, (int(token),))
        return None if got is None else []

    def free(self, seq) -> None:
        self.manager.free_sequence(seq)
        self._computed.pop(seq, None)

    def fork(self, parent, child) -> None:
        raise ValueError("a model with sliding-window layers serves one sequence per request")

    def swap_out(self, seqs):
        return None  # never swapped: the scheduler recomputes instead

    # ---- what happened, for the step log ---------------------------------------------------
    def events_since_mark(self) -> dict:
        """Blocks that entered and left the tables since the last call (read from the
        tables: the v1 managers keep no per-block event list here), and each group's use."""
        named = {
            b
            for s in self._computed
            for g in range(len(self.groups))
            for b in self.table(s, g)
            if b != NULL_BLOCK
        }
        counts = dict(
            allocated=len(named - self._named), shared=0, copied=0, freed=len(self._named - named)
        )
        self._named = named
        counts.update({f"{g}_blocks": n for g, n in self.blocks_in_use().items()})
        return counts
