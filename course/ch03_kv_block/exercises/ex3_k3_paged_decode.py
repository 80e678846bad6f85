"""Puzzle 3.k3 (your file): a naive paged decode, one thread per head (chapter 3.3; vLLM's
paged_attention_v1 without its tricks).

Spec (NumPy), for head h, with L = context_len[0], B = k_cache.shape[1], scale = 1/sqrt(D):

    k_p = k_cache[block_table[p // B], p % B, h, :]   (likewise v_p)   for p < L
    s_p = scale * (q[h] . k_p);   w_p = exp(s_p - max_p s_p) / sum_p exp(s_p - max_p s_p)
    out[h, :] = sum_p w_p * v_p

Shapes: q [H, D], k_cache and v_cache [num_blocks, B, H, D], block_table [M] (int),
context_len [1] (int), out [H, D]. Logits can be large: subtract the maximum before exp.

Thread layout: one block; thread h = cuda.threadIdx.x computes all of out[h, :]. Extra
threads (h >= H) do nothing.
"""

from __future__ import annotations

import math  # noqa: F401 (math.exp, math.sqrt, math.log work in kernels)

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def paged_decode_kernel(q, k_cache, v_cache, block_table, context_len, out):
    """out[h, :] = softmax(scale * q[h] . K) V over the sequence's first context_len tokens."""
    # TODO(student): max scaled logit, sum of exps, then out[h, :] as the weighted V.
    raise NotImplementedError("paged_decode_kernel")
