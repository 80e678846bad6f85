"""Split-K against single pass, sliding windows, GQA group sizes, head sizes,
full and partial last blocks, the auto-mode rule and the layout factory."""

import numpy as np
import pytest
from conftest import GARBAGE, random_cache, random_query, rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

import cuda_kernels as ck
from cuda_kernels import layout_demo, reference
from cuda_kernels.attention import DEFAULT_PARTITION, choose_mode


def scattered_case(rng, lens, block_size, num_kv_heads, group, head_dim, dtype=np.float32):
    """Sequences of the given lengths in randomly chosen, disjoint physical blocks."""
    tables, num_blocks = reference.scattered_block_tables(rng, lens, block_size, spare=2,
                                                          fill=GARBAGE)
    cache = random_cache(rng, num_blocks, num_kv_heads, block_size, head_dim, dtype)
    query = random_query(rng, len(lens), num_kv_heads * group, head_dim, dtype)
    return query, cache, tables, np.asarray(lens, np.int32)


@settings(max_examples=12)
@given(lens=st.lists(st.integers(1, 40), min_size=1, max_size=2), partition=st.integers(1, 24),
       seed=st.integers(0, 2**31))
def test_split_k_equals_single_pass_to_float32_rounding_for_any_partition_size(lens, partition, seed):
    rng = np.random.default_rng(seed)
    case = scattered_case(rng, lens, 4, 1, 2, 8)
    single = ck.paged_attention(*case, mode="single")
    split = ck.paged_attention(*case, mode="split", partition_size=partition)
    assert rel_err(split, single) < 2e-6
    assert rel_err(single, reference.paged_attention(*case)) < 1e-5


@settings(max_examples=12)
@given(length=st.integers(1, 40), window=st.integers(1, 20), sinks=st.integers(0, 6),
       split=st.booleans(), seed=st.integers(0, 2**31))
def test_windowed_attention_matches_the_windowed_reference_and_skips_dropped_blocks(
        length, window, sinks, split, seed):
    rng = np.random.default_rng(seed)
    query, cache, tables, lens = scattered_case(rng, [length], 4, 1, 2, 8)
    want = reference.windowed_attention(query, cache, tables, lens, window, sinks)
    attended = set(reference.attended_positions(length, window, sinks).tolist())
    for logical in range(tables.shape[1]):  # drop blocks the window does not reach
        if not attended & set(range(4 * logical, 4 * logical + 4)):
            tables[0, logical] = -1  # NULL_BLOCK: must be neither read nor validated
    out = ck.paged_attention(query, cache, tables, lens, window=window, sinks=sinks,
                             mode="split" if split else "single", partition_size=3 if split else None)
    assert rel_err(out, want) < 1e-5


@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_every_gqa_group_size_reads_the_shared_kv_head(group):
    rng = np.random.default_rng(group)
    case = scattered_case(rng, [11, 6], 4, 2, group, 8)
    assert rel_err(ck.paged_attention(*case), reference.paged_attention(*case)) < 1e-5


@pytest.mark.parametrize("head_dim,dtype", [(80, np.float32), (96, np.float16), (128, np.float16)])
def test_head_dims_that_are_not_powers_of_two_work(head_dim, dtype):
    rng = np.random.default_rng(head_dim)
    case = scattered_case(rng, [9], 8, 1, 2, head_dim, dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    assert rel_err(ck.paged_attention(*case), reference.paged_attention(*case)) < tol


@pytest.mark.parametrize("length", [8, 16, 5, 13])  # full last block, then partly full
def test_full_and_partly_full_last_blocks(length):
    rng = np.random.default_rng(length)
    case = scattered_case(rng, [length], 4, 1, 1, 8)
    assert rel_err(ck.paged_attention(*case), reference.paged_attention(*case)) < 1e-5


def test_device_inputs_give_a_device_output():
    from numba import cuda
    rng = np.random.default_rng(7)
    query, cache, tables, lens = scattered_case(rng, [7], 4, 1, 2, 8)
    out = ck.paged_attention(cuda.to_device(query), cuda.to_device(cache), cuda.to_device(tables),
                             cuda.to_device(lens))
    assert not isinstance(out, np.ndarray)
    assert rel_err(out.copy_to_host(), reference.paged_attention(query, cache, tables, lens)) < 1e-5


def test_auto_mode_splits_only_long_contexts_on_a_grid_too_small_for_the_gpu():
    long = 2 * DEFAULT_PARTITION
    assert choose_mode(4, 8, long, DEFAULT_PARTITION, 132) == "split"
    assert choose_mode(4, 8, long - 1, DEFAULT_PARTITION, 132) == "single"  # one partition
    assert choose_mode(64, 8, 8 * long, DEFAULT_PARTITION, 132) == "single"  # grid fills the GPU


def test_the_factory_builds_a_kernel_for_split_token_major_pools():
    rng = np.random.default_rng(9)
    query, cache, tables, lens = scattered_case(rng, [10, 3], 4, 2, 2, 8)
    k_pool = np.ascontiguousarray(cache[:, 0].transpose(0, 2, 1, 3))  # [N, B, H_kv, D]
    v_pool = np.ascontiguousarray(cache[:, 1].transpose(0, 2, 1, 3))
    from numba import cuda
    out = ck.decode_with(layout_demo.SPLIT_NHD, cuda.to_device(k_pool), cuda.to_device(v_pool),
                         query, tables, lens, num_blocks=cache.shape[0], num_kv_heads=2,
                         block_size=4, head_dim=8, mode="split", partition_size=4)
    assert rel_err(out, reference.paged_attention(query, cache, tables, lens)) < 1e-5


def test_the_simulator_poisons_output_buffers_so_an_unwritten_element_fails():
    from cuda_kernels.attention import _empty
    assert np.isnan(_empty((2, 3, 4)).copy_to_host()).all()
    with pytest.raises(AssertionError, match="NaN"):
        rel_err(np.full((1, 2), np.nan), np.ones((1, 2)))


def test_the_gpu_launch_configuration_runs_correctly_in_the_simulator(monkeypatch):
    """128 threads, 32-token tiles, D = 128, G = 8: the shape the GPU runs (slow here,
    so one sequence, one KV head)."""
    from cuda_kernels import attention
    monkeypatch.setattr(attention, "launch_config", lambda head_dim, group: (128, 32))
    rng = np.random.default_rng(11)
    case = scattered_case(rng, [45], 16, 1, 8, 128, np.float16)
    want = reference.paged_attention(*case)
    assert rel_err(ck.paged_attention(*case, mode="single"), want) < 2e-3
    assert rel_err(ck.paged_attention(*case, mode="split", partition_size=40), want) < 2e-3
