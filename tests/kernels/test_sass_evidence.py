"""The tensor-core evidence of the report on synthetic SASS: HMMA / HGMMA / LDSM / LDGSTS
counts in the steady-state loop, FLOPs per trip, SASS per HMMA, and the H200 bound
model of `roofline.py` on figures worked out by hand."""

import pytest

# A prologue cp.async (outside every loop), then a loop of 2 cp.async of 16 bytes, one
from cuda_kernels.tools import disasm, roofline

# ldmatrix, two m16n8k16 mma, one FFMA, a predicated FMUL and a loop-closing branch.
TC_SASS = """
        /*0000*/                   LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R4.64] ;
.L_x_7:
        /*0010*/                   LDGSTS.E.BYPASS.LTC128B.128 [R3+0x100], desc[UR4][R6.64] ;
        /*0020*/                   LDGSTS.E.BYPASS.LTC128B.128 [R3+0x200], desc[UR4][R8.64] ;
        /*0030*/                   LDSM.16.M88.4 R12, [R10] ;
        /*0040*/                   HMMA.16816.F32 R16, R20, R12, R16 ;
        /*0050*/                   HMMA.16816.F32 R24, R20, R14, R24 ;
        /*0060*/                   FFMA R30, R31, R32, R30 ;
        /*0070*/               @P1 FMUL R33, R33, R34 ;
        /*0080*/                   NOP ;
        /*0090*/               @P0 BRA `(.L_x_7) ;
        /*00a0*/                   EXIT ;
"""


def test_the_loop_counts_tensor_core_ldmatrix_and_cp_async_instructions_and_flops():
    row = disasm.steady_loop(disasm.parse_sass(TC_SASS))
    assert (row["hmma"], row["hgmma"], row["ldsm"], row["ldgsts"]) == (2, 0, 1, 2)
    assert row["loop_sass"] == 8  # 9 instructions from .L_x_7 to the branch, less the NOP
    assert row["loop_kv_loads"] == 2 and row["loop_kv_bytes"] == 2 * 32 * 16
    assert row["tensor_flops"] == 2 * 4096
    assert row["loop_flops"] == 2 * 4096 + 32 * 2 + 32  # HMMA, FFMA, FMUL over 32 lanes
    assert row["loop_sass_per_hmma"] == 4.0
    assert row["flops_per_loop_sass"] == round((8192 + 96) / 8, 2)


@pytest.mark.parametrize(
    "opcode,flops",
    [
        ("HMMA.16816.F32", 4096),
        ("HMMA.16816.F32.BF16", 4096),
        ("HMMA.1688.F32", 2048),
        # a warpgroup's HGMMA is issued by each of its 4 warps: a warp's share is a quarter
        ("HGMMA.64x8x16.F32", 2 * 64 * 8 * 16 // 4),
        ("HGMMA.64x128x16.F32", 2 * 64 * 128 * 16 // 4),
        ("FFMA", 64),
        ("HFMA2", 128),
        ("FADD", 32),
        ("FMNMX", 32),
        ("MUFU.EX2", 0),
        ("IMAD", 0),
    ],
)
def test_each_opcode_counts_the_flops_a_warp_instruction_performs(opcode, flops):
    assert disasm.instr_flops(opcode) == flops


def test_a_loop_without_mma_has_no_sass_per_hmma():
    sass = TC_SASS.replace("HMMA.16816.F32", "FFMA")
    row = disasm.steady_loop(disasm.parse_sass(sass))
    assert row["hmma"] == 0 and row["loop_sass_per_hmma"] is None and row["tensor_flops"] == 0


def test_the_bound_is_the_largest_of_the_memory_issue_and_tensor_times():
    budget = roofline.ISSUE_S / roofline.HBM_BYTES_S
    assert round(budget, 3) == 0.243
    # 2,048 bytes and 300 SASS a trip: 0.146 SASS/B < 0.243, memory-bound at 100%
    mem = roofline.bound({"loop_sass": 300, "loop_kv_bytes": 2048, "tensor_flops": 0})
    assert mem["bound"] == "memory" and mem["expected_pct_of_peak"] == 100.0
    assert mem["issue_budget_pct"] == round(100 * 300 / 2048 / budget, 1)
    # 890 SASS for 4,096 bytes (the old G=4 decode, 0.217 SASS/B): still memory, 89% budget
    old = roofline.bound({"loop_sass": 890, "loop_kv_bytes": 4096, "tensor_flops": 0})
    assert old["bound"] == "memory" and old["issue_budget_pct"] == 89.4
    # 1,514 SASS for 4,096 bytes (the old G=8, 0.370 SASS/B): issue-bound at 0.243 / 0.370
    g8 = roofline.bound({"loop_sass": 1514, "loop_kv_bytes": 4096, "tensor_flops": 0})
    assert g8["bound"] == "issue" and g8["peak"] == "HBM 4.3 TB/s"
    assert g8["expected_pct_of_peak"] == round(100 * (4096 / 4.3e12) / (1514 / roofline.ISSUE_S), 1)
    # a matrix loop: 256 HMMA (1.05 MFLOP: 1.06 ns) and 512 SASS (0.49 ns) for 2 KB (0.48 ns)
    mma = roofline.bound({"loop_sass": 512, "loop_kv_bytes": 2048, "tensor_flops": 256 * 4096})
    assert mma == {
        "bound": "tensor",
        "peak": "tensor fp16",
        "expected_pct_of_peak": 100.0,
        "issue_budget_pct": round(100 * 512 / 2048 / budget, 1),
    }
    # the same with 4 SASS per HMMA (1,024: 0.98 ns) is still tensor-bound; 8 (1.96 ns) is not
    four = roofline.bound({"loop_sass": 1024, "loop_kv_bytes": 2048, "tensor_flops": 256 * 4096})
    assert four["bound"] == "tensor"
    busy = roofline.bound({"loop_sass": 2048, "loop_kv_bytes": 2048, "tensor_flops": 256 * 4096})
    assert busy["bound"] == "issue" and busy["peak"] == "tensor fp16"
    t_tensor, t_issue = 256 * 4096 / 990e12, 2048 / roofline.ISSUE_S
    assert busy["expected_pct_of_peak"] == round(100 * t_tensor / t_issue, 1)


def test_a_row_without_a_kv_loop_has_no_bound():
    assert roofline.bound({"loop_sass": None, "loop_kv_bytes": None})["bound"] is None


# The CUDA-core decode's staged loop: a 32-bit block-table read, two cp.async of K/V with
# ptxas's never-taken `@!PT LDS` guard before them, the commit (LDGDEPBAR), the wait
# (DEPBAR), one LDS.128 read-back of the lane's own chunk and the math.
STAGED_SASS = """
.L_x_3:
        /*0000*/              @!P1 LDG.E R94, desc[UR16][R112.64] ;
        /*0010*/              @!PT LDS RZ, [RZ] ;
        /*0020*/                   LDGSTS.E.BYPASS.128 [R49], desc[UR16][R32.64], P2 ;
        /*0030*/                   LDGSTS.E.BYPASS.128 [R49+0x200], desc[UR16][R38.64], P3 ;
        /*0040*/                   LDGDEPBAR ;
        /*0050*/                   DEPBAR.LE SB0, 0x1 ;
        /*0060*/                   LDS.128 R32, [R66] ;
        /*0070*/                   FFMA R30, R31, R32, R30 ;
        /*0080*/               @P0 BRA `(.L_x_3) ;
        /*0090*/                   EXIT ;
"""


def test_a_staged_loop_counts_its_cp_async_as_the_kv_loads_and_not_the_table_read():
    row = disasm.steady_loop(disasm.parse_sass(STAGED_SASS))
    assert row["loop_kv_bits"] == 128 and row["loop_kv_loads"] == 2 and row["ldgsts"] == 2
    assert row["loop_kv_bytes"] == 2 * 32 * 16
    assert row["loop_sass"] == 9  # every issued instruction, the never-taken guard too
    assert row["sass_per_kv_byte"] == round(9 / 1024, 4)
