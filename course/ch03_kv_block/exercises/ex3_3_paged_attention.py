"""Exercise 3.3 (your file): logical -> physical translation, and paged attention in NumPy.

A sequence's tokens are contiguous in *logical* space only. Token p lives in logical
block p // block_size at offset p % block_size, and the block table says which
physical block that logical block is:

    slot(p) = block_table[p // block_size] * block_size + p % block_size

Attention for one decoding step of one sequence reads every earlier token's K and V
through that table. Layout of one layer's cache (vLLM's, and the kernels'):

    kv_cache  [num_blocks, 2, H_kv, block_size, D]   index 0 of dim 1 is K, 1 is V
    query     [H, D]                                  H query heads, H % H_kv == 0

Query head h reads KV head h // (H // H_kv) (grouped-query attention).

中文：序列的 token 只在逻辑上连续。第 p 个 token 在逻辑块 p // block_size 的偏移
p % block_size，Block Table 给出这个逻辑块对应的物理块：slot(p) = table[p // block_size] ×
block_size + p % block_size。blocks_needed 向上取整（0 个 token 需要 0 个 Block）。一次 decode 的
注意力通过这张表读取之前每个 token 的 K 和 V；查询头 h 读 KV 头 h // (H // H_kv)；softmax 之前
先减去每行最大值，scale 默认 1/sqrt(D)。

Reference: Kwon et al., SOSP 2023, section 4.1 (PagedAttention) and 4.3 (block tables).
"""

from __future__ import annotations

import numpy as np  # noqa: F401  (you will need it)


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """How many blocks hold `num_tokens` tokens: a partly filled last block counts."""
    # TODO(student): ceil(num_tokens / block_size) with integers only.
    raise NotImplementedError("blocks_needed")


def locate(block_table, block_size: int, position: int) -> tuple[int, int]:
    """Token position -> (physical block, offset inside it)."""
    # TODO(student): split the position into (logical block, offset) and look the block up.
    raise NotImplementedError("locate")


def slot(block_table, block_size: int, position: int) -> int:
    """Token position -> its flat slot in the cache's token dimension."""
    # TODO(student): physical block times block_size, plus the offset.
    raise NotImplementedError("slot")


def paged_attention(query, kv_cache, block_table, context_len: int, scale=None):
    """Attention of one sequence's query over its first `context_len` cached tokens.

    Returns float64 [H, D]. `scale` defaults to 1 / sqrt(D).
    """
    # TODO(student): gather K and V via the table, softmax(q.K * scale) (max first!), weights @ V.
    raise NotImplementedError("paged_attention")
