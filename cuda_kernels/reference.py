"""NumPy float64 references for the kernels: paged (through the block table),
windowed, and dense.

These are deliberately plain: gather each sequence's K/V token by token through its
block table (the PagedAttention indirection, Kwon et al. 2023, 4.1), then do
softmax(q K^T * scale) V in float64. Tests compare kernels to these.
"""

from __future__ import annotations

import math

import numpy as np

from .mask import CAUSAL, ScoreMask


def attended_positions(length: int, sliding_window=None, sinks: int = 0) -> np.ndarray:
    """Token positions a query at the end of a `length`-token context attends to:
    all of them, or the first `sinks` plus the last `sliding_window` (StreamingLLM-style)."""
    if sliding_window is None:
        return np.arange(length)
    kept = min(sinks, length)
    start = max(length - sliding_window, kept)
    return np.concatenate([np.arange(kept), np.arange(start, length)])


def gather_kv(kv_cache: np.ndarray, table, positions) -> tuple[np.ndarray, np.ndarray]:
    """K and V [len(positions), H_kv, D] float64, read through the block table."""
    block_size = kv_cache.shape[3]
    ks, vs = [], []
    for pos in positions:
        block, offset = int(table[pos // block_size]), pos % block_size
        ks.append(kv_cache[block, 0, :, offset, :])  # [H_kv, D]
        vs.append(kv_cache[block, 1, :, offset, :])
    return np.asarray(ks, np.float64), np.asarray(vs, np.float64)


def dense_attention(
    query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale=None
) -> np.ndarray:
    """One sequence: query [H, D], keys/values [L, H_kv, D] -> [H, D] float64 (GQA)."""
    num_heads, head_dim = query.shape
    group = num_heads // keys.shape[1]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    k = np.repeat(np.asarray(keys, np.float64), group, axis=1)  # [L, H, D]
    v = np.repeat(np.asarray(values, np.float64), group, axis=1)
    scores = np.einsum("hd,lhd->hl", np.asarray(query, np.float64), k) * scale  # [H, L]
    scores -= scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=1, keepdims=True)
    return np.einsum("hl,lhd->hd", p, v)


def paged_attention(
    query, kv_cache, block_tables, context_lens, mask: ScoreMask = CAUSAL
) -> np.ndarray:
    """[S, H, D] float64: decode, `reference_prefill` with one query row per sequence."""
    starts = np.arange(len(context_lens) + 1)
    return reference_prefill(query, kv_cache, block_tables, context_lens, starts, mask)


def scattered_block_tables(rng, lens, block_size: int, spare: int = 0, fill: int = -1):
    """(tables int32 [S, max_blocks] padded with `fill`, num_blocks): sequences of `lens`
    tokens in random, disjoint blocks of a pool with `spare` blocks more than they need."""
    need = [-(-int(n) // block_size) for n in lens]
    num_blocks = sum(need) + spare
    ids = rng.permutation(num_blocks)
    tables = np.full((len(need), max(need)), fill, np.int32)
    at = 0
    for i, n in enumerate(need):
        tables[i, :n] = ids[at : at + n]
        at += n
    return tables, num_blocks


def reference_prefill(
    query, kv_cache, block_tables, context_lens, query_start_loc, mask: ScoreMask = CAUSAL
) -> np.ndarray:
    """[total_q, H, D] float64, one query row at a time: token i of sequence s is at
    position p = context_len - query_len + i and sees the first p + 1 positions when
    mask.causal (else the whole context), windowed by `attended_positions`."""
    starts = np.asarray(query_start_loc)
    out = np.empty(query.shape, np.float64)
    for s, ctx in enumerate(np.asarray(context_lens)):
        lo, hi = int(starts[s]), int(starts[s + 1])
        for row in range(lo, hi):
            length = int(ctx) - (hi - row) + 1 if mask.causal else int(ctx)
            positions = attended_positions(length, mask.sliding_window, mask.sinks)
            keys, values = gather_kv(np.asarray(kv_cache), block_tables[s], positions)
            out[row] = dense_attention(query[row], keys, values, mask.scale)
    return out
