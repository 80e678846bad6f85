"""vLLM's test_prefill_hybrid_model (tests/v1/core/test_prefix_caching.py, vLLM commit
003df2961dd8830c317a61f9745ccd557da9fa06), re-told on pagedsim's HybridManager.

Translations: vLLM's config has one full-attention group and *two* sliding-window groups
(window 2 blocks); pagedsim's hybrid manager has one of each, so vLLM's third group's
blocks are absent and its expectations for group 1 stand for both. NULL_BLOCK = -1, so
vLLM's pool of 21 blocks is 20 here and ids shift by -1 (vLLM numbers the groups' blocks
1-4, 5-8, 9-12; here 0-3 and 4-7). `_test_partial_request_hit` pops a hash from the index
and puts it back; here each case evicts the blocks (`pool.evict_blocks`) in a fresh copy of
the same history. Our window group frees the blocks its next query never reads at the end
of the step (v1: at the next allocation), so its table shows the null block one step early.
"""

import pytest

from pagedsim import NULL_BLOCK
from pagedsim.policies.hybrid import HybridManager

B = 16
COMMON = [i for i in range(3) for _ in range(B)]


def history():
    m = HybridManager(20, B, sliding_window=2 * B)
    all0 = COMMON + [3] * 7
    hit = m.get_computed_blocks(all0)
    assert hit.blocks == ((), ()) and hit.num_tokens == 0
    full0, window0 = m.allocate_slots("0", 55, new_token_ids=all0, computed=hit)
    return m, full0, window0


def test_prefill_hybrid_model():
    m, full0, window0 = history()
    assert (full0, window0) == ([0, 1, 2, 3], [4, 5, 6, 7])
    for i in range(3):  # full blocks are cached in both groups, under one hash (v1 0.34:
        # the index keys it with the group id; tests/vllm_oracle), from distinct roots
        assert m.pool.is_cached(full0[i]) and m.pool.is_cached(window0[i])
        assert m.pool.hash_of(full0[i]) == m.pool.hash_of(window0[i])
        assert m.pool.parent_key(full0[i]) != m.pool.parent_key(window0[i])
    assert not m.pool.is_cached(full0[3]) and not m.pool.is_cached(window0[3])
    hit = m.get_computed_blocks(COMMON + [3] * 5)
    assert hit.blocks == ((0, 1, 2), (NULL_BLOCK, 5, 6)) and hit.num_tokens == 48
    assert m.allocate_slots("1", 5, new_token_ids=COMMON + [3] * 5, computed=hit) == ([8], [9])
    for b in (0, 1, 2, 5, 6):
        assert m.pool.ref_count(b) == 2
    m.check_invariants()


@pytest.mark.parametrize(
    "evict, expect_hit_blocks",
    [
        ([("window", 0)], 3),  # outside the window: the hit length stays
        ([("full", 0)], 0),  # the first full-attention block: a total miss
        ([("full", 2), ("window", 2)], 2),  # the last block of every group
        ([("full", 2)], 2),
        ([("window", 2)], 2),
        ([("full", 2), ("window", 0)], 0),  # full hits 2, the window group then finds no run
    ],
)
def test_prefill_hybrid_model_partial_request_hit(evict, expect_hit_blocks):
    m, full0, window0 = history()
    hit = m.get_computed_blocks(COMMON + [3] * 5)
    m.allocate_slots("1", 5, new_token_ids=COMMON + [3] * 5, computed=hit)
    m.free_sequence("0")
    m.free_sequence("1")
    blocks = {"full": full0, "window": window0}
    m.pool.evict_blocks([blocks[g][i] for g, i in evict])
    hit = m.get_computed_blocks(COMMON + [3] * 5)
    assert hit.num_tokens == expect_hit_blocks * B
    assert all(len(group) == expect_hit_blocks for group in hit.blocks)
    m.check_invariants()
