"""Every launcher check: a bad argument raises ValueError naming it (and the index),
before anything is launched, and leaves the cache unchanged."""

import numpy as np
import pytest

import cuda_kernels as ck
from cuda_kernels import _checks as ck_checks

RNG = np.random.default_rng(0)
CACHE = RNG.standard_normal((4, 2, 2, 4, 8)).astype(np.float32)  # [N=4, 2, H_kv=2, B=4, D=8]
QUERY = RNG.standard_normal((2, 4, 8)).astype(np.float32)  # [S=2, H=4, D=8]
TABLES = np.array([[0, 1], [2, 3]], np.int32)
LENS = np.array([5, 8], np.int32)
KEY = RNG.standard_normal((2, 2, 8)).astype(np.float32)


def attention(**change):
    args = dict(query=QUERY, kv_cache=CACHE, block_tables=TABLES, context_lens=LENS)
    args.update(change)
    return lambda: ck.paged_attention(**args)


def write(**change):
    args = dict(kv_cache=CACHE.copy(), key=KEY, value=KEY, slot_mapping=np.array([0, 5]))
    args.update(change)
    return lambda: ck.write_kv(**args)


CASES = {
    "cache_with_four_dims": (write(kv_cache=CACHE[:, 0]), r"kv_cache must have 5 dimensions"),
    "cache_without_k_and_v_pair": (
        write(kv_cache=np.zeros((4, 3, 2, 4, 8), np.float32)),
        r"kv_cache .*dimension 1 is 3",
    ),
    "cache_of_float64": (
        write(kv_cache=CACHE.astype(np.float64)),
        r"kv_cache must be float32/float16",
    ),
    "cache_not_contiguous_inside": (
        write(kv_cache=np.zeros((4, 2, 2, 8, 8), np.float32)[:, :, :, ::2]),
        r"kv_cache must be C-contiguous in its inner",
    ),
    "key_of_wrong_shape": (write(key=KEY[:, :1]), r"key must have shape \(2, 2, 8\)"),
    "value_of_other_dtype": (write(value=KEY.astype(np.float16)), r"value must be float32"),
    "slot_past_the_cache": (
        write(slot_mapping=np.array([0, 16])),
        r"slot_mapping\[1\] = 16 is out of range",
    ),
    "slot_written_twice": (
        write(slot_mapping=np.array([3, 3])),
        r"slot_mapping names slot 3 twice",
    ),
    "slot_mapping_of_floats": (
        write(slot_mapping=np.array([0.0, 1.0])),
        r"slot_mapping must be int32/int64",
    ),
    "query_of_float64": (
        attention(query=QUERY.astype(np.float64)),
        r"query must be float32/float16",
    ),
    "query_head_dim_mismatch": (attention(query=QUERY[:, :, :4].copy()), r"query head_dim 4"),
    "heads_not_a_multiple_of_kv_heads": (
        attention(query=QUERY[:, :3].copy()),
        r"not a multiple of num_kv_heads=2",
    ),
    "tables_of_int64": (
        attention(block_tables=TABLES.astype(np.int64)),
        r"block_tables and context_lens must be int32",
    ),
    "tables_with_too_few_rows": (
        attention(block_tables=TABLES[:1]),
        r"block_tables has 1 rows for 2",
    ),
    "context_past_the_table": (
        attention(context_lens=np.array([5, 9], np.int32)),
        r"context_lens\[1\] = 9 is out of range",
    ),
    "empty_context": (attention(context_lens=np.array([0, 8], np.int32)), r"context_lens\[0\] = 0"),
    "block_id_past_the_cache": (
        attention(block_tables=np.array([[0, 4], [2, 3]], np.int32)),
        r"block_tables\[\(0, 1\)\] = 4 is out of range \[0, 4\)",
    ),
    "null_block_inside_the_context": (
        attention(block_tables=np.array([[0, 1], [-1, 3]], np.int32)),
        r"block_tables\[\(1, 0\)\] = -1",
    ),
    "window_of_zero": (
        attention(mask=ck.ScoreMask(sliding_window=0)),
        r"sliding_window = 0 must be >= 1",
    ),
    "sinks_without_window": (
        attention(mask=ck.ScoreMask(sinks=2)),
        r"sinks needs a sliding_window",
    ),
    "unknown_mode": (attention(mode="fast"), r"mode must be one of"),
    "partition_of_zero": (attention(mode="split", partition_size=0), r"partition_size = 0"),
    "partition_for_single_pass": (
        attention(mode="single", partition_size=4),
        r"partition_size applies only",
    ),
    "scale_not_finite": (
        attention(mask=ck.ScoreMask(scale=float("nan"))),
        r"scale must be a finite float32",
    ),
    "copy_from_a_block_past_the_cache": (
        lambda: ck.copy_blocks(CACHE.copy(), [(0, 1), (7, 2)]),
        r"pairs\[1\] src = 7 is out of range",
    ),
    "copy_to_the_same_block_twice": (
        lambda: ck.copy_blocks(CACHE.copy(), [(0, 2), (1, 2)]),
        r"pairs\[1\] writes block 2, already a dst",
    ),
    "copy_into_a_block_being_read": (
        lambda: ck.copy_blocks(CACHE.copy(), [(0, 1), (1, 2)]),
        r"pairs\[0\] writes block 1, which another pair reads",
    ),
    "copy_pairs_that_are_not_pairs": (
        lambda: ck.copy_blocks(CACHE.copy(), [(0, 1, 2)]),
        r"pairs must be \(src, dst\) pairs",
    ),
    "swap_to_a_host_pool_of_other_layout": (
        lambda: ck.swap_out(CACHE, np.zeros((4, 2, 1, 4, 8), np.float32), [(0, 0)]),
        r"host_cache .* must match kv_cache",
    ),
    "swap_to_a_block_past_the_host_pool": (
        lambda: ck.swap_out(CACHE, np.zeros((2,) + CACHE.shape[1:], np.float32), [(0, 2)]),
        r"pairs\[0\] dst = 2 is out of range",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_bad_argument_raises_a_value_error_naming_it(case):
    call, message = CASES[case]
    with pytest.raises(ValueError, match=message):
        call()


def test_a_rejected_write_leaves_the_cache_unchanged():
    cache = CACHE.copy()
    with pytest.raises(ValueError):
        ck.write_kv(cache, KEY, KEY, np.array([1, 99]))
    assert np.array_equal(cache, CACHE)


def test_table_entries_past_the_context_are_never_validated():
    tables = np.array([[0, 1, 123456], [2, 3, -5]], np.int32)
    assert np.isfinite(ck.paged_attention(QUERY, CACHE, tables, LENS)).all()


# ---- Fuzzing every launcher with ill-typed and out-of-range arguments -------------------
# Each example replaces ONE argument of a valid call with a bad value. The launcher must
# raise TypeError or ValueError (not OverflowError, not a NumPy error, never launch) and
# leave every buffer it could write exactly as it was.

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cuda_kernels.layout import BLOCK_MAJOR  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None)
SCALAR_NOT_INT = st.one_of(
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.just(np.float64(4.0)),
    st.just(np.bool_(True)),
    st.just(np.array(2)),
)
NOT_INT = st.one_of(SCALAR_NOT_INT, st.lists(st.integers(0, 3), max_size=2))
HUGE = st.integers(2**31, 2**70)
NOT_AN_INT_ELEMENT = st.one_of(
    st.floats(allow_nan=True),
    st.text(max_size=2),
    st.booleans(),
    st.none(),
    st.integers(2**63, 2**70),
)


def with_one_bad(good: list, bad):
    """A list of ints with `bad` put in at a place drawn by the caller."""
    return st.integers(0, len(good)).map(lambda i: good[:i] + [bad] + good[i:])


BAD_INDEX_LIST = NOT_AN_INT_ELEMENT.flatmap(lambda bad: with_one_bad([0, 1], bad))
BAD_INDEX_ARRAY = st.sampled_from(
    [
        np.array([0.0, 1.0]),
        np.array([True, False]),
        np.array(["0", "1"]),
        np.array([0, 1], np.uint8).view(np.int8)[:1].astype(np.float16),
    ]
)
BAD_SCALE = st.one_of(
    st.booleans(),
    st.text(max_size=2),
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(-float("inf")),
    st.floats(3.5e38, 1e308),
    st.floats(-1e308, -3.5e38),
    st.integers(2**129, 2**300),
    # finite float32, but a score would overflow (issue 33: 1e38 gave NaN): past MAX_SCALE
    st.floats(ck_checks.MAX_SCALE, 3.4e38, exclude_min=True),
    st.floats(-3.4e38, -ck_checks.MAX_SCALE, exclude_max=True),
    st.sampled_from([1e38, -1e38, 2**17]),
    st.just([1.0]),
    st.just(np.array([0.5])),
    st.just(1 + 2j),
)


def raises_clearly_and_changes_nothing(call, *buffers):
    before = [np.array(b, copy=True) for b in buffers]
    try:
        call()
    except (TypeError, ValueError) as error:
        assert str(error), "an error must say what is wrong"
    else:
        raise AssertionError("the launcher accepted a bad argument")
    for b, was in zip(buffers, before, strict=True):
        assert np.asarray(b).tobytes() == was.tobytes(), "a refused call changed a buffer"


@FUZZ
@given(data=st.data())
def test_write_kv_refuses_every_ill_typed_or_out_of_range_argument(data):
    cache = CACHE.copy()
    args = dict(kv_cache=cache, key=KEY, value=KEY, slot_mapping=np.array([0, 5]))
    name, bad = data.draw(
        st.sampled_from(
            [
                ("slot_mapping", BAD_INDEX_LIST),
                ("slot_mapping", BAD_INDEX_ARRAY),
                ("slot_mapping", st.one_of(SCALAR_NOT_INT, st.none())),
                ("slot_mapping", st.lists(st.integers(16, 2**62), min_size=2, max_size=2)),
                ("key", st.sampled_from([KEY.tolist(), KEY.astype(np.float64), KEY[0], None, 3])),
                ("value", st.sampled_from([KEY.astype(np.float16), KEY[:, :, :4], "v"])),
                ("kv_cache", st.sampled_from([CACHE.tolist(), CACHE.astype(np.int32), CACHE[0]])),
            ]
        )
    )
    args[name] = data.draw(bad)
    raises_clearly_and_changes_nothing(lambda: ck.write_kv(**args), cache)


def pair_strategies(limit: int):
    bad_row = NOT_AN_INT_ELEMENT.flatmap(lambda bad: st.sampled_from([(bad, 1), (0, bad)]))
    return st.one_of(
        bad_row.map(lambda row: [(2, 3), row]),
        st.sampled_from(
            [
                [0, 1],
                [(0,)],
                [(0, 1, 2)],
                [[0, 1], [2]],
                "01",
                5,
                None,
                np.array([[0.0, 1.0]]),
                np.array([[True, False]]),
                [(0, 1.5)],
                [("0", "1")],
            ]
        ),
        st.tuples(st.integers(limit, 2**70), st.integers(0, limit - 1)).map(lambda p: [p]),
        st.tuples(st.integers(0, limit - 1), st.integers(-(2**70), -1)).map(lambda p: [p]),
    )


@FUZZ
@given(pairs=pair_strategies(4), which=st.sampled_from(["copy", "swap_out", "swap_in"]))
def test_copy_and_swap_refuse_ill_typed_or_out_of_range_pairs(pairs, which):
    cache, host = CACHE.copy(), np.zeros_like(CACHE)
    call = {
        "copy": lambda: ck.copy_blocks(cache, pairs),
        "swap_out": lambda: ck.swap_out(cache, host, pairs),
        "swap_in": lambda: ck.swap_in(host, cache, pairs),
    }[which]
    raises_clearly_and_changes_nothing(call, cache, host)


@FUZZ
@given(
    host=st.sampled_from(
        [
            CACHE.tolist(),
            CACHE.astype(np.float64),
            CACHE[:, :1],
            CACHE[0],
            None,
            7,
            np.zeros((4, 2, 2, 4, 4), np.float32),
            np.zeros((4, 2, 2, 4, 8), np.float16),
        ]
    ),
    out=st.booleans(),
)
def test_swap_refuses_a_host_pool_of_the_wrong_kind_or_layout(host, out):
    cache = CACHE.copy()
    call = (
        (lambda: ck.swap_out(cache, host, [(0, 1)]))
        if out
        else (lambda: ck.swap_in(host, cache, [(1, 0)]))
    )
    buffers = (cache, host) if isinstance(host, np.ndarray) else (cache,)
    raises_clearly_and_changes_nothing(call, *buffers)


def attention_args(**change):
    """A valid decode call with `change` in it: mask fields (MASK_FIELDS) go into its
    ScoreMask; sinks come with a window and partition_size with mode="split"."""
    args = dict(query=QUERY, kv_cache=CACHE, block_tables=TABLES, context_lens=LENS)
    if "sinks" in change:
        change = {"sliding_window": 4, **change}
    if "partition_size" in change:
        change = {"mode": "split", **change}
    mask = {k: change.pop(k) for k in MASK_FIELDS if k in change}
    return {**args, **change, "mask": ck.ScoreMask(**mask)}


# the mask's fields by their ScoreMask names, then the launch's own arguments
MASK_FIELDS = ("scale", "causal", "sliding_window", "sinks")
ATTENTION_BAD = [
    ("scale", BAD_SCALE),
    ("causal", st.one_of(st.integers(0, 1), st.none(), st.text(max_size=2))),
    ("sliding_window", st.one_of(NOT_INT, HUGE, st.integers(-(2**40), 0))),
    ("sinks", st.one_of(NOT_INT, HUGE, st.integers(-(2**40), -1), st.none())),
    ("partition_size", st.one_of(NOT_INT, HUGE, st.integers(-(2**40), 0))),
    ("block_tables", st.one_of(BAD_INDEX_LIST.map(lambda row: [row, [2, 3]]), BAD_INDEX_ARRAY)),
    ("context_lens", st.one_of(BAD_INDEX_LIST, BAD_INDEX_ARRAY, st.just([5, 2**40]))),
    ("query", st.sampled_from([QUERY.tolist(), QUERY.astype(np.float64), QUERY[0], None])),
]


@FUZZ
@given(data=st.data())
def test_paged_attention_refuses_every_ill_typed_or_out_of_range_argument(data):
    name, bad = data.draw(st.sampled_from(ATTENTION_BAD))
    cache = CACHE.copy()
    args = attention_args(kv_cache=cache, **{name: data.draw(bad)})
    raises_clearly_and_changes_nothing(lambda: ck.paged_attention(**args), cache)


@FUZZ
@given(data=st.data())
def test_decode_with_refuses_every_ill_typed_or_out_of_range_argument(data):
    name, bad = data.draw(st.sampled_from(ATTENTION_BAD))
    cache = CACHE.copy()
    args = attention_args(**{name: data.draw(bad)})
    plan = {k: args[k] for k in ("mode", "partition_size") if k in args}
    raises_clearly_and_changes_nothing(
        lambda: ck.decode_with(
            BLOCK_MAJOR,
            cache,
            cache,
            args["query"],
            args["block_tables"],
            args["context_lens"],
            ck.CacheShape(num_blocks=4, num_kv_heads=2, block_size=4, head_dim=8),
            ck.DecodeOptions(args["mask"], **plan),
        ),
        cache,
    )


@pytest.mark.parametrize("scale", [ck_checks.MAX_SCALE, -ck_checks.MAX_SCALE, 1e-30])
def test_an_extreme_scale_inside_the_documented_range_matches_the_float64_reference(scale):
    from cuda_kernels.reference import paged_attention as reference

    lens = np.array([5, 8], np.int32)
    got = ck.paged_attention(QUERY, CACHE, TABLES, lens, ck.ScoreMask(scale=scale))
    want = reference(QUERY, CACHE, TABLES, lens, ck.ScoreMask(scale=scale))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-3)
