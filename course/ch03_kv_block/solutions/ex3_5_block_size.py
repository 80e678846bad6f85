"""Exercise 3.5: how much a block size wastes, and picking one for a workload and a budget.

Solved; the spec is the docstring of exercises/ex3_5_block_size.py.
"""

from __future__ import annotations


def waste(lengths, block_size: int) -> int:
    """Empty slots in the last blocks of sequences with these token counts."""
    return sum(-(-n // block_size) * block_size - n for n in lengths)


def waste_fraction(lengths, block_size: int) -> float:
    """Empty slots over allocated slots (0.0 when nothing is allocated)."""
    allocated = sum(-(-n // block_size) * block_size for n in lengths)
    return waste(lengths, block_size) / allocated if allocated else 0.0


def choose_block_size(lengths, bytes_per_token: int, budget_bytes: int,
                      candidates=(8, 16, 32, 64, 128), max_waste: float = 0.1) -> int:
    """The largest candidate that fits the budget with a waste fraction <= max_waste.

    Raises ValueError naming the budget when no candidate qualifies.
    """
    for bs in sorted(candidates, reverse=True):
        allocated = sum(lengths) + waste(lengths, bs)
        if allocated * bytes_per_token <= budget_bytes and waste_fraction(lengths, bs) <= max_waste:
            return bs
    raise ValueError(f"no block size in {sorted(candidates)} fits budget_bytes={budget_bytes} "
                     f"with waste <= {max_waste}")
