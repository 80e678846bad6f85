"""Exercise 3.5 (your file): how much a block size wastes, and picking one for a workload and a budget.

A sequence of L tokens holds ceil(L / B) blocks of B slots; the empty slots at the
end of its last block are its waste (internal fragmentation, at most B - 1 per
sequence). Small blocks waste little but make long block tables and many
allocations; large blocks are cheap to manage but waste more. `choose_block_size`
makes the chapter's trade-off a rule:

    the largest candidate B such that
        all sequences fit in the budget:  allocated slots * bytes_per_token <= budget
        and the waste stays small:        empty slots / allocated slots   <= max_waste

Reference: Kwon et al., SOSP 2023, section 7.2 (the block-size ablation; vLLM defaults to 16).
"""

from __future__ import annotations


def waste(lengths, block_size: int) -> int:
    """Empty slots in the last blocks of sequences with these token counts."""
    # TODO(student): for each length, blocks (ceil!) times block_size minus the length.
    raise NotImplementedError("waste")


def waste_fraction(lengths, block_size: int) -> float:
    """Empty slots over allocated slots (0.0 when nothing is allocated)."""
    # TODO(student): waste divided by all allocated slots; mind the empty workload.
    raise NotImplementedError("waste_fraction")


def choose_block_size(lengths, bytes_per_token: int, budget_bytes: int,
                      candidates=(8, 16, 32, 64, 128), max_waste: float = 0.1) -> int:
    """The largest candidate that fits the budget with a waste fraction <= max_waste.

    Raises ValueError naming the budget when no candidate qualifies.
    """
    # TODO(student): try candidates from largest to smallest; return the first that passes both tests.
    raise NotImplementedError("choose_block_size")
