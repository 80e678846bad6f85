"""A deque-based block manager in the style of small inference engines (nano-vllm-like),
written for this guide. It satisfies the kit's contract directly:

    pagedsim conform examples/conform/deque_allocator.py:DequeBlockManager

Free block ids sit in a deque: allocation pops the left end, a block whose count
drops to 0 is appended at the right end (FIFO reuse, like vLLM). Fork shares blocks
by counting; appending into a shared, partly filled last block copies it first and
reports the (src, dst) pair through drain_copies().
"""

from collections import deque


class Block:
    __slots__ = ("block_id", "ref_count")

    def __init__(self, block_id: int):
        self.block_id = block_id  # its index in the pool
        self.ref_count = 0  # tables holding it; 0 means it is in free_block_ids


class DequeBlockManager:
    def __init__(self, num_gpu_blocks: int, block_size: int):
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_gpu_blocks)]
        self.free_block_ids = deque(range(num_gpu_blocks))
        self.tables: dict[int, list[int]] = {}  # seq id -> physical block ids
        self.lengths: dict[int, int] = {}  # seq id -> tokens stored
        self.copies: list[tuple[int, int]] = []  # copy-on-write pairs not yet drained

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def _blocks_for(self, num_tokens: int) -> int:
        return (num_tokens + self.block_size - 1) // self.block_size

    def _take(self) -> int:
        block_id = self.free_block_ids.popleft()
        self.blocks[block_id].ref_count = 1
        return block_id

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free_block_ids.append(block_id)

    def add_sequence(self, seq_id: int, num_tokens: int) -> None:
        if seq_id in self.tables:
            raise KeyError(f"sequence {seq_id} already exists")
        need = self._blocks_for(num_tokens)
        if need > len(self.free_block_ids):  # check first: all or nothing
            raise MemoryError(f"need {need} blocks, {len(self.free_block_ids)} free")
        self.tables[seq_id] = [self._take() for _ in range(need)]
        self.lengths[seq_id] = num_tokens

    def append_tokens(self, seq_id: int, n: int) -> None:
        table, length = self.tables[seq_id], self.lengths[seq_id]
        shared_tail = length % self.block_size != 0 and self.blocks[table[-1]].ref_count > 1
        need = self._blocks_for(length + n) - len(table) + shared_tail
        if need > len(self.free_block_ids):
            raise MemoryError(f"need {need} blocks, {len(self.free_block_ids)} free")
        if shared_tail:  # copy-on-write: write into a private copy of the last block
            src, dst = table[-1], self._take()
            self._release(src)
            table[-1] = dst
            self.copies.append((src, dst))
        while len(table) < self._blocks_for(length + n):
            table.append(self._take())
        self.lengths[seq_id] = length + n

    def fork(self, parent_id: int, child_id: int) -> None:
        if child_id in self.tables:
            raise KeyError(f"sequence {child_id} already exists")
        table = self.tables[parent_id]
        for block_id in table:
            self.blocks[block_id].ref_count += 1
        self.tables[child_id] = list(table)
        self.lengths[child_id] = self.lengths[parent_id]

    def free_sequence(self, seq_id: int) -> None:
        table = self.tables.pop(seq_id)
        del self.lengths[seq_id]
        for block_id in reversed(table):
            self._release(block_id)

    def block_table(self, seq_id: int) -> list[int]:
        return list(self.tables[seq_id])

    def drain_copies(self) -> list[tuple[int, int]]:
        copies, self.copies = self.copies, []
        return copies
