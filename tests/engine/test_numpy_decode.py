"""The NumPy backend's batched decode (every sequence's query at once, K/V gathered block by
block) against a float64 reference that walks each sequence's block table token by token:
random tables, lengths, null blocks, windows, soft-caps, GQA groups, and never-written
slots poisoned with NaN."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.engine.backend import NumpyAttention
from pagedsim.engine.model import Attention


def reference(query, cache, tables, lens, spec) -> np.ndarray:
    """[S, H, D] float64: softmax(q . k * scale (soft-capped)) . v over each sequence's
    positions, the window's included, read one token at a time through the table."""
    s, heads, d = query.shape
    bs, kv_heads = cache.shape[3], cache.shape[2]
    out = np.zeros((s, heads, d))
    for i in range(s):
        seen = range(max(0, lens[i] - (spec.sliding_window or lens[i])), lens[i])
        keys = np.array([cache[tables[i][p // bs], 0, :, p % bs] for p in seen], np.float64)
        values = np.array([cache[tables[i][p // bs], 1, :, p % bs] for p in seen], np.float64)
        for h in range(heads):
            g = h // (heads // kv_heads)
            scores = keys[:, g] @ query[i, h].astype(np.float64) * spec.scale
            if spec.logits_soft_cap is not None:
                scores = spec.logits_soft_cap * np.tanh(scores / spec.logits_soft_cap)
            p = np.exp(scores - scores.max())
            out[i, h] = (p / p.sum()) @ values[:, g]
    return out


@st.composite
def decode_steps(draw):
    bs = draw(st.sampled_from([1, 2, 4, 8]))
    kv_heads, group, d = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.sampled_from([4, 8])),
    )
    window = draw(st.none() | st.integers(1, 12))
    lens = draw(st.lists(st.integers(1, 20), min_size=1, max_size=5))
    need = [-(-n // bs) for n in lens]
    num_blocks = sum(need) + draw(st.integers(0, 3))
    ids = iter(draw(st.permutations(range(num_blocks))))
    width = max(need) + draw(st.integers(0, 2))
    tables = np.full((len(lens), width), -1, np.int32)  # -1 pads each row
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cache = np.full((num_blocks, 2, kv_heads, bs, d), np.nan, np.float32)  # unwritten: NaN
    for row, n in enumerate(lens):
        for b in range(need[row]):
            first = b * bs  # blocks wholly before the window may be null (vLLM's -1)
            if window is not None and first + bs <= n - window and draw(st.booleans()):
                continue
            tables[row, b] = block = next(ids)
            filled = min(bs, n - first)
            cache[block, :, :, :filled] = rng.standard_normal((2, kv_heads, filled, d))
    softcap = draw(st.none() | st.floats(0.5, 30))
    spec = Attention(draw(st.floats(0.05, 1.0)), softcap, window)
    query = rng.standard_normal((len(lens), kv_heads * group, d)).astype(np.float32)
    return query, cache, tables, np.array(lens, np.int32), spec


@settings(max_examples=200)
@given(step=decode_steps())
def test_batched_decode_equals_the_token_by_token_reference(step):
    query, cache, tables, lens, spec = step
    backend = NumpyAttention()
    got = backend.decode(query, cache, tables, lens, spec)
    assert got.shape == query.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, reference(query, cache, tables, lens, spec), atol=2e-5)
    again = backend.decode(query, cache, tables, lens, spec)  # its reused buffer: same answer
    np.testing.assert_array_equal(again, got)


@given(step=decode_steps(), past=st.integers(0, 5))
def test_a_block_id_past_the_cache_is_refused_never_clipped(step, past):
    query, cache, tables, lens, spec = step
    row = int(np.argmax(lens))  # the longest row: its first block is always read
    tables = tables.copy()
    tables[row, 0] = len(cache) + past
    with pytest.raises(IndexError, match=f"block {len(cache) + past} is outside"):
        NumpyAttention().decode(query, cache, tables, lens, spec)
