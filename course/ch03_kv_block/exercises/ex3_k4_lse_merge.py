"""Puzzle 3.k4 (your file): merge two split-K partials by their log-sum-exp
(flash-decoding's reduction; vLLM v1's merge_attn_states).

Each partial is attention over half of the tokens: o1 [H, D] with lse1 [H] = log(sum of
exp(logits)) over its half, and likewise o2, lse2. Spec (NumPy), for head h:

    m = max(lse1[h], lse2[h]);  w1 = exp(lse1[h] - m);  w2 = exp(lse2[h] - m)
    out[h, :] = (w1 * o1[h, :] + w2 * o2[h, :]) / (w1 + w2)
    lse_out[h] = m + log(w1 + w2)

An lse can be in the hundreds: exp(lse) itself overflows, so subtract the maximum first.

Thread layout: one block; thread i = cuda.threadIdx.x writes ONE number out[h, d] with
h = i // D and d = i % D; the thread with d == 0 also writes lse_out[h]. Extra threads do
nothing.
"""

from __future__ import annotations

import math  # noqa: F401 (math.exp, math.sqrt, math.log work in kernels)

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def merge_kernel(o1, lse1, o2, lse2, out, lse_out):
    """out[h, d] and lse_out[h]: the two partials merged by their log-sum-exp."""
    # TODO(student): weigh both partials by exp(lse - max); write out and lse_out.
    raise NotImplementedError("merge_kernel")
