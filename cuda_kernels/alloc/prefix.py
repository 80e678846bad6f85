"""Batch allocation without atomics: an exclusive prefix sum gives each request a disjoint slice.

SGLang's token-to-KV pool allocates a whole batch at once: it takes the summed counts off
the free list in one step, and an exclusive scan of the counts (a partition of [0, total),
so no two requests overlap) tells request i where its slice starts. The scan runs on the
device in the classic two-level way:

  1. `block_scan`: one thread block per SCAN_TPB requests, a Hillis-Steele scan in shared
     memory (double-buffered, log2(SCAN_TPB) rounds): each element's exclusive prefix within
     its block, and each block's total;
  2. the block totals are scanned the same way (recursively, until one block is left);
  3. `add_block_offsets` adds each block's scanned total to its elements.

Then `take_slices` copies free_ids[base + offset[i] : ... + counts[i]] (base = top - total)
and the launcher lowers top by total.

Reference: SGLang `TokenToKVPoolAllocator.alloc` (python/sglang/srt/mem_cache/allocator.py);
Hillis & Steele, "Data parallel algorithms" (CACM 1986); GPU Gems 3, ch. 39 (scan).
"""

import numpy as np
from numba import cuda, int32

SCAN_TPB = 256  # threads per block in the scan; a power of two
SCAN_BUF = 512  # 2 * SCAN_TPB, spelled out: shared array sizes must be plain constants


def block_scan(values, excl, block_sums):
    """Block b, thread t: excl[i] = sum of values[b*TPB : i] (i = b*TPB + t);
    block_sums[b] = the block's total."""
    buf = cuda.shared.array(SCAN_BUF, int32)  # [2, SCAN_TPB]: ping-pong buffers
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * SCAN_TPB + t
    v = values[i] if i < values.shape[0] else 0
    buf[t] = v
    cuda.syncthreads()  # every value is in buffer 0 before round 1 reads neighbours
    src = 0
    step = 1
    while step < SCAN_TPB:
        x = buf[src * SCAN_TPB + t]
        if t >= step:
            x += buf[src * SCAN_TPB + t - step]
        buf[(1 - src) * SCAN_TPB + t] = x
        cuda.syncthreads()  # this round's writes land before the next round reads them
        src = 1 - src
        step *= 2
    inclusive = buf[src * SCAN_TPB + t]
    if i < values.shape[0]:
        excl[i] = inclusive - v
    if t == SCAN_TPB - 1:
        block_sums[cuda.blockIdx.x] = inclusive


def add_block_offsets(excl, block_offsets):
    """Thread i: add the scanned total of all earlier blocks."""
    i = cuda.grid(1)
    if i < excl.shape[0]:
        excl[i] += block_offsets[i // SCAN_TPB]


def take_slices(counts, offsets, base, free_ids, ref, out, granted):
    """Thread i: copy its disjoint slice of free ids; no atomics needed."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    start = base + offsets[i]
    for j in range(counts[i]):
        b = free_ids[start + j]
        out[i, j] = b
        ref[b] = 1
    granted[i] = 1


block_scan_kernel = cuda.jit(block_scan)
add_block_offsets_kernel = cuda.jit(add_block_offsets)
take_slices_kernel = cuda.jit(take_slices)


def exclusive_scan(d_values):
    """Exclusive prefix sum of a 1-D int32 device array, on the device, as a new one."""
    n = d_values.shape[0]
    nblocks = (n + SCAN_TPB - 1) // SCAN_TPB
    d_excl = cuda.device_array(n, dtype=np.int32)
    d_sums = cuda.device_array(nblocks, dtype=np.int32)
    block_scan_kernel[nblocks, SCAN_TPB](d_values, d_excl, d_sums)
    if nblocks > 1:
        d_offsets = exclusive_scan(d_sums)  # recursion depth log_TPB(n): 3 levels for 1M requests
        add_block_offsets_kernel[nblocks, SCAN_TPB](d_excl, d_offsets)
    return d_excl
