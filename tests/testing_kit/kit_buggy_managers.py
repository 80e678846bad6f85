"""Five classic block-manager bugs, each one method away from the correct
DequeBlockManager of examples/conform. The kit must catch every one."""

from buggy_fork import ForkWithoutIncref  # bug 1: fork shares blocks without counting them
from deque_allocator import DequeBlockManager


class SkipsCopyOnWrite(DequeBlockManager):
    """Bug 2: appending into a shared, partly filled last block writes into it in place."""

    def append_tokens(self, seq_id, n):
        table, length = self.tables[seq_id], self.lengths[seq_id]
        need = self._blocks_for(length + n) - len(table)
        if need > len(self.free_block_ids):
            raise MemoryError("out of blocks")
        table.extend(self._take() for _ in range(need))
        self.lengths[seq_id] = length + n


class LeaksOnFree(DequeBlockManager):
    """Bug 3: freeing forgets the last block of the table."""

    def free_sequence(self, seq_id):
        table = self.tables.pop(seq_id)
        del self.lengths[seq_id]
        for block_id in table[:-1]:
            self._release(block_id)


class HalfwayAllocation(DequeBlockManager):
    """Bug 4: allocates block by block and raises when the pool runs dry, keeping what it took."""

    def add_sequence(self, seq_id, num_tokens):
        table = self.tables[seq_id] = []
        self.lengths[seq_id] = num_tokens
        for _ in range(self._blocks_for(num_tokens)):
            if not self.free_block_ids:
                raise MemoryError("out of blocks")
            table.append(self._take())


class OffByOneBlocks(DequeBlockManager):
    """Bug 5: blocks needed = tokens // block_size + 1, one too many at exact multiples."""

    def _blocks_for(self, num_tokens):
        return num_tokens // self.block_size + 1


BUGS = {
    ForkWithoutIncref: "fork without incref",
    SkipsCopyOnWrite: "copy-on-write skipped",
    LeaksOnFree: "leak on free",
    HalfwayAllocation: "all-or-nothing broken halfway",
    OffByOneBlocks: "off-by-one in blocks needed",
}
