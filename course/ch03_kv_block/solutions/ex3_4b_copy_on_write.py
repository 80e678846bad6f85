"""Exercise 3.4b: fork, and copy-on-write when a sequence appends after a fork.

Solved; the spec is the docstring of exercises/ex3_4b_copy_on_write.py.
"""

from __future__ import annotations


def fork(pool, parent: list[int]) -> list[int]:
    """Return the child's table: the same blocks as `parent`, each with one more owner."""
    child = list(parent)
    for b in child:
        pool.incref(b)
    return child


def slot_for_append(pool, table: list[int], position: int, block_size: int, copies: list) -> int:
    """Prepare the slot for token `position` (the sequence's current length) and return it.

    Changes `table` in place: a new block when the last one is full (or the table is
    empty), a private copy when the last block is partly full and shared; in the
    second case (src, dst) is appended to `copies`.
    """
    offset = position % block_size
    if offset == 0:
        table.append(pool.allocate())
    elif pool.ref_count(table[-1]) > 1:
        src = table[-1]
        dst = pool.allocate()
        copies.append((src, dst))
        pool.free(src)
        table[-1] = dst
    return table[-1] * block_size + offset


def free_table(pool, table: list[int]) -> None:
    """The sequence finished: drop its ownership of every block (last block first)."""
    for b in reversed(table):
        pool.free(b)
    table.clear()
