"""The two ways a caller can misuse the block manager.

`OutOfBlocks` is not a bug: the pool is simply full, and a scheduler is expected to
catch it (preempt, swap, or wait). `BlockError` is a bug in the caller: freeing a
block twice, naming a block that does not exist, or passing something that is not
a block id. Both are raised *before* any state changes, so after either one the
pool and every block table are exactly as they were.
"""

import operator


class OutOfBlocks(RuntimeError):
    """The free list cannot supply the blocks an operation needs."""

    def __init__(self, needed: int, available: int, what: str = "the operation"):
        self.needed = needed  # blocks the operation needed
        self.available = available  # blocks that were free at the time
        super().__init__(
            f"out of blocks: {what} needs {needed} free block(s) but only "
            f"{available} are free"
        )


class BlockError(ValueError):
    """A block id that is invalid for the requested operation."""


class SequenceError(ValueError):
    """A sequence id that is unknown (or already present) for the operation."""


def count_arg(name: str, value) -> int:
    """`value` as a non-negative int (NumPy integers accepted), or a ValueError naming `name`."""
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value}")
    return value
