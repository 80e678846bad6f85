"""Layout lab: the decode kernel over every registered cache layout equals the reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels import reference
from cuda_kernels.labs import layouts

pytestmark = [pytest.mark.kernels, pytest.mark.ch3_7]


@st.composite
def decode_cases(draw):
    """A tiny random cache, block tables with shuffled physical blocks, and queries."""
    dtype = draw(st.sampled_from([np.float32, np.float16]))
    x = layouts.vec_width(dtype)
    head_dim = x * draw(st.integers(1, 2))
    num_kv_heads, group = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    block_size = draw(st.sampled_from([4, 8]))
    lens = draw(st.lists(st.integers(1, 3 * block_size), min_size=1, max_size=2))
    spare = draw(st.integers(0, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    tables, num_blocks = reference.scattered_block_tables(rng, lens, block_size, spare)
    cache = rng.standard_normal((num_blocks, 2, num_kv_heads, block_size, head_dim)).astype(dtype)
    query = rng.standard_normal((len(lens), num_kv_heads * group, head_dim)).astype(dtype)
    return cache, query, tables, np.array(lens, np.int32)


@settings(max_examples=5)
@given(decode_cases())
def test_every_layout_gives_the_reference_attention(case):
    cache, query, tables, lens = case
    want = reference.paged_attention(query, cache, tables, lens)
    tol = 2e-2 if cache.dtype == np.float16 else 1e-5
    for name in layouts.LAYOUTS:
        k_src, v_src = layouts.convert(name, cache)
        got = layouts.decode(name, query, k_src, v_src, tables, lens, mode="single")
        assert not np.isnan(got).any(), name
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)


def test_converted_layouts_hold_each_element_where_their_index_formula_says():
    rng = np.random.default_rng(3)
    cache = rng.standard_normal((3, 2, 2, 4, 8)).astype(np.float32)  # [N, 2, H, B, D]
    n, h, t, d = 2, 1, 3, 6
    k_split, v_split = layouts.convert("split", cache)
    k_nhd, v_nhd = layouts.convert("nhd", cache)
    key, value = layouts.convert("vllm", cache)
    x = layouts.vec_width(np.float32)
    assert k_split[n, h, t, d] == cache[n, 0, h, t, d]
    assert v_split[n, h, t, d] == cache[n, 1, h, t, d]
    assert k_nhd[n, t, h, d] == cache[n, 0, h, t, d] and v_nhd[n, t, h, d] == cache[n, 1, h, t, d]
    assert key[n, h, d // x, t, d % x] == cache[n, 0, h, t, d]
    assert value[n, h, d, t] == cache[n, 1, h, t, d]
    assert key.shape == (3, 2, 8 // x, 4, x) and value.shape == (3, 2, 8, 4)


def test_every_registered_layout_holds_every_element_where_its_index_says():
    rng = np.random.default_rng(4)
    cache = rng.standard_normal((3, 2, 2, 4, 8)).astype(np.float32)  # [N, 2, H, B, D]
    N, _, H, B, D = cache.shape
    x = layouts.vec_width(np.float32)
    n, h, t, d = np.meshgrid(*map(np.arange, (N, H, B, D)), indexing="ij")
    for name, spec in layouts.LAYOUTS.items():
        for which, src in zip("kv", layouts.convert(name, cache), strict=True):
            assert src.shape == spec.array_shape(which, N, H, B, D, x), f"{name} {which}"
            at = spec.index(which, src.shape, n, h, t, d)
            want = cache[n, int(which == "v"), h, t, d]
            np.testing.assert_array_equal(src.reshape(-1)[at], want, err_msg=f"{name} {which}")


def test_a_split_layout_with_k_and_v_swapped_is_caught_by_the_reference():
    rng = np.random.default_rng(5)
    cache = rng.standard_normal((4, 2, 1, 4, 8)).astype(np.float32)
    query = rng.standard_normal((1, 1, 8)).astype(np.float32)
    tables, lens = np.array([[2, 0]], np.int32), np.array([7], np.int32)
    k_src, v_src = layouts.convert("split", cache)
    got = layouts.decode("split", query, v_src, k_src, tables, lens)
    assert not np.allclose(got, reference.paged_attention(query, cache, tables, lens), atol=1e-3)


def test_layout_arguments_are_checked_before_launch():
    cache = np.zeros((2, 2, 1, 4, 8), np.float32)
    q = np.zeros((1, 1, 8), np.float32)
    tables, lens = np.array([[0]], np.int32), np.array([3], np.int32)
    with pytest.raises(ValueError, match="layout"):
        layouts.convert("hnd", cache)
    key, value = layouts.convert("vllm", cache)
    with pytest.raises(ValueError, match="v_src must have shape"):
        layouts.decode("vllm", q, key, np.ascontiguousarray(value[:, :, :4]), tables, lens)
    with pytest.raises(ValueError, match="x=4"):
        layouts.decode("vllm", q, key.reshape(2, 1, 1, 4, 8), value, tables, lens)
    with pytest.raises(ValueError, match="same kv_cache"):
        layouts.decode("fused", q, cache, cache.copy(), tables, lens)
    k_src, v_src = layouts.convert("split", cache)
    with pytest.raises(ValueError, match="dtypes differ"):
        layouts.decode("split", q, k_src, v_src.astype(np.float16), tables, lens)


def test_split_and_nhd_use_the_same_16_byte_loads_as_fused_and_vllm_stays_scalar():
    from cuda_kernels.attention import usable_loaders

    cache = np.zeros((2, 2, 1, 4, 8), np.float16)  # head_dim 8: one 16-byte vector per row
    for name, vector in (("fused", True), ("split", True), ("nhd", True), ("vllm", False)):
        k_src, v_src = layouts.convert(name, cache)
        assert usable_loaders(layouts.LOADERS[name], k_src, v_src, 8).vector is vector, name
    odd = np.zeros((2, 2, 1, 4, 12), np.float16)  # 24-byte rows: the scalar fallback
    k_src, v_src = layouts.convert("split", odd)
    assert not usable_loaders(layouts.LOADERS["split"], k_src, v_src, 12).vector
