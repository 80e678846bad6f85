"""The real-GPU gate without a GPU: every kernel compiles to PTX for sm_80 and sm_90,
ptxas reports no register spills, and the PTX/SASS figures are read correctly."""

from pathlib import Path

import numpy as np
import ptx_rows
import pytest
from ptx_rows import uses

from cuda_kernels import report
from cuda_kernels.fast.decode_geometry import geometry
from cuda_kernels.report import (
    find_tool,
    head_dim_specs,
    kernel_specs,
    ladder_specs,
    parse_ptxas,
    targets,
)
from cuda_kernels.tools import disasm, report_format

README = Path(__file__).resolve().parents[2] / "cuda_kernels" / "README.md"

pytestmark = pytest.mark.ptx


PTX = """
\tld.global.u32 \t%r1, [%rd1];
@%p1 ld.global.nc.v4.u32 \t{%r2, %r3, %r4, %r5}, [%rd2];
\tld.global.u16 \t%rs1, [%rd3];
\tld.shared.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd4];
\tshfl.sync.bfly.b32 \t%r6|%p2, %r5, 16, 31, -1;
\tshfl.sync.bfly.b32 \t%r7|%p3, %r6, 8, 31, -1;
\tbar.sync \t0;
"""

# A tile loop (.L_x_1, closed at 0x0090) holding a 32-bit table read and two 128-bit K/V
# loads, around an inner loop (.L_x_2) with one more 128-bit load; a forward branch; EXIT.
SASS = """
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
.L_x_1:
        /*0010*/                   LDG.E R8, desc[UR4][R6.64] ;
        /*0020*/                   LDG.E.128.CONSTANT R12, desc[UR4][R10.64] ;
.L_x_2:
        /*0030*/                   LDG.E.128 R16, desc[UR4][R10.64+0x10] ;
        /*0040*/                   FFMA R20, R16, R17, R20 ;
        /*0050*/               @P0 BRA `(.L_x_2) ;
        /*0060*/                   NOP ;
        /*0070*/                   SHFL.BFLY PT, R21, R20, 0x10, 0x1f ;
        /*0080*/              @!P1 BRA `(.L_x_3) ;
        /*0090*/               @P2 BRA `(.L_x_1) ;
.L_x_3:
        /*00a0*/                   EXIT ;
"""


def test_ptx_figures_are_the_widest_global_load_and_the_shuffle_and_barrier_counts():
    assert disasm.ptx_stats(PTX) == {"global_load_bits": 128, "shuffles": 2, "barriers": 1}
    scalar = "\tld.global.u16 \t%rs1, [%rd3];\n\tld.global.s32 \t%r1, [%rd1];\n\tbar.sync \t0;\n"
    assert disasm.ptx_stats(scalar) == {"global_load_bits": 32, "shuffles": 0, "barriers": 1}
    assert (
        disasm.ptx_stats("\tcp.async.cg.shared.global [%r1], [%rd1], 16;\n")["global_load_bits"]
        == 128
    )


def test_sass_branches_resolve_labels_and_backward_ones_close_loops():
    ins = disasm.parse_sass(SASS)
    assert [i.addr for i in ins] == list(range(0, 0xB0, 0x10))
    assert [i.load_bits for i in ins[:4]] == [128, 32, 128, 128]
    assert ins[5].target == 0x30 and ins[8].target == 0xA0
    assert disasm.loops(ins) == [(1, 9), (3, 5)]  # (first, last) instruction indices


def test_the_steady_loop_is_the_one_holding_the_most_kv_loads_and_counts_per_byte():
    ins = disasm.parse_sass(SASS)
    # the tile loop holds 2 of the 128-bit loads (the one before it is outside any loop);
    # 9 instructions less the NOP, over 2 loads x 32 lanes x 16 bytes
    assert disasm.steady_loop(ins) == {
        "loop_sass": 8,
        "loop_kv_loads": 2,
        "loop_kv_bits": 128,
        "loop_inner_loops": 1,
        "sass_per_kv_byte": round(8 / 1024, 4),
        "loop_kv_bytes": 1024,
        "hmma": 0,
        "hgmma": 0,
        "ldsm": 0,
        "ldgsts": 0,
        "loop_flops": 64,
        "tensor_flops": 0,
        "loop_sass_per_hmma": None,
        "flops_per_loop_sass": 8.0,
    }
    # told K/V are 32-bit, the table read is the only K/V load, still in the tile loop
    assert disasm.steady_loop(ins, kv_bits=32)["loop_kv_loads"] == 1
    # a scalar fp16 kernel: 16-bit loads beat the 32-bit table read as K/V
    half = SASS.replace("LDG.E.128", "LDG.E.U16")
    assert disasm.steady_loop(disasm.parse_sass(half))["loop_kv_bits"] == 16
    assert disasm.steady_loop(disasm.parse_sass("/*0000*/ EXIT ;"))["loop_sass"] is None


def test_cuobjdump_listings_with_hex_branch_targets_parse_the_same():
    hexed = (
        SASS.replace("`(.L_x_2)", "0x30").replace("`(.L_x_1)", "0x10").replace("`(.L_x_3)", "0xa0")
    )
    hexed = "\n".join(line for line in hexed.splitlines() if not line.startswith(".L"))
    assert disasm.loops(disasm.parse_sass(hexed)) == [(1, 9), (3, 5)]


@pytest.mark.parametrize(
    "arch, regs, smem, threads, ctas, limit",
    [
        ("sm_90", 40, 38368, 128, 5, "shared"),  # (38368 + 1024 reserved) -> 228 KiB / 39424 = 5
        ("sm_80", 40, 38368, 128, 4, "shared"),  # 164 KiB / 39424 = 4
        ("sm_90", 128, 0, 256, 2, "registers"),  # 128 x 32 per warp, 8 warps: 65536 / 32768 = 2
        ("sm_90", 33, 0, 128, 12, "registers"),  # 33 -> 40 per thread: 51 warps -> 12 CTAs of 4
        ("sm_90", 16, 0, 32, 32, "ctas"),
        ("sm_80", 16, 0, 1024, 2, "warps"),
    ],
)
def test_occupancy_is_the_tightest_of_warps_ctas_registers_and_shared_memory(
    arch, regs, smem, threads, ctas, limit
):
    got = disasm.occupancy(arch, regs, smem, threads)
    assert got == {
        "ctas_per_sm": ctas,
        "warps_per_sm": ctas * -(-threads // 32),
        "limited_by": limit,
    }


def test_ptxas_output_over_several_functions_takes_the_max_registers_and_sums_spills():
    text = (
        "ptxas info    : Function properties for helper\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 12 registers\n"
        "ptxas info    : Function properties for kernel\n"
        "    0 bytes stack frame, 0 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n"
    )
    assert parse_ptxas(text) == {
        "registers": 40,
        "shared_bytes": 2048,
        "stack_bytes": 8,
        "spill_bytes": 16,
    }


def test_ptxas_output_is_parsed_into_registers_shared_stack_and_spills():
    text = (
        "ptxas info    : Used 72 registers, used 1 barriers, 38368 bytes smem, 432 bytes cmem[0]\n"
        "ptxas info    : Function properties for f\n"
        "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
    )
    assert parse_ptxas(text) == {
        "registers": 72,
        "shared_bytes": 38368,
        "stack_bytes": 16,
        "spill_bytes": 20,
    }


# the SASS and roofline figures every report row carries
SASS_FIGURES = {
    "hmma",
    "ldsm",
    "ldgsts",
    "loop_sass_per_hmma",
    "flops_per_loop_sass",
    "bound",
    "expected_pct_of_peak",
}


@pytest.mark.skipif(find_tool("ptxas") is None, reason="needs the ptx extra (nvidia-cuda-nvcc)")
@uses("kernels")
def test_every_kernel_compiles_for_sm80_and_sm90_without_spilling(request, tmp_path_factory):
    run = ptx_rows.report(request, tmp_path_factory)
    assert run.returncode == 0, run.stderr
    # the run prints every row of every set it compiled, in set, spec and arch order
    builders = {"kernels": kernel_specs, "ladder": ladder_specs, "head_dims": head_dim_specs}
    assert [(r["kernel"], r["arch"]) for r in run.rows] == [
        (spec[0], target)
        for name in run.sets
        for spec in builders[name]()
        for _, target in targets(spec, ("sm_80", "sm_90"))
    ]
    rows = run.rows[: sum(len(targets(spec, ("sm_80", "sm_90"))) for spec in kernel_specs())]
    tmp_path = run.ptx_dir
    names = {spec[0] for spec in kernel_specs()}
    # the chapter 3.7 labs' allocators and every layout variant are in the gate too
    assert {"alloc.alloc_cas", "alloc.free_blocks", "alloc.block_scan"} <= names
    assert {n.split("[")[0] for n in names} >= {
        f"labs.decode_{x}" for x in ("fused", "split", "nhd", "vllm")
    }
    assert {(r["kernel"], r["arch"]) for r in rows} == {
        (spec[0], target)
        for spec in kernel_specs()
        for _, target in targets(spec, ("sm_80", "sm_90"))
    }
    assert all(
        set(r) >= {"kernel", "arch", "registers", "shared_bytes", "spill_bytes"} for r in rows
    )
    spilled = [(r["kernel"], r["arch"], r["spill_bytes"]) for r in rows if r["spill_bytes"]]
    assert not spilled, f"register spills: {spilled}"
    assert all(0 < r["registers"] <= 255 for r in rows)
    decode = [r for r in rows if r["kernel"].startswith("paged_decode")]
    assert all(0 < r["shared_bytes"] <= 48 * 1024 for r in decode)  # static shared limit
    g8 = next(r for r in decode if r["kernel"] == "paged_decode[float16,G=8,D=128]")
    # the launcher's estimate is exact
    assert g8["shared_bytes"] == geometry(128, 8, np.float16, 4)["shared"]
    # every row carries the PTX/SASS figures, and every kernel's PTX was written for checking
    assert all(r["global_load_bits"] >= 8 and r["ctas_per_sm"] >= 1 for r in rows)
    assert all(r["loop_sass"] is None or r["sass_per_kv_byte"] > 0 for r in decode)
    assert all(r["loop_sass"] for r in decode)  # a decode kernel always has a K/V loop
    files = {p.name for p in tmp_path.glob("*.ptx")}
    assert all(f"{report._stem(r['kernel'], r['arch'])}.ptx" in files for r in rows)
    assert len(files) == len({(r["kernel"], r["arch"]) for r in run.rows})
    # issue 24's targets on sm_90 (D=128, fp16): tensor-core decode <= 0.1 warp SASS per K/V
    # byte at G=4 and G=8 with HMMA, LDSM and LDGSTS in the loop; CUDA-core G=4 <= 0.17
    at = {r["kernel"]: r for r in rows if r["arch"] == "sm_90"}
    for group in (4, 8):
        tc = at[f"paged_decode_tc[float16,G={group},D=128]"]
        assert tc["hmma"] > 0 and tc["ldsm"] > 0 and tc["ldgsts"] > 0, tc
        assert tc["sass_per_kv_byte"] <= 0.1 and tc["path"] == "tensor", tc
        assert tc["bound"] == "memory" and tc["expected_pct_of_peak"] == 100.0, tc
    core = at["paged_decode[float16,G=4,D=128]"]
    assert core["sass_per_kv_byte"] <= 0.17 and core["hmma"] == 0
    assert core["path"] == "cuda_core"
    # the CUDA-core decode stages K/V by cp.async (LDGSTS in the loop): within 5% of the
    # register path's loop at G=1 and G=8 (0.072, 0.243 SASS/B) and with fewer registers
    # than it had (121, 162, 255); the scalar fallback keeps registers (no LDGSTS)
    register_path = {1: (0.072, 121), 4: (0.157, 162), 8: (0.243, 255)}
    for group, (sass_b, regs) in register_path.items():
        row = at[f"paged_decode[float16,G={group},D=128]"]
        assert row["ldgsts"] > 0 and row["sass_per_kv_byte"] <= 1.05 * sass_b, row
        assert row["registers"] < regs, row
    assert at["paged_decode[scalar,float16,G=8,D=128]"]["ldgsts"] == 0
    assert all(set(r) >= SASS_FIGURES for r in rows)
    # the wgmma prefill is compiled for sm_90a alone, and its loop runs on HGMMA
    wg = next(r for r in rows if r["kernel"] == "paged_prefill_wgmma[float16,G=8,D=128]")
    assert wg["arch"] == "sm_90a" and wg["path"] == "wgmma" and wg["hgmma"] > 0, wg
    assert wg["hmma"] == 0 and wg["ldgsts"] > 0, wg
    written = (tmp_path / "paged_decode_float16_G_8_D_128_sm_90.ptx").read_text()
    assert disasm.ptx_stats(written)["barriers"] == g8["barriers"]
    # every prefill row knows its K/V reuse (QT, T from the kernel's closure or its work map's)
    prefill = [r for r in rows if r["kernel"].startswith("paged_prefill")]
    assert prefill and all(r["reuse"] and r["q_tile"] >= 1 for r in prefill), prefill
    block = report_format.readme_block("kernel", rows)
    assert block in README.read_text(), (
        "cuda_kernels/README.md's kernel table is stale: python -m cuda_kernels.report --readme"
    )


LOWER_ONCE = """
import json, re
from numba.cuda import compile_ptx
from cuda_kernels import report
report._allow_device_functions_without_gpu()

def names_masked(ptx):  # numba's mangled names carry a per-compile id and the cc's flags
    out, pos = [], 0
    for m in re.finditer(r"B\\d+v\\d+B(\\d+)", ptx):
        if m.start() >= pos:
            out += [ptx[pos : m.start()], "B#"]
            pos = m.end() + int(m[1])
    return "".join(out + [ptx[pos:]])

got = {}
for spec in report.kernel_specs():
    if spec[0] in ("merge_partitions", "alloc.alloc_cas", "copy_blocks_vec[f16]"):
        lib = report.lower(spec[1], spec[2], (8, 0))
        for target in ("sm_80", "sm_90", "sm_90a"):
            ptx, _ = compile_ptx(spec[1], spec[2], cc=report._cc(target))
            shared = report.ptx_for(lib, target)
            got[f"{spec[0]} {target}"] = names_masked(shared) == names_masked(ptx)
# specs numba compiles alike share a compile key, so the report compiles them once
from cuda_kernels import labs
from cuda_kernels.ladder import RUNGS
archs = ("sm_80", "sm_90")
by_name = {spec[0]: spec for spec in report.kernel_specs()}
key = report.compile_key(by_name["paged_decode[float16,G=4,D=128]"], archs)
fused = next(r for r in labs.PTX_KERNELS if r[0].startswith("decode_fused["))  # "void(...)"
others = ["paged_decode[float16,G=8,D=128]", "paged_decode[pool-view,G=4,D=128]",
          "paged_decode[scalar,float16,G=8,D=128]", "labs.decode_nhd[float16,G=4,D=128]"]
got["keys"] = [
    key is not None,
    report.compile_key(fused, archs) == key,
    report.compile_key(("rung11", *RUNGS[10].ptx_spec()), archs)
    == report.compile_key(by_name["paged_decode_tc[float16,G=4,D=128]"], archs),
    *(report.compile_key(by_name[name], archs) != key for name in others),
    report.compile_key(by_name["paged_decode[float16,G=4,D=128]"], ("sm_90",)) != key,
    report.fingerprint([1, {}]) is None,
]
print(json.dumps(got))
"""


def test_one_lowering_serves_every_arch_and_alike_specs_share_a_compile_key():
    """report.lower: typed and lowered once (for sm_80), NVVM per arch; the PTX is
    compile_ptx's for that arch but for numba's mangled names. report.compile_key: the
    same factory, arguments and signature (rung 8, labs.decode_fused and the report's
    paged_decode[float16,G=4,D=128]) is one compile; a different group, layout, array
    layout or arch set is not."""
    got = ptx_rows.run_gpu_probe(LOWER_ONCE)
    keys = got.pop("keys")
    assert keys == [True] * 9, keys
    assert len(got) == 9 and all(got.values()), got
