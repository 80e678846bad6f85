"""Merge split-K partial results with log-sum-exp (FlashDecoding; vLLM's
paged_attention_v2_reduce_kernel).

Partition p of a (sequence, head) produced a normalised output o_p, its max scaled
score m_p and its sum of exp l_p = sum exp(s - m_p). With M = max_p m_p over
non-empty partitions, w_p = l_p * exp(m_p - M), and the exact softmax output is
    out = sum_p w_p o_p / sum_p w_p.
Grid: one thread block per (head, sequence); each thread owns head_dim elements
d = tid, tid + NT, ... No shared memory or barriers: each thread recomputes M, which
reads only num_partitions floats. An empty partition (l = 0) is skipped; a NaN one is
not, so a NaN anywhere in a sequence's scores reaches its output (IEEE, as the float64
reference does).
"""

from __future__ import annotations

import math

from numba import cuda, float32


@cuda.jit
def merge_partitions(partial, max_logits, exp_sums, out):
    """partial [S, H, P, D], max_logits/exp_sums [S, H, P] -> out [S, H, D] float32."""
    head = cuda.blockIdx.x
    seq = cuda.blockIdx.y
    num_parts = partial.shape[2]
    head_dim = partial.shape[3]
    top = float32(-math.inf)
    for p in range(num_parts):
        if exp_sums[seq, head, p] != 0:  # non-empty (a NaN sum included: it propagates)
            top = max(top, max_logits[seq, head, p])
    for d in range(cuda.threadIdx.x, head_dim, cuda.blockDim.x):
        num = float32(0)
        den = float32(0)
        for p in range(num_parts):
            weight = exp_sums[seq, head, p]
            if weight != 0:
                weight *= math.exp(max_logits[seq, head, p] - top)
                num += weight * partial[seq, head, p, d]
                den += weight
        out[seq, head, d] = num / den
