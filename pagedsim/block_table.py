"""One sequence's block table: logical block i -> physical block id (3.3).

Token p lives in logical block p // block_size at offset p % block_size. A token's *slot*,
what vLLM's `slot_mapping` holds and `write_kv` consumes, is

    slot = physical_block * block_size + offset

A table always has ceil(num_tokens / block_size) entries. NULL_BLOCK (-1) marks a logical
block a sliding window dropped: vLLM v1's null block, though ours is not a pool block.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import numpy as np

from .errors import BlockError, count_arg

NULL_BLOCK = -1  # a dropped logical block (sliding window); never a valid physical id
_OFFSETS: dict[int, np.ndarray] = {}  # block_size -> arange(block_size), shared read-only


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """ceil(num_tokens / block_size): a partly filled last block still takes a whole block."""
    if (
        type(block_size) is not int
        or block_size < 1
        or type(num_tokens) is not int
        or num_tokens < 0
    ):
        num_tokens = count_arg("num_tokens", num_tokens)
        block_size = count_arg("block_size", block_size, 1)
    return -(-num_tokens // block_size)


class BlockTable:
    __slots__ = ("block_size", "blocks", "num_tokens")

    def __init__(self, block_size: int, blocks: Iterable[int] = (), num_tokens: int = 0):
        if (
            type(block_size) is not int
            or block_size < 1
            or type(num_tokens) is not int
            or num_tokens < 0
        ):
            block_size = count_arg("block_size", block_size, 1)
            num_tokens = count_arg("num_tokens", num_tokens)
        self.block_size = block_size  # tokens per block
        self.blocks = list(blocks)  # logical index -> physical block id
        self.num_tokens = num_tokens  # tokens stored; the last block may be partly full

    # ---- translation -------------------------------------------------------
    def locate(self, position: int) -> tuple[int, int]:
        """Token position -> (physical block, offset inside it)."""
        if not 0 <= position < self.num_tokens:
            raise IndexError(f"token {position} is outside [0, {self.num_tokens})")
        logical, offset = divmod(position, self.block_size)
        block = self.blocks[logical]
        if block == NULL_BLOCK:
            raise IndexError(f"token {position} lives in dropped logical block {logical}")
        return block, offset

    def slot(self, position: int) -> int:
        block, offset = self.locate(position)
        return block * self.block_size + offset

    def slot_mapping(self) -> np.ndarray:
        """The slot of every token, as an int64 array of length num_tokens."""
        bs = self.block_size
        blocks = np.array(self.blocks, dtype=np.int64)
        offsets = _OFFSETS.get(bs)
        if offsets is None:
            offsets = _OFFSETS[bs] = np.arange(bs, dtype=np.int64)
        slots: np.ndarray = (blocks[:, None] * bs + offsets).reshape(-1)[: self.num_tokens]
        if NULL_BLOCK in self.blocks:  # dropped blocks have no slots
            slots[np.repeat(blocks == NULL_BLOCK, bs)[: self.num_tokens]] = -1
        return slots

    # ---- list-like view ----------------------------------------------------
    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> int:
        return self.blocks[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.blocks)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockTable):
            return (self.block_size, self.blocks, self.num_tokens) == (
                other.block_size,
                other.blocks,
                other.num_tokens,
            )
        if isinstance(other, (list, tuple)):
            return self.blocks == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'BlockTable' (it changes as the sequence grows)")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.blocks, dtype=dtype or np.int32)

    def copy(self) -> BlockTable:
        return BlockTable(self.block_size, self.blocks, self.num_tokens)

    def __repr__(self) -> str:
        return (
            f"BlockTable({self.blocks}, num_tokens={self.num_tokens}, block_size={self.block_size})"
        )

    def check(self) -> None:
        """The one structural rule: the table's length matches its token count."""
        need = blocks_needed(self.num_tokens, self.block_size)
        assert len(self.blocks) == need, (
            f"table has {len(self.blocks)} blocks for {self.num_tokens} tokens; "
            f"expected ceil({self.num_tokens}/{self.block_size}) = {need}"
        )


def restore_plan(
    tables: Any, block_size: int, drops_blocks: bool
) -> dict[Hashable, tuple[tuple[int, ...], int]]:
    """Validate `restore_sequences`' {seq_id: (labels, num_tokens)}: a label per logical
    block, none twice, NULL_BLOCK only where a window dropped one (never the last)."""
    if not isinstance(tables, dict):
        raise TypeError(f"tables must be a dict, got {type(tables).__name__}")
    plan = {}
    for seq_id, entry in tables.items():
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(f"seq {seq_id!r}: expected (labels, num_tokens), got {entry!r}")
        labels, num_tokens = entry
        num_tokens = count_arg("num_tokens", num_tokens)
        if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
            raise TypeError(f"seq {seq_id!r}: labels must be a sequence of ints")
        labels = tuple(count_arg("label", b, NULL_BLOCK) for b in labels)
        if len(labels) != blocks_needed(num_tokens, block_size):
            raise ValueError(f"seq {seq_id!r}: {len(labels)} labels for {num_tokens} tokens")
        named = [b for b in labels if b != NULL_BLOCK]
        if len(set(named)) != len(named):
            raise BlockError(f"seq {seq_id!r} names a block twice: {list(labels)}")
        if len(named) != len(labels) and (not drops_blocks or labels[-1] == NULL_BLOCK):
            raise BlockError(
                f"seq {seq_id!r}: NULL_BLOCK is allowed only for blocks a "
                f"sliding window dropped, never for the last one"
            )
        plan[seq_id] = (labels, num_tokens)
    return plan
