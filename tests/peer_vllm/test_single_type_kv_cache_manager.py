"""vLLM's tests/v1/core/test_single_type_kv_cache_manager.py, re-told on pagedsim
(vLLM commit 00b08dc44519a82cbdd9061d92d1226985094622).

Translations:
    * vLLM's SlidingWindowManager over a BlockPool is pagedsim's
      `SlidingWindowPrefixCachingManager(num_gpu_blocks, block_size, sliding_window=W)`; the null
      block is NULL_BLOCK = -1, so block ids shift by -1 and a pool of N is N - 1 here.
    * vLLM fills `cached_block_hash_to_block` by hand; here a prompt is cached for real and
      the blocks that should miss are evicted with `pool.evict_blocks`. A chain is only
      findable through its cached blocks, so an evicted block *after the last cached one*
      is simply the end of the prompt, as in vLLM, where a lookup never reads past it.
    * `find_longest_cache_hit(..., max_length=L)` is `get_computed_blocks` of the prompt plus
      one token (its cap, num_tokens - 1, is then exactly L).
    * `remove_skipped_blocks(req, n)` runs at the end of every step with n = the computed
      tokens; a table of 11 blocks with n computed is made with lookahead slots.
    * `get_num_blocks_to_allocate` is the drop in free blocks an admission causes.
Not applicable: chunked local attention, circular buffers, Mamba, R-SWA, zeroing of new
blocks, external (connector) blocks, finer hash alignment, the admission cap.
"""

import pytest

from pagedsim import NULL_BLOCK
from pagedsim.policies import SlidingWindowPrefixCachingManager

B, W = 2, 4


def cached_pattern(block_is_cached):
    """A manager whose prefix cache holds exactly the blocks marked True of one prompt."""
    n = len(block_is_cached)
    m = SlidingWindowPrefixCachingManager(2 * n + 4, B, sliding_window=W)
    tokens = list(range(n * B))
    m.allocate_slots("prime", n * B, new_token_ids=tokens)
    m.free_sequence("prime")
    blocks = {m.pool.tokens_of(b): b for b in m.cached_free_blocks()}
    by_logical = [blocks[tuple(tokens[i * B : (i + 1) * B])] for i in range(n)]
    m.pool.evict_blocks(
        [b for b, keep in zip(by_logical, block_is_cached, strict=True) if not keep]
    )
    return m, tokens, by_logical


@pytest.mark.parametrize(
    "block_is_cached, expect_length",
    [
        ([False] * 10, 0),
        ([True], 1),
        ([True, False], 1),
        ([True, True], 2),
        ([True, True, False], 2),
        ([True, True, True], 3),
        ([True, True, True, False], 3),
        ([True, True, False, True, False, False, True, True, False, True, True, True], 12),
        ([True, True, False, True, False, False, True, True, False, False, False], 8),
        ([True, True, False, True, False, False, True, True, False, False, False, True], 8),
    ],
)
def test_sliding_window_possible_cached_prefix(block_is_cached, expect_length):
    m, tokens, by_logical = cached_pattern(block_is_cached)
    hit = m.get_computed_blocks(tokens + [999])  # max_length = len(blocks) * B
    assert len(hit.blocks) == expect_length
    assert all(b == NULL_BLOCK for b in hit.blocks[: max(expect_length - 2, 0)])
    for i in range(min(2, expect_length)):  # the last two are the cached ones
        k = expect_length - i - 1
        assert hit.blocks[k] == by_logical[k]
    m.check_invariants()


def test_sliding_window_remove_skipped_blocks():
    m = SlidingWindowPrefixCachingManager(40, B, sliding_window=W)
    m.allocate_slots("test", 0, num_lookahead_tokens=22, new_token_ids=list(range(22)))
    original = m.block_table("test").blocks
    assert len(original) == 11
    expected = {0: 0, 4: 0, 5: 1, 6: 1, 7: 2, 11: 4}  # computed tokens -> null entries
    done = 0
    for n, nulls in expected.items():
        m.allocate_slots("test", n - done)  # n computed; the lookahead keeps the table at 11
        done = n
        table = m.block_table("test").blocks
        assert table == [NULL_BLOCK] * nulls + original[nulls:], f"{n} computed tokens"
        m.check_invariants()
    # blocks 2 and 3 went in one step: 3 ends the longer prefix and is evicted first
    m2 = SlidingWindowPrefixCachingManager(11, B, sliding_window=W)
    m2.allocate_slots("test", 0, num_lookahead_tokens=22, new_token_ids=list(range(22)))
    t = m2.block_table("test").blocks
    m2.allocate_slots("test", 7)
    m2.allocate_slots("test", 4)  # 11 computed: blocks 2 and 3 are dropped together
    order = [b for b in m2.pool.free_list() if b in (t[2], t[3])]
    assert order == [t[3], t[2]]


def blocks_taken(m, seq, tokens, hit):
    """Free blocks an admission takes: the drop in free blocks plus what the window freed."""
    free, dropped = m.num_free_blocks, m.dropped_blocks
    m.allocate_slots(seq, len(tokens) - hit.num_tokens, new_token_ids=tokens, computed=hit)
    return free - m.num_free_blocks + m.dropped_blocks - dropped


def primed(sliding_window, evict_first=0):
    """20-token prompt cached (10 blocks), its first `evict_first` blocks evicted."""
    m = SlidingWindowPrefixCachingManager(60, B, sliding_window=sliding_window)
    m.allocate_slots("prime", 20, new_token_ids=list(range(20)))
    m.free_sequence("prime")
    m.pool.evict_blocks(
        [b for b in m.cached_free_blocks() if m.pool.tokens_of(b)[0] < evict_first * B]
    )
    return m


def test_get_num_blocks_to_allocate():
    tokens = list(range(40))  # 20 blocks
    m = primed(sliding_window=1000)  # a hit from block 0: ten cached, free blocks
    hit = m.get_computed_blocks(tokens)
    assert len(hit.blocks) == 10 and NULL_BLOCK not in hit.blocks
    assert blocks_taken(m, "1", tokens, hit) == 20  # the ten hits leave the free list too
    m = primed(
        sliding_window=10, evict_first=5
    )  # a hit needs ceil(9 / 2) = 5 blocks from the right
    hit = m.get_computed_blocks(tokens)
    assert hit.blocks[:5] == (NULL_BLOCK,) * 5 and len(hit.blocks) == 10
    assert blocks_taken(m, "2", tokens, hit) == 15  # null blocks cost nothing


def test_evictable_cached_blocks_not_double_allocated():
    m = SlidingWindowPrefixCachingManager(99, B, sliding_window=2 * B)
    m.allocate_slots("prime", B, new_token_ids=[5, 6])
    m.free_sequence("prime")
    evictable = m.cached_free_blocks()[0]  # ref count 0, an eviction candidate
    hit = m.get_computed_blocks([5, 6, 7, 8])
    assert hit.blocks == (evictable,)
    free = m.num_free_blocks
    new = m.allocate_slots("req", 2, new_token_ids=[5, 6, 7, 8], computed=hit)
    assert free - m.num_free_blocks == 2  # the evictable hit and one new block
    assert len(new) == 1 and len(m.block_table("req")) == 2
