"""Puzzle 3.k2: gather one sequence's K through its block table (chapter 3.3).

Solved; the spec is the docstring of exercises/ex3_k2_gather_k.py.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def gather_k_kernel(k_cache, block_table, out):
    """out[p, d] = the K of position p, dim d, read through the block table."""
    i = cuda.threadIdx.x
    B, D = k_cache.shape[1], k_cache.shape[2]
    p, d = i // D, i % D
    if p < out.shape[0]:
        block = block_table[p // B]
        out[p, d] = k_cache[block, p % B, d]
