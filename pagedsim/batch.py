"""Planning one decode step over a batch of block tables, before anything changes (3.4).

`KVCacheManager.decode_step(seq_ids)` appends one token to each listed sequence; a
sequence listed k times gets k tokens. Everything it will do can be worked out from
the tables and the pool's counts alone, which is what makes the step all-or-nothing:

    start_positions   where each entry's token goes (a table listed k times fills k
                      positions in turn)
    plan_copies       which tables must copy their last block first (copy-on-write):
                      a table whose first write lands in a partly filled block that
                      another table still holds. Writers earlier in the batch that
                      copied away from the same block lower its count, exactly as
                      `append_tokens(s, 1)` for each entry in turn would. The step
                      makes these copies first, then hands out the boundary blocks, so
                      the main loop over the batch stays one tight pass.
    decode_need       free blocks the step takes: one per entry at a block boundary,
                      one per copy.

Copy-on-write is vLLM v0's mechanism (v1 shares only full, cached blocks).
These functions read the pool only through its public queries.
"""

from __future__ import annotations


def start_positions(batch) -> list[int]:
    """The position each entry's token is written to, in entry order."""
    positions = [t.num_tokens for t in batch]
    if len(set(map(id, batch))) != len(batch):  # a table listed more than once
        seen: dict = {}
        for i, t in enumerate(batch):
            k = seen.get(id(t), 0)
            positions[i] += k
            seen[id(t)] = k + 1
    return positions


def plan_copies(batch, pool, block_size: int) -> list:
    """[(table, shared block)], in entry order, for every table whose first write must copy."""
    out: list = []
    if not pool.num_shared:
        return out
    seen, drops = set(), {}  # drops: shared block -> earlier writers that copied away from it
    for t in batch:
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.num_tokens % block_size:
            src = t.blocks[-1]
            if pool.ref_count(src) - drops.get(src, 0) > 1:
                out.append((t, src))
                drops[src] = drops.get(src, 0) + 1
    return out


def decode_need(batch, pool, block_size: int) -> int:
    """Free blocks the step takes: a new block at each boundary, one per copy-on-write."""
    boundaries = sum(1 for p in start_positions(batch) if not p % block_size)
    return boundaries + len(plan_copies(batch, pool, block_size))
