"""Sliding-window attention with attention sinks: old blocks go back to the pool (3.x, Mistral, StreamingLLM).

With a window of W tokens and S sink tokens, a query at context length `ctx` attends
to positions p with p < S (the sinks, Xiao et al. 2023, "StreamingLLM") or
p >= ctx - W (the window). Logical block i covers positions [i*B, (i+1)*B). It can
never be attended again once it lies entirely before the window and holds no sink:

    (i + 1) * B <= ctx - W   and   i * B >= S

so the manager frees it and writes NULL_BLOCK into the table entry, keeping the
logical numbering of the later blocks intact (vLLM v1's SlidingWindowManager marks
such entries with its null block the same way, in remove_skipped_blocks; attention
sinks are StreamingLLM's, not a vLLM mechanism). With prefix caching on, the v1
combination is in sliding_window_cache.py. The kernel side is
`paged_attention(..., window=W, sinks=S)`, which masks exactly the same positions.

Blocks are dropped at the end of every public step (a decode step included), so the
live blocks of a sequence never exceed ceil(S/B) + ceil(W/B) + 1.
"""

from __future__ import annotations

from ..block_table import NULL_BLOCK, blocks_needed
from ..errors import MAX_BLOCK_SIZE, count_arg
from ..manager import KVCacheManager
from .. import trace as tr

MAX_WINDOW = (1 << 31) - 1  # the kernels take window and sinks as int32


class SlidingWindowManager(KVCacheManager):
    drops_blocks = True  # tables hold NULL_BLOCK for blocks behind the window

    def __init__(self, num_blocks: int, block_size: int, *, window: int, sinks: int = 0, **kwargs):
        block_size = count_arg("block_size", block_size, 1, MAX_BLOCK_SIZE)
        window = count_arg("window", window, 1, MAX_WINDOW)
        sinks = count_arg("sinks", sinks, 0, MAX_WINDOW)
        self.window = window  # W: the most recent tokens every query sees
        self.sinks = sinks  # S: the first tokens every query also sees
        self.first_droppable = -(-sinks // block_size)  # first logical block with no sink token
        self.dropped_blocks = 0  # blocks returned to the pool by sliding
        self._next_drop: dict = {}  # seq -> next logical block that may be dropped
        super().__init__(num_blocks, block_size, **kwargs)

    def kept(self, num_tokens: int) -> int:
        """How many logical blocks stay named for a sequence of `num_tokens` tokens."""
        num_tokens = count_arg("num_tokens", num_tokens)
        bs = self.block_size
        gone = max(0, (num_tokens - self.window) // bs - self.first_droppable)
        return blocks_needed(num_tokens, bs) - gone

    def peak_blocks(self, prompt_len: int, total_len: int) -> int:
        """A whole prompt is held until the step ends; later, the window plus one new block."""
        prompt_len = count_arg("prompt_len", prompt_len)
        return max(blocks_needed(prompt_len, self.block_size),
                   self.kept(max(prompt_len, count_arg("total_len", total_len))) + 1)

    def fork(self, parent_id, child_id) -> None:
        super().fork(parent_id, child_id)
        self._next_drop[child_id] = self._next_drop.get(parent_id, self.first_droppable)

    def free_sequence(self, seq_id) -> None:
        super().free_sequence(seq_id)
        self._next_drop.pop(seq_id, None)

    def _end_step(self) -> None:
        self._slide_all()
        super()._end_step()

    def _slide_all(self) -> None:
        bs, limit = self.block_size, self.window
        for seq_id, table in self._tables.items():
            i = self._next_drop.get(seq_id, self.first_droppable)
            stop = (table.num_tokens - limit) // bs  # blocks [.., stop) lie before the window
            while i < stop:
                b = table.blocks[i]
                if b != NULL_BLOCK:
                    count = self.pool.free(b)
                    table.blocks[i] = NULL_BLOCK
                    self.dropped_blocks += 1
                    self._emit(tr.BlockReleased, seq_id, b, count)
                i += 1
            self._next_drop[seq_id] = i

    def check_invariants(self) -> None:
        super().check_invariants()
        for seq_id, table in self._tables.items():
            named = sum(1 for b in table.blocks if b != NULL_BLOCK)
            assert named == self.kept(table.num_tokens), (
                f"seq {seq_id!r} names {named} blocks; the window keeps {self.kept(table.num_tokens)}")
