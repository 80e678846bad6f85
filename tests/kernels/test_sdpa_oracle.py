"""The attention kernels on the space issue 24 is judged on, against float64 oracles.

Cases come from `sdpa_cases` (the space) and `sdpa_campaign` (the tolerances):
head_dim 16..256 (HEAD_DIMS; 24 and 40 are not multiples of 16: CUDA cores only), 1-2 KV
heads, G in 1..16, block sizes 1..256, float16/float32 caches and queries, shuffled
physical blocks, garbage (-1 or a huge id) in unused trailing table columns and, with a
window, in the blocks no query reads; decode in every mode; ragged prefill chunks behind
cached prefixes, causal or not, windows with sinks.
  * In CI (no torch) the oracle is `cuda_kernels.reference` (float64): a Hypothesis test
    per launcher, each example shrunk to a few simulated tiles, the path forced to
    "tensor" where the shape allows it and to "cuda_core" elsewhere.
  * With torch (/work/venv-torch), `reference` itself is checked against
    torch.nn.functional.scaled_dot_product_attention on 200 cases, and kernels on a few
    campaign cases against SDPA directly; those tests skip, saying so, without torch.
  * Bad input: every launcher and path raises a TypeError/ValueError naming the argument
    before any launch, and changes none of its inputs.
"""

import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sdpa_campaign import TOL_CUDA_CORE, TOL_TENSOR, error, launch, run_case
from sdpa_cases import (
    BLOCK_SIZES,
    GROUPS,
    HEAD_DIMS,
    arrays,
    cost,
    draw_decode,
    draw_prefill,
    numpy_reference,
    sdpa,
    servable,
    shrink,
)

import cuda_kernels
from cuda_kernels import ScoreMask, reference

TINY = 4  # simulated warp x tile units per Hypothesis example (a few seconds)


@st.composite
def cases(draw, kind: str, budget: float = TINY):
    window = draw(st.one_of(st.none(), st.integers(1, 20)))
    case = dict(
        kind=kind,
        head_dim=draw(st.sampled_from(HEAD_DIMS)),
        kv_heads=draw(st.integers(1, 2)),
        group=draw(st.sampled_from(GROUPS)),
        block_size=draw(st.sampled_from(BLOCK_SIZES)),
        cache_dtype=draw(st.sampled_from(["float16", "float32"])),
        query_dtype=draw(st.sampled_from(["float16", "float32"])),
        window=window,
        sinks=draw(st.integers(0, 3)) if window else 0,
        scale=draw(st.one_of(st.none(), st.floats(0.05, 0.5))),
        fill=draw(st.sampled_from([-1, 10**6])),
        extra_cols=draw(st.integers(0, 2)),
        blank_skipped=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
        needle=draw(st.sampled_from([None, "first", "last", "outside"])),
    )
    if kind == "decode":
        case.update(
            lens=draw(st.lists(st.integers(1, 48), min_size=1, max_size=2)),
            mode=draw(st.sampled_from(["auto", "single", "split"])),
        )
        case["partition_size"] = (
            draw(st.sampled_from([16, 24, 32])) if case["mode"] == "split" else None
        )
    else:
        seqs = draw(st.integers(1, 3))
        chunks = draw(st.lists(st.integers(0, 6), min_size=seqs, max_size=seqs))
        chunks[0] = max(chunks[0], 1)
        prefixes = draw(st.lists(st.integers(0, 40), min_size=seqs, max_size=seqs))
        prefixes = [max(p, 1 - c) for p, c in zip(prefixes, chunks, strict=True)]
        case.update(chunks=chunks, prefixes=prefixes, causal=draw(st.booleans()))
    case = shrink(case, budget)
    if cost(case) > budget:  # a context too short to halve: one KV head is half the work
        case["kv_heads"] = 1
    return case


def forced_path(case) -> str:
    return "tensor" if servable(case) else "cuda_core"


def check_against_reference(case):
    data = arrays(case)
    path = forced_path(case)
    out, ran = launch(case, data, path)
    assert ran == path
    tol = TOL_TENSOR if path == "tensor" else TOL_CUDA_CORE
    assert error(out, numpy_reference(case, data), data) <= tol, case


EDGE = dict(
    kv_heads=1,
    cache_dtype="float16",
    query_dtype="float32",
    scale=None,
    fill=-1,
    extra_cols=1,
    blank_skipped=True,
)


@settings(max_examples=10)
@given(case=cases("decode"))
@example(
    case=dict(
        EDGE,
        kind="decode",
        head_dim=256,
        group=16,
        block_size=256,
        window=None,
        sinks=0,
        lens=[20],
        mode="auto",
        partition_size=None,
        seed=1,
        needle="last",
    )
)
def test_decode_with_the_path_forced_matches_the_float64_reference_anywhere_in_the_space(case):
    check_against_reference(case)


@settings(max_examples=10)
@given(case=cases("prefill"))
@example(
    case=dict(
        EDGE,
        kind="prefill",
        head_dim=80,
        group=3,
        block_size=100,
        window=9,
        sinks=2,
        prefixes=[25],
        chunks=[4],
        causal=True,
        seed=2,
        needle="outside",
    )
)
def test_prefill_with_the_path_forced_matches_the_float64_reference_anywhere_in_the_space(case):
    check_against_reference(case)


@pytest.mark.slow
@settings(max_examples=8)  # the two tests above draw the same space on smaller contexts
@given(case=st.one_of(cases("decode", 12), cases("prefill", 12)))
def test_larger_cases_of_both_launchers_match_the_float64_reference(case):
    check_against_reference(case)


@pytest.mark.parametrize("needle", ["first", "last", "outside"])
def test_a_mask_one_position_off_misses_the_tensor_tolerance_by_far_on_a_needle_case(needle):
    """The tolerances can fail: on 300-token contexts the answer with the needle's edge
    moved by one position (the last token dropped, the first one dropped, the window one
    longer) is over 20 x TOL_TENSOR away from the right one."""
    window = 40 if needle == "outside" else None
    case = dict(
        kind="decode",
        head_dim=64,
        kv_heads=2,
        group=4,
        block_size=16,
        cache_dtype="float16",
        query_dtype="float16",
        window=window,
        sinks=0,
        scale=None,
        fill=-1,
        extra_cols=0,
        blank_skipped=False,
        seed=3,
        lens=[300, 200],
        mode="auto",
        partition_size=None,
        needle=needle,
    )
    data = arrays(case)
    want = numpy_reference(case, data)
    lens = data["context_lens"]
    off = {
        "last": dict(context_lens=lens - 1, window=None),
        "first": dict(context_lens=lens, window=int(lens.max()) - 1),
        "outside": dict(context_lens=lens, window=41),
    }[needle]
    wrong = reference.paged_attention(
        data["query"],
        data["kv_cache"],
        data["block_tables"],
        off["context_lens"],
        ScoreMask(sliding_window=off["window"]),
    )
    assert error(wrong, want, data) > 20 * TOL_TENSOR


def torch_or_skip():
    return pytest.importorskip(
        "torch",
        reason="the SDPA oracle needs torch "
        "(/work/venv-torch); CI compares with reference.py instead",
    )


def test_the_float64_reference_agrees_with_torch_sdpa_on_the_campaign_space():
    """reference.py is the CI oracle: it must be torch's SDPA, masks and windows included."""
    torch_or_skip()
    rng = np.random.default_rng(7)
    for number in range(200):
        case = draw_decode(rng) if number % 2 == 0 else draw_prefill(rng)
        data = arrays(case)
        want = sdpa(case, data)
        assert np.abs(numpy_reference(case, data) - want).max() < 1e-12, case


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_every_path_that_serves_a_campaign_case_matches_torch_sdpa(kind, seed):
    torch_or_skip()
    rng = np.random.default_rng(1000 + seed)
    case = (draw_decode if kind == "decode" else draw_prefill)(rng)
    records = run_case(shrink(case, 10))
    assert all(r["ok"] for r in records), (case, records)


# Bad input: a clear error naming the argument, before any launch, nothing changed.


def small_batch(kind):
    rng = np.random.default_rng(3)
    cache = rng.standard_normal((6, 2, 2, 4, 32)).astype(np.float16)  # [N, 2, H_kv, B, D]
    tables = np.array([[4, 1, 3], [0, 5, -1]], np.int32)
    lens = np.array([9, 5], np.int32)
    rows = 2 if kind == "decode" else 6
    query = rng.standard_normal((rows, 8, 32)).astype(np.float16)
    starts = np.array([0, 4, 6], np.int32)
    return dict(
        query=query, kv_cache=cache, block_tables=tables, context_lens=lens, query_start_loc=starts
    )


def call(kind, path, args):
    common = (args["query"], args["kv_cache"], args["block_tables"], args["context_lens"])
    if kind == "decode":
        return cuda_kernels.paged_attention(*common, path=path)
    return cuda_kernels.paged_prefill(*common, args["query_start_loc"], path=path)


def non_contiguous(q):
    return np.ascontiguousarray(q.transpose(1, 0, 2)).transpose(1, 0, 2)


def with_entry(tables, at, value):
    tables = tables.copy()
    tables[at] = value
    return tables


BAD = {  # name: (argument to change, change, exception, words the message must hold)
    "a block id past the cache": (
        "block_tables",
        lambda a: with_entry(a, (0, 1), 6),
        ValueError,
        "block_tables[(0, 1)] = 6",
    ),
    "a block id of -1 that is read": (
        "block_tables",
        lambda a: with_entry(a, (1, 0), -1),
        ValueError,
        "block_tables[(1, 0)] = -1",
    ),
    "a context of 0 tokens": (
        "context_lens",
        lambda a: np.array([9, 0], np.int32),
        ValueError,
        "context_lens[1] = 0",
    ),
    "a float64 query": ("query", lambda a: a.astype(np.float64), TypeError, "query"),
    "an int16 cache": ("kv_cache", lambda a: a.astype(np.int16), TypeError, "kv_cache"),
    "int64 block tables": ("block_tables", lambda a: a.astype(np.int64), ValueError, "int32"),
    "head_dim 0": ("kv_cache", lambda a: a[..., :0], ValueError, "kv_cache"),
    "a non-contiguous query": ("query", non_contiguous, ValueError, "query"),
    "5 heads over 2 KV heads": ("query", lambda a: a[:, :5].copy(), ValueError, "num_kv_heads"),
    "a query head_dim unlike the cache's": (
        "query",
        lambda a: a[..., :16].copy(),
        ValueError,
        "head_dim",
    ),
}


@pytest.mark.parametrize("path", ["auto", "tensor", "cuda_core"])
@pytest.mark.parametrize("kind", ["decode", "prefill"])
@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_input_is_refused_naming_the_argument_and_changes_nothing(bad, kind, path):
    name, change, exc, words = BAD[bad]
    args = small_batch(kind)
    args[name] = change(args[name])
    before = {k: np.array(v, copy=True) for k, v in args.items()}
    with pytest.raises(exc, match=re.escape(words)):
        call(kind, path, args)
    for k, v in args.items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_forcing_tensor_cores_on_a_float32_cache_or_head_dim_24_is_refused_naming_path(kind):
    for change in (lambda a: a.astype(np.float32), lambda a: a[..., :24].copy()):
        args = small_batch(kind)
        args["kv_cache"] = change(args["kv_cache"])
        args["query"] = args["query"][..., : args["kv_cache"].shape[4]].copy()
        with pytest.raises(ValueError, match=r"^path='tensor': the tensor-core path needs"):
            call(kind, "tensor", args)


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_a_device_cache_not_16_byte_aligned_falls_back_to_cuda_cores_and_refuses_tensor(kind):
    """A cache one fp16 element into a device buffer: "auto" runs the CUDA-core kernel's
    scalar loads and matches the reference; "tensor" is refused before any launch."""
    from numba import cuda

    case = dict(
        kind=kind,
        head_dim=32,
        kv_heads=1,
        group=4,
        block_size=4,
        cache_dtype="float16",
        query_dtype="float16",
        window=None,
        sinks=0,
        scale=None,
        fill=-1,
        extra_cols=1,
        blank_skipped=False,
        seed=11,
        needle="last",
    )
    case.update(
        dict(lens=[23, 7], mode="auto", partition_size=None)
        if kind == "decode"
        else dict(prefixes=[13, 0], chunks=[5, 4], causal=True)
    )
    data = arrays(case)
    flat = np.zeros(data["kv_cache"].size + 1, np.float16)
    flat[1:] = data["kv_cache"].ravel()
    shifted = dict(data, kv_cache=cuda.to_device(flat)[1:].reshape(data["kv_cache"].shape))
    out, ran = launch(case, shifted, "auto")
    assert ran == "cuda_core"
    assert error(out, numpy_reference(case, data), data) <= TOL_CUDA_CORE
    with pytest.raises(ValueError, match="path='tensor': .*16-byte aligned"):
        launch(case, shifted, "tensor")
