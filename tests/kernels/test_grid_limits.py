"""Every launcher checks its grid against CUDA's limits (x < 2**31, y and z <= 65,535)
before anything is launched: the simulator would run an unlaunchable grid, a GPU
would refuse it with an opaque launch error."""

import numpy as np
import pytest

import cuda_kernels as ck
from cuda_kernels import _checks
from cuda_kernels.prefill import paged_prefill


def test_a_grid_over_the_y_or_z_limit_is_a_value_error_naming_the_dimension():
    assert _checks.require_grid("k", (2**31 - 1, 65535, 65535), ("a", "b", "c")) == (
        2**31 - 1,
        65535,
        65535,
    )
    with pytest.raises(ValueError, match=r"k: 65536 sequences exceed the grid's y limit of 65,535"):
        _checks.require_grid("k", (1, 65536, 1), ("heads", "sequences", "parts"))
    with pytest.raises(ValueError, match=r"70000 parts exceed the grid's z limit"):
        _checks.require_grid("k", (1, 1, 70000), ("heads", "sequences", "parts"))
    with pytest.raises(ValueError, match=r"x limit"):
        _checks.require_grid("k", (2**31, 1, 1), ("heads", "sequences", "parts"))


def long_context(tokens=65536, block_size=256, head_dim=16):
    rng = np.random.default_rng(0)
    blocks = tokens // block_size
    cache = rng.standard_normal((blocks, 2, 1, block_size, head_dim)).astype(np.float32)
    query = rng.standard_normal((1, 1, head_dim)).astype(np.float32)
    tables = np.arange(blocks, dtype=np.int32)[None, :]
    return query, cache, tables, np.array([tokens], np.int32)


def test_partition_size_one_on_a_65536_token_context_is_refused_before_any_launch():
    with pytest.raises(ValueError, match=r"65536 partitions .*partition_size 1.* z limit"):
        ck.paged_attention(*long_context(), mode="split", partition_size=1)
    with pytest.raises(ValueError, match=r"65536 partitions .*partition_size 2\)"):
        ck.paged_attention(*long_context(tokens=2 * 65536), mode="split", partition_size=2)


def test_the_auto_plan_never_needs_more_partitions_than_the_grid_holds():
    for tokens in (65536, 2**22):
        part = ck.choose_partition([tokens], 1, 264)
        assert -(-tokens // part) <= 65535


def test_more_sequences_than_grid_y_holds_are_refused_by_decode():
    seqs = 65536
    cache = np.ones((1, 2, 1, 4, 8), np.float32)
    query = np.ones((seqs, 1, 8), np.float32)
    tables = np.zeros((seqs, 1), np.int32)
    lens = np.ones(seqs, np.int32)
    with pytest.raises(ValueError, match=r"65536 sequences exceed the grid's y limit"):
        ck.paged_attention(query, cache, tables, lens, mode="single")


def test_prefill_refuses_more_kv_heads_than_grid_y_holds():
    heads = 65536
    cache = np.ones((1, 2, heads, 4, 16), np.float16)
    query = np.ones((1, heads, 16), np.float16)
    with pytest.raises(ValueError, match=r"paged_prefill: 65536 KV heads exceed"):
        paged_prefill(
            query,
            cache,
            np.zeros((1, 1), np.int32),
            np.array([1], np.int32),
            np.array([0, 1], np.int32),
        )
