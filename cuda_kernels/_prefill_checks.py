"""Host-side checks of a paged-prefill batch (`prefill.paged_prefill` runs them first).

The query, cache and window arguments go through the validators every attention
launcher shares (`_checks.check_query`, `layout.check_kv_cache`, `_checks.window_args`);
this adds what only a ragged prefill batch has: query_start_loc [S + 1] running from 0 to
the query's token count without going down, every context at least as long as its query
tokens, and every block-table entry the kernel will read (the attended blocks of each
sequence with queries, windowed as `attention.attended_ranges` says) inside the cache.
A refused batch has launched nothing and changed nothing.
"""

from __future__ import annotations

import numpy as np

from . import _checks as ck
from .attention import attended_ranges, check_read_blocks


def check_batch(query, num_kv_heads, head_dim, block_size, num_blocks, block_tables,
                 context_lens, query_start_loc, causal, window, sinks):
    """Validate everything but the cache; returns (tables, lens, starts) on the host."""
    total_q = ck.check_query(query, num_kv_heads, head_dim, "token")[0]
    tables = ck.host_ints("block_tables", block_tables, 2)
    lens = ck.host_ints("context_lens", context_lens, 1)
    starts = ck.host_ints("query_start_loc", query_start_loc, 1)
    if tables.dtype != np.int32 or lens.dtype != np.int32 or starts.dtype != np.int32:
        raise ValueError("block_tables, context_lens and query_start_loc must be int32")
    num_seqs = len(lens)
    ck.require_shape("query_start_loc", starts, (num_seqs + 1,))
    if tables.shape[0] != num_seqs:
        raise ValueError(f"block_tables has {tables.shape[0]} rows for {num_seqs} sequences")
    if starts[0] != 0 or starts[-1] != total_q:
        raise ValueError(f"query_start_loc must run from 0 to {total_q} (the query's tokens), "
                         f"got {int(starts[0])} .. {int(starts[-1])}")
    q_lens = np.diff(starts.astype(np.int64))
    ck.require_range("query lengths (query_start_loc diffs)", q_lens, 0, 2**31)
    max_blocks = tables.shape[1]
    ck.require_range("context_lens", lens, 1, max_blocks * block_size + 1,
                     f": block_tables has {max_blocks} blocks of {block_size} tokens")
    at = ck.first_bad(lens < q_lens)
    if at is not None:
        raise ValueError(f"context_lens[{at[0]}] = {int(lens[at])} is shorter than its "
                         f"{int(q_lens[at])} query tokens")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    ctx = lens.astype(np.int64)
    len_lo = ctx - q_lens + 1 if causal else ctx  # positions seen by each first / last row
    kept_hi, _, _ = attended_ranges(ctx, window, sinks)
    _, start_lo, _ = attended_ranges(len_lo, window, sinks)
    check_read_blocks(tables, block_size, num_blocks, kept_hi, start_lo, ctx, rows=q_lens > 0)
    return tables, lens, starts, q_lens
