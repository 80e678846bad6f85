"""Puzzle 3.k5: copy_blocks for copy-on-write pairs (chapter 3.4; vLLM's copy_blocks).

Solved; the spec is the docstring of exercises/ex3_k5_copy_blocks.py.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def copy_blocks_kernel(cache, pairs):
    """cache[dst, b, d] = cache[src, b, d] for the thread's pair, slot and dim."""
    i = cuda.threadIdx.x
    B, D = cache.shape[1], cache.shape[2]
    p, b, d = i // (B * D), (i // D) % B, i % D
    if p < pairs.shape[0]:
        cache[pairs[p, 1], b, d] = cache[pairs[p, 0], b, d]
