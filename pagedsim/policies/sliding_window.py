"""Sliding-window attention with attention sinks: old blocks go back to the pool (v1).

References: Mistral; StreamingLLM (Xiao et al. 2023) for the sinks, which vLLM lacks.
With a window of W tokens and S sinks, the query at q reads p < S and q - W < p <= q.
Once n tokens are computed the next query never reads block i (tokens [i*B, (i+1)*B))
again when

    (i + 1) * B <= n - W + 1   and   i * B >= S

It is freed and its entry becomes NULL_BLOCK, keeping later logical numbers: vLLM v1's
`SlidingWindowManager.remove_skipped_blocks`. n counts *computed* tokens only (lookahead
never pushes the window). Invariant: after every public step a sequence names exactly
`kept(...)` blocks, at most ceil(S/B) + ceil(W/B) + 1 (+ lookahead); with v1's timing
(`slide_on_allocate`, the engine's) at least that many, the rest freed by its next call.
"""

from __future__ import annotations

from typing import Any

from .. import trace as tr
from ..block_table import NULL_BLOCK, blocks_needed
from ..errors import MAX_BLOCK_SIZE, count_arg
from ..manager import KVCacheManager, SeqId

MAX_WINDOW = (1 << 31) - 1  # the kernels take window and sinks as int32


class SlidingWindowManager(KVCacheManager):
    drops_blocks = True  # tables hold NULL_BLOCK for blocks behind the window

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        sliding_window: int,
        sinks: int = 0,
        **kwargs: Any,
    ) -> None:
        block_size = count_arg("block_size", block_size, 1, MAX_BLOCK_SIZE)
        sliding_window = count_arg("sliding_window", sliding_window, 1, MAX_WINDOW)
        sinks = count_arg("sinks", sinks, 0, MAX_WINDOW)
        self.sliding_window = sliding_window  # W: the most recent tokens every query sees
        self.sinks = sinks  # S: the first tokens every query also sees
        self.first_droppable = -(-sinks // block_size)  # first logical block with no sink token
        self.dropped_blocks = 0  # blocks returned to the pool by sliding
        self._next_drop: dict[SeqId, int] = {}  # seq -> next logical block that may be dropped
        super().__init__(num_gpu_blocks, block_size, **kwargs)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens the next query never reads again, sinks aside: n - W + 1 (v1's name)."""
        n = count_arg("num_computed_tokens", num_computed_tokens)
        return max(0, n - self.sliding_window + 1)

    def kept(self, num_tokens: int, num_computed_tokens: int | None = None) -> int:
        """Logical blocks that stay named for `num_tokens` slots, `num_computed_tokens` computed."""
        num_tokens = count_arg("num_tokens", num_tokens)
        done = (
            num_tokens
            if num_computed_tokens is None
            else count_arg("num_computed_tokens", num_computed_tokens, 0, num_tokens)
        )
        bs = self.block_size
        gone = max(0, self.get_num_skipped_tokens(done) // bs - self.first_droppable)
        return blocks_needed(num_tokens, bs) - gone

    def peak_blocks(self, prompt_len: int, total_len: int, max_chunk: int | None = None) -> int:
        """The most blocks a sequence holds at once while growing to total_len slots: with
        `max_chunk`, v1's SlidingWindowSpec.max_memory_usage_bytes plus the sinks; without
        (v0), the prompt, then the window plus one new block."""
        prompt_len = count_arg("prompt_len", prompt_len)
        total_len = max(prompt_len, count_arg("total_len", total_len))
        if max_chunk is not None:
            max_chunk = count_arg("max_chunk", max_chunk, 1)
            span = min(self.sliding_window - 1 + max_chunk, total_len)
            return min(
                blocks_needed(total_len, self.block_size),
                blocks_needed(span, self.block_size) + 1 + self.first_droppable,
            )
        return max(blocks_needed(prompt_len, self.block_size), self.kept(total_len) + 1)

    def get_num_common_prefix_blocks(self, request_id: SeqId, num_running_requests: int) -> int:
        """Always 0, as in v1: cascade attention is for full attention only."""
        super().get_num_common_prefix_blocks(request_id, num_running_requests)  # the checks
        return 0

    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        super().fork(parent_id, child_id)
        self._next_drop[child_id] = self._next_drop.get(parent_id, self.first_droppable)

    def free_sequence(self, seq_id: SeqId) -> None:
        super().free_sequence(seq_id)
        self._next_drop.pop(seq_id, None)

    # v1's timing (SchedulerV1(slide_after_update=True), the engine's): a sequence's skipped
    # blocks go when its next allocate_slots starts, by the tokens computed before it, even
    # if that call is then refused (v1: remove_skipped_blocks at the top of allocate_slots).
    # Off (the chapter's): every sequence slides as each public call ends.
    slide_on_allocate = False

    def _end_step(self) -> None:
        if not self.slide_on_allocate:
            for seq_id in self._tables:
                self._remove_skipped_blocks(seq_id, self.num_computed_tokens(seq_id))
        super()._end_step()

    def _before_extend(self, seq_id: SeqId) -> None:
        if self.slide_on_allocate:
            self._remove_skipped_blocks(seq_id, self.num_computed_tokens(seq_id))

    def _remove_skipped_blocks(self, seq_id: SeqId, num_computed_tokens: int) -> None:
        """v1's remove_skipped_blocks: free the blocks the next query never reads."""
        table = self._tables[seq_id]
        i = self._next_drop.get(seq_id, self.first_droppable)
        # blocks [.., stop) are skipped
        stop = (num_computed_tokens - self.sliding_window + 1) // self.block_size
        if i >= stop:
            return
        # the last block first, as v1 does: it ends the longer prefix, so it is evicted first;
        # freed in one call, as v1's free_blocks (unhashed ones reach the head as one run)
        dropped = [b for b in reversed(table.blocks[i:stop]) if b != NULL_BLOCK]
        self.pool.release(dropped)
        for logical in range(i, stop):
            table.blocks[logical] = NULL_BLOCK
        self.dropped_blocks += len(dropped)
        for b in dropped:
            self._emit(tr.BlockReleased, seq_id, b, self.pool.ref_count(b))
        self._next_drop[seq_id] = stop

    def check_invariants(self) -> None:
        super().check_invariants()
        for seq_id, table in self._tables.items():
            named = sum(1 for b in table.blocks if b != NULL_BLOCK)
            keep = self.kept(table.num_tokens, self.num_computed_tokens(seq_id))
            if self.slide_on_allocate:  # what it no longer reads goes at its next call
                assert named >= keep, f"seq {seq_id!r} names {named} blocks, below {keep}"
            else:
                assert named == keep, (
                    f"seq {seq_id!r} names {named} blocks; the window keeps {keep}"
                )
