"""Alignment lab: blocks 0..128 bytes off a 128-byte boundary give the same attention."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels import reference
from cuda_kernels.labs import alignment

pytestmark = [pytest.mark.kernels, pytest.mark.ch3_7]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@settings(max_examples=1)  # one fresh case per dtype: the offsets are the variable here
@given(seed=st.integers(0, 2**16))
def test_decode_over_an_offset_pool_matches_the_reference_at_every_offset(dtype, seed):
    rng = np.random.default_rng(seed)
    cache = rng.standard_normal((5, 2, 2, 4, 8)).astype(dtype)  # [N, 2, H_kv, B, D]: 512 B blocks
    query = rng.standard_normal((2, 4, 8)).astype(dtype)
    tables = np.array([[3, 0], [4, 1]], np.int32)
    lens = rng.integers(1, 9, size=2).astype(np.int32)
    want = reference.paged_attention(query, cache, tables, lens)
    tol = 2e-2 if dtype == np.float16 else 1e-5
    for offset in alignment.OFFSETS:
        got, misalign = alignment.decode_at_offset(offset, query, cache, tables, lens)
        assert misalign == offset % 128  # the pool really starts where we asked
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"offset {offset}")


def test_offset_pool_places_every_block_start_the_same_distance_off_the_boundary():
    pool = alignment.offset_pool((3, 2, 1, 4, 8), np.float32, 16)  # 256-byte blocks
    base = alignment.device_address(pool)
    assert base % 128 == 16
    assert [(base + b * 256) % 128 for b in range(3)] == [16, 16, 16]
    assert pool.shape == (3, 2, 1, 4, 8) and not pool.copy_to_host().any()


def test_offsets_that_split_an_element_are_refused():
    with pytest.raises(ValueError, match="not a multiple of the float32 size 4"):
        alignment.offset_pool((2, 2), np.float32, 2)
    with pytest.raises(ValueError, match="offset must be"):
        alignment.offset_pool((2, 2), np.float32, -4)
