"""An intentionally buggy manager: fork shares the parent's blocks but forgets to
count the new owner (no incref). Freeing the parent then returns blocks the child
still reads. See docs/testing-kit.md for what the kit prints:

    pagedsim conform examples/conform/buggy_fork.py:ForkWithoutIncref   # exits 1
"""

from deque_allocator import DequeBlockManager


class ForkWithoutIncref(DequeBlockManager):
    def fork(self, parent_id: int, child_id: int) -> None:
        self.tables[child_id] = list(self.tables[parent_id])  # BUG: no ref_count += 1
        self.lengths[child_id] = self.lengths[parent_id]
