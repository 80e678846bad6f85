"""An allocator with vLLM-style names (v0's BlockSpaceManager / BlockAllocator), and the
thin adapter that maps the kit's contract onto those names. Both written for this guide:

    pagedsim conform examples/conform/vllm_names.py:make_adapter

vLLM v0 speaks of sequences, not ids: `allocate(seq)`, `append_slots(seq)` (returns
copy-on-write pairs), `fork(parent_seq, child_seq)`, `free(seq)`,
`get_block_table(seq)`, `get_num_free_gpu_blocks()`. The adapter keeps one small
`Sequence` object per id and forwards each call; that is all an adapter needs.
"""

from dataclasses import dataclass


@dataclass
class Sequence:
    seq_id: int
    num_tokens: int


class BlockAllocator:
    """Free block ids as a stack (LIFO), with a reference count per block."""

    def __init__(self, num_gpu_blocks: int):
        self.free_blocks = list(range(num_gpu_blocks - 1, -1, -1))
        self.ref_counts = [0] * num_gpu_blocks

    def get_num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def allocate(self) -> int:
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block

    def free(self, block: int) -> None:
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_blocks.append(block)


class BlockSpaceManager:
    def __init__(self, block_size: int, num_gpu_blocks: int):
        self.block_size = block_size
        self.gpu_allocator = BlockAllocator(num_gpu_blocks)
        self.block_tables: dict[int, list[int]] = {}  # seq_id -> block ids

    def _num_blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, seq: Sequence) -> bool:
        return self._num_blocks(seq.num_tokens) <= self.gpu_allocator.get_num_free_blocks()

    def allocate(self, seq: Sequence) -> None:
        self.block_tables[seq.seq_id] = [
            self.gpu_allocator.allocate() for _ in range(self._num_blocks(seq.num_tokens))
        ]

    def can_append_slots(self, seq: Sequence, num_new: int) -> bool:
        table = self.block_tables[seq.seq_id]
        cow = seq.num_tokens % self.block_size != 0 and self.gpu_allocator.ref_counts[table[-1]] > 1
        need = self._num_blocks(seq.num_tokens + num_new) - len(table) + cow
        return need <= self.gpu_allocator.get_num_free_blocks()

    def append_slots(self, seq: Sequence, num_new: int) -> list[tuple[int, int]]:
        """Grow the table for num_new more tokens; return copy-on-write (src, dst) pairs."""
        table, copies = self.block_tables[seq.seq_id], []
        if seq.num_tokens % self.block_size and self.gpu_allocator.ref_counts[table[-1]] > 1:
            src, dst = table[-1], self.gpu_allocator.allocate()
            self.gpu_allocator.free(src)
            table[-1] = dst
            copies.append((src, dst))
        seq.num_tokens += num_new
        while len(table) < self._num_blocks(seq.num_tokens):
            table.append(self.gpu_allocator.allocate())
        return copies

    def fork(self, parent_seq: Sequence, child_seq: Sequence) -> None:
        table = self.block_tables[parent_seq.seq_id]
        for block in table:
            self.gpu_allocator.ref_counts[block] += 1
        self.block_tables[child_seq.seq_id] = list(table)

    def free(self, seq: Sequence) -> None:
        for block in reversed(self.block_tables.pop(seq.seq_id)):
            self.gpu_allocator.free(block)

    def get_block_table(self, seq: Sequence) -> list[int]:
        return list(self.block_tables[seq.seq_id])

    def get_num_free_gpu_blocks(self) -> int:
        return self.gpu_allocator.get_num_free_blocks()


class VllmStyleAdapter:
    """The kit's names -> vLLM's names. Running out of blocks becomes MemoryError."""

    def __init__(self, num_gpu_blocks: int, block_size: int):
        self.manager = BlockSpaceManager(block_size, num_gpu_blocks)
        self.seqs: dict[int, Sequence] = {}

    def add_sequence(self, seq_id, num_tokens):
        if seq_id in self.seqs:
            raise KeyError(f"sequence {seq_id} already exists")
        seq = Sequence(seq_id, num_tokens)
        if not self.manager.can_allocate(seq):
            raise MemoryError(f"cannot allocate {num_tokens} tokens")
        self.manager.allocate(seq)
        self.seqs[seq_id] = seq

    def append_tokens(self, seq_id, n):
        seq = self.seqs[seq_id]
        if not self.manager.can_append_slots(seq, n):
            raise MemoryError(f"cannot append {n} tokens to sequence {seq_id}")
        self.pending = getattr(self, "pending", []) + self.manager.append_slots(seq, n)

    def fork(self, parent_id, child_id):
        if child_id in self.seqs:
            raise KeyError(f"sequence {child_id} already exists")
        child = Sequence(child_id, self.seqs[parent_id].num_tokens)
        self.manager.fork(self.seqs[parent_id], child)
        self.seqs[child_id] = child

    def free_sequence(self, seq_id):
        self.manager.free(self.seqs.pop(seq_id))

    def block_table(self, seq_id):
        return self.manager.get_block_table(self.seqs[seq_id])

    def num_free_blocks(self):
        return self.manager.get_num_free_gpu_blocks()

    def drain_copies(self):
        pending, self.pending = getattr(self, "pending", []), []
        return pending


def make_adapter(num_gpu_blocks: int, block_size: int) -> VllmStyleAdapter:
    return VllmStyleAdapter(num_gpu_blocks, block_size)
