"""paged_prefill on Hopper's warpgroup MMA (path="wgmma", `prefill_wgmma`) against the
float64 reference, on fresh random ragged batches behind cached prefixes, outputs
poisoned with NaN first (the simulator launcher always poisons). One warpgroup (128
simulated threads) and 16-token tiles: every wgmma goes through the stand-ins that
follow the ISA's fragments, descriptors and 128-byte swizzle (`_wgmma_sim`), every
K/V copy through the cp.async stand-in. The path is opt-in and checked before launch."""

import numpy as np
import pytest
from conftest import prefill_batch as batch
from conftest import rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels import ScoreMask, _prefill_checks, prefill
from cuda_kernels._prefill_checks import choose_path
from cuda_kernels.fast import prefill_wgmma
from cuda_kernels.prefill import paged_prefill
from cuda_kernels.reference import reference_prefill

TOL = 4e-3  # P is rounded to fp16 before P V, as in FlashAttention-2 and -3


@st.composite
def wgmma_batches(draw):
    head_dim = draw(st.sampled_from([16, 16, 32, 48, 64]))
    group = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    block_size = draw(st.sampled_from([1, 2, 5, 16]))
    kv_heads = draw(st.integers(1, 2))
    seqs = draw(st.integers(1, 2))
    # up to 3 KV tiles; the unmasked loop between masked tiles has its own tests below
    prefixes = [draw(st.integers(0, 24)) for _ in range(seqs)]
    q_lens = [draw(st.integers(1, 10)) for _ in range(seqs)]
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return batch(rng, prefixes, q_lens, kv_heads, group, head_dim, block_size)


@pytest.mark.slow
@settings(max_examples=6)
@given(args=wgmma_batches(), causal=st.booleans())
def test_the_wgmma_prefill_matches_the_float64_reference_on_ragged_chunked_batches(args, causal):
    query, cache, tables, lens, starts = args
    out = paged_prefill(query, cache, tables, lens, starts, ScoreMask(causal=causal), path="wgmma")
    want = reference_prefill(query, cache, tables, lens, starts, ScoreMask(causal=causal))
    assert out.shape == query.shape and out.dtype == np.float32
    assert rel_err(out, want) < TOL
    assert prefill.LAST_PATH["path"] == "wgmma"


def test_head_dim_128_with_eight_heads_a_group_runs_two_64_dim_panels():
    """The headline shape's D and G: P V is two m64n64 wgmmas per 16 tokens, S eight k-steps
    across two panels of 128-byte rows; 8 query tokens x 8 heads fill the 64 rows."""
    rng = np.random.default_rng(128)
    query, cache, tables, lens, starts = batch(rng, [6], [8], 1, 8, 128, 4)
    out = paged_prefill(query, cache, tables, lens, starts, path="wgmma")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL


def test_a_narrow_last_panel_and_a_padded_row_layout_are_served():
    """D=80: the second panel is 16 dims wide (an m64n16 for P V); G=3: 21 tokens x 3
    heads use 63 of the 64 rows."""
    rng = np.random.default_rng(80)
    query, cache, tables, lens, starts = batch(rng, [20, 3], [6, 2], 1, 3, 80, 8)
    out = paged_prefill(query, cache, tables, lens, starts, path="wgmma")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL


@pytest.mark.parametrize("window, sinks, causal", [(7, 2, True), (4, 1, False)])
def test_windows_and_sinks_on_wgmma_follow_the_reference(window, sinks, causal):
    """A 40-token context in 16-token tiles: sink tiles, the window's seam, the causal
    diagonal and a tile tail all occur."""
    rng = np.random.default_rng(window * 10 + sinks)
    query, cache, tables, lens, starts = batch(rng, [30], [10], 1, 2, 16, 8)
    mask = ScoreMask(causal=causal, sliding_window=window, sinks=sinks)
    out = paged_prefill(query, cache, tables, lens, starts, mask, path="wgmma")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts, mask)) < TOL


@pytest.mark.parametrize("prefix, new, window, sinks", [(34, 3, None, 0), (60, 3, 40, 2)])
def test_a_long_cached_prefix_runs_the_unmasked_tile_loop_between_masked_tiles(
    prefix, new, window, sinks
):
    """Tiles every row sees whole (the cached prefix; the window's interior) run in the
    loop without a mask, after the sink, seam and diagonal tiles."""
    rng = np.random.default_rng(prefix)
    query, cache, tables, lens, starts = batch(rng, [prefix], [new], 1, 2, 16, 16)
    mask = ScoreMask(sliding_window=window, sinks=sinks)
    out = paged_prefill(query, cache, tables, lens, starts, mask, path="wgmma")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts, mask)) < TOL


def test_a_32_token_tile_reads_s_as_an_m64n32_and_p_v_in_two_k_steps(monkeypatch):
    monkeypatch.setattr(prefill_wgmma, "kv_tile", lambda: 32)
    rng = np.random.default_rng(32)
    query, cache, tables, lens, starts = batch(rng, [40], [5], 1, 4, 32, 16)
    out = paged_prefill(query, cache, tables, lens, starts, path="wgmma")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL


def test_auto_never_picks_wgmma_and_wgmma_refuses_what_it_cannot_serve():
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((4, 2, 1, 16, 64)).astype(np.float16)
    assert choose_path("auto", cache) == "tensor" and choose_path("wgmma", cache) == "wgmma"
    with pytest.raises(ValueError, match="path='wgmma': the wgmma path needs a float16 cache"):
        choose_path("wgmma", cache.astype(np.float32))
    wide = np.zeros((4, 2, 1, 16, 144), np.float16)
    with pytest.raises(ValueError, match=r"multiple of 16 in \[16, 128\], got 144"):
        choose_path("wgmma", wide)
    with pytest.raises(ValueError, match="'cuda_core', 'wgmma'"):
        choose_path("hopper", cache)


@pytest.mark.parametrize("cc", [(8, 0), (10, 0), (8, 9)])
def test_on_a_gpu_that_is_not_sm90_wgmma_is_refused_naming_its_compute_capability(monkeypatch, cc):
    rng = np.random.default_rng(1)
    query, cache, tables, lens, starts = batch(rng, [3], [2], 1, 1, 16, 4)
    monkeypatch.setattr(_prefill_checks, "compute_capability", lambda: cc)
    before = prefill.LAST_PATH["path"]
    with pytest.raises(ValueError, match=f"compute capability {cc[0]}.{cc[1]}"):
        paged_prefill(query, cache, tables, lens, starts, path="wgmma")
    assert prefill.LAST_PATH["path"] == before
    monkeypatch.setattr(_prefill_checks, "compute_capability", lambda: (9, 0))
    assert choose_path("wgmma", cache) == "wgmma"


@pytest.mark.parametrize("path", ["tensor", "wgmma"])
def test_a_misaligned_host_cache_is_judged_by_the_aligned_copy_it_is_staged_into(path):
    """A NumPy view starting 2 bytes past an allocation is copied to the device before the
    kernel runs: the tensor-core paths serve it (and a GPU never asks NumPy for a device
    address)."""
    rng = np.random.default_rng(5)
    query, cache, tables, lens, starts = batch(rng, [4], [3], 1, 2, 16, 4)
    spare = np.empty(cache.size + 1, np.float16)[1:].reshape(cache.shape)
    spare[...] = cache
    assert spare.ctypes.data % 16 and choose_path("auto", spare) == "tensor"
    out = paged_prefill(query, spare, tables, lens, starts, path=path)
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL
