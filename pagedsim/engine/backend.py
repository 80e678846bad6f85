"""The engine's one seam for attention: who writes, reads, copies and swaps paged K/V.

An attention backend has the methods of `AttentionBackend`, on caches in the layout of
cuda_kernels/layout.py ([num_blocks, 2, H_kv, B, D] float32): a NumPy array here, a device
array in kernels_backend.py. `spec` is the layer's model.Attention; a table entry may be -1
(vLLM's null block). `choose(name)` is the only place a backend is picked: "auto" means
the kernels on a GPU, else NumPy, which reads through the same block tables and slots.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from .dense import dense_attention

if TYPE_CHECKING:
    from .model import Attention

NAMES = ("auto", "numpy", "kernels")
METHODS = ("new_cache", "write", "prefill", "decode", "copy_blocks", "swap_out", "swap_in")
Ints = npt.NDArray[np.int32]  # block tables, context lengths, slots, query starts
Floats = npt.NDArray[np.float32]  # queries, keys, values, the attention's output
Pairs = Sequence[tuple[int, int]]  # (source block, destination block) per copy
Cache = TypeVar("Cache")  # a backend's own cache: a NumPy array, a device array


class AttentionBackend(Protocol[Cache]):
    """Who writes, reads, copies and swaps paged K/V; every array on the host is NumPy."""

    name: str  # "numpy" or "kernels"

    def where(self) -> str: ...  # one phrase: what actually ran

    def new_cache(self, shape: tuple[int, ...]) -> Cache: ...  # unwritten slots are NaN

    # K/V [T, H_kv, D] into slots (-1: skip)
    def write(self, cache: Cache, key: Floats, value: Floats, slots: Ints) -> None: ...

    # ragged causal prefill -> [T, H, D]
    def prefill(
        self,
        query: Floats,
        cache: Cache,
        tables: Ints,
        lens: Ints,
        starts: Ints,
        spec: Attention | None = None,
    ) -> Floats: ...

    # one query per sequence -> [S, H, D]
    def decode(
        self, query: Floats, cache: Cache, tables: Ints, lens: Ints, spec: Attention | None = None
    ) -> Floats: ...

    def copy_blocks(self, cache: Cache, pairs: Pairs) -> None: ...

    def swap_out(self, cache: Cache, host: Floats, pairs: Pairs) -> None: ...

    def swap_in(self, host: Floats, cache: Cache, pairs: Pairs) -> None: ...


class NumpyAttention:
    name = "numpy"

    def __init__(self) -> None:
        self.buffer = np.empty(0, np.float32)  # the decode gather's, reused step to step

    def where(self) -> str:
        return "NumPy paged attention on the CPU"

    def new_cache(self, shape: tuple[int, ...]) -> Floats:
        return np.full(shape, np.nan, np.float32)  # never-written slots poison any read

    def write(self, cache: Floats, key: Floats, value: Floats, slots: Ints) -> None:
        bs = cache.shape[3]
        keep = slots >= 0
        blocks, offsets = slots[keep] // bs, slots[keep] % bs
        cache[blocks, 0, :, offsets] = key[keep]
        cache[blocks, 1, :, offsets] = value[keep]

    def prefill(
        self,
        query: Floats,
        cache: Floats,
        tables: Ints,
        lens: Ints,
        starts: Ints,
        spec: Attention | None = None,
    ) -> Floats:
        out = np.empty(query.shape, np.float32)  # [T, H, D]
        for s, ctx in enumerate(lens):
            lo, hi = int(starts[s]), int(starts[s + 1])
            keys, values = gather(cache, tables[s], int(ctx))
            out[lo:hi] = dense_attention(query[lo:hi], keys, values, spec)
        return out

    def decode(
        self, query: Floats, cache: Floats, tables: Ints, lens: Ints, spec: Attention | None = None
    ) -> Floats:
        return batched_decode(
            query, cache, tables, lens, spec, self._workspace(query, cache, tables)
        )

    def _workspace(self, query: Floats, cache: Floats, tables: Ints) -> Floats:
        """The decode gather's buffer, grown to the largest step seen (the table width
        bounds the blocks a step gathers)."""
        need = len(query) * np.shape(tables)[1] * int(np.prod(cache.shape[1:]))
        if self.buffer.size < need:
            self.buffer = np.empty(need, np.float32)
        return self.buffer

    def copy_blocks(self, cache: Floats, pairs: Pairs) -> None:
        for src, dst in pairs:
            cache[dst] = cache[src]

    def swap_out(self, cache: Floats, host: Floats, pairs: Pairs) -> None:
        for gpu, h in pairs:
            host[h] = cache[gpu]

    def swap_in(self, host: Floats, cache: Floats, pairs: Pairs) -> None:
        for h, gpu in pairs:
            cache[gpu] = host[h]


def gather(cache: Floats, table: Ints, length: int) -> tuple[Floats, Floats]:
    """K and V [length, H_kv, D] of one sequence, read through its block table; a null
    block (-1, left behind by a sliding window) reads as zeros, which the window masks."""
    bs = cache.shape[3]
    blocks = np.asarray(table[: -(-length // bs)], np.int64)
    kv = np.where(
        (blocks >= 0)[:, None, None, None, None], cache[np.maximum(blocks, 0)], np.float32(0)
    )  # [n, 2, H_kv, B, D]
    kv = np.ascontiguousarray(kv.transpose(1, 0, 3, 2, 4))  # [2, n, B, H_kv, D]: one copy,
    kv = kv.reshape(2, -1, kv.shape[3], kv.shape[4])  # then a view [2, n*B, H_kv, D]
    return kv[0, :length], kv[1, :length]


def batched_decode(
    query: Floats,
    cache: Floats,
    tables: Ints,
    lens: Ints,
    spec: Attention | None = None,
    workspace: Floats | None = None,
) -> Floats:
    """One query per sequence, all at once -> [S, H, D]: the blocks gathered through the
    tables (padded to the longest), a [G, D] x [D, B] product per (sequence, block, KV
    head) in one stacked matmul, positions past the length, in a null block or before the
    window masked. `workspace`: a float32 array the gather may reuse."""
    s, heads, d = query.shape
    if s == 0:
        return np.empty(query.shape, np.float32)
    bs, kv_heads = cache.shape[3], cache.shape[2]
    group = heads // kv_heads
    lens = np.asarray(lens, np.int64)
    width = -(-int(lens.max()) // bs)  # n: blocks of the longest sequence
    blocks = np.asarray(tables, np.int64)[:, :width]  # [S, n]: -1 pads and null blocks
    shape = (s, width) + cache.shape[1:]  # [S, n, 2, H_kv, B, D]
    size = int(np.prod(shape))
    out = None if workspace is None or workspace.size < size else workspace[:size].reshape(shape)
    if blocks.size and int(blocks.max()) >= len(cache):  # so that "clip" never clips
        raise IndexError(f"block {int(blocks.max())} is outside the {len(cache)}-block cache")
    # mode="clip": every index is in range now, and "raise" copies through a buffer
    kv = np.take(cache, np.maximum(blocks, 0), axis=0, out=out, mode="clip")
    where = np.arange(width * bs).reshape(width, bs)  # [n, B]: each slot's position
    masked = (where[None] >= lens[:, None, None]) | (blocks < 0)[:, :, None]  # [S, n, B]
    if spec is not None and spec.sliding_window is not None:
        masked |= where[None] <= lens[:, None, None] - 1 - spec.sliding_window
    seq, block, slot = np.nonzero(masked)  # values of masked slots (NaN when never
    kv[seq, block, 1, :, slot] = 0  # written) weigh nothing
    masked = masked[:, :, None, None, :]  # [S, n, 1, 1, B]: broadcasts over H_kv and G
    scale = np.float32(d**-0.5 if spec is None else spec.scale)
    qg = query.reshape(s, 1, kv_heads, group, d)
    scores = qg @ kv[:, :, 0].swapaxes(-1, -2)  # [S, n, H_kv, G, B]
    scores *= scale
    if spec is not None and spec.logits_soft_cap is not None:
        cap = np.float32(spec.logits_soft_cap)
        scores = np.tanh(scores / cap) * cap
    np.copyto(scores, np.float32(-np.inf), where=masked)
    scores -= scores.max(axis=(1, 4), keepdims=True)  # the max of [S, 1, H_kv, G, 1]
    p = np.exp(scores, out=scores)
    p /= p.sum(axis=(1, 4), keepdims=True)
    attn = (p @ kv[:, :, 1]).sum(axis=1)  # [S, n, H_kv, G, D] summed over blocks
    return np.ascontiguousarray(attn.reshape(s, heads, d), dtype=np.float32)


def gpu_visible() -> bool:
    """A GPU is usable: PAGEDSIM_CUDA=gpu, or /dev/nvidiactl exists (no numba import)."""
    forced = os.environ.get("PAGEDSIM_CUDA", "").strip().lower()
    if forced:
        return forced == "gpu"
    return os.path.exists("/dev/nvidiactl")


def choose(backend: str | AttentionBackend[Any] = "auto") -> AttentionBackend[Any]:
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
    from .kernels_backend import KernelAttention  # loads numba: only when asked for

    return KernelAttention()
