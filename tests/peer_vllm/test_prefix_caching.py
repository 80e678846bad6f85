"""vLLM's tests/v1/core/test_prefix_caching.py, re-told on pagedsim (vLLM commit
003df2961dd8830c317a61f9745ccd557da9fa06).

Translations:
    * NULL_BLOCK = -1 is not a pool block, so a vLLM pool of N blocks (block 0 is the null
      block) is `PrefixCachingManager(N - 1, ...)` here and every block id shifts by -1:
      vLLM's [1, 2, 3, 4] is [0, 1, 2, 3].
    * A `Request` is a sequence id plus its token ids: `get_computed_blocks(token_ids)`,
      then `allocate_slots(seq, num_new_tokens, new_token_ids=..., computed=...)`;
      `manager.free(req)` is `free_sequence(seq)`; `block.ref_cnt` is `pool.ref_count(b)`;
      `block.block_hash` is `pool.hash_of(b)` (None: `not pool.is_cached(b)`);
      `free_block_queue.get_all_free_blocks()` is `pool.free_list()`.
    * vLLM's request appends sampled tokens itself; here the ids travel with the call
      (`allocate_slots(seq, n, new_token_ids=[...])`).
    * Deleting an entry of `cached_block_hash_to_block` by hand is `pool.evict_blocks([b])`.
    * Prompt logprobs (plp) make vLLM skip the lookup: here the admission passes no
      `computed`. With caching disabled vLLM's KVCacheManager is the plain KVCacheManager.
Not applicable: multimodal hashes, EAGLE, Mamba, hybrid retention intervals and
connector (external) blocks, per-group block sizes, prefix-cache stats switched off.
"""

import pytest

from pagedsim import KVCacheManager, OutOfBlocks
from pagedsim.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from pagedsim.policies import PrefixCachingManager, chained_hash

B = 16
COMMON = [i for i in range(3) for _ in range(B)]  # three full blocks


def admit(m, seq, tokens, n=None, **keys):
    """get_computed_blocks + allocate_slots for the rest (or `n` new tokens)."""
    hit = m.get_computed_blocks(tokens, **keys)
    n = len(tokens) - hit.num_tokens if n is None else n
    return hit, m.allocate_slots(seq, n, new_token_ids=tokens, computed=hit, **keys)


def test_prefill():
    m = PrefixCachingManager(10, B)  # vLLM: 11 blocks
    all0 = COMMON + [3] * 7
    hit, blocks = admit(m, "0", all0)
    assert hit.blocks == () and hit.num_tokens == 0
    assert blocks == [0, 1, 2, 3]
    parent = 0
    for b in (0, 1, 2):  # full blocks are hashed and chained
        h = chained_hash(parent, tuple(all0[b * B : (b + 1) * B]))
        assert m.pool.hash_of(b) == h and m.pool.ref_count(b) == 1
        parent = h
    assert not m.pool.is_cached(3) and m.pool.ref_count(3) == 1  # the partial block
    hit, blocks = admit(m, "1", COMMON + [3] * 5)  # hit while the blocks are in use
    assert hit.blocks == (0, 1, 2) and hit.num_tokens == 48 and blocks == [4]
    assert all(m.pool.ref_count(b) == 2 for b in hit.blocks)
    assert m.num_free_blocks == 5
    m.free_sequence("0")
    m.free_sequence("1")
    assert m.num_free_blocks == 10
    # partial blocks without hashes at the head, unallocated after them, common at the tail
    assert m.pool.free_list() == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]
    hit, blocks = admit(m, "2", COMMON + [3] * 6)  # hit on free blocks
    assert hit.blocks == (0, 1, 2) and blocks == [4]
    assert m.num_free_blocks == 6 and all(m.pool.ref_count(b) == 0 for b in m.pool.free_list())
    m.free_sequence("2")
    hit, blocks = admit(m, "3", [99] * (16 * 10))  # a miss evicts in queue order
    assert hit.blocks == () and blocks == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]
    assert m.num_free_blocks == 0 and m.pool._next[m.pool._head] == m.pool._tail
    m.check_invariants()


def test_prefill_plp():
    m = PrefixCachingManager(10, B)
    all0 = COMMON + [3] * 7
    blocks0 = m.allocate_slots("0", 55, new_token_ids=all0)  # plp: no lookup
    hashes0 = [m.pool.hash_of(b) for b in blocks0[:3]]
    assert blocks0 == [0, 1, 2, 3]
    hit, blocks = admit(m, "1", COMMON + [3] * 5)  # an ordinary request does hit
    assert hit.blocks == (0, 1, 2) and blocks == [4] and m.num_free_blocks == 5
    m.free_sequence("0")
    m.free_sequence("1")
    assert m.pool.free_list() == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]
    blocks2 = m.allocate_slots("2", 54, new_token_ids=COMMON + [3] * 6)  # plp: no hit
    assert blocks2 != [0, 1, 2, 3]
    # duplicate cached blocks: other ids, the same hashes as request 0's
    assert [m.pool.hash_of(b) for b in blocks2[:3]] == hashes0
    assert all(m.pool.ref_count(b) == 1 for b in blocks2)
    m.check_invariants()


def test_decode():
    m = PrefixCachingManager(10, B)
    _, blocks = admit(m, "0", COMMON + [3] * 7)
    assert blocks == [0, 1, 2, 3]
    assert m.allocate_slots("0", 4, new_token_ids=[8] * 4) == []  # fits in block 3
    assert not m.pool.is_cached(m.block_table("0")[-1])
    new = m.allocate_slots("0", 19, new_token_ids=[7] * 19)  # fills block 3, takes one more
    assert len(new) == 1
    table = m.block_table("0")
    assert m.pool.is_cached(table[-2]) and not m.pool.is_cached(table[-1])


def test_evict():
    m = PrefixCachingManager(10, B)
    _, blocks = admit(m, "0", list(range(5 * 16 + 7)))
    assert len(blocks) == 6  # 5 full + 1 partial
    _, blocks = admit(m, "1", list(range(87, 87 + 3 * 16)))
    assert len(blocks) == 3 and m.num_free_blocks == 1
    m.free_sequence("0")
    assert m.pool.free_list() == [5, 9, 4, 3, 2, 1, 0]  # partial at the head, LRU at the tail
    m.free_sequence("1")
    assert m.pool.free_list() == [5, 9, 4, 3, 2, 1, 0, 8, 7, 6]
    hit, blocks = admit(m, "2", list(range(2 * 16 + 3)))  # touch the first two blocks
    assert hit.blocks == (0, 1) and hit.num_tokens == 32 and blocks == [5]
    assert m.num_free_blocks == 7


def test_hash_block_correct_reuse():
    m = PrefixCachingManager(1, B)  # vLLM: 2 blocks
    _, blocks = admit(m, "0", list(range(16)))
    assert len(blocks) == 1 and m.pool.is_cached(blocks[0])
    m.free_sequence("0")
    _, blocks = admit(m, "1", list(range(15)))  # not full: the reused block's hash is reset
    assert len(blocks) == 1 and not m.pool.is_cached(blocks[0])


def test_computed_blocks_not_evicted():
    m = PrefixCachingManager(2, B)  # vLLM: 3 blocks
    _, blocks = admit(m, "0", list(range(16)))
    assert blocks == [0]
    _, blocks = admit(m, "1", list(range(16, 32)))
    assert blocks == [1]
    m.free_sequence("0")
    m.free_sequence("1")
    hit, blocks = admit(m, "2", list(range(32)))  # hits block 0: block 1 is evicted instead
    assert hit.blocks == (0,) and hit.num_tokens == 16 and blocks == [1]


def test_basic_prefix_caching_disabled():
    m = KVCacheManager(4, 4)  # vLLM: 5 blocks, enable_caching=False
    m.add_sequence("1", 10)
    assert len(m.block_table("1")) == 3
    m.free_sequence("1")
    m.add_sequence("2", 16)  # no caching: no hit on the shared prefix
    assert len(m.block_table("2")) == 4
    with pytest.raises(OutOfBlocks):  # vLLM: allocate_slots returns None
        m.add_sequence("3", 4)


def test_cache_blocks():
    # cache_full_blocks for two full blocks, then for the third (block_size 4, 14 tokens)
    m = PrefixCachingManager(5, 4)
    m.allocate_slots("0", 8, new_token_ids=list(range(14)))
    assert len([b for b in m.block_table("0") if m.pool.is_cached(b)]) == 2
    m.allocate_slots("0", 4)
    assert len([b for b in m.block_table("0") if m.pool.is_cached(b)]) == 3
    m.check_invariants()


def test_cache_key_salting():
    m = PrefixCachingManager(10, B)
    tokens = COMMON + [3] * 11
    hit, blocks = admit(m, "0", tokens, cache_salt="salt1")
    assert hit.num_tokens == 0 and blocks == [0, 1, 2, 3]
    salted = [m.pool.hash_of(b) for b in blocks[:3]]
    assert salted[0] != chained_hash(0, tuple(tokens[:B]))  # the salt is in the first hash
    assert salted[1] == chained_hash(salted[0], tuple(tokens[B : 2 * B]))  # ... and chains on
    assert m.allocate_slots("0", 5, new_token_ids=[8] * 5) == []
    hit = m.get_computed_blocks(COMMON + [4] * 11, cache_salt="salt1")
    assert len(hit.blocks) == 3 and hit.num_tokens == 48  # same salt: a hit
    hit = m.get_computed_blocks(COMMON + [4] * 11, cache_salt="salt2")
    assert hit.blocks == () and hit.num_tokens == 0  # other salt: a miss


def test_prefill_not_enough_free_blocks_with_computed_blocks():
    m = PrefixCachingManager(10, B)
    admit(m, "0", COMMON)
    part0 = m.block_table("0").blocks
    hit, _ = admit(m, "1", COMMON * 2)
    assert list(hit.blocks) == part0 and hit.num_tokens == 48
    part1 = m.block_table("1").blocks
    m.free_sequence("1")
    assert {m.pool.ref_count(b) for b in part1[:3]} == {1}
    assert {m.pool.ref_count(b) for b in part1[3:]} == {0}
    admit(m, "2", [7] * B * 2)
    assert m.num_free_blocks == 5
    hit = m.get_computed_blocks(COMMON * 3)
    assert list(hit.blocks) == part1 and hit.num_tokens == 96
    assert m.allocate_slots("3", 48, new_token_ids=COMMON * 3, computed=hit) is None
    assert {m.pool.ref_count(b) for b in part1[:3]} == {1}  # counts untouched
    assert {m.pool.ref_count(b) for b in part1[3:]} == {0}


def test_reset_prefix_cache():
    m = PrefixCachingManager(10, B)
    blocks = m.allocate_slots("0", 55, new_token_ids=COMMON + [3] * 7)
    assert blocks == [0, 1, 2, 3]
    hit, blocks = admit(m, "1", COMMON + [4] * 7)
    assert len(hit.blocks) == 3 and blocks == [4]
    assert not m.reset_prefix_cache()  # blocks in use
    assert m.pool.is_cached(0)
    m.free_sequence("0")
    m.free_sequence("1")
    assert m.reset_prefix_cache()
    assert not any(m.pool.is_cached(b) for b in range(10))


def test_maybe_evict_cached_block():
    # two blocks with the same hash (duplicates): evicting one keeps the other findable
    m = PrefixCachingManager(4, 2)
    m.allocate_slots("a", 2, new_token_ids=[1, 2])
    m.allocate_slots("b", 2, new_token_ids=[1, 2])  # no lookup: a duplicate of a's block
    a, b = m.block_table("a")[0], m.block_table("b")[0]
    assert m.pool.hash_of(a) == m.pool.hash_of(b) and a != b
    m.free_sequence("a")
    m.free_sequence("b")
    m.pool.evict_blocks([a])
    assert m.get_computed_blocks([1, 2, 3]).blocks == (b,)
    m.pool.evict_blocks([b])
    assert m.get_computed_blocks([1, 2, 3]).blocks == ()
    m.check_invariants()


@pytest.mark.parametrize("blocks_to_cache", [2, 3, 10])
def test_kv_cache_events(blocks_to_cache):
    m = PrefixCachingManager(blocks_to_cache, B, enable_kv_cache_events=True)  # vLLM: +1
    n = B * blocks_to_cache
    m.allocate_slots("0", n, new_token_ids=list(range(n)))
    events = m.take_events()
    stored = events[-1]
    assert isinstance(stored, BlockStored)
    assert len(stored.block_hashes) == blocks_to_cache == len(m.pool._key)
    assert len(stored.token_ids) == stored.block_size * len(stored.block_hashes)
    assert m.take_events() == []
    m.free_sequence("0")
    m.allocate_slots("1", n, new_token_ids=list(range(n)))  # no lookup: every block evicted
    events = m.take_events()
    assert len(events) == blocks_to_cache + 1
    for e in events[:-1]:
        assert isinstance(e, BlockRemoved) and e.block_hashes[0] in stored.block_hashes
    assert len(events[-1].block_hashes) == blocks_to_cache
    m.free_sequence("1")
    m.reset_prefix_cache()
    assert isinstance(m.take_events()[-1], AllBlocksCleared) and not m.pool._key


@pytest.mark.parametrize("blocks_to_cache", [2, 3, 10])
def test_kv_cache_events_with_lora(blocks_to_cache):
    m = PrefixCachingManager(blocks_to_cache, B, enable_kv_cache_events=True)
    n = B * blocks_to_cache
    m.allocate_slots("lora_req", n, new_token_ids=list(range(n)), lora_id=42)
    stored = m.take_events()[-1]
    assert isinstance(stored, BlockStored) and stored.lora_id == 42
    assert len(stored.block_hashes) == blocks_to_cache and stored.block_size == B
    m.free_sequence("lora_req")
    m.allocate_slots("no_lora_req", n, new_token_ids=list(range(n)))
    stored = m.take_events()[-1]
    assert stored.lora_id is None and len(stored.block_hashes) == blocks_to_cache
