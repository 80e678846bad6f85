"""Puzzle 3.k2 (your file): gather one sequence's K through its block table (chapter 3.3).

Spec (NumPy): for every position p < L = out.shape[0],

    out[p, :] = k_cache[block_table[p // B], p % B, :]      (B = k_cache.shape[1])

Shapes: k_cache [num_blocks, B, D], block_table [M] (int, M * B >= L), out [L, D].

Thread layout: one block; thread i = cuda.threadIdx.x writes ONE number, out[p, d] with
p = i // D and d = i % D. Extra threads (i >= L * D) do nothing.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def gather_k_kernel(k_cache, block_table, out):
    """out[p, d] = the K of position p, dim d, read through the block table."""
    # TODO(student): out[p, d] from p's physical block and offset (skip extra threads).
    raise NotImplementedError("gather_k_kernel")
