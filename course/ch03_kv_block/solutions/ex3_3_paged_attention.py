"""Exercise 3.3: logical -> physical translation, and paged attention in NumPy.

Solved; the spec is the docstring of exercises/ex3_3_paged_attention.py.
"""

from __future__ import annotations

import numpy as np


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """How many blocks hold `num_tokens` tokens: a partly filled last block counts."""
    return -(-num_tokens // block_size)


def locate(block_table, block_size: int, position: int) -> tuple[int, int]:
    """Token position -> (physical block, offset inside it)."""
    logical, offset = divmod(position, block_size)
    return int(block_table[logical]), offset


def slot(block_table, block_size: int, position: int) -> int:
    """Token position -> its flat slot in the cache's token dimension."""
    block, offset = locate(block_table, block_size, position)
    return block * block_size + offset


def paged_attention(query, kv_cache, block_table, context_len: int, scale=None):
    """Attention of one sequence's query over its first `context_len` cached tokens.

    Returns float64 [H, D]. `scale` defaults to 1 / sqrt(D).
    """
    num_heads, head_dim = query.shape  # [H, D]
    num_kv_heads, block_size = kv_cache.shape[2], kv_cache.shape[3]
    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale
    positions = np.arange(context_len)
    blocks = np.asarray(block_table)[positions // block_size]  # [T] physical block per token
    offsets = positions % block_size  # [T]
    keys = kv_cache[blocks, 0, :, offsets, :].astype(np.float64)  # [T, H_kv, D]
    values = kv_cache[blocks, 1, :, offsets, :].astype(np.float64)  # [T, H_kv, D]
    kv_head = np.arange(num_heads) // (num_heads // num_kv_heads)  # [H] KV head of each query head
    logits = np.einsum("hd,thd->ht", query.astype(np.float64), keys[:, kv_head]) * scale  # [H, T]
    logits -= logits.max(axis=1, keepdims=True)  # exp of large logits would overflow
    weights = np.exp(logits)
    weights /= weights.sum(axis=1, keepdims=True)
    return np.einsum("ht,thd->hd", weights, values[:, kv_head])  # [H, D]
