"""Checks for exercise 3.2: bytes per block and offsets in the whole-model pool (chapter 3.2).

Bytes are compared with pagedsim.sizing's ModelSpec and the chapter's 8 MiB example;
offsets with NumPy's own indexing of an arange-filled pool (Hypothesis picks shapes
and indices); and slot offsets with the write_kv kernel writing random K/V into a
NaN-poisoned pool through a per-layer view.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.sizing import ModelSpec

EXERCISE = "3.2"
pytestmark = pytest.mark.ch3_2


def test_the_chapters_block_is_8_mib(impl):
    """16 tokens x 32 layers x K,V x 32 heads x 128 dims x 2 bytes = 8,388,608 bytes."""
    got = impl.bytes_per_block(16, 32, 32, 128, 2)
    assert got == 16 * 32 * 2 * 32 * 128 * 2, (
        f"bytes_per_block for the chapter's example gave {got:,}, expected 8,388,608: "
        "count K and V, every layer and the bytes per element")
    default = impl.bytes_per_block(16, 32, 32, 128)
    assert default == got, (
        f"bytes_per_block(16, 32, 32, 128) without dtype_bytes gave {default:,}, expected {got:,}: "
        "dtype_bytes should default to 2 (FP16), as in the chapter")


@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@given(st.integers(1, 64), st.integers(1, 48), st.integers(1, 16), st.sampled_from([64, 80, 128]),
       st.sampled_from([1, 2, 4]))
def test_bytes_per_block_agrees_with_the_model_spec(impl, bs, layers, kv_heads, dim, dtype_bytes):
    """bytes_per_block matches pagedsim.sizing for any model shape and dtype."""
    want = ModelSpec("x", layers, kv_heads, dim, dtype_bytes).bytes_per_block(bs)
    got = impl.bytes_per_block(bs, layers, kv_heads, dim, dtype_bytes)
    assert got == want, f"bytes_per_block({bs}, {layers}, {kv_heads}, {dim}, {dtype_bytes}) gave {got}, expected {want}"


@st.composite
def pool_index(draw):
    """A small pool shape (N, L, 2, H, B, D) and one valid index into it."""
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 3)), 2, draw(st.integers(1, 3)),
             draw(st.integers(1, 4)), draw(st.integers(1, 5)))
    return shape, tuple(draw(st.integers(0, n - 1)) for n in shape)


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(pool_index())
def test_flat_offset_agrees_with_numpy_indexing(impl, case):
    """flat_offset(shape, *index) is the number NumPy finds at kv_pool[index] in an arange pool."""
    shape, index = case
    pool = np.arange(np.prod(shape)).reshape(shape)  # [N, L, 2, H_kv, B, D]: each element holds its offset
    got = impl.flat_offset(shape, *index)
    assert got == pool[index], (
        f"flat_offset{index} in a pool of shape {shape} gave {got}, NumPy says {pool[index]}: "
        f"check each dimension's stride (NumPy's are {tuple(s // 8 for s in pool.strides)})")
    assert tuple(impl.strides(shape)) == tuple(s // pool.itemsize for s in pool.strides), (
        f"strides({shape}) disagree with NumPy's")


def test_slot_offset_uses_block_size_to_split_the_slot(impl):
    """Slot 7 with blocks of 4 tokens is token 3 of block 1, whatever head_dim is."""
    shape = (3, 2, 2, 2, 4, 5)  # [N, L, 2, H_kv, B, D]: B (4) differs from D (5)
    pool = np.arange(np.prod(shape)).reshape(shape)
    got = impl.slot_offset(shape, 7, 1, 1, 0, 2)
    assert got == pool[1, 1, 1, 0, 3, 2], (
        f"slot_offset(slot 7) gave {got}, expected {pool[1, 1, 1, 0, 3, 2]}: "
        "slot // block_size is the block and slot % block_size the token")


@pytest.mark.kernels
def test_slot_offsets_find_what_write_kv_wrote(impl, kernels):
    """write_kv into kv_pool[:, layer]; every number is found again at its slot_offset."""
    rng = np.random.default_rng(5)
    shape = (5, 3, 2, 2, 4, 3)  # [N, L, 2, H_kv, B, D]
    pool = np.full(shape, np.nan, np.float32)
    layer = 1
    slots = rng.choice(shape[0] * shape[4], size=6, replace=False).astype(np.int64)
    key = rng.standard_normal((6, shape[3], shape[5])).astype(np.float32)  # [T, H_kv, D]
    value = rng.standard_normal((6, shape[3], shape[5])).astype(np.float32)
    kernels.write_kv(pool[:, layer], key, value, slots)
    flat = pool.reshape(-1)
    for t, s in enumerate(slots):
        for h in range(shape[3]):
            for d in range(shape[5]):
                for kv, src in ((0, key), (1, value)):
                    got = flat[impl.slot_offset(shape, int(s), layer, kv, h, d)]
                    assert got == src[t, h, d], (
                        f"write_kv put {'KV'[kv]} of token {t} (slot {s}, head {h}, dim {d}) somewhere "
                        f"else than slot_offset says (found {got} there)")
    assert np.isnan(pool[:, [0, 2]]).all(), "write_kv into layer 1 touched other layers"
