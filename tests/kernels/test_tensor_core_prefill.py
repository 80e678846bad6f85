"""paged_prefill on tensor cores (path="tensor", `prefill_tc`) against the float64
reference, on fresh random ragged batches behind cached prefixes, outputs poisoned with
NaN first (the simulator launcher always poisons). One warp, 16-token tiles under the
simulator: every mma, ldmatrix and cp.async goes through the PTX-faithful stand-ins."""

import numpy as np
import pytest
from conftest import prefill_batch as batch
from conftest import rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels import ScoreMask, prefill
from cuda_kernels._prefill_checks import choose_path
from cuda_kernels.fast import prefill_tc
from cuda_kernels.fast.prefill_tc_shape import TileShape
from cuda_kernels.prefill import paged_prefill
from cuda_kernels.reference import reference_prefill

TOL = 4e-3  # P is rounded to fp16 before P V, as in FlashAttention-2


@st.composite
def tensor_batches(draw):
    head_dim = draw(st.sampled_from([16, 16, 32, 48, 64]))
    group = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    block_size = draw(st.sampled_from([1, 2, 5, 16, 256]))
    kv_heads = draw(st.integers(1, 2))
    seqs = draw(st.integers(1, 3))
    prefixes = [draw(st.integers(0, 40)) for _ in range(seqs)]
    # at most two 16-row tiles of a sequence's rows (a third runs the same code)
    q_lens = [draw(st.integers(1, min(12, max(1, 32 // group)))) for _ in range(seqs)]
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return batch(rng, prefixes, q_lens, kv_heads, group, head_dim, block_size)


@settings(max_examples=8)
@given(args=tensor_batches(), causal=st.booleans())
def test_the_tensor_core_prefill_matches_the_float64_reference_on_ragged_chunked_batches(
    args, causal
):
    query, cache, tables, lens, starts = args
    out = paged_prefill(query, cache, tables, lens, starts, ScoreMask(causal=causal), path="tensor")
    want = reference_prefill(query, cache, tables, lens, starts, ScoreMask(causal=causal))
    assert out.shape == query.shape and out.dtype == np.float32
    assert rel_err(out, want) < TOL


@pytest.mark.parametrize("head_dim, group", [(128, 8), (16, 16), (80, 3)])
def test_the_widest_group_and_a_padded_row_layout_are_served(head_dim, group):
    """The headline D=128 with G=8, G=16 (one query token per warp), D=80 (10 chunks a
    row: the odd-stride padded layout instead of the XOR swizzle). D=256 (16 k-steps):
    test_the_large_head_dims_with_gqa_match_the_reference_behind_cached_prefixes."""
    rng = np.random.default_rng(head_dim + group)
    query, cache, tables, lens, starts = batch(rng, [9, 0], [5, 3], 1, group, head_dim, 4)
    out = paged_prefill(query, cache, tables, lens, starts, path="tensor")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL


@pytest.mark.parametrize("window, sinks, causal", [(5, 0, True), (7, 2, True), (4, 1, False)])
def test_windows_and_sinks_on_tensor_cores_follow_the_reference(window, sinks, causal):
    """A context of 70 tokens: sink tiles, the window's seam, full tiles in between and
    the causal diagonal all occur."""
    rng = np.random.default_rng(window * 10 + sinks)
    query, cache, tables, lens, starts = batch(rng, [50, 3], [20, 2], 2, 2, 32, 8)
    mask = ScoreMask(causal=causal, sliding_window=window, sinks=sinks)
    out = paged_prefill(query, cache, tables, lens, starts, mask, path="tensor")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts, mask)) < TOL


def test_a_long_cached_prefix_runs_the_unmasked_tile_loop_and_a_float32_query_is_accepted():
    rng = np.random.default_rng(2)
    query, cache, tables, lens, starts = batch(rng, [70], [4], 1, 4, 16, 16, np.float32)
    out = paged_prefill(query, cache, tables, lens, starts, path="tensor")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL


def test_tensor_and_cuda_core_paths_agree_and_auto_takes_tensor_cores_when_it_can():
    rng = np.random.default_rng(4)
    query, cache, tables, lens, starts = batch(rng, [6, 20], [10, 1], 2, 4, 32, 4)
    tensor = paged_prefill(query, cache, tables, lens, starts, path="tensor")
    core = paged_prefill(query, cache, tables, lens, starts, path="cuda_core")
    assert np.abs(tensor - core).max() < 2e-2  # two fp16 roundings apart at most
    assert choose_path("auto", cache) == "tensor" and prefill.LAST_PATH["path"] == "cuda_core"
    one = batch(rng, [0], [1], 2, 4, 32, 4)  # one token: what auto runs, not its answer
    paged_prefill(*one)
    assert prefill.LAST_PATH["path"] == "tensor"
    assert choose_path("auto", cache.astype(np.float32)) == "cuda_core"
    assert choose_path("auto", cache[..., :24]) == "cuda_core"  # 24 is not a multiple of 16
    d_cache, d_query, d_tables, d_lens, d_starts = (
        prefill.ck.to_device(a) for a in (cache, query, tables, lens, starts)
    )
    launch = prefill.launcher(
        d_cache,
        d_query,
        prefill.PrefillBatch(d_tables, d_lens, d_starts, np.diff(starts)),
        mask=ScoreMask(scale=0.25),
        out=prefill._empty(query.shape),
        path="auto",
    )
    assert launch.path == "tensor"


CANNOT = {
    "a float32 cache": (np.float32, 32, r"path='tensor': .*float16 cache, got float32"),
    "head_dim 24": (np.float16, 24, r"path='tensor': .*multiple of 16 .*got 24"),
    "head_dim 272": (np.float16, 272, r"path='tensor': .*\[16, 256\], got 272"),
}


@pytest.mark.parametrize("name", sorted(CANNOT))
def test_forcing_tensor_cores_on_a_shape_they_cannot_serve_is_a_value_error(name):
    dtype, head_dim, message = CANNOT[name]
    rng = np.random.default_rng(0)
    query, cache, tables, lens, starts = batch(rng, [2], [2], 1, 1, head_dim, 4)
    cache = cache.astype(dtype)
    before = cache.copy()
    with pytest.raises(ValueError, match=message):
        paged_prefill(query, cache, tables, lens, starts, path="tensor")
    assert np.array_equal(cache, before)
    got = paged_prefill(query, cache, tables, lens, starts, path="auto")  # the fallback serves
    assert rel_err(got, reference_prefill(query, cache, tables, lens, starts)) < TOL


@pytest.mark.parametrize("path", ["gpu", "", None, 3, "Tensor"])
def test_an_unknown_path_is_a_value_error_naming_path(path):
    rng = np.random.default_rng(0)
    query, cache, tables, lens, starts = batch(rng, [2], [2], 1, 1, 16, 4)
    with pytest.raises(ValueError, match=r"path must be one of 'auto', 'tensor', 'cuda_core'"):
        paged_prefill(query, cache, tables, lens, starts, path=path)


def test_the_gpu_configuration_is_a_warpgroup_with_tiles_that_fit_shared_memory(monkeypatch):
    monkeypatch.setattr(prefill_tc._backend, "backend", lambda: "gpu")
    assert prefill_tc.launch_config(128) == (4, 64, 8, 1)
    assert prefill_tc.launch_config(176) == (4, 32, 11, 1)
    assert prefill_tc.launch_config(192) == (8, 32, 12, 2)  # O split over two warps a row
    assert prefill_tc.launch_config(224) == (8, 32, 14, 2)
    assert prefill_tc.launch_config(256) == (4, 16, 0, 2)  # 32 rows, all of Q in q_s
    for head_dim in range(16, 257, 16):
        warps, tile, q_regs, o_split = prefill_tc.launch_config(head_dim)
        shape = TileShape.build(head_dim, 1, warps, tile, 16, q_regs, o_split)
        rows = 32 if head_dim == 256 else 64  # one warpgroup, two row blocks at D=256
        assert shape.ROWS == rows and shape.NDW * o_split == head_dim // 8
        assert 2 * tile * shape.SC * 16 <= prefill_tc.SHARED_BUDGET
        assert shape.shared_bytes() <= 48 * 1024  # all static shared memory


def run_shape(monkeypatch, config, head_dim, group, block_size, prefixes, q_lens, causal=True):
    """paged_prefill(path="tensor") with launch_config forced to `config` (warps, tile,
    q_regs, o_split), against the float64 reference; returns the relative error."""
    monkeypatch.setattr(prefill_tc, "launch_config", lambda d: config)
    rng = np.random.default_rng(head_dim * 7 + group + block_size)
    query, cache, tables, lens, starts = batch(
        rng, prefixes, q_lens, 1, group, head_dim, block_size
    )
    mask = ScoreMask(causal=causal)
    out = paged_prefill(query, cache, tables, lens, starts, mask, path="tensor")
    return rel_err(out, reference_prefill(query, cache, tables, lens, starts, mask))


@pytest.mark.slow
@pytest.mark.parametrize("head_dim, group, block_size", [(256, 2, 1), (192, 4, 6)])
def test_the_large_head_dims_with_gqa_match_the_reference_behind_cached_prefixes(
    head_dim, group, block_size
):
    """The simulator's launch_config (o_split 2 above D=176, as on a GPU): two ragged
    chunks behind cached prefixes (one spans a block boundary), block sizes 1 and 6 (16 runs
    in the ragged and long-prefix tests: the block size and head_dim are separate code)."""
    rng = np.random.default_rng(head_dim + group + block_size)
    query, cache, tables, lens, starts = batch(rng, [17, 5], [3, 2], 1, group, head_dim, block_size)
    out = paged_prefill(query, cache, tables, lens, starts, path="tensor")
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < TOL


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, head_dim, block_size",
    [
        ((2, 16, 3, 2), 48, 6),  # o_split with an odd share of O (3 n-tiles: the x2.trans tile)
        ((1, 16, 1, 1), 64, 1),  # Q's k-steps 1..3 in shared memory, read back by ldmatrix
        ((1, 16, 0, 1), 80, 5),  # all of Q in shared memory, on the padded row layout
        ((4, 16, 0, 2), 128, 3),  # D=256's GPU shape: two row blocks, o_split, Q in shared memory
    ],
)
def test_split_o_and_q_in_shared_memory_match_the_reference(
    monkeypatch, config, head_dim, block_size
):
    """Causal: each row's length depends on its row block's offset, which a shape-specific
    mapping bug would move. Non-causal rows all see the whole context, through the same
    code for every shape (the ragged and window tests run it)."""
    assert run_shape(monkeypatch, config, head_dim, 2, block_size, [9, 0], [5, 3]) < TOL


BAD_SHAPES = {
    "o_split 3": ((64, 1, 4, 16, 16, None, 3), r"o_split must be 1 or 2"),
    "q_regs past the k-steps": ((64, 1, 4, 16, 16, 5, 1), r"q_regs must be in \[0, 4\], got 5"),
    "a split through a swizzle group": ((64, 1, 2, 16, 16, None, 2), r"whole swizzle groups"),
    "a tile wider than the CTA": ((64, 1, 1, 48, 16, None, 1), r"at most the CTA's threads"),
}


@pytest.mark.parametrize("name", sorted(BAD_SHAPES))
def test_a_tile_shape_the_kernel_cannot_take_is_a_value_error(name):
    args, message = BAD_SHAPES[name]
    with pytest.raises(ValueError, match=message):
        TileShape.build(*args)
