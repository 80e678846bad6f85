"""paged_prefill against the float64 reference on ragged batches that mix pure decode
(query length 1), chunks and whole prompts; decode is the case query length = 1."""

import numpy as np
import pytest
from conftest import rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

import cuda_kernels as ck
from cuda_kernels import ScoreMask, prefill, reference
from cuda_kernels.prefill import paged_prefill
from cuda_kernels.reference import reference_prefill


@st.composite
def ragged_batches(draw):
    """(cache, tables, context_lens, query_start_loc, query) for 1-3 sequences whose
    query lengths are 1 (decode), a chunk, the whole context (a prompt) or 0 (idle)."""
    block_size = draw(st.sampled_from([2, 4]))
    num_kv_heads = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([3, 5, 8]))
    dtype = draw(st.sampled_from([np.float32, np.float16]))
    lens, q_lens = [], []
    for _ in range(draw(st.integers(1, 3))):
        ctx = draw(st.integers(1, 11))
        kind = draw(st.sampled_from(["decode", "chunk", "prompt", "idle"]))
        lens.append(ctx)
        q_lens.append({"decode": 1, "prompt": ctx, "idle": 0}.get(kind, None))
        if q_lens[-1] is None:
            q_lens[-1] = draw(st.integers(1, ctx))
    if sum(q_lens) == 0:
        q_lens[0] = 1
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    tables, num_blocks = reference.scattered_block_tables(
        rng, lens, block_size, spare=1, fill=10**6
    )
    cache = rng.standard_normal((num_blocks, 2, num_kv_heads, block_size, head_dim)).astype(dtype)
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    query = rng.standard_normal((int(starts[-1]), num_kv_heads * group, head_dim)).astype(dtype)
    return cache, tables, np.array(lens, np.int32), starts, query


@settings(max_examples=12)
@given(
    batch=ragged_batches(),
    window=st.sampled_from([None, None, 1, 3]),
    sinks=st.integers(0, 2),
    causal=st.booleans(),
)
def test_paged_prefill_matches_the_float64_reference_on_ragged_batches(
    batch, window, sinks, causal
):
    cache, tables, lens, starts, query = batch
    mask = ScoreMask(causal=causal, sliding_window=window, sinks=sinks if window else 0)
    out = paged_prefill(query, cache, tables, lens, starts, mask)
    want = reference_prefill(query, cache, tables, lens, starts, mask)
    assert out.dtype == np.float32 and out.shape == query.shape
    assert rel_err(out, want) < (3e-3 if query.dtype == np.float16 else 1e-5)


@settings(max_examples=20)
@given(batch=ragged_batches(), window=st.sampled_from([None, 2]), sinks=st.integers(0, 1))
def test_the_prefill_reference_with_one_query_token_per_sequence_is_the_decode_reference(
    batch, window, sinks
):
    cache, tables, lens, _, _ = batch
    rng = np.random.default_rng(0)
    query = rng.standard_normal((len(lens), 2 * cache.shape[2], cache.shape[4]))
    starts = np.arange(len(lens) + 1, dtype=np.int32)
    mask = ScoreMask(sliding_window=window, sinks=sinks if window else 0)
    got = reference_prefill(query, cache, tables, lens, starts, mask)
    want = reference.paged_attention(query, cache, tables, lens, mask)
    assert np.array_equal(got, want)


def test_paged_prefill_with_query_length_one_equals_paged_attention():
    rng = np.random.default_rng(7)
    lens = np.array([9, 3, 14], np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, 4)
    cache = rng.standard_normal((num_blocks, 2, 2, 4, 8)).astype(np.float32)
    query = rng.standard_normal((3, 4, 8)).astype(np.float32)
    starts = np.arange(4, dtype=np.int32)
    mask = ScoreMask(sliding_window=5, sinks=1)
    got = paged_prefill(query, cache, tables, lens, starts, mask)
    want = ck.paged_attention(query, cache, tables, lens, mask)
    assert np.abs(got - want).max() < 1e-6


@pytest.mark.parametrize("config", [(128, 32, 8), (16, 8, 1), (3, 4, 2)])
def test_other_thread_and_tile_shapes_give_the_same_output(config, monkeypatch):
    """The GPU's 128 threads and 32-token tiles; more threads than tile tokens; fewer
    threads than rows."""
    monkeypatch.setattr(prefill, "launch_config", lambda head_dim, group: config)
    rng = np.random.default_rng(3)
    lens = np.array([10, 5], np.int32)  # query lengths 6 and 1
    tables, num_blocks = reference.scattered_block_tables(rng, lens, 2)
    cache = rng.standard_normal((num_blocks, 2, 1, 2, 5)).astype(np.float32)
    starts = np.array([0, 6, 7], np.int32)
    query = rng.standard_normal((7, 2, 5)).astype(np.float32)
    mask = ScoreMask(sliding_window=4, sinks=1)
    out = paged_prefill(query, cache, tables, lens, starts, mask)
    want = reference_prefill(query, cache, tables, lens, starts, mask)
    assert rel_err(out, want) < 1e-5


def test_the_gpu_configuration_fits_shared_memory_by_shrinking_the_query_tile(monkeypatch):
    monkeypatch.setattr(prefill._backend, "backend", lambda: "gpu")
    assert prefill.launch_config(128, 8) == (128, 32, 2)
    for head_dim, group in ((128, 1), (256, 4), (512, 1), (80, 16)):
        threads, tile, q_tile = prefill.launch_config(head_dim, group)
        assert prefill.shared_bytes(head_dim, q_tile * group, tile) <= prefill.SHARED_LIMIT
    with pytest.raises(ValueError, match="shared memory"):
        prefill.launch_config(1024, 8)


def test_changing_a_future_token_leaves_earlier_rows_unchanged():
    rng = np.random.default_rng(5)
    lens = np.array([8], np.int32)
    tables = np.array([[1, 0]], np.int32)
    cache = rng.standard_normal((2, 2, 1, 4, 4)).astype(np.float32)
    starts = np.array([0, 8], np.int32)
    query = rng.standard_normal((8, 1, 4)).astype(np.float32)
    before = paged_prefill(query, cache, tables, lens, starts)
    cache[0, :, 0, 3] += 5.0  # position 7 (block 0 is logical block 1, offset 3)
    after = paged_prefill(query, cache, tables, lens, starts)
    assert np.array_equal(before[:7], after[:7]) and not np.allclose(before[7], after[7])


RNG = np.random.default_rng(0)
CACHE = RNG.standard_normal((4, 2, 2, 4, 8)).astype(np.float32)  # [N=4, 2, H_kv=2, B=4, D=8]
QUERY = RNG.standard_normal((5, 4, 8)).astype(np.float32)  # [total_q=5, H=4, D=8]
ARGS = dict(
    query=QUERY,
    kv_cache=CACHE,
    block_tables=np.array([[0, 1], [2, 3]], np.int32),
    context_lens=np.array([4, 8], np.int32),
    query_start_loc=np.array([0, 1, 5], np.int32),
)
CASES = {
    "starts_not_ending_at_the_token_count": (
        dict(query_start_loc=np.array([0, 1, 4], np.int32)),
        r"query_start_loc must run from 0 to 5",
    ),
    "starts_of_wrong_length": (
        dict(query_start_loc=np.array([0, 5], np.int32)),
        r"query_start_loc must have shape \(3,\)",
    ),
    "starts_going_down": (
        dict(query_start_loc=np.array([0, 6, 5], np.int32)),
        r"query lengths .*\[1\] = -1",
    ),
    "starts_of_int64": (dict(query_start_loc=np.array([0, 1, 5])), r"must be int32"),
    "context_shorter_than_its_queries": (
        dict(context_lens=np.array([4, 3], np.int32)),
        r"context_lens\[1\] = 3 is shorter than its 4 query",
    ),
    "block_past_the_cache": (
        dict(block_tables=np.array([[0, 1], [2, 9]], np.int32)),
        r"block_tables\[\(1, 1\)\] = 9 is out of range",
    ),
    "sinks_without_window": (dict(mask=ScoreMask(sinks=1)), r"sinks needs a sliding_window"),
    "negative_window": (
        dict(mask=ScoreMask(sliding_window=-2)),
        r"sliding_window = -2 must be >= 1",
    ),
    "window_of_zero": (dict(mask=ScoreMask(sliding_window=0)), r"sliding_window = 0 must be"),
    "causal_not_a_bool": (dict(mask=ScoreMask(causal=1)), r"causal must be a bool"),
    "scale_not_finite": (
        dict(mask=ScoreMask(scale=float("inf"))),
        r"scale must be a finite float32",
    ),
    "query_of_float64": (dict(query=QUERY.astype(np.float64)), r"query must be float32/float16"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_prefill_arguments_raise_a_value_error_naming_them(name):
    change, message = CASES[name]
    with pytest.raises(ValueError, match=message):
        paged_prefill(**{**ARGS, **change})


@pytest.mark.parametrize("launch", ["prefill", "decode"])
def test_a_bare_scale_where_the_mask_goes_is_a_type_error_naming_score_mask(launch):
    """The fifth (decode) / sixth (prefill) argument was the scale before ScoreMask."""
    call = {
        "prefill": lambda: paged_prefill(*ARGS.values(), 0.5),
        "decode": lambda: ck.paged_attention(QUERY[:2], CACHE, *list(ARGS.values())[2:4], 0.5),
    }[launch]
    with pytest.raises(TypeError, match=r"mask must be a cuda_kernels.ScoreMask, got 0.5"):
        call()


def test_a_windowed_prefill_never_validates_the_blocks_it_skips():
    tables = np.array([[-1, -1, 2, 3]], np.int32)  # positions 0..7 dropped by the window
    starts = np.array([0, 2], np.int32)
    query = QUERY[:2].copy()
    lens = np.array([16], np.int32)
    mask = ScoreMask(sliding_window=4)
    out = paged_prefill(query, CACHE, tables, lens, starts, mask)
    want = reference_prefill(query, CACHE, np.array([[0, 0, 2, 3]]), lens, starts, mask)
    assert rel_err(out, want) < 1e-5


@pytest.mark.parametrize("head_dim, loads", [(8, "vector"), (6, "scalar")])
def test_prefill_reads_16_byte_vectors_when_head_dim_allows_and_scalars_otherwise(head_dim, loads):
    rng = np.random.default_rng(11)
    lens = np.array([7, 4], np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, 4)
    cache = rng.standard_normal((num_blocks, 2, 1, 4, head_dim)).astype(np.float16)
    starts = np.array([0, 5, 6], np.int32)
    query = rng.standard_normal((6, 2, head_dim)).astype(np.float16)
    prefill._kernels.clear()
    out = paged_prefill(query, cache, tables, lens, starts)
    assert rel_err(out, reference_prefill(query, cache, tables, lens, starts)) < 3e-3
    ((name, *_),) = prefill._kernels  # the one kernel built for this call
    assert name.endswith(" scalar") == (loads == "scalar")


def nan_case(where, dtype, head_dim):
    """A prompt of 6 tokens behind a 14-token cached prefix (block size 4) with one NaN:
    in a query, in K or V at position 6 (every row attends it), or at position 16 (rows
    0..1 mask it: causally it is their future)."""
    rng = np.random.default_rng(17)
    lens, starts = np.array([20], np.int32), np.array([0, 6], np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, 4)
    cache = rng.standard_normal((num_blocks, 2, 1, 4, head_dim)).astype(dtype)
    query = rng.standard_normal((6, 2, head_dim)).astype(dtype)
    kv, pos = {"k_seen": (0, 6), "v_seen": (1, 6), "k_future": (0, 16), "v_future": (1, 16)}.get(
        where, (None, None)
    )
    if where == "query":
        query[2, 1, 3] = np.nan
    else:
        cache[tables[0, pos // 4], kv, 0, pos % 4, 1] = np.nan
    return query, cache, tables, lens, starts


NAN_PATHS = [
    ("cuda_core", np.float32, 8),
    ("cuda_core", np.float16, 16),
    ("tensor", np.float16, 16),
]


@pytest.mark.parametrize("path, dtype, head_dim", NAN_PATHS)
@pytest.mark.parametrize("where", ["query", "k_seen", "v_seen", "k_future", "v_future"])
def test_a_nan_in_q_k_or_v_propagates_exactly_where_the_float64_reference_puts_it(
    where, path, dtype, head_dim
):
    """IEEE propagation: a NaN query row, or a NaN key a row attends, makes that row NaN;
    a NaN value makes its component NaN for the rows attending it; a row that masks the
    token is untouched (0 x NaN must not leak into it)."""
    query, cache, tables, lens, starts = nan_case(where, dtype, head_dim)
    out = paged_prefill(query, cache, tables, lens, starts, path=path)
    want = reference_prefill(query, cache, tables, lens, starts)
    assert np.isnan(want).any()  # the case means something
    assert np.array_equal(np.isnan(out), np.isnan(want))
    finite = ~np.isnan(want)
    tol = 1e-5 if dtype == np.float32 else 4e-3
    if finite.any():  # a NaN key everybody attends leaves nothing finite
        assert np.abs(out[finite] - want[finite]).max() < tol * np.abs(want[finite]).max()


@pytest.mark.parametrize("path", ["cuda_core", "tensor"])
def test_an_fp16_output_is_the_float32_result_rounded_once(path):
    """out_dtype=float16 (what SDPA writes): the same float32 accumulation, rounded on the
    store; a dtype no kernel can store is refused by name."""
    rng = np.random.default_rng(33)
    lens = np.array([7, 3], np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, 4, spare=1)
    cache = rng.standard_normal((num_blocks, 2, 1, 4, 16)).astype(np.float16)
    starts = np.array([0, 3, 5], np.int32)
    query = rng.standard_normal((5, 2, 16)).astype(np.float16)
    full = ck.paged_prefill(query, cache, tables, lens, starts, path=path)
    half = ck.paged_prefill(query, cache, tables, lens, starts, path=path, out_dtype=np.float16)
    assert half.dtype == np.float16 and np.isfinite(half).all()
    np.testing.assert_array_equal(half, full.astype(np.float16))
    with pytest.raises(ValueError, match="out_dtype"):
        ck.paged_prefill(query, cache, tables, lens, starts, out_dtype=np.int8)
