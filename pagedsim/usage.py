"""What a manager's memory holds right now: blocks used and free, tokens, empty slots."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .block_pool import BlockPool
from .block_table import NULL_BLOCK, BlockTable


def block_fill(tables: Iterable[BlockTable], num_gpu_blocks: int, block_size: int) -> list[int]:
    """Tokens held by each physical block (0 if free): the fullest owner's view of it."""
    fill = [0] * num_gpu_blocks
    for t in tables:
        for i, b in enumerate(t.blocks):
            if b != NULL_BLOCK:
                fill[b] = max(fill[b], min(block_size, t.num_tokens - i * block_size))
    return fill


@dataclass(frozen=True)
class Usage:
    num_gpu_blocks: int
    blocks_used: int
    blocks_free: int
    tokens_stored: int  # physical token slots holding data (a shared prefix counts once)
    logical_tokens: int  # sum of every sequence's length (a shared prefix counts per owner)
    empty_slots: int  # allocated slots with no token yet: internal fragmentation

    @classmethod
    def of(cls, tables: Iterable[BlockTable], pool: BlockPool) -> Usage:
        """The usage of a pool whose blocks the given tables hold."""
        tables = list(tables)
        stored = sum(block_fill(tables, pool.num_gpu_blocks, pool.block_size))
        return cls(
            pool.num_gpu_blocks,
            pool.num_used,
            pool.num_free_blocks,
            stored,
            sum(t.num_tokens for t in tables),
            pool.num_used * pool.block_size - stored,
        )

    @property
    def utilization(self) -> float:
        """Fraction of allocated slots that hold a token."""
        slots = self.tokens_stored + self.empty_slots
        return self.tokens_stored / slots if slots else 1.0
