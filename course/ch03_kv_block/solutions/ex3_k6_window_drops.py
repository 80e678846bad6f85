"""Puzzle 3.k6: which blocks a sliding window drops (chapter 3.6's window; vLLM v1's
SlidingWindowManager.remove_skipped_blocks).

Solved; the spec is the docstring of exercises/ex3_k6_window_drops.py.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def dropped_kernel(params, dropped):
    """dropped[j] = 1 when logical block j lies wholly before the window, else 0."""
    j = cuda.threadIdx.x
    if j < dropped.shape[0]:
        n, w, B = params[0], params[1], params[2]
        if (j + 1) * B <= n - w:
            dropped[j] = 1
        else:
            dropped[j] = 0
