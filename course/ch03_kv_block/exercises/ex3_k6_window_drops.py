"""Puzzle 3.k6 (your file): which blocks a sliding window drops (chapter 3.6's window; vLLM v1's
SlidingWindowManager.remove_skipped_blocks).

A sequence of n = params[0] tokens attends only to its last w = params[1] tokens, the
positions n - w ... n - 1. With blocks of B = params[2] tokens, logical block j holds
positions j * B ... j * B + B - 1, and it can be dropped (its KV freed) exactly when every
one of them is before the window:

    dropped[j] = 1 if (j + 1) * B <= n - w else 0          for j < dropped.shape[0]

Shapes: params [3] (int: n, w, B), dropped [M] (int).

Thread layout: one block; thread j = cuda.threadIdx.x writes dropped[j]. Extra threads do
nothing.
"""

from __future__ import annotations

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def dropped_kernel(params, dropped):
    """dropped[j] = 1 when logical block j lies wholly before the window, else 0."""
    # TODO(student): dropped[j] = 1 when block j ends before the window, else 0.
    raise NotImplementedError("dropped_kernel")
