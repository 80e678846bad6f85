"""The CUDA-core decode's cp.async staging on the simulator: the staged kernel and the
register path agree with the float64 reference; a staging that waits for one group too
few reads stages whose copies have not landed (the simulator lands cp.async data only at
wait_group) and is wrong, so these inputs do exercise the wait; the geometry keeps the
ring within its budget and refuses staged=True where it cannot serve."""

import numpy as np
import pytest
from conftest import padded_tables, random_cache, random_query, rel_err
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

import cuda_kernels as ck
from cuda_kernels import reference
from cuda_kernels.fast import decode, decode_geometry
from cuda_kernels.layout import BLOCK_MAJOR, BLOCK_MAJOR_SCALAR

HEAD_DIM, GROUP, KV_HEADS, BLOCK = 16, 4, 2, 4
LENS = (70, 37)  # 32 tokens a step with one warp at head_dim 16: several steps, a ragged tail


def case(seed, dtype=np.float16):
    rng = np.random.default_rng(seed)
    blocks = [-(-n // BLOCK) for n in LENS]
    ids = rng.permutation(sum(blocks) + 3)  # spare blocks no table names
    tables, at = [], 0
    for n in blocks:
        tables.append(ids[at : at + n])
        at += n
    cache = random_cache(rng, len(ids), KV_HEADS, BLOCK, HEAD_DIM, dtype)
    query = random_query(rng, len(LENS), KV_HEADS * GROUP, HEAD_DIM, dtype)
    return query, cache, padded_tables(tables), np.asarray(LENS, np.int32)


def run_single_pass(loaders, query, cache, tables, lens, **factory):
    """Launch make_decode_kernel(...) directly, one partition spanning every context."""
    dtype = cache.dtype
    kern = decode.make_decode_kernel(loaders, HEAD_DIM, GROUP, dtype, BLOCK, warps=1, **factory)
    chunks = decode_geometry.geometry(HEAD_DIM, GROUP, dtype, 1)["chunks"]
    seqs, heads = query.shape[:2]
    out = np.full((seqs, heads, 1, HEAD_DIM), np.nan, np.float32)  # poisoned
    m = np.full((seqs, heads, 1), np.nan, np.float32)
    l_sum = np.full((seqs, heads, 1), np.nan, np.float32)
    d_cache = cuda.to_device(cache)
    kern[(KV_HEADS * chunks, seqs, 1), 32](
        d_cache,
        d_cache,
        query,
        tables,
        lens,
        np.float32(HEAD_DIM**-0.5),
        np.int32(0),
        np.int32(0),
        np.int32(max(LENS)),
        out,
        m,
        l_sum,
    )
    return out[:, :, 0, :]


def test_this_shape_is_staged_with_two_tokens_per_row_on_one_warp():
    g = decode_geometry.geometry(HEAD_DIM, GROUP, np.float16, 1)
    assert g["staged"] and g["tpr"] == 2
    assert g["ring_bytes"] == decode_geometry.STAGES * 32 * 2 * 2 * g["vpl"] * 16


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_the_staged_kernel_and_the_register_path_both_match_the_reference(dtype):
    query, cache, tables, lens = case(1, dtype)
    want = reference.paged_attention(query, cache, tables, lens)
    staged = run_single_pass(BLOCK_MAJOR, query, cache, tables, lens, staged=True)
    registers = run_single_pass(BLOCK_MAJOR, query, cache, tables, lens, staged=False)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    assert rel_err(staged, want) < tol
    assert rel_err(registers, want) < tol


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # unlanded stages hold garbage
def test_a_staging_that_waits_for_one_group_too_few_reads_unlanded_stages(monkeypatch):
    query, cache, tables, lens = case(2)
    want = reference.paged_attention(query, cache, tables, lens)
    wait = decode.cp_async_wait
    monkeypatch.setattr(decode, "cp_async_wait", lambda pending: wait(pending + 1))
    got = run_single_pass(BLOCK_MAJOR, query, cache, tables, lens, staged=True)
    close = np.abs(got - want) <= 2e-3 * np.abs(want).max()  # NaN compares as not close
    assert not close.all(), "a late wait went unnoticed: the inputs do not test the wait"


def test_paged_attention_on_cuda_cores_runs_the_staged_kernel_and_is_right():
    query, cache, tables, lens = case(3)
    got = ck.paged_attention(
        query, cache, tables, lens, mode="split", partition_size=40, path="cuda_core"
    )
    assert rel_err(got, reference.paged_attention(query, cache, tables, lens)) < 2e-3


def test_staged_true_is_refused_for_scalar_loaders():
    with pytest.raises(ValueError, match="staged=True needs vector loaders"):
        decode.make_decode_kernel(
            BLOCK_MAJOR_SCALAR, HEAD_DIM, GROUP, np.float16, BLOCK, warps=1, staged=True
        )


@settings(max_examples=200)
@given(
    head_dim=st.integers(1, 512),
    group=st.integers(1, 64),
    fp16=st.booleans(),
    warps=st.sampled_from([1, 2, 4, 8]),
)
def test_the_ring_is_planned_exactly_where_whole_vectors_fit_the_budget(
    head_dim, group, fp16, warps
):
    dtype = np.float16 if fp16 else np.float32
    g = decode_geometry.geometry(head_dim, group, dtype, warps)
    whole = head_dim % g["vec"] == 0
    fits_one = decode_geometry.ring_bytes(warps, 1, g["vpl"]) <= decode_geometry.RING_BUDGET
    assert g["staged"] == (whole and fits_one)
    if g["staged"]:
        assert g["ring_bytes"] == decode_geometry.ring_bytes(warps, g["tpr"], g["vpl"])
        assert g["ring_bytes"] <= decode_geometry.RING_BUDGET
        two_fit = decode_geometry.ring_bytes(warps, 2, g["vpl"]) <= decode_geometry.RING_BUDGET
        assert g["tpr"] == (2 if two_fit else 1)
    else:
        assert g["ring_bytes"] == 0 and g["tpr"] == (1 if g["vpl"] > 1 else 2)
    merge = 4 * g["rows"] * g["hpc"] * g["nvec"] * g["vec"]
    assert g["shared"] == max(g["ring_bytes"], merge) + 4 * g["hpc"] * 2 * g["rows"]
    assert not decode_geometry.geometry(head_dim, group, dtype, warps, staged=False)["staged"]
