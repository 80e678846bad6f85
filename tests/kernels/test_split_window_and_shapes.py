"""Split-K against single pass, sliding windows, GQA group sizes, head sizes,
full and partial last blocks, the auto-mode rule and the layout factory."""

import numpy as np
import pytest
from conftest import GARBAGE, random_cache, random_query, rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

import cuda_kernels as ck
from cuda_kernels import reference
from cuda_kernels.attention import choose_partition
from cuda_kernels.labs.layouts import NHD_SCALAR


def scattered_case(rng, lens, block_size, num_kv_heads, group, head_dim, dtype=np.float32):
    """Sequences of the given lengths in randomly chosen, disjoint physical blocks."""
    tables, num_blocks = reference.scattered_block_tables(
        rng, lens, block_size, spare=2, fill=GARBAGE
    )
    cache = random_cache(rng, num_blocks, num_kv_heads, block_size, head_dim, dtype)
    query = random_query(rng, len(lens), num_kv_heads * group, head_dim, dtype)
    return query, cache, tables, np.asarray(lens, np.int32)


@settings(max_examples=8)
@given(
    lens=st.lists(st.integers(1, 40), min_size=1, max_size=2),
    partition=st.integers(1, 24),
    seed=st.integers(0, 2**31),
)
def test_split_k_equals_single_pass_to_float32_rounding_for_any_partition_size(
    lens, partition, seed
):
    rng = np.random.default_rng(seed)
    lens = [min(n, 6 * partition) for n in lens]  # up to 6 partitions: more merge the same way
    case = scattered_case(rng, lens, 4, 1, 2, 8)
    single = ck.paged_attention(*case, mode="single")
    split = ck.paged_attention(*case, mode="split", partition_size=partition)
    assert rel_err(split, single) < 2e-6
    assert rel_err(single, reference.paged_attention(*case)) < 1e-5


@settings(max_examples=12)
@given(
    length=st.integers(1, 40),
    window=st.integers(1, 20),
    sinks=st.integers(0, 6),
    split=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_windowed_attention_matches_the_windowed_reference_and_skips_dropped_blocks(
    length, window, sinks, split, seed
):
    rng = np.random.default_rng(seed)
    query, cache, tables, lens = scattered_case(rng, [length], 4, 1, 2, 8)
    mask = ck.ScoreMask(sliding_window=window, sinks=sinks)
    want = reference.paged_attention(query, cache, tables, lens, mask)
    attended = set(reference.attended_positions(length, window, sinks).tolist())
    for logical in range(tables.shape[1]):  # drop blocks the window does not reach
        if not attended & set(range(4 * logical, 4 * logical + 4)):
            tables[0, logical] = -1  # NULL_BLOCK: must be neither read nor validated
    out = ck.paged_attention(
        query,
        cache,
        tables,
        lens,
        mask,
        mode="split" if split else "single",
        partition_size=3 if split else None,
    )
    assert rel_err(out, want) < 1e-5


@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_every_gqa_group_size_reads_the_shared_kv_head(group):
    rng = np.random.default_rng(group)
    case = scattered_case(rng, [11, 6], 4, 2, group, 8)
    assert rel_err(ck.paged_attention(*case), reference.paged_attention(*case)) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    "group,head_dim,dtype,lens,split",
    [
        (17, 8, np.float32, [13, 5], 8),
        (17, 64, np.float16, [9], 6),
        (32, 8, np.float16, [7], None),
        (64, 16, np.float32, [6], None),
        (71, 8, np.float32, [7], 4),
    ],
)
def test_multi_query_groups_larger_than_a_cta_initialise_and_write_every_head(
    group, head_dim, dtype, lens, split
):
    """One KV head, up to Falcon's 71 query heads: more heads than the simulator's 32
    threads and than one CTA holds, so the group is split into chunks across the grid."""
    from cuda_kernels.fast.decode_geometry import geometry

    assert geometry(head_dim, group, dtype, 1)["chunks"] > 1
    rng = np.random.default_rng(group)
    case = scattered_case(rng, lens, 4, 1, group, head_dim, dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    want = reference.paged_attention(*case)
    assert rel_err(ck.paged_attention(*case, mode="single"), want) < tol
    if split:
        assert rel_err(ck.paged_attention(*case, mode="split", partition_size=split), want) < tol


@pytest.mark.parametrize(
    "head_dim,dtype",
    [
        (80, np.float32),
        (96, np.float16),
        (128, np.float16),
        (64, np.float16),
        (72, np.float16),
        (36, np.float16),
        (6, np.float32),
    ],
)
def test_head_dims_that_are_not_powers_of_two_work(head_dim, dtype):
    """36 (fp16) and 6 (fp32) are not whole 16-byte vectors: the scalar loaders run."""
    rng = np.random.default_rng(head_dim)
    case = scattered_case(rng, [9], 8, 1, 2, head_dim, dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    assert rel_err(ck.paged_attention(*case), reference.paged_attention(*case)) < tol


@pytest.mark.parametrize("length", [8, 16, 5, 13])  # full last block, then partly full
def test_full_and_partly_full_last_blocks(length):
    rng = np.random.default_rng(length)
    case = scattered_case(rng, [length], 4, 1, 1, 8)
    assert rel_err(ck.paged_attention(*case), reference.paged_attention(*case)) < 1e-5


def test_device_inputs_give_a_device_output():
    from numba import cuda

    rng = np.random.default_rng(7)
    query, cache, tables, lens = scattered_case(rng, [7], 4, 1, 2, 8)
    out = ck.paged_attention(
        cuda.to_device(query), cuda.to_device(cache), cuda.to_device(tables), cuda.to_device(lens)
    )
    assert not isinstance(out, np.ndarray)
    assert rel_err(out.copy_to_host(), reference.paged_attention(query, cache, tables, lens)) < 1e-5


def waves_and_tail(counts, part, ctas_per_seq, slots):
    """(waves, CTAs in the last wave) of a plan, counted here without plan_cost."""
    ctas = ctas_per_seq * sum(-(-c // part) for c in counts)
    return -(-ctas // slots), ctas - (-(-ctas // slots) - 1) * slots


def test_the_headline_batch_is_split_into_full_waves_instead_of_one_pass_with_a_tail():
    """64 x 4096 tokens x 8 KV heads on 396 slots (132 SMs x 3 CTAs at G = 4): spreading
    tokens over slots gave 5,312-token partitions, one pass of 512 CTAs in 2 waves whose
    second is 116 CTAs. Counting CTAs cuts each sequence in 3: 1,536 CTAs in 4 waves."""
    part = choose_partition([4096] * 64, 8, 396)
    assert part == 1408 and -(-4096 // part) == 3
    assert waves_and_tail([4096] * 64, part, 8, 396) == (4, 348)
    assert waves_and_tail([4096] * 64, 4096, 8, 396) == (2, 116)
    assert 4 * (part + 64) < 2 * (4096 + 64)  # the model's makespan: 5,888 < 8,320


def test_one_long_sequence_in_a_full_batch_is_split_and_short_ones_are_not():
    """64 sequences x 8 KV heads already fill 132 SMs x 2 CTAs, but one 32K sequence
    would walk 32K tokens in 8 serial CTAs: it is cut into pieces the short ones' size."""
    lens = [1024] * 63 + [32768]
    part = choose_partition(lens, 8, 264)
    assert part == 1024  # 32 pieces: 760 CTAs in 3 waves of 1,024 tokens
    assert choose_partition([1024] * 64, 8, 264) >= 1024  # all short: one pass each


def test_a_small_batch_is_split_to_fill_the_slots_but_never_below_the_minimum():
    assert choose_partition([4096], 8, 264) == 256  # 128 CTAs of 256: still one wave
    assert choose_partition([100_000], 1, 4) <= 8192  # capped: no pass longer than MAX_PASS
    assert choose_partition([16384] * 4, 8, 264) == 2048  # 256 CTAs: one wave, nothing idle
    assert choose_partition([5, 3], 8, 264) == 256  # short: one pass of the minimum size
    with pytest.raises(ValueError):
        choose_partition([10], 0, 264)


@settings(max_examples=40)
@given(
    counts=st.lists(st.integers(1, 20000), min_size=1, max_size=6),
    ctas=st.integers(1, 16),
    slots=st.integers(1, 600),
)
def test_the_chosen_partition_is_the_cheapest_multiple_of_the_grain_in_range(counts, ctas, slots):
    """Brute force over every allowed size, with waves counted by `waves_and_tail`."""
    part = choose_partition(counts, ctas, slots)
    assert part % 64 == 0 and 256 <= part <= 8192

    def cost(p):
        return waves_and_tail(counts, p, ctas, slots)[0] * (min(p, max(counts)) + 64)

    sizes = [p for p in range(256, 8193, 64) if p <= max(-(-max(counts) // 64) * 64, 256)]
    assert cost(part) == min(cost(p) for p in sizes)
    assert part == max(p for p in sizes if cost(p) == cost(part))


def test_the_factory_builds_a_kernel_for_split_token_major_pools():
    rng = np.random.default_rng(9)
    query, cache, tables, lens = scattered_case(rng, [10, 3], 4, 2, 2, 8)
    k_pool = np.ascontiguousarray(cache[:, 0].transpose(0, 2, 1, 3))  # [N, B, H_kv, D]
    v_pool = np.ascontiguousarray(cache[:, 1].transpose(0, 2, 1, 3))
    from numba import cuda

    out = ck.decode_with(
        NHD_SCALAR,
        cuda.to_device(k_pool),
        cuda.to_device(v_pool),
        query,
        tables,
        lens,
        ck.CacheShape(num_blocks=cache.shape[0], num_kv_heads=2, block_size=4, head_dim=8),
        ck.DecodeOptions(mode="split", partition_size=4),
    )
    assert rel_err(out, reference.paged_attention(query, cache, tables, lens)) < 1e-5


@settings(max_examples=100)
@given(
    head_dim=st.integers(1, 512),
    group=st.integers(1, 128),
    fp16=st.booleans(),
    warps=st.sampled_from([1, 2, 4, 8]),
)
def test_the_thread_mapping_covers_head_dim_and_every_head_within_the_budgets(
    head_dim, group, fp16, warps
):
    from cuda_kernels.attention import SHARED_LIMIT
    from cuda_kernels.fast.decode_geometry import ACC_BUDGET, geometry

    dtype = np.float16 if fp16 else np.float32
    g = geometry(head_dim, group, dtype, warps)
    assert g["vec"] * 2 ** (not fp16) == 8 and g["lpr"] & (g["lpr"] - 1) == 0 and g["lpr"] <= 32
    assert g["lpr"] * g["vpl"] * g["vec"] >= head_dim > (g["nvec"] - 1) * g["vec"]
    assert g["rows"] * g["lpr"] == 32 * warps
    assert g["hpc"] * g["chunks"] >= group > g["hpc"] * (g["chunks"] - 1)  # balanced chunks
    assert g["hpc"] * g["vpl"] * g["vec"] <= max(ACC_BUDGET, g["vpl"] * g["vec"])
    assert g["shared"] <= SHARED_LIMIT


def test_a_cache_off_a_16_byte_boundary_falls_back_to_scalar_loads_and_stays_right():
    from numba import cuda

    from cuda_kernels.attention import usable_loaders
    from cuda_kernels.layout import BLOCK_MAJOR, BLOCK_MAJOR_SCALAR, Loaders

    rng = np.random.default_rng(5)
    query, cache, tables, lens = scattered_case(rng, [10], 4, 1, 2, 16, np.float16)
    flat = cuda.to_device(np.zeros(cache.size + 8, np.float16))
    shifted = flat[1 : 1 + cache.size].reshape(cache.shape)  # 2 bytes past a 16-byte boundary
    shifted.copy_to_device(cache)
    assert usable_loaders(BLOCK_MAJOR, shifted, shifted, 16) is BLOCK_MAJOR_SCALAR
    aligned = cuda.to_device(cache)
    assert usable_loaders(BLOCK_MAJOR, aligned, aligned, 16) is BLOCK_MAJOR
    want = reference.paged_attention(query, cache, tables, lens)
    assert rel_err(ck.paged_attention(query, shifted, tables, lens), want) < 2e-3
    no_fallback = Loaders("vector only", BLOCK_MAJOR.load_k, BLOCK_MAJOR.load_v, vector=True)
    with pytest.raises(ValueError, match="no scalar fallback"):
        usable_loaders(no_fallback, shifted, shifted, 16)


def test_the_simulator_poisons_output_buffers_so_an_unwritten_element_fails():
    from cuda_kernels.attention import _empty

    assert np.isnan(_empty((2, 3, 4)).copy_to_host()).all()
    with pytest.raises(AssertionError, match="NaN"):
        rel_err(np.full((1, 2), np.nan), np.ones((1, 2)))
