"""Exercise 3.1: a variable-size first-fit allocator, to watch external fragmentation appear.

Solved; the spec is the docstring of exercises/ex3_1_first_fit.py.
"""

from __future__ import annotations


class FirstFit:
    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity  # slots in the whole region
        self.holes: list[tuple[int, int]] = [(0, capacity)]  # (start, size), sorted, never touching

    def free_slots(self) -> int:
        return sum(size for _, size in self.holes)

    def allocate(self, size: int) -> int | None:
        """Take `size` slots from the front of the first hole that has room; None if none has.

        A size that is not a positive int raises ValueError and changes nothing.
        """
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        for i, (start, hole) in enumerate(self.holes):
            if hole >= size:
                if hole == size:
                    del self.holes[i]
                else:
                    self.holes[i] = (start + size, hole - size)
                return start
        return None

    def free(self, start: int, size: int) -> None:
        """Return [start, start + size) and merge it with a hole that touches it on either side."""
        i = 0
        while i < len(self.holes) and self.holes[i][0] < start:
            i += 1
        self.holes.insert(i, (start, size))
        # touches the right hole
        if i + 1 < len(self.holes) and start + size == self.holes[i + 1][0]:
            self.holes[i] = (start, size + self.holes[i + 1][1])
            del self.holes[i + 1]
        if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == start:  # touches the left hole
            left = self.holes[i - 1]
            self.holes[i - 1] = (left[0], left[1] + self.holes[i][1])
            del self.holes[i]


def external_fragmentation(holes: list[tuple[int, int]]) -> float:
    """1 - largest hole / all free slots: 0 when the free space is one piece (or empty)."""
    free = sum(size for _, size in holes)
    return 1.0 - max(size for _, size in holes) / free if free else 0.0
