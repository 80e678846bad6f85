"""vLLM's block-index tests, re-told on pagedsim's CachingBlockPool through its managers:
tests/v1/core/test_prefix_caching.py::test_block_lookup_cache_single_block_per_key,
::test_block_lookup_cache_multi_blocks_per_key and ::test_cache_blocks_multi_group, as
read on vLLM's main branch (the BlockHashToBlockMap era; kv_events.py at commit 0181ea3).

Translations: vLLM's `BlockHashToBlockMap` (insert / get_one_block / pop(key, block_id))
is the pool's hash index: `cache` inserts (a manager caches a block as it fills),
`lookup` is get_one_block (the first block inserted under the hash wins, as vLLM's dict
keeps insertion order), and pop(key, block_id) is `evict_blocks([block_id])`, which
forgets exactly that block and skips an id that holds nothing cached. vLLM builds the
map by hand with fake hashes; here two sequences compute the same prompt at once (no
lookup in between), which is how duplicates arise (v1 never de-duplicates, so block
tables stay append-only). `BlockHashWithGroupId` is pagedsim's per-group root: the
hybrid manager's two groups never find each other's blocks.
"""

from pagedsim.policies import PrefixCachingManager
from pagedsim.policies.hybrid import HybridManager

B = 4
PROMPT = list(range(2 * B))


def hashes_and_tokens(m, blocks):
    return [(m.pool.hash_of(b), m.pool.tokens_of(b)) for b in blocks]


def first_block(m, seq):
    """The key (hash, tokens, parent: the root) of seq's first block, for `lookup`."""
    b = m.block_table(seq)[0]
    return b, (m.pool.hash_of(b), m.pool.tokens_of(b), m.pool.root_of(()))


def test_one_block_per_hash_is_found_until_that_very_block_is_evicted():
    m = PrefixCachingManager(6, B)
    m.allocate_slots("0", B, new_token_ids=PROMPT[:B])
    m.allocate_slots("1", B, new_token_ids=[9] * B)
    b0, key0 = first_block(m, "0")
    b1, key1 = first_block(m, "1")
    assert m.pool.lookup(*key0) == b0 and m.pool.lookup(*key1) == b1
    m.pool.evict_blocks([5])  # an id that holds nothing cached: nothing is forgotten
    assert m.pool.lookup(*key0) == b0 and m.pool.lookup(*key1) == b1
    m.pool.evict_blocks([b0])
    assert m.pool.lookup(*key0) is None and m.pool.lookup(*key1) == b1
    m.pool.evict_blocks([b1])
    assert m.pool.lookup(*key1) is None
    m.check_invariants()


def test_two_blocks_under_one_hash_are_both_kept_and_the_first_one_is_found():
    m = PrefixCachingManager(6, B)
    m.allocate_slots("a", len(PROMPT), new_token_ids=PROMPT)  # no lookup in between: both
    m.allocate_slots("b", len(PROMPT), new_token_ids=PROMPT)  # compute the same blocks
    a, b = m.block_table("a"), m.block_table("b")
    assert set(a).isdisjoint(b) and hashes_and_tokens(m, a) == hashes_and_tokens(m, b)
    _, key = first_block(m, "a")
    assert m.pool.lookup(*key) == a[0]  # the first inserted wins
    assert m.get_computed_blocks(PROMPT + [0]).blocks == tuple(a)
    m.pool.evict_blocks([a[0]])
    assert m.pool.lookup(*key) == b[0]  # the duplicate still answers
    m.pool.evict_blocks([b[0]])
    assert m.pool.lookup(*key) is None
    m.check_invariants()


def test_each_kv_cache_group_finds_only_the_blocks_it_cached():
    m = HybridManager(8, B, sliding_window=2 * B, trace=False)
    m.allocate_slots("0", 3 * B, new_token_ids=list(range(3 * B)))
    full, window = m.block_tables("0")
    for own, other in ((m.full, m.window), (m.window, m.full)):
        blocks = [b for b in own.block_table("0") if b >= 0]
        assert blocks and all(m.pool.is_cached(b) for b in blocks)
        assert not set(blocks) & {b for b in other.block_table("0")}
    # the same tokens carry the same hash in both groups (v1 0.34: the index keys it with the
    # group id, BlockHashWithGroupId; tests/vllm_oracle), yet neither lookup returns the other's
    kept = [i for i, b in enumerate(window) if b >= 0]
    assert [m.pool.hash_of(full[i]) for i in kept] == [m.pool.hash_of(window[i]) for i in kept]
    hit = m.get_computed_blocks(list(range(3 * B)) + [0])
    assert hit.blocks[0] == tuple(full) and hit.num_tokens == 3 * B
