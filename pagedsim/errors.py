"""The ways a caller can misuse the simulator, and the one integer-argument validator.

`OutOfBlocks` is not a bug: the pool is full, and a scheduler catches it. `BlockError` and
`SequenceError` are the caller's bugs (a double free, an unknown block or sequence). A
wrong *type* is a `TypeError`, a value out of range a `ValueError`, each raised *before*
any state changes. The MAX_* limits keep a typo from exhausting memory or overflowing int64.
"""

import operator
from typing import Any, SupportsIndex, cast

MAX_NUM_GPU_BLOCKS = 1 << 22
MAX_BLOCK_SIZE = 1 << 16
MAX_TOKEN_ID = (1 << 63) - 1


class OutOfBlocks(RuntimeError):
    """The free list cannot supply the blocks an operation needs."""

    def __init__(self, needed: int, available: int, what: str = "the operation"):
        self.needed = needed  # blocks the operation needed
        self.available = available  # blocks that were free at the time
        super().__init__(
            f"out of blocks: {what} needs {needed} free block(s) but only {available} are free"
        )


class BlockError(ValueError):
    """A block id that is invalid for the requested operation."""


class SequenceError(ValueError):
    """A sequence id that is unknown (or already present) for the operation."""


def count_arg(name: str, value: object, low: int | None = 0, high: int | None = None) -> int:
    """`value` as a Python int in [low, high] (NumPy integers accepted; None: unbounded);
    TypeError for a non-integer (a bool too), ValueError naming `name` out of range."""
    if type(value) is int:
        n = value
    else:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        n = operator.index(cast(SupportsIndex, value))
    if (low is not None and n < low) or (high is not None and n > high):
        bound = (
            f">= {low}" if high is None else f"<= {high}" if low is None else f"in [{low}, {high}]"
        )
        raise ValueError(f"{name} must be an int {bound}, got {n}")
    return n


def choice_arg(name: str, value: object, choices: tuple[str, ...]) -> str:
    """`value` if it is one of the str `choices`; TypeError for a non-str, else ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def bool_arg(name: str, value: object) -> bool:
    """`value` if it is a bool; a TypeError naming `name` for anything else (1, "yes",
    None, a NumPy bool): a flag is never guessed from a truthy value."""
    if type(value) is not bool:
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def token_ids_arg(name: str, value: Any, n: int | None = None) -> tuple[int, ...]:
    """`value` as a tuple of ints in [0, MAX_TOKEN_ID] (exactly `n` if given); a sequence."""
    if (
        isinstance(value, (str, bytes, set, frozenset, dict))
        or not hasattr(value, "__len__")
        or not hasattr(value, "__getitem__")
    ):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    if getattr(value, "ndim", 1) != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {value.shape}")
    if n is not None and len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries for {n} token(s)")
    if type(value) is tuple and all(type(t) is int and 0 <= t <= MAX_TOKEN_ID for t in value):
        return value
    return tuple(count_arg(f"{name} entry", t, 0, MAX_TOKEN_ID) for t in value)
