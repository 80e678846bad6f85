"""Checks for puzzle 3.k3: a naive paged decode, one thread per head."""

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import check_launch, check_spec

EXERCISE = "3.k3"
pytestmark = pytest.mark.ch3_7


def spec(q, k_cache, v_cache, block_table, context_len, out):
    B, D, L = k_cache.shape[1], q.shape[1], int(context_len[0])
    pos = np.arange(L)
    k = k_cache[block_table[pos // B], pos % B]  # [L, H, D]
    v = v_cache[block_table[pos // B], pos % B]
    s = np.einsum("hd,lhd->hl", q, k) / np.sqrt(D)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    out[:] = np.einsum("hl,lhd->hd", w / w.sum(axis=1, keepdims=True), v)
    return {"out": out}


def case(draw):
    H, B, D, N = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.integers(2, 4)),
    )
    L = draw(st.integers(1, min(N * B, 6)))
    loud = draw(st.sampled_from([1.0, 300.0]))  # large logits: exp needs the max subtracted
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    table = rng.permutation(N)[: -(-L // B)].astype(np.int64)
    arrays = {
        "q": rng.standard_normal((H, D)) * loud,
        "k_cache": rng.standard_normal((N, B, H, D)),
        "v_cache": rng.standard_normal((N, B, H, D)),
        "block_table": table,
        "context_len": np.array([L]),
        "out": np.full((H, D), POISON),
    }
    return arrays, H, f"H={H}, L={L}, B={B}, D={D}, table {table.tolist()}, |q| ~ {loud:g}"


def owner(out_name, index, arrays):
    return index[0]


def test_paged_decode_matches_the_softmax_spec(impl):
    """out[h] = softmax(q[h] . K / sqrt(D)) V through the table, for logits small and large."""
    check_spec(impl, "paged_decode_kernel", case, spec, outputs=["out"], owner=owner)


def test_paged_decode_launches_under_the_cuda_simulator(impl):
    """One real launch (GPU, or Numba's CUDA simulator), with extra threads."""
    rng = np.random.default_rng(6)
    arrays = {
        "q": rng.standard_normal((2, 4)),
        "k_cache": rng.standard_normal((3, 2, 2, 4)),
        "v_cache": rng.standard_normal((3, 2, 2, 4)),
        "block_table": np.array([1, 2, 0]),
        "context_len": np.array([5]),
        "out": np.full((2, 4), POISON),
    }
    check_launch(impl, "paged_decode_kernel", arrays, 4, spec, ["out"])
