"""Sliding-window attention with attention sinks: old blocks go back to the pool (3.x, Mistral, StreamingLLM).

With a window of W tokens and S sink tokens, a query at context length `ctx` attends
to positions p with p < S (the sinks, Xiao et al. 2023, "StreamingLLM") or
p >= ctx - W (the window). Logical block i covers positions [i*B, (i+1)*B). It can
never be attended again once it lies entirely before the window and holds no sink:

    (i + 1) * B <= ctx - W   and   i * B >= S

so the manager frees it and writes NULL_BLOCK into the table entry, keeping the
logical numbering of the later blocks intact (vLLM's sliding-window manager marks
such entries with a null block the same way). The kernel side is
`paged_attention(..., window=W, sinks=S)`, which masks exactly the same positions.

Blocks are dropped at the end of every public step, and after every decode step,
so the live blocks of a sequence never exceed ceil(S/B) + ceil(W/B) + 1.
"""

from __future__ import annotations

from ..block_table import NULL_BLOCK
from ..manager import KVCacheManager, _count
from .. import trace as tr


class SlidingWindowManager(KVCacheManager):
    def __init__(self, num_blocks: int, block_size: int, *, window: int, sinks: int = 0, **kwargs):
        window, sinks = _count("window", window), _count("sinks", sinks)
        if window < 1:
            raise ValueError(f"window must be a positive int, got {window}")
        self.window = window  # W: the most recent tokens every query sees
        self.sinks = sinks  # S: the first tokens every query also sees
        self.first_droppable = -(-sinks // block_size)  # first logical block with no sink token
        self.dropped_blocks = 0  # blocks returned to the pool by sliding
        self._next_drop: dict = {}  # seq -> next logical block that may be dropped
        super().__init__(num_blocks, block_size, **kwargs)

    def kept(self, num_tokens: int) -> int:
        """How many logical blocks stay named for a sequence of `num_tokens` tokens."""
        bs = self.block_size
        total = -(-num_tokens // bs)
        gone = max(0, (num_tokens - self.window) // bs - self.first_droppable)
        return total - gone

    def decode_step(self, seq_ids, *args, **kwargs):
        slots = super().decode_step(seq_ids, *args, **kwargs)
        if self.trace is None:  # the traced path already slid in _end_step
            self._slide_all()
        return slots

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
                    self._emit(tr.BlockReleased(self.step + 1, seq_id, b, count))
                i += 1
            self._next_drop[seq_id] = i

    def check_invariants(self) -> None:
        super().check_invariants()
        for seq_id, table in self._tables.items():
            named = sum(1 for b in table.blocks if b != NULL_BLOCK)
            assert named == self.kept(table.num_tokens), (
                f"seq {seq_id!r} names {named} blocks; the window keeps {self.kept(table.num_tokens)}")
