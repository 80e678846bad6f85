"""The kernel's view of a page: how paged attention would read each step's blocks.

For every step, the split-K partition size that `cuda_kernels.attention.choose_partition`
picks for the live sequences' lengths (one CTA per partition per KV head, over the SMs x
resident CTAs `cuda_kernels.attention` assumes), and, for the whole trace, each
sequence's longest length: what a contiguous allocator (before paging) would reserve for
it. The page draws, for a chosen sequence, the query -> its block table -> the physical
blocks in the order the kernel walks them, which partition (CTA) reads which token range,
the bytes a block holds and where the last partial block stops, and beside it the
contiguous layout's waste. Called at page-build time only: the simulator core never
imports cuda_kernels (nor numba).
"""

from __future__ import annotations

from typing import NamedTuple


class KernelShape(NamedTuple):
    """The attention shape the page's numbers are for (a small model's decode)."""

    kv_heads: int = 1
    head_dim: int = 64
    dtype_bytes: int = 2  # float16 K and V


SMALL_DECODE = KernelShape()


def kernel_story(snaps, shape: KernelShape = SMALL_DECODE) -> dict:
    """{"part": [partition size per step, 0 with no live sequence], "slots", "shape",
    "bytes_per_token", "max_tokens": {seq: its longest length in the trace}}."""
    from cuda_kernels.attention import SIMULATED_CTAS_PER_SM, choose_partition, sm_count

    slots = sm_count() * SIMULATED_CTAS_PER_SM
    parts = []
    longest: dict = {}
    for snap in snaps:
        counts = [s.num_tokens for s in snap.sequences]
        for s in snap.sequences:
            longest[str(s.seq_id)] = max(longest.get(str(s.seq_id), 0), s.num_tokens)
        parts.append(choose_partition(counts, shape.kv_heads, slots) if counts else 0)
    return {
        "part": parts,
        "slots": slots,
        "shape": list(shape),
        "bytes_per_token": 2 * shape.kv_heads * shape.head_dim * shape.dtype_bytes,
        "max_tokens": longest,
    }
