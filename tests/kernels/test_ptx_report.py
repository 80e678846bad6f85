"""The real-GPU gate without a GPU: every kernel compiles to PTX for sm_80 and sm_90,
and ptxas reports no register spills."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_kernels.attention import shared_bytes
from cuda_kernels.report import find_ptxas, kernel_specs, parse_ptxas

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ptx


def test_ptxas_output_over_several_functions_takes_the_max_registers_and_sums_spills():
    text = ("ptxas info    : Function properties for helper\n"
            "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
            "ptxas info    : Used 12 registers\n"
            "ptxas info    : Function properties for kernel\n"
            "    0 bytes stack frame, 0 bytes spill stores, 8 bytes spill loads\n"
            "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n")
    assert parse_ptxas(text) == {"registers": 40, "shared_bytes": 2048, "stack_bytes": 8,
                                 "spill_bytes": 16}


def test_ptxas_output_is_parsed_into_registers_shared_stack_and_spills():
    text = ("ptxas info    : Used 72 registers, used 1 barriers, 38368 bytes smem, 432 bytes cmem[0]\n"
            "ptxas info    : Function properties for f\n"
            "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n")
    assert parse_ptxas(text) == {"registers": 72, "shared_bytes": 38368, "stack_bytes": 16,
                                 "spill_bytes": 20}


@pytest.mark.skipif(find_ptxas() is None, reason="needs the ptx extra (nvidia-cuda-nvcc)")
def test_every_kernel_compiles_for_sm80_and_sm90_without_spilling():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "cuda_kernels.report", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    names = {name for name, _, _ in kernel_specs()}
    # the chapter 3.7 labs' allocators and every layout variant are in the gate too
    assert {"alloc.alloc_cas", "alloc.free_blocks", "alloc.block_scan"} <= names
    assert {n.split("[")[0] for n in names} >= {f"labs.decode_{x}" for x in ("fused", "split", "nhd", "vllm")}
    assert {(r["kernel"], r["arch"]) for r in rows} == {(n, a) for n in names for a in ("sm_80", "sm_90")}
    assert all(set(r) >= {"kernel", "arch", "registers", "shared_bytes", "spill_bytes"} for r in rows)
    spilled = [(r["kernel"], r["arch"], r["spill_bytes"]) for r in rows if r["spill_bytes"]]
    assert not spilled, f"register spills: {spilled}"
    assert all(0 < r["registers"] <= 255 for r in rows)
    decode = [r for r in rows if r["kernel"].startswith("paged_decode")]
    assert all(0 < r["shared_bytes"] <= 48 * 1024 for r in decode)  # static shared limit
    g8 = next(r for r in decode if r["kernel"] == "paged_decode[float16,G=8,D=128]")
    assert g8["shared_bytes"] == shared_bytes(128, 8, 32)  # the launcher's estimate is exact
