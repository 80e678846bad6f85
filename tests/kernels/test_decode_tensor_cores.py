"""The tensor-core decode (`decode_tc.py`) against the float64 reference, on tiny
simulator grids (one or two warps): head_dim 16..256, groups 1..17, block sizes 1..256,
single pass and split-K, windows, NaN; and how paged_attention chooses its path."""

import numpy as np
import pytest
from conftest import random_query, rel_err
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numba import cuda

import cuda_kernels as ck
from cuda_kernels import attention, reference
from cuda_kernels.fast.decode_tc import make_tc_decode_kernel, tc_geometry
from cuda_kernels.layout import BLOCK_MAJOR
from cuda_kernels.merge import merge_partitions

TOL = 4e-3  # q and p are rounded to fp16 for the mma (FlashInfer does the same)


def fp16_case(rng, lens, block_size, kv_heads, group, head_dim, q_dtype=np.float32):
    """Sequences in shuffled disjoint blocks of a float16 cache."""
    blocks = [-(-n // block_size) for n in lens]
    ids = rng.permutation(sum(blocks))
    tables = np.full((len(lens), max(blocks)), -1, np.int32)
    at = 0
    for s, n in enumerate(blocks):
        tables[s, :n] = ids[at : at + n]
        at += n
    shape = (sum(blocks), 2, kv_heads, block_size, head_dim)
    cache = rng.standard_normal(shape).astype(np.float16)
    query = random_query(rng, len(lens), kv_heads * group, head_dim, q_dtype)
    return query, cache, tables, np.asarray(lens, np.int32)


@settings(max_examples=8)  # test_sdpa_oracle's decode test draws this space too
@example(  # the rare path (scale 2), a partition inside a slab, two chunks of heads
    head_dim=16, group=17, block_size=3, lens=[20], split=7, q16=True, scale=2.0, seed=3
)
@example(  # a float32 query whose fp16 rounding alone moved the output past TOL
    head_dim=80, group=5, block_size=3, lens=[1, 16], split=None, q16=False, scale=2.0, seed=25
)
@given(
    head_dim=st.sampled_from([16, 32, 48, 80, 128, 256]),
    group=st.integers(1, 17),
    block_size=st.sampled_from([1, 3, 16, 256]),
    lens=st.lists(st.integers(1, 40), min_size=1, max_size=2),
    split=st.sampled_from([None, 7, 16]),
    q16=st.booleans(),
    scale=st.sampled_from([None, 2.0]),
    seed=st.integers(0, 2**31),
)
def test_the_tensor_path_matches_the_float64_reference(
    head_dim, group, block_size, lens, split, q16, scale, seed
):
    """scale 2.0 makes the scores spread, so the running max moves often (the rare path)."""
    rng = np.random.default_rng(seed)
    query, cache, tables, lens = fp16_case(
        rng, lens, block_size, 1, group, head_dim, np.float16 if q16 else np.float32
    )
    mode = dict(mode="split", partition_size=split) if split else dict(mode="single")
    mask = ck.ScoreMask(scale=scale)
    got = ck.paged_attention(query, cache, tables, lens, mask, path="tensor", **mode)
    assert attention.LAST_PLAN["path"] == "tensor"
    # the reference reads q as the mma does, rounded to fp16: at scale 2 and D=80 the
    # rounding alone moves a float32 query's output by 0.5% (seed 25 below), which TOL
    # does not cover; what is left to compare is the kernel's own arithmetic
    rounded = query.astype(np.float16)
    assert rel_err(got, reference.paged_attention(rounded, cache, tables, lens, mask)) < TOL


@pytest.mark.parametrize(
    "group,lens,part",
    [
        (4, [37, 5], 20),  # partition 0: 16 + 4 tokens, a slab each; two partitions merged
        (16, [33], 40),  # three slabs: warp 0 takes two
        (17, [9, 30], 32),  # two chunks of heads; 30 tokens: a slab per warp, 9: warp 1 idle
    ],
)
def test_two_warps_split_the_slabs_and_merge_their_states_in_shared_memory(group, lens, part):
    rng = np.random.default_rng(group)
    query, cache, tables, lens = fp16_case(rng, lens, 4, 2, group, 32)
    geo = tc_geometry(32, group, warps=2)
    kernel = make_tc_decode_kernel(BLOCK_MAJOR, 32, group, 4, warps=2)
    num_seqs, heads = query.shape[:2]
    parts = -(-int(lens.max()) // part)
    out = np.full((num_seqs, heads, parts, 32), np.nan, np.float32)  # poisoned
    m = np.full((num_seqs, heads, parts), np.nan, np.float32)
    l_sum = m.copy()
    d_cache = cuda.to_device(cache)
    kernel[(2 * geo["chunks"], num_seqs, parts), 64](
        d_cache,
        d_cache,
        query,
        tables,
        lens,
        np.float32(32**-0.5),
        np.int32(0),
        np.int32(0),
        np.int32(part),
        out,
        m,
        l_sum,
    )
    merged = np.empty((num_seqs, heads, 32), np.float32)
    merge_partitions[(heads, num_seqs), 32](out, m, l_sum, merged)
    assert rel_err(merged, reference.paged_attention(query, cache, tables, lens)) < TOL


@pytest.mark.parametrize("split", [False, True])
def test_a_window_with_sinks_on_the_tensor_path_matches_the_windowed_reference(split):
    rng = np.random.default_rng(5)
    query, cache, tables, lens = fp16_case(rng, [45], 4, 1, 4, 16)
    mask = ck.ScoreMask(sliding_window=13, sinks=3)
    got = ck.paged_attention(
        query,
        cache,
        tables,
        lens,
        mask,
        mode="split" if split else "single",
        partition_size=6 if split else None,
        path="tensor",
    )
    want = reference.paged_attention(query, cache, tables, lens, mask)
    assert rel_err(got, want) < TOL


@pytest.mark.parametrize("where", ["query", "key"])
def test_nan_propagates_on_the_tensor_path_as_in_the_reference(where):
    rng = np.random.default_rng(6)
    query, cache, tables, lens = fp16_case(rng, [21, 9], 4, 1, 4, 16)
    if where == "query":
        query[1, 2, 3] = np.nan
    else:
        cache[tables[0, 2], 0, 0, 1, 5] = np.nan  # sequence 0, token 9
    want = reference.paged_attention(query, cache, tables, lens)
    got = ck.paged_attention(query, cache, tables, lens, path="tensor")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any() and not np.isnan(want).all()


@pytest.mark.parametrize(
    "group,dtype,head_dim,want",
    [
        (4, np.float16, 16, "tensor"),
        (8, np.float16, 32, "tensor"),
        (16, np.float16, 16, "tensor"),
        (2, np.float16, 16, "cuda_core"),
        (1, np.float16, 16, "cuda_core"),
        (4, np.float32, 16, "cuda_core"),
        (4, np.float16, 24, "cuda_core"),
    ],
)
def test_auto_takes_the_tensor_cores_from_a_group_of_four_when_the_shape_allows(
    group, dtype, head_dim, want
):
    rng = np.random.default_rng(7)
    query, cache, tables, lens = fp16_case(rng, [5], 4, 1, group, head_dim)
    out = ck.paged_attention(query, cache.astype(dtype), tables, lens)
    assert attention.LAST_PLAN["path"] == want
    assert rel_err(out, reference.paged_attention(query, cache.astype(dtype), tables, lens)) < TOL


@pytest.mark.parametrize(
    "dtype,head_dim,message",
    [
        (np.float32, 16, "needs a float16 cache"),
        (np.float16, 24, "multiple of 16"),
        (np.float16, 272, "multiple of 16 in \\[16, 256\\]"),
    ],
)
def test_forcing_the_tensor_path_on_a_shape_it_cannot_serve_is_a_value_error(
    dtype, head_dim, message
):
    rng = np.random.default_rng(8)
    query, cache, tables, lens = fp16_case(rng, [3], 4, 1, 4, head_dim)
    attention.LAST_PLAN.clear()
    with pytest.raises(ValueError, match=message):
        ck.paged_attention(query, cache.astype(dtype), tables, lens, path="tensor")
    assert attention.LAST_PLAN == {}  # refused before any launch


def test_an_unknown_path_is_a_value_error_naming_the_choices():
    rng = np.random.default_rng(9)
    with pytest.raises(ValueError, match=r"path must be one of \('auto', 'tensor', 'cuda_core'\)"):
        ck.paged_attention(*fp16_case(rng, [3], 4, 1, 4, 16), path="tensor-cores")


def test_the_cuda_core_path_can_be_forced_for_a_group_auto_sends_to_tensor_cores():
    rng = np.random.default_rng(10)
    case = fp16_case(rng, [19], 4, 1, 8, 16)
    got = ck.paged_attention(*case, path="cuda_core")
    assert attention.LAST_PLAN["path"] == "cuda_core"
    assert rel_err(got, reference.paged_attention(*case)) < 1e-3


def test_a_cache_off_a_16_byte_boundary_leaves_auto_on_cuda_cores_and_refuses_tensor():
    """cp.async and ldmatrix need 16-byte aligned rows: the scalar fallback serves it."""
    rng = np.random.default_rng(12)
    query, cache, tables, lens = fp16_case(rng, [10], 4, 1, 4, 16)
    flat = cuda.to_device(np.zeros(cache.size + 8, np.float16))
    shifted = flat[1 : 1 + cache.size].reshape(cache.shape)  # 2 bytes past a 16-byte boundary
    shifted.copy_to_device(cache)
    got = ck.paged_attention(query, shifted, tables, lens)
    assert attention.LAST_PLAN["path"] == "cuda_core"
    assert rel_err(got, reference.paged_attention(query, cache, tables, lens)) < 1e-3
    with pytest.raises(ValueError, match="16-byte aligned"):
        ck.paged_attention(query, shifted, tables, lens, path="tensor")


@pytest.mark.parametrize(
    "head_dim,group,block_size,lens", [(256, 4, 256, [20]), (16, 16, 1, [33, 2]), (144, 3, 5, [18])]
)
def test_the_extreme_shapes_the_tensor_path_serves(head_dim, group, block_size, lens):
    """The largest head_dim and block size, the smallest block, a head_dim (144) whose
    rows are not a power of two of 16-byte chunks (padded rows in shared memory)."""
    rng = np.random.default_rng(head_dim + group)
    case = fp16_case(rng, lens, block_size, 1, group, head_dim)
    got = ck.paged_attention(*case, path="tensor")
    assert rel_err(got, reference.paged_attention(*case)) < TOL
