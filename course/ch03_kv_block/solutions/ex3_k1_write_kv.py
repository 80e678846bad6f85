"""Puzzle 3.k1: write_kv's slot scatter (chapter 3.2 and 3.7; vLLM's reshape_and_cache).

Solved; the spec is the docstring of exercises/ex3_k1_write_kv.py.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def write_kv_kernel(key, slot_mapping, k_cache):
    """Copy key[t, d] to k_cache[slot_mapping[t], d] for the thread's (t, d)."""
    i = cuda.threadIdx.x
    D = key.shape[1]
    t, d = i // D, i % D
    if t < key.shape[0]:
        slot = slot_mapping[t]
        if slot >= 0:
            k_cache[slot, d] = key[t, d]
