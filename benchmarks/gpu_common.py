"""Shared pieces of the GPU benchmarks (gpu_attention.py, gpu_labs.py).

    decode_launch    a closure launching exactly what `attention.decode_with` launches for
                     a layout's loaders (kernel, grid, partial buffers, merge), minus the
                     host-side checks, on buffers already on the device: what is timed;
    read_roofline    a read-only kernel streaming the same K/V bytes with 16-byte loads
                     (`primitives.load16`), xor-folding them into one word per thread so
                     nothing is optimised away: the most a decode kernel could achieve;
    close, time_ms, filled   the correctness test, the event timer and random device buffers
                     every row uses;
    rotation         how many copies of a buffer to cycle between launches, so that the
                     working set is at least 4x the L2 (60 MB on an H100/H200) and no
                     launch reads from L2.
The contiguous-KV baseline kernel lives in `cuda_kernels.labs.contiguous`.
"""

from __future__ import annotations

import statistics

import numpy as np
from numba import cuda, uint32

from cuda_kernels import attention
from cuda_kernels._checks import require_scale
from cuda_kernels.merge import merge_partitions
from cuda_kernels.primitives import itemsize, load16

L2_BYTES = 60 * 2**20
WORKING_SET = 4 * L2_BYTES
PER_SAMPLE = 10  # launches between one pair of events


@cuda.jit
def read_all(src, chunks, sink):
    """xor of every 16-byte chunk of `src` (flat, 16-byte aligned), one word per thread;
    four independent 16-byte loads in flight per thread per trip, as in copy_blocks."""
    vec = 16 // itemsize(src)
    acc = uint32(0)
    n = cuda.gridsize(1)
    i = cuda.grid(1)
    while i + 3 * n < chunks:
        w0 = load16(src, i * vec)
        w1 = load16(src, (i + n) * vec)
        w2 = load16(src, (i + 2 * n) * vec)
        w3 = load16(src, (i + 3 * n) * vec)
        acc ^= (w0[0] ^ w0[1] ^ w0[2] ^ w0[3]) ^ (w1[0] ^ w1[1] ^ w1[2] ^ w1[3])
        acc ^= (w2[0] ^ w2[1] ^ w2[2] ^ w2[3]) ^ (w3[0] ^ w3[1] ^ w3[2] ^ w3[3])
        i += 4 * n
    while i < chunks:
        w = load16(src, i * vec)
        acc ^= w[0] ^ w[1] ^ w[2] ^ w[3]
        i += n
    sink[cuda.grid(1)] = acc


def read_roofline_launch(flat, blocks: int, threads: int):
    """A launch closure reading all of `flat` (a contiguous device array) once."""
    chunks = flat.size * flat.dtype.itemsize // 16
    sink = cuda.device_array(blocks * threads, np.uint32)
    return lambda: read_all[blocks, threads](flat, chunks, sink)


def roofline_reads_every_byte_once(rng, nbytes: int, blocks: int, threads: int) -> bool:
    """On random data, the xor of the threads' words equals the xor of the buffer's words
    (a chunk skipped or read twice would change it)."""
    host = rng.integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    sink = cuda.device_array(blocks * threads, np.uint32)
    read_all[blocks, threads](cuda.to_device(host), nbytes // 16, sink)
    return bool(np.bitwise_xor.reduce(sink.copy_to_host()) == np.bitwise_xor.reduce(host))


def rotation(nbytes: int) -> int:
    """Copies of a buffer of `nbytes` to cycle through so the working set reaches 4x L2."""
    return max(1, -(-WORKING_SET // max(nbytes, 1)))


def decode_launch(loaders, k_src, v_src, query, tables, lens, *, block_size: int, num_kv_heads: int,
                  mode: str, part: int, paged: bool = True, longest: int | None = None):
    """(launch, out): launch() runs the decode kernel (and the merge when split) on device
    buffers; out [S, H, D] float32 holds the result afterwards. mode "single" covers the
    longest context in one partition; "split" uses partitions of `part` tokens."""
    num_seqs, num_heads, dim = query.shape
    kernel, threads, chunks = attention.kernel_for(loaders, dim, num_heads // num_kv_heads,
                                                   np.dtype(k_src.dtype), block_size, paged=paged)
    longest = longest or int(lens.copy_to_host().max())
    part = longest if mode == "single" else part
    num_parts = -(-longest // part)
    out = attention._empty((num_seqs, num_heads, dim))  # NaN-poisoned while POISON is on
    partial = (out.reshape(num_seqs, num_heads, 1, dim) if num_parts == 1 else
               attention._empty((num_seqs, num_heads, num_parts, dim)))
    m = attention._empty((num_seqs, num_heads, num_parts))
    s = attention._empty((num_seqs, num_heads, num_parts))
    args = (k_src, v_src, query, tables, lens, np.float32(require_scale(None, dim)), np.int32(0),
            np.int32(0), np.int32(part), partial, m, s)

    def launch():
        kernel[(num_kv_heads * chunks, num_seqs, num_parts), threads](*args)
        if num_parts > 1:
            merge_partitions[(num_heads, num_seqs), min(threads, 128)](partial, m, s, out)
    return launch, out


def close(out, want, tol) -> bool:
    """Finite, and within tol x the largest |want| of the float64 reference everywhere."""
    out = np.asarray(out, np.float64)
    return bool(np.isfinite(out).all() and np.abs(out - want).max() <= tol * np.abs(want).max())


def time_ms(launches, runs: int, timed: bool):
    """Median over `runs` samples of the mean time of PER_SAMPLE back-to-back launches,
    cycling through `launches` (rotated buffers). One launch is queued before the start
    event, so the GPU is busy when the timed launches are enqueued: Python's launch
    overhead is hidden behind queued work, not measured."""
    launches = launches if isinstance(launches, list) else [launches]
    for launch in launches:  # compile and warm up
        launch()
    cuda.synchronize()
    per_sample = PER_SAMPLE if timed else 1
    times, k = [], 0
    for _ in range(runs):
        start, end = cuda.event(), cuda.event()
        launches[k % len(launches)]()
        start.record()
        for _ in range(per_sample):
            k += 1
            launches[k % len(launches)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per_sample)
    return statistics.median(times) if timed else None


def filled(rng, shape, dtype):
    """A device array of `shape` with random values (one host piece reused: values do not
    matter for timing, only the bytes)."""
    dev = cuda.device_array(shape, dtype)
    per = int(np.prod(shape[1:]))
    chunk = min(shape[0], max(1, (1 << 26) // per))
    piece = rng.standard_normal((chunk,) + tuple(shape[1:])).astype(dtype)
    for b in range(0, shape[0], chunk):
        n = min(chunk, shape[0] - b)
        dev[b:b + n].copy_to_device(piece[:n])
    return dev
