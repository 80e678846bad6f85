"""Puzzle 3.k1: write_kv's slot scatter (chapter 3.2 and 3.7; vLLM's reshape_and_cache).

Spec (NumPy): for every token t whose slot_mapping[t] >= 0 (a padded token has -1),

    k_cache[slot_mapping[t], :] = key[t, :]

and nothing else in k_cache changes. Shapes: key [T, D], slot_mapping [T] (int),
k_cache [num_slots, D] (a cache viewed as slots: block * block_size + offset).

Thread layout: one block; thread i = cuda.threadIdx.x copies ONE number, key[t, d] with
t = i // D and d = i % D. The launch may have more threads than T * D: the extra ones do
nothing.
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
