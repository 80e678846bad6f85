"""On the real CUDA target (compiled for sm_90a, no GPU needed) the generated wgmma
intrinsics are the instructions they name: one K-major and one MN-major m64n64k16 come
out of ptxas as two HGMMA.64x64x16.F32, the second reading B with .tnspB and the first,
issued with accumulate 0, ignoring the old D (RZ), with no spills."""

import ptx_rows
import pytest
from ptx_rows import uses

from cuda_kernels.gpu.wgmma_intrinsics import wgmma_constraints, wgmma_text

pytestmark = pytest.mark.ptx

PROBE = """
import json, re, subprocess, tempfile
from pathlib import Path
import numpy as np
from numba import cuda, float32
from numba.cuda import compile_ptx
from numba.cuda import types as t
from cuda_kernels import report
from cuda_kernels.fast import wgmma as wg

report._allow_device_functions_without_gpu()

def kernel(words, out):
    tid = cuda.threadIdx.x
    smem = cuda.shared.array(9216, np.float16)
    pad = wg.align_pad(smem)
    for i in range(64):
        smem[pad + tid * 64 + i] = 1.0
    wg.fence_proxy_async()
    cuda.syncthreads()  # B is written before the warpgroup reads it
    d = cuda.local.array(32, float32)
    w = words[tid]
    wg.wgmma_fence()
    wg.wgmma_n64(wg.smem_desc(smem, pad, 16, 1024, 1), w[0], w[1], w[2], w[3], d, 0, 0)
    wg.wgmma_n64_t(wg.smem_desc(smem, pad, 8192, 1024, 1), w[0], w[1], w[2], w[3], d, 0, 1)
    wg.wgmma_commit()
    wg.wgmma_wait(0)
    total = float32(0)
    for i in range(32):
        total += d[i]
    out[tid] = total

ptx, _ = compile_ptx(kernel, (t.Array(t.uint32, 2, "C"), t.Array(t.float32, 1, "C")),
                     cc=(9, 0, "a"))
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "wgmma.ptx"
    path.write_text(ptx)
    done = subprocess.run([report.find_tool("ptxas"), "-v", "-arch=sm_90a", str(path), "-o",
                           str(path.with_suffix(".cubin"))], capture_output=True, text=True,
                          check=True)
    sass = report.disassemble(path.with_suffix(".cubin"))
ops = [line.split(";")[0].split("*/")[-1].split() for line in sass.splitlines() if "HGMMA" in line]
print(json.dumps([".target sm_90a" in ptx, report.parse_ptxas(done.stderr)["spill_bytes"],
      [op[0] for op in ops], ["tnspB" in " ".join(op) for op in ops], [op[4] for op in ops]]))
"""


def test_generated_asm_names_n_over_2_accumulators_tied_to_the_outputs():
    text, constraints = wgmma_text(16, True), wgmma_constraints(16).split(",")
    assert "m64n16k16.f32.f16.f16 {$0, $1, $2, $3, $4, $5, $6, $7}, {$8, $9, $10, $11}" in text
    assert text.endswith("$12, p, 1, 1, 1; }") and "setp.ne.b32 p, $13, 0;" in text
    assert constraints[:8] == ["=f"] * 8 and constraints[8:14] == ["r"] * 4 + ["l", "r"]
    assert constraints[14:22] == [str(i) for i in range(8)] and constraints[-1] == "~{memory}"


def test_wgmma_n64_assembles_to_hgmma_64x64x16_on_sm90a_k_major_and_transposed_no_spills():
    assert ptx_rows.run_gpu_probe(PROBE) == [
        True,
        0,
        ["HGMMA.64x64x16.F32", "HGMMA.64x64x16.F32"],
        [False, True],
        ["RZ,", "R24,"],
    ]


@pytest.mark.slow
@uses("kernels")
def test_the_wgmma_prefill_compiles_for_sm90a_alone_with_hgmma_in_its_loop_and_no_spills(
    request, tmp_path_factory
):
    """The report's row (D=128, G=8, 64-token tiles): 8 HGMMA for S and 8 for P V per tile,
    the K/V copies as LDGSTS, no HMMA, no spill, no stack; the loop stays under 800 SASS."""
    run = ptx_rows.report(request, tmp_path_factory)
    assert run.returncode == 0, run.stderr
    (row,) = run.of(["paged_prefill_wgmma[float16,G=8,D=128]"])  # sm_90a alone
    assert row["arch"] == "sm_90a" and row["path"] == "wgmma", row
    assert (row["hgmma"], row["hmma"], row["ldgsts"]) == (16, 0, 16), row
    assert row["spill_bytes"] == 0 and row["stack_bytes"] == 0, row
    assert row["loop_sass"] < 800 and row["tensor_flops"] == 16 * 2 * 64 * 64 * 16 // 4, row
