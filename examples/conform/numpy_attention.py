"""A correct paged attention in plain NumPy, with the testing kit's signature:

    pagedsim conform examples/conform/deque_allocator.py:DequeBlockManager \
        --attention examples/conform/numpy_attention.py:paged_attention

query [S, H, D], kv_cache [num_blocks, 2, H_kv, block_size, D], block_tables int32
[S, max_blocks], context_lens int32 [S] -> [S, H, D] float32. Query head h reads KV
head h // (H // H_kv) (grouped-query attention).
"""

import numpy as np


def paged_attention(query, kv_cache, block_tables, context_lens, scale):
    num_heads, block_size = query.shape[1], kv_cache.shape[3]
    group = num_heads // kv_cache.shape[2]
    out = np.empty(query.shape, np.float32)
    for s, n in enumerate(context_lens):
        positions = np.arange(n)
        blocks = block_tables[s][positions // block_size]  # physical block of each token
        keys = kv_cache[blocks, 0, :, positions % block_size].astype(np.float32)  # [n, H_kv, D]
        values = kv_cache[blocks, 1, :, positions % block_size].astype(np.float32)
        for h in range(num_heads):
            scores = keys[:, h // group] @ query[s, h].astype(np.float32) * scale  # [n]
            weights = np.exp(scores - scores.max())
            out[s, h] = weights / weights.sum() @ values[:, h // group]
    return out
