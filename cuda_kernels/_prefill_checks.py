"""Host-side checks of a ragged paged-prefill batch (query_start_loc from 0 to the
query's tokens, never down; contexts at least their query tokens; every table entry read
inside the cache), and `choose_path`, the kernel that serves a call.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _backend
from . import _checks as ck
from .attention import attended_ranges, check_read_blocks
from .fast.prefill_tc import unservable as tc_unservable
from .fast.prefill_wgmma import unservable as wgmma_unservable
from .layout import CacheShape
from .mask import ScoreMask
from .primitives import aligned16

PATHS = ("auto", "tensor", "cuda_core", "wgmma")


def staged_aligned(kv_cache) -> bool:
    """Is the cache the kernel will read 16-byte aligned? (A host array is staged into a
    fresh contiguous allocation.)"""
    if ck.is_device(kv_cache):
        return aligned16(kv_cache)
    return int(kv_cache.shape[4]) * np.dtype(kv_cache.dtype).itemsize % 16 == 0


def compute_capability() -> tuple[int, int] | None:
    if _backend.backend() != "gpu":
        return None
    from numba import cuda

    return tuple(cuda.get_current_device().compute_capability)


def _refusal(path: str, kv_cache) -> str | None:
    """Why the "tensor" or "wgmma" kernel cannot serve this cache, or None."""
    wgmma = path == "wgmma"
    unservable = wgmma_unservable if wgmma else tc_unservable
    why = unservable(int(kv_cache.shape[4]), kv_cache.dtype)
    if why is None and not staged_aligned(kv_cache):
        label = "wgmma" if wgmma else "tensor-core"
        why = f"the {label} path needs a 16-byte aligned kv_cache (data and strides)"
    cc = compute_capability() if wgmma else None
    if why is None and cc is not None and cc != (9, 0):
        why = (
            f"the wgmma path needs an sm_90 GPU (compute capability 9.0), this one has "
            f"compute capability {cc[0]}.{cc[1]}"
        )
    return why


def choose_path(path, kv_cache) -> str:
    """ "tensor", "wgmma" or "cuda_core" for this cache ("auto" falls back to "cuda_core",
    the others refuse a cache they cannot serve)."""
    if not isinstance(path, str) or path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(map(repr, PATHS))}, got {path!r}")
    if path == "cuda_core":
        return path
    why = _refusal("wgmma" if path == "wgmma" else "tensor", kv_cache)
    if why is None:
        return "tensor" if path == "auto" else path
    if path == "auto":
        return "cuda_core"
    raise ValueError(f"path={path!r}: {why}")


class PrefillBatch(NamedTuple):
    """tables, lens, starts (int32, host or device), and q_lens [S] on the host."""

    tables: object
    lens: object
    starts: object
    q_lens: np.ndarray


def check_batch(
    query, shape: CacheShape, block_tables, context_lens, query_start_loc, mask: ScoreMask
) -> PrefillBatch:
    num_blocks, num_kv_heads, block_size, head_dim = shape
    _, causal, window, sinks = mask
    total_q = ck.check_query(query, num_kv_heads, head_dim, "token")[0]
    lens = ck.host_ints("context_lens", context_lens, 1)
    num_seqs = len(lens)
    tables, lens = ck.block_tables_and_lens(block_tables, lens, num_seqs, block_size)
    starts = ck.host_ints("query_start_loc", query_start_loc, 1)
    if starts.dtype != np.int32:
        raise ValueError("query_start_loc must be int32")
    ck.require_shape("query_start_loc", starts, (num_seqs + 1,))
    if starts[0] != 0 or starts[-1] != total_q:
        raise ValueError(
            f"query_start_loc must run from 0 to {total_q} (the query's tokens), "
            f"got {int(starts[0])} .. {int(starts[-1])}"
        )
    q_lens = np.diff(starts.astype(np.int64))
    ck.require_range("query lengths (query_start_loc diffs)", q_lens, 0, 2**31)
    at = ck.first_bad(lens < q_lens)
    if at is not None:
        raise ValueError(
            f"context_lens[{at[0]}] = {int(lens[at])} is shorter than its "
            f"{int(q_lens[at])} query tokens"
        )
    ctx = lens.astype(np.int64)
    len_lo = ctx - q_lens + 1 if causal else ctx  # positions seen by each first / last row
    kept_hi, _, _ = attended_ranges(ctx, window, sinks)
    _, start_lo, _ = attended_ranges(len_lo, window, sinks)
    check_read_blocks(tables, block_size, num_blocks, kept_hi, start_lo, ctx, rows=q_lens > 0)
    return PrefillBatch(tables, lens, starts, q_lens)
