"""The H200 model of `roofline.py` on rows worked out by hand: a decode loop stays
HBM-bound with reuse 1; a prefill loop at the issue's headline shape, whose K/V tiles
every query tile re-reads from L2, is not; the reuse count and its L2-footprint guard."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuda_kernels.tools import roofline

ISSUE_S, HBM, L2, PEAK = 132 * 4 * 1.98e9, 4.3e12, 9.9e12, 990e12


def test_the_constants_are_the_documented_h200_figures():
    assert roofline.ISSUE_S == ISSUE_S and roofline.HBM_BYTES_S == HBM
    assert roofline.L2_BYTES_S == L2 and roofline.TENSOR_FLOPS_S == PEAK
    assert round(roofline.SASS_PER_BYTE_BUDGET, 3) == 0.243
    assert roofline.L2_BYTES == 50 * 10**6


def test_a_tensor_core_decode_row_stays_memory_bound_with_reuse_one():
    # paged_decode_tc at G=4: 0.049 SASS per byte, 32 HMMA per 8 KiB trip
    row = {
        "loop_sass": 402,
        "loop_kv_bytes": 8192,
        "tensor_flops": 32 * 4096,
        "loop_flops": 32 * 4096 + 40 * 32,
    }
    got = roofline.model(row)
    t_mem, t_l2 = 8192 / HBM, 8192 / L2  # 1.905 ns, 0.827 ns
    t_issue, t_tensor = 402 / ISSUE_S, 32 * 4096 / PEAK  # 0.385 ns, 0.132 ns
    assert t_mem > max(t_l2, t_issue, t_tensor)
    assert got["bound"] == "memory" and got["peak"] == "HBM 4.3 TB/s"
    assert got["expected_pct_of_peak"] == 100.0 and got["reuse"] == 1.0
    assert got["hbm_bytes"] == 8192.0
    assert got["flops_per_hbm_byte"] == round((32 * 4096 + 1280) / 8192, 2)  # 16.16
    assert got["expected_pct_of_tensor_peak"] == round(100 * (132352 / PEAK) / t_mem, 2)
    assert roofline.bound(row) == {
        k: got[k] for k in ("bound", "peak", "expected_pct_of_peak", "issue_budget_pct")
    }


# paged_prefill_tc, sm_90, fp16, D=128, 4 warps (64 rows): per warp and trip 526 SASS,
# 132 HMMA and 16 LDGSTS of 16 bytes x 32 lanes (its quarter of a 64-token K and V tile)
PREFILL = {
    "loop_sass": 526,
    "loop_kv_bytes": 16 * 32 * 16,
    "tensor_flops": 132 * 4096,
    "loop_flops": 132 * 4096 + 4096,
}


def test_prefill_reuse_counts_the_ctas_reading_each_kv_tile_causal_mask_included():
    # 4 new tokens after a 4-token prefix, query tiles of 2, K/V tiles of 4: both query
    # tiles read both K/V tiles (positions 0..5 and 0..7): 4 reads / 2 tiles
    assert roofline.prefill_reuse(4, 4, q_tile=2, kv_tile=4) == 2.0
    # no prefix, 8 tokens: the tiles read 1, 1, 2, 2 of the 2 K/V tiles
    assert roofline.prefill_reuse(8, 0, q_tile=2, kv_tile=4) == 3.0
    assert roofline.prefill_reuse(8, 0, q_tile=2, kv_tile=4, causal=False) == 4.0
    # the headline (1,024 behind 1,024) at G = 4: 16 query tokens x 4 heads = 64 rows per
    # CTA, 64 query tiles; tile i reads 16 prefix tiles + ceil((i + 1) / 4) of the new
    reads = sum(16 + math.ceil((i + 1) / 4) for i in range(64))
    assert reads == 1568 and roofline.prefill_reuse(1024, 1024, 16, 64) == 1568 / 32 == 49.0


def test_a_prefill_row_at_the_headline_shape_is_l2_bound_not_memory_bound():
    reuse = roofline.prefill_reuse(1024, 1024, 16, 64)
    got = roofline.model(PREFILL, reuse)
    t_mem = 8192 / 49 / HBM  # 0.039 ns: HBM sees each byte once per 49 reads
    t_l2, t_tensor, t_issue = 8192 / L2, 540672 / PEAK, 526 / ISSUE_S  # 0.827, 0.546, 0.503
    assert t_l2 > t_tensor > t_issue > t_mem
    assert got["bound"] == "l2" and got["peak"] == "tensor fp16"
    assert got["expected_pct_of_peak"] == round(100 * t_tensor / t_l2, 1) == 66.0
    assert got["expected_pct_of_tensor_peak"] == round(100 * 544768 / PEAK / t_l2, 2)
    assert got["flops_per_hbm_byte"] == round(544768 / (8192 / 49), 2)  # 3,258: far past 230
    # without the reuse it is the old verdict the issue rejected: memory, 100% of HBM
    old = roofline.model(PREFILL)
    assert old["bound"] == "memory" and old["expected_pct_of_peak"] == 100.0


def test_a_prefill_cta_of_128_rows_halves_the_l2_bytes_and_is_tensor_bound():
    """The same warp loop with the K/V tile shared by 8 warps (two warpgroups, 128 rows,
    FlashAttention-3's M): 4 KiB per warp and trip, t_l2 0.41 ns < t_tensor 0.55 ns."""
    row = dict(PREFILL, loop_kv_bytes=8 * 32 * 16)
    reuse = roofline.prefill_reuse(1024, 1024, 32, 64)
    assert reuse == (512 + sum(math.ceil(i / 2) for i in range(1, 33))) / 32 == 24.5
    got = roofline.model(row, reuse)
    assert 4096 / L2 < 540672 / PEAK
    assert got["bound"] == "tensor" and got["expected_pct_of_peak"] == 100.0
    # and with twice the SASS per HMMA it turns issue-bound
    busy = roofline.model(dict(row, loop_sass=2 * 526), reuse)
    assert busy["bound"] == "issue"
    assert busy["expected_pct_of_peak"] == round(100 * (540672 / PEAK) / (1052 / ISSUE_S), 1)


def test_the_headline_reuse_is_withdrawn_when_the_resident_kv_does_not_fit_in_l2():
    fits = roofline.headline_reuse(4, 16, 64, ctas_per_sm=2, head_dim=128, itemsize=2)
    # 264 resident CTAs, 64 query tiles per pair: 5 + 1 pairs of 2,048 x 128 x 2 B x 2
    assert fits["l2_footprint_bytes"] == 6 * 2048 * 128 * 2 * 2
    assert fits["reuse"] == 49.0 and "GQA 32/8" in fits["reuse_case"]
    huge = roofline.headline_reuse(
        4,
        16,
        64,
        ctas_per_sm=2,
        head_dim=128,
        itemsize=2,
        shape={"new_tokens": 64, "cached_prefix": 200_000},
    )
    assert huge["l2_footprint_bytes"] == 67 * 200_064 * 128 * 2 * 2 > roofline.L2_BYTES
    assert huge["reuse"] == 1.0 and "no reuse credited" in huge["reuse_case"]


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="reuse must be >= 1"):
        roofline.model(PREFILL, 0.5)
    with pytest.raises(ValueError, match="q_tile must be a positive int"):
        roofline.prefill_reuse(8, 0, q_tile=0, kv_tile=4)
    with pytest.raises(ValueError, match="cached_prefix must be >= 0"):
        roofline.prefill_reuse(8, -1, q_tile=2, kv_tile=4)
    with pytest.raises(TypeError, match="kv_tile must be an int, got float"):
        roofline.prefill_reuse(8, 0, q_tile=2, kv_tile=4.0)


def test_a_row_without_a_loop_has_every_model_field_none():
    got = roofline.model({"loop_sass": None, "loop_kv_bytes": None}, 49.0)
    assert set(got.values()) == {None} and "flops_per_hbm_byte" in got


loops = st.fixed_dictionaries(
    {
        "loop_sass": st.integers(1, 10**5),
        "loop_kv_bytes": st.integers(1, 10**6),
        "tensor_flops": st.integers(0, 10**9),
    }
)


@given(loops)
def test_with_reuse_one_the_l2_term_never_decides_the_bound(row):
    got = roofline.model(row)
    assert got["bound"] in ("tensor", "issue", "memory")
    assert 0 <= got["expected_pct_of_peak"] <= 100.0


@given(st.integers(1, 300), st.integers(0, 300), st.integers(1, 64), st.integers(1, 64))
def test_causal_reuse_lies_between_one_and_the_number_of_query_tiles(new, prefix, qt, kt):
    full = roofline.prefill_reuse(new, prefix, qt, kt, causal=False)
    assert full == math.ceil(new / qt)  # without a mask every query tile reads every tile
    assert 1 <= roofline.prefill_reuse(new, prefix, qt, kt) <= full


def test_a_prefill_whose_kv_loop_only_loads_gets_no_bound_and_says_why():
    """The CUDA-core prefill: its K/V loop copies the tile to shared memory (98 SASS, no
    FLOPs); crediting it with reuse would call it L2-bound at 0% of any peak."""
    loader = {"loop_sass": 98, "loop_kv_bytes": 1024, "tensor_flops": 0, "loop_flops": 0}
    got = roofline.model(loader, 512.0, expects_flops=True)
    assert got["bound"] is None and got["reuse"] == 512.0
    assert got["bound_note"] == roofline.NO_MATH_IN_LOOP
    assert roofline.model(loader)["bound"] == "memory"  # a copy loop is judged as one
