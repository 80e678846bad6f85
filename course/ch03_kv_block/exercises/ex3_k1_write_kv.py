"""Puzzle 3.k1 (your file): write_kv's slot scatter (chapter 3.2 and 3.7; vLLM's reshape_and_cache).

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
    # TODO(student): copy key[t, d] to its slot (skip extra threads and slot -1).
    raise NotImplementedError("write_kv_kernel")
