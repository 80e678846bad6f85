"""The engine's one seam for attention: who writes, reads, copies and swaps paged K/V.

An attention backend is any object with these methods (arrays are the cache layout of
cuda_kernels/layout.py, [num_blocks, 2, H_kv, B, D] float32):

    name                                       "numpy" or "kernels"
    where()                                    one phrase: what actually ran
    new_cache(shape)                           a cache whose unwritten slots are NaN
    write(cache, key, value, slots)            K/V [T, H_kv, D] into slots (-1: skip)
    prefill(query, cache, tables, lens, starts, spec)  ragged causal prefill -> [T, H, D]
    decode(query, cache, tables, lens, spec)   one query per sequence -> [S, H, D]

`spec` is the layer's model.Attention: its scale, soft-cap and sliding window. A table
entry of a block the window left behind may be -1 (vLLM's null block).
    copy_blocks(cache, pairs) / swap_out(cache, host, pairs) / swap_in(host, cache, pairs)

`choose(name)` is the only place a backend is picked, and `pagedsim.engine.kernels_backend`
the only module that imports cuda_kernels; the engine receives the chosen object
(`PagedEngine(..., backend=...)` takes a name or such an object). "auto" means the
kernels on a GPU and NumPy on the CPU: the simulator runs each CUDA thread as a Python
thread, so it is chosen only when asked for ("kernels" on a machine without a GPU).

NumpyAttention reads K/V through the same block tables and slots as the kernels, so
blocks, copy-on-write, prefix hits and swapping are exercised either way.
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from .dense import dense_attention

NAMES = ("auto", "numpy", "kernels")
METHODS = ("new_cache", "write", "prefill", "decode", "copy_blocks", "swap_out", "swap_in")


class NumpyAttention:
    name = "numpy"

    def where(self) -> str:
        return "NumPy paged attention on the CPU"

    def new_cache(self, shape):
        return np.full(shape, np.nan, np.float32)  # never-written slots poison any read

    def write(self, cache, key, value, slots):
        bs = cache.shape[3]
        keep = slots >= 0
        blocks, offsets = slots[keep] // bs, slots[keep] % bs
        cache[blocks, 0, :, offsets] = key[keep]
        cache[blocks, 1, :, offsets] = value[keep]

    def prefill(self, query, cache, tables, lens, starts, spec=None):
        out = np.empty(query.shape, np.float32)  # [T, H, D]
        for s, ctx in enumerate(lens):
            lo, hi = int(starts[s]), int(starts[s + 1])
            keys, values = gather(cache, tables[s], int(ctx))
            out[lo:hi] = dense_attention(query[lo:hi], keys, values, spec)
        return out

    def decode(self, query, cache, tables, lens, spec=None):
        return self.prefill(query, cache, tables, lens, np.arange(len(lens) + 1), spec)

    def copy_blocks(self, cache, pairs):
        for src, dst in pairs:
            cache[dst] = cache[src]

    def swap_out(self, cache, host, pairs):
        for gpu, h in pairs:
            host[h] = cache[gpu]

    def swap_in(self, host, cache, pairs):
        for h, gpu in pairs:
            cache[gpu] = host[h]


def gather(cache: np.ndarray, table, length: int) -> tuple:
    """K and V [length, H_kv, D] of one sequence, read through its block table; a null
    block (-1, left behind by a sliding window) reads as zeros, which the window masks."""
    bs = cache.shape[3]
    blocks = np.asarray(table[: -(-length // bs)], np.int64)
    kv = np.where(
        (blocks >= 0)[:, None, None, None, None], cache[np.maximum(blocks, 0)], np.float32(0)
    )  # [n, 2, H_kv, B, D]
    kv = kv.transpose(1, 0, 3, 2, 4).reshape(2, -1, kv.shape[2], kv.shape[4])  # [2, n*B, H_kv, D]
    return kv[0, :length], kv[1, :length]


def gpu_visible() -> bool:
    """A GPU is usable: PAGEDSIM_CUDA=gpu, or the driver's /dev/nvidiactl exists (a
    stricter test than cuda_kernels', which also accepts a loadable libcuda; this one
    must not import numba)."""
    forced = os.environ.get("PAGEDSIM_CUDA", "").strip().lower()
    if forced:
        return forced == "gpu"
    return os.path.exists("/dev/nvidiactl")


def choose(backend="auto"):
    """A backend object from a name in NAMES, or `backend` itself if it has every method."""
    if not isinstance(backend, str):
        missing = [m for m in METHODS if not callable(getattr(backend, m, None))]
        if missing:
            raise TypeError(
                f"backend must be one of {NAMES} or an attention backend; "
                f"{type(backend).__name__} lacks {', '.join(missing)}"
            )
        return backend
    if backend not in NAMES:
        raise ValueError(f"backend must be one of {', '.join(NAMES)}, got {backend!r}")
    if backend == "auto":
        backend = "kernels" if gpu_visible() else "numpy"
    if backend == "numpy":
        return NumpyAttention()
    return importlib.import_module(".kernels_backend", __package__).KernelAttention()
