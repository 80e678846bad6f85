"""On the real CUDA target (compiled, no GPU needed) the tensor-core primitives are the
instructions they name: ptxas turns them into HMMA.16816.F32 (and .BF16), LDSM.16.M88.*
(LDSM.16.MT88.* with .trans), LDGSTS.E.BYPASS.128 and F2FP.*PACK_AB on sm_80 and sm_90,
with no spills."""

import ptx_rows
import pytest
from ptx_rows import uses

from cuda_kernels.report import HEAD_DIMS

pytestmark = pytest.mark.ptx

PROBE = """
import json, re, subprocess, sys, tempfile
from pathlib import Path
import numpy as np
from numba import cuda
from numba.cuda import compile_ptx
from numba.cuda import types as t
from cuda_kernels import primitives as pr, report

report._allow_device_functions_without_gpu()

def kernel(q, cache, out):
    lane = cuda.threadIdx.x
    smem = cuda.shared.array((2, 64, 16), np.float16)
    pr.cp_async16(smem, lane * 8, cache, lane * 8, 16)
    pr.cp_async_commit()
    pr.cp_async_wait(0)
    cuda.syncthreads()  # the copies are visible before ldmatrix reads them
    a0, a1, a2, a3 = pr.ldmatrix_x4(smem, (lane % 16) * 16 + (lane // 16) * 8)
    b0, b1 = pr.ldmatrix_x2_trans(smem, (lane % 16) * 16)
    c0, c1, c2, c3 = pr.ldmatrix_x4_trans(smem, lane * 16)
    b2 = pr.ldmatrix_x1(smem, (lane % 8) * 16)
    e0, e1 = pr.ldmatrix_x2(smem, (lane % 16) * 16 + 8)
    w = pr.pack_f16x2(q[lane], q[lane + 1])
    d0, d1, d2, d3 = pr.mma_f16(a0, a1, a2, w, b0, b1, 0.0, 0.0, 0.0, 0.0)
    d0, d1, d2, d3 = pr.mma_f16(c0, c1, c2, c3, e0, e1, d0, d1, d2, d3)
    f0, f1, f2, f3 = pr.mma_bf16(a0, a1, a2, pr.pack_bf16x2(d0, d1), b0, b2, d0, d1, d2, d3)
    out[lane] = f0 + f1 + f2 + f3

sig = (t.Array(t.float32, 1, "C"), t.Array(t.float16, 1, "C"), t.Array(t.float32, 1, "C"))
rows = {}
with tempfile.TemporaryDirectory() as tmp:
    for cc in ((8, 0), (9, 0)):
        arch = f"sm_{cc[0]}{cc[1]}"
        ptx, _ = compile_ptx(kernel, sig, cc=cc)
        path = Path(tmp) / f"probe_{arch}.ptx"
        path.write_text(ptx)
        cubin = path.with_suffix(".cubin")
        done = subprocess.run([report.find_tool("ptxas"), "-v", f"-arch={arch}", str(path), "-o",
                               str(cubin)], capture_output=True, text=True, check=True)
        sass = report.disassemble(cubin)
        ops = re.findall(r"\\b(HMMA|LDSM|LDGSTS|F2FP)(\\.[A-Z0-9_.]+)", sass)
        rows[arch] = {"ptxas": report.parse_ptxas(done.stderr),
                      "sass": sorted(a + b for a, b in ops)}
print(json.dumps(rows))
"""


def test_tensor_core_primitives_assemble_to_hmma_ldsm_ldgsts_on_sm80_and_sm90():
    rows = ptx_rows.run_gpu_probe(PROBE)
    for arch in ("sm_80", "sm_90"):
        sass, ptxas = rows[arch]["sass"], rows[arch]["ptxas"]
        assert ptxas["spill_bytes"] == 0 and ptxas["stack_bytes"] == 0, (arch, ptxas)
        assert sass.count("HMMA.16816.F32") == 2, (arch, sass)
        assert sass.count("HMMA.16816.F32.BF16") == 1, (arch, sass)
        assert {
            "LDSM.16.M88.4",
            "LDSM.16.MT88.2",
            "LDSM.16.MT88.4",
            "LDSM.16.M88",
            "LDSM.16.M88.2",
            "LDGSTS.E.BYPASS.128",
        } <= set(sass), (arch, sass)
        assert sum(op.startswith("F2FP") and "PACK_AB" in op for op in sass) == 2, (arch, sass)


@pytest.mark.slow
@uses("head_dims")
def test_the_tensor_core_prefill_compiles_without_spills_at_every_kind_of_head_dim(
    request, tmp_path_factory
):
    """launch_config's GPU shape for head_dims 16 .. 256 (swizzled and padded rows, 64-,
    32- and 16-token tiles, O split above D=192) at G=4, on sm_80 and sm_90: no spill, no
    stack; D=128 keeps at most 4 SASS per HMMA in its steady loop (`report --head-dims`)."""
    run = ptx_rows.report(request, tmp_path_factory)
    assert run.returncode == 0, run.stderr
    rows = run.of(f"paged_prefill_tc[float16,G=4,D={d}]" for d in HEAD_DIMS)
    assert sorted((r["kernel"], r["arch"]) for r in rows) == sorted(
        (f"paged_prefill_tc[float16,G=4,D={d}]", a) for d in HEAD_DIMS for a in ("sm_80", "sm_90")
    )
    spilled = [r for r in rows if r["spill_bytes"] or r["stack_bytes"]]
    assert all(r["hmma"] > 0 for r in rows), rows
    at_128 = [r for r in rows if r["kernel"].endswith(",D=128]")]
    assert len(at_128) == 2 and all(r["loop_sass_per_hmma"] <= 4 for r in at_128), at_128
    assert not spilled, spilled
