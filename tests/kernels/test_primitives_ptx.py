"""On the real CUDA target (compiled, no GPU needed) the 16-byte load is one 128-bit
global load through the read-only path, and the fp16 unpack is two cvt.f32.f16."""

import ptx_rows
import pytest

pytestmark = pytest.mark.ptx

PROBE = """
import json
from cuda_kernels import primitives
from numba import cuda, float32
from numba.cuda import types as t
from numba.cuda import compile_ptx

def kernel(a, out):
    i = cuda.threadIdx.x
    raw = primitives.load16(a, i * 8)
    lo, hi = primitives.half2_to_float2(raw[0])
    out[i] = lo + hi + primitives.bits_to_float(raw[3])

rows = {}
for cc in ((8, 0), (9, 0)):
    ptx, _ = compile_ptx(kernel, (t.Array(t.float16, 1, "C"), t.Array(t.float32, 1, "C")), cc=cc)
    loads = [line.split()[0] for line in ptx.splitlines() if line.strip().startswith("ld.global")]
    cvts = sum("cvt.f32.f16" in line for line in ptx.splitlines())
    rows[f"sm_{cc[0]}{cc[1]}"] = [loads, cvts]
print(json.dumps(rows))
"""


def test_load16_compiles_to_ld_global_nc_v4_u32_for_sm80_and_sm90():
    assert ptx_rows.run_gpu_probe(PROBE) == {
        "sm_80": [["ld.global.nc.v4.u32"], 2],
        "sm_90": [["ld.global.nc.v4.u32"], 2],
    }
