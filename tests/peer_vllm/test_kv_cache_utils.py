"""vLLM's tests/v1/core/test_kv_cache_utils.py, re-told on pagedsim (vLLM commit
002f10e0cfa1373a19a0d2756598a34b700d20e5).

Translations:
    * vLLM's `FreeKVCacheBlockQueue(blocks)` is pagedsim's `LinkedBlockPool`: `popleft()` is
      `allocate()`, `popleft_n(k)` is `allocate_many(k)`, `remove(block)` is `take(b)`,
      `append(block)` / `append_n` is freeing with `free_order="fifo"` (to the tail), and
      `prepend_n` is `CachingBlockPool.release` of unhashed blocks (to the head, in order).
      A queue that starts in an arbitrary order is made by allocating every block and
      freeing them in that order. `fake_free_list_head/tail` are the sentinel ids
      `num_gpu_blocks` and `num_gpu_blocks + 1`; `next_free_block` is `_next[b]`. The plain
      `BlockPool` keeps its free ids on stacks instead, in the same order: the tests that
      look only at the order run on both.
    * These queue tests build the queue directly, with no null block, so ids do not shift.
    * `hash_block_tokens(hash_fn, parent, tokens, extra_keys)` is `chained_hash(parent,
      tokens)`; extra keys (cache_salt, LoRA) are part of the lookup, not of the hash
      function: they give a prompt its own root (policies/prefix_cache.py).
    * `CachingMetrics.hit_rate` over PrefixCacheStats(queries, hits) is CacheStats.hit_rate
      over (prompt_tokens, hit_tokens).
Not applicable: KVCacheConfig sizing and memory (get_kv_cache_configs, estimate_max_model_len,
concurrency, page sizes, HiSparse, DCP), multimodal and prompt-embedding extra keys, the
NONE_HASH seed: pagedsim has no model layers, no images and no cross-process hash seed.
"""

import pytest

from pagedsim import BlockPool, OutOfBlocks
from pagedsim.linked_pool import LinkedBlockPool
from pagedsim.policies import CachingBlockPool, PrefixCachingManager, chained_hash
from pagedsim.policies.cache_stats import CacheStats


def queue_in_order(order, free_order="fifo", pool_class=LinkedBlockPool):
    """A pool whose free list is exactly `order` (every other block allocated)."""
    pool = pool_class(max(order) + 1 if order else 1, 1, free_order)
    taken = pool.allocate_many(pool.num_gpu_blocks)
    assert taken == list(range(pool.num_gpu_blocks))
    for b in order:
        pool.free(b)
    return pool


def test_free_kv_cache_block_queue_initialization():
    # re-tells test_free_kv_cache_block_queue_initialization
    pool = LinkedBlockPool(1, 1)
    assert pool.num_free_blocks == 1 and pool._next[pool._head] == 0 and pool._prev[pool._tail] == 0


def test_free_kv_cache_block_queue_operations():
    # re-tells test_free_kv_cache_block_queue_operations
    pool = LinkedBlockPool(5, 1, "fifo")
    assert pool.num_free_blocks == 5 and pool.head() == 0 and pool._prev[pool._tail] == 4
    assert pool.allocate() == 0  # popleft
    assert pool.num_free_blocks == 4 and pool.head() == 1 and pool._prev[pool._tail] == 4
    pool.take(2)  # remove from the middle
    assert pool.num_free_blocks == 3 and pool._next[1] == 3 and pool._prev[3] == 1
    pool.free(2)  # append back (fifo: to the tail)
    assert pool.num_free_blocks == 4 and pool._prev[pool._tail] == 2
    assert pool._prev[2] == 4 and pool._next[2] == pool._tail
    for _ in range(4):
        pool.allocate()
    assert pool.num_free_blocks == 0 and pool._next[pool._head] == pool._tail
    assert pool._prev[pool._tail] == pool._head
    with pytest.raises(OutOfBlocks):  # vLLM: ValueError("No free blocks available")
        pool.allocate()
    pool.check_invariants()


def test_free_kv_cache_block_queue_append_n():
    # re-tells test_free_kv_cache_block_queue_append_n (release in fifo order = append_n)
    pool = LinkedBlockPool(6, 1, "fifo")
    pool.allocate_many(6)
    pool.release([])
    assert pool.num_free_blocks == 0 and pool._next[pool._head] == pool._tail
    pool.release([0])
    assert pool.free_list() == [0] and pool._prev[0] == pool._head and pool._next[0] == pool._tail
    pool.release([4, 5])
    assert pool.free_list() == [0, 4, 5] and pool._prev[4] == 0 and pool._next[5] == pool._tail
    pool.release([1, 2, 3])
    assert pool.free_list() == [0, 4, 5, 1, 2, 3]
    assert [pool._prev[b] for b in (4, 5, 1, 2, 3)] == [0, 4, 5, 1, 2]
    pool.check_invariants()


def test_free_kv_cache_block_queue_prepend_n():
    # re-tells test_free_kv_cache_block_queue_prepend_n: unhashed blocks freed by a caching
    # pool go to the head as one run, order kept
    pool = CachingBlockPool(6, 1)
    pool.allocate_many(6)
    pool.release([0])
    pool.release([])
    assert pool.free_list() == [0]
    pool.release([4, 5])
    assert pool.free_list() == [4, 5, 0] and pool._prev[4] == pool._head
    pool.release([1, 2])
    assert pool.free_list() == [1, 2, 4, 5, 0]
    assert [pool.allocate() for _ in range(5)] == [1, 2, 4, 5, 0] and pool.num_free_blocks == 0


@pytest.mark.parametrize("pool_class", [LinkedBlockPool, BlockPool])
def test_free_kv_cache_block_queue_popleft_n(pool_class):
    # re-tells test_free_kv_cache_block_queue_popleft_n
    pool = queue_in_order([1, 3, 5, 4, 0, 2], pool_class=pool_class)
    assert pool.free_list() == [1, 3, 5, 4, 0, 2]
    assert pool.allocate_many(0) == [] and pool.num_free_blocks == 6
    assert pool.allocate_many(1) == [1] and pool.num_free_blocks == 5
    assert pool.allocate_many(2) == [3, 5] and pool.num_free_blocks == 3
    assert pool.allocate_many(3) == [4, 0, 2] and pool.num_free_blocks == 0
    assert pool.head() is None
    pool.check_invariants()


@pytest.mark.parametrize("pool_class", [LinkedBlockPool, BlockPool])
def test_free_kv_cache_block_queue_get_all_free_blocks(pool_class):
    # re-tells test_free_kv_cache_block_queue_get_all_free_blocks
    pool = pool_class(5, 1, "fifo")
    assert pool.free_list() == [0, 1, 2, 3, 4]
    pool.allocate()
    assert pool.free_list() == [1, 2, 3, 4]
    pool.take(2)
    assert pool.free_list() == [1, 3, 4]
    pool.free(2)
    assert pool.free_list() == [1, 3, 4, 2]


def test_kv_cache_block():
    # re-tells test_kv_cache_block: a block's count and its hash are set and reset
    pool = CachingBlockPool(2, 1)
    b = pool.allocate()
    assert pool.ref_count(b) == 1 and not pool.is_cached(b)
    pool.incref(b)
    assert pool.ref_count(b) == 2
    pool.free(b)
    pool.cache(b, 123, (7,), 0)
    assert pool.is_cached(b) and pool.hash_of(b) == 123
    pool.free(b)  # freed: still cached until handed out again
    pool.allocate()  # the uncached block first
    assert pool.allocate() == b and not pool.is_cached(b)  # evicted: hash reset


def test_hash_block_tokens():
    # re-tells test_hash_block_tokens (no extra keys in the hash function itself)
    assert chained_hash(123, (1, 2, 3)) == hash((123, (1, 2, 3)))
    assert chained_hash(123, (1, 2, 3)) != chained_hash(124, (1, 2, 3))


def test_hash_request_tokens_no_mm_inputs():
    # re-tells test_hash_request_tokens_no_mm_inputs: block_size 3, six tokens, two hashes
    m = PrefixCachingManager(4, 3)
    m.allocate_slots("0", 6, new_token_ids=list(range(6)))
    h0, h1 = (m.pool.hash_of(b) for b in m.block_table("0"))
    assert h0 == chained_hash(0, (0, 1, 2)) and h1 == chained_hash(h0, (3, 4, 5))


def test_generate_block_hash_extra_keys_cache_salt():
    # re-tells test_generate_block_hash_extra_keys_cache_salt: the salt changes the chain,
    # so every block of a salted prompt hashes differently from the unsalted one
    m = PrefixCachingManager(8, 3)
    m.allocate_slots("plain", 6, new_token_ids=list(range(6)))
    m.allocate_slots("salted", 6, new_token_ids=list(range(6)), cache_salt="salt")
    plain = [m.pool.hash_of(b) for b in m.block_table("plain")]
    salted = [m.pool.hash_of(b) for b in m.block_table("salted")]
    assert plain[0] != salted[0] and plain[1] != salted[1]
    assert salted[1] == chained_hash(salted[0], (3, 4, 5))  # only the first block sees the salt


def test_generate_block_hash_extra_keys_lora():
    # re-tells test_generate_block_hash_extra_keys_lora: an adapter's blocks are its own
    m = PrefixCachingManager(8, 3)
    m.allocate_slots("a", 6, new_token_ids=list(range(6)), lora_id=1)
    assert m.get_computed_blocks(list(range(7)), lora_id=1).num_tokens == 6
    assert m.get_computed_blocks(list(range(7))).num_tokens == 0  # lora_request = None


def test_metrics():
    # re-tells test_metrics: the hit rate is hits / queries, in tokens
    stats = CacheStats()
    assert stats.hit_rate == 0.0
    stats.prompt_tokens, stats.hit_tokens = 20, 9
    assert stats.hit_rate == 0.45
    stats.prompt_tokens, stats.hit_tokens = 100, 25
    assert stats.hit_rate == 0.25


@pytest.mark.parametrize("new, lookahead, blocks", [(3, 2, 2), (3, 4, 2), (3, 6, 3)])
def test_allocate_with_lookahead(new, lookahead, blocks):
    # re-tells test_allocate_with_lookahead: ceil((new + lookahead) / 4) blocks
    m = PrefixCachingManager(10, 4)
    got = m.allocate_slots("0", new, num_lookahead_tokens=lookahead, new_token_ids=[1, 2, 3])
    assert len(got) == blocks and m.num_computed_tokens("0") == new
