"""Puzzle 3.k4: merge two split-K partials by their log-sum-exp (flash-decoding's reduction;
vLLM v1's merge_attn_states).

Solved; the spec is the docstring of exercises/ex3_k4_lse_merge.py.
"""

from __future__ import annotations

import math

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def merge_kernel(o1, lse1, o2, lse2, out, lse_out):
    """out[h, d] and lse_out[h]: the two partials merged by their log-sum-exp."""
    i = cuda.threadIdx.x
    D = o1.shape[1]
    h, d = i // D, i % D
    if h < o1.shape[0]:
        a, b = lse1[h], lse2[h]
        m = max(a, b)
        w1, w2 = math.exp(a - m), math.exp(b - m)
        out[h, d] = (w1 * o1[h, d] + w2 * o2[h, d]) / (w1 + w2)
        if d == 0:
            lse_out[h] = m + math.log(w1 + w2)
