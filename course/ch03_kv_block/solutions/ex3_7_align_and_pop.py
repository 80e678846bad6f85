"""Exercise 3.7: 128-byte aligned block starts, and a concurrent block pop with atomics.

Solved; the spec is the docstring of exercises/ex3_7_align_and_pop.py.
"""

from __future__ import annotations

import numpy as np

from course.ch03_kv_block._cuda import cuda


def align_up(nbytes: int, alignment: int = 128) -> int:
    """The smallest multiple of `alignment` (a power of two) that is >= nbytes."""
    return (nbytes + alignment - 1) & ~(alignment - 1)


def block_starts(num_gpu_blocks: int, block_bytes: int, alignment: int = 128) -> list[int]:
    """Byte offset of each block in a pool whose base is aligned: block i at i * stride."""
    stride = align_up(block_bytes, alignment)
    return [i * stride for i in range(num_gpu_blocks)]


@cuda.jit
def pop_kernel(free_stack, top, out):
    """One thread per request, one block of threads. Thread i pops one block into out[i].

    free_stack[0:top[0]] are the free block ids; a thread that finds the stack empty
    writes -1. top[0] may end below 0 when more threads ask than blocks are free.
    Threads with i >= out.shape[0] (a launch rounded up to a block size) do nothing.
    """
    i = cuda.grid(1)
    if i < out.shape[0]:
        old = cuda.atomic.sub(top, 0, 1)
        if old > 0:
            out[i] = free_stack[old - 1]
        else:
            out[i] = -1


def pop_blocks(free_stack, num_threads: int):
    """Launch pop_kernel with `num_threads` threads. Returns (handed out [num_threads], top)."""
    stack = np.asarray(free_stack, np.int32)
    top = np.array([len(stack)], np.int32)
    out = np.full(num_threads, -2, np.int32)  # -2: a thread that never wrote
    pop_kernel[1, num_threads](stack, top, out)
    return out, int(top[0])
