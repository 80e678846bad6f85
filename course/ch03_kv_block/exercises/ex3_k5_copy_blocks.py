"""Puzzle 3.k5 (your file): copy_blocks for copy-on-write pairs (chapter 3.4; vLLM's copy_blocks).

Spec (NumPy): for every pair (src, dst) in pairs, in any order (no dst is another pair's
src, and no two pairs share a dst),

    cache[dst, :, :] = cache[src, :, :]

Shapes: cache [num_blocks, B, D], pairs [P, 2] (int). Nothing else changes.

Thread layout: one block; thread i = cuda.threadIdx.x copies ONE number: pair
p = i // (B * D), then slot b = (i // D) % B and dim d = i % D. Extra threads do nothing.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def copy_blocks_kernel(cache, pairs):
    """cache[dst, b, d] = cache[src, b, d] for the thread's pair, slot and dim."""
    # TODO(student): copy cache[src, b, d] to cache[dst, b, d] (skip extra threads).
    raise NotImplementedError("copy_blocks_kernel")
