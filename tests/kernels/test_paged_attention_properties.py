"""Property tests: real KVCacheManager histories -> write_kv -> paged_attention,
compared with the NumPy float64 reference that gathers through the block table."""

import numpy as np
import pytest
from conftest import padded_tables, random_query, rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

import cuda_kernels as ck
from cuda_kernels import reference
from pagedsim import KVCacheManager, OutOfBlocks


@st.composite
def histories(draw, max_seqs=3):
    """A manager after random add / append / fork / free steps, with >= 1 live sequence."""
    block_size = draw(st.sampled_from([4, 8]))
    mgr = KVCacheManager(draw(st.integers(8, 20)), block_size, trace=False)
    next_id = 0
    for _ in range(draw(st.integers(1, 8))):
        live = mgr.seq_ids()
        op = draw(st.sampled_from(["add", "append", "fork", "free"] if live else ["add"]))
        try:
            if op == "add" and len(live) < max_seqs:
                mgr.add_sequence(next_id, draw(st.integers(1, 3 * block_size)))
                next_id += 1
            elif op == "append":
                mgr.append_tokens(draw(st.sampled_from(live)), draw(st.integers(1, block_size + 1)))
            elif op == "fork" and len(live) < max_seqs:
                mgr.fork(draw(st.sampled_from(live)), next_id)
                next_id += 1
            elif op == "free" and len(live) > 1:
                mgr.free_sequence(draw(st.sampled_from(live)))
        except OutOfBlocks:
            pass
    if not mgr.seq_ids():
        mgr.add_sequence(next_id, draw(st.integers(1, 2 * block_size)))
    mgr.check_invariants()
    return mgr


def fill_cache(mgr, rng, num_kv_heads, head_dim, dtype):
    """Write random K/V for every live token with write_kv into a NaN-poisoned cache.

    Returns (cache written by the kernel, truth cache built with NumPy). Shared slots
    (forked prefixes) get one value, as they hold one token."""
    truth = np.full((mgr.num_gpu_blocks, 2, num_kv_heads, mgr.block_size, head_dim), np.nan, dtype)
    slots = np.unique(np.concatenate([mgr.slot_mapping(s) for s in mgr.seq_ids()]))
    key = rng.standard_normal((len(slots), num_kv_heads, head_dim)).astype(dtype)
    value = rng.standard_normal((len(slots), num_kv_heads, head_dim)).astype(dtype)
    blocks, offsets = slots // mgr.block_size, slots % mgr.block_size
    truth[blocks, 0, :, offsets] = key
    truth[blocks, 1, :, offsets] = value
    cache = np.full_like(truth, np.nan)
    ck.write_kv(cache, key, value, slots)
    return cache, truth


@pytest.mark.slow
@settings(max_examples=15)
@given(
    mgr=histories(),
    num_kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([8, 12, 16]),
    fp16=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_attention_over_manager_block_tables_matches_the_float64_reference(
    mgr, num_kv_heads, group, head_dim, fp16, seed
):
    rng = np.random.default_rng(seed)
    dtype = np.float16 if fp16 else np.float32
    cache, truth = fill_cache(mgr, rng, num_kv_heads, head_dim, dtype)
    written = ~np.isnan(truth)
    assert np.array_equal(cache[written], truth[written]), "write_kv put a value in the wrong slot"
    seqs = mgr.seq_ids()
    tables = padded_tables([mgr.block_table(s).blocks for s in seqs])
    lens = np.array([mgr.num_tokens(s) for s in seqs], np.int32)
    query = random_query(rng, len(seqs), num_kv_heads * group, head_dim, dtype)
    out = ck.paged_attention(query, cache, tables, lens, mode="single")
    want = reference.paged_attention(query, truth, tables, lens)
    assert out.dtype == np.float32 and out.shape == query.shape
    assert rel_err(out, want) < (2e-3 if fp16 else 1e-5)


@settings(max_examples=5)  # the property is the table indirection, which any history has
@given(mgr=histories(max_seqs=2), seed=st.integers(0, 2**31))
def test_shuffling_physical_blocks_and_rewriting_tables_leaves_the_output_unchanged(mgr, seed):
    rng = np.random.default_rng(seed)
    cache, _ = fill_cache(mgr, rng, 1, 8, np.float32)
    seqs = mgr.seq_ids()
    tables = padded_tables([mgr.block_table(s).blocks for s in seqs])
    lens = np.array([mgr.num_tokens(s) for s in seqs], np.int32)
    query = random_query(rng, len(seqs), 2, 8)
    before = ck.paged_attention(query, cache, tables, lens)
    perm = rng.permutation(mgr.num_gpu_blocks)  # block b moves to perm[b]
    moved = np.empty_like(cache)
    moved[perm] = cache
    new_tables = np.where(
        tables < mgr.num_gpu_blocks, perm[np.minimum(tables, mgr.num_gpu_blocks - 1)], tables
    ).astype(np.int32)
    after = ck.paged_attention(query, moved, new_tables, lens)
    assert np.isfinite(before).all()
    assert np.abs(after - before).max() <= 1e-6 * np.abs(before).max()
