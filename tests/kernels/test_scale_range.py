"""Every softmax scale a launcher accepts (`_checks.require_scale`: |scale| <= MAX_SCALE =
2^16, either sign, zero, subnormal) gives the float64 reference's answer on every decode and
prefill path. The tensor-core decode once packed q * scale * log2(e) to fp16 before the mma,
so |q| * |scale| * 1.44 > 65504 (scale 32768, |q| >= 2) became inf and the output NaN.

Q and K hold integers (exact in fp16, every dot product exact in float32) and no two
tokens tie: column 0 is 9 in Q and 64 x a distinct number per token in K, which outweighs
the other columns (in [-3, 3]), so the scores of a row are at least 18 |scale| apart. A
huge scale then makes the softmax a sharp one-hot that the fp32 rounding of a score cannot
move (a tie would be ill-conditioned: the CUDA-core path rounds q * scale first); V is
random normal. The launchers poison their outputs with NaN
under the simulator (`attention._empty`), so an element never written fails too."""

import numpy as np
from conftest import rel_err
from hypothesis import example, given, settings
from hypothesis import strategies as st

import cuda_kernels as ck
from cuda_kernels import attention, prefill, reference
from cuda_kernels._checks import MAX_SCALE

TOL = 4e-3  # P is rounded to fp16 before P V on the tensor-core paths

SCALES = st.floats(-MAX_SCALE, MAX_SCALE, allow_nan=False, allow_infinity=False)


def integer_case(rng, lens, q_tokens, heads, kv_heads, head_dim, block_size):
    """(query [q_tokens, heads, D], cache, tables, lens): integer Q and K, no ties."""
    tables, num_blocks = reference.scattered_block_tables(rng, lens, block_size, spare=1)
    cache = rng.standard_normal((num_blocks, 2, kv_heads, block_size, head_dim))
    cache[:, 0] = rng.integers(-3, 4, cache[:, 0].shape)
    distinct = rng.permutation(cache[:, 0, :, :, 0].size).reshape(cache[:, 0, :, :, 0].shape)
    cache[:, 0, :, :, 0] = 64 * distinct  # distinct < 2048: exact in fp16
    query = rng.integers(-3, 4, (q_tokens, heads, head_dim))
    query[..., 0] = 9
    lens = np.asarray(lens, np.int32)
    return query.astype(np.float16), cache.astype(np.float16), tables, lens


@settings(max_examples=8)
@example(scale=32768.0, path="tensor", group=4, split=None, seed=0)  # the reviewer's case
@example(scale=-MAX_SCALE, path="tensor", group=8, split=16, seed=1)
@example(scale=0.0, path="cuda_core", group=4, split=None, seed=2)
@example(scale=5e-324, path="tensor", group=4, split=None, seed=3)  # float32 0
@given(
    scale=SCALES,
    path=st.sampled_from(["tensor", "cuda_core"]),
    group=st.sampled_from([1, 4, 8]),
    split=st.sampled_from([None, 16]),
    seed=st.integers(0, 2**31),
)
def test_decode_matches_the_reference_at_every_accepted_scale(scale, path, group, split, seed):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 40, size=2).tolist()
    query, cache, tables, lens = integer_case(rng, lens, 2, 2 * group, 2, 32, 4)
    mode = dict(mode="split", partition_size=split) if split else dict(mode="single")
    mask = ck.ScoreMask(scale=scale)
    got = ck.paged_attention(query, cache, tables, lens, mask, path=path, **mode)
    assert attention.LAST_PLAN["path"] == path
    want = reference.paged_attention(query, cache, tables, lens, mask)
    assert rel_err(got, want) < TOL


@settings(max_examples=6)
@example(scale=32768.0, path="tensor", group=4, causal=True, seed=0)
@example(scale=-MAX_SCALE, path="tensor", group=4, causal=True, seed=1)
@example(scale=-MAX_SCALE, path="wgmma", group=4, causal=True, seed=1)
@example(scale=0.0, path="tensor", group=1, causal=True, seed=2)
@example(scale=0.0, path="wgmma", group=1, causal=True, seed=2)
@example(scale=-3.0, path="cuda_core", group=4, causal=False, seed=3)
@given(
    scale=SCALES,
    path=st.sampled_from(["tensor", "wgmma", "cuda_core"]),
    group=st.sampled_from([1, 4]),
    causal=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_prefill_matches_the_reference_at_every_accepted_scale(scale, path, group, causal, seed):
    rng = np.random.default_rng(seed)
    prefix = int(rng.integers(0, 20))
    q_len = int(rng.integers(1, 6))
    query, cache, tables, lens = integer_case(rng, [prefix + q_len], q_len, group, 1, 16, 5)
    starts = np.array([0, q_len], np.int32)
    mask = ck.ScoreMask(scale=scale, causal=causal)
    got = prefill.paged_prefill(query, cache, tables, lens, starts, mask, path=path)
    assert prefill.LAST_PATH["path"] == path
    want = reference.reference_prefill(query, cache, tables, lens, starts, mask)
    assert rel_err(got, want) < TOL
