"""The launch configuration a GPU gets, run in the simulator: 4-warp decode CTAs whose
warps merge their states in shared memory, 128-thread CUDA-core prefill blocks, and
tensor-core prefill CTAs of 4 warps (64 rows, one warpgroup) with 64- or 32-token tiles.

The simulator normally launches one warp per CTA and 16-token tiles
(`attention.launch_warps`, `prefill.launch_config`, `prefill_tc.launch_config`), so the
code a GPU runs for NW > 1 (decode_tc's cross-warp merge, prefill_tc's warp rows and
its whole-tile pipeline) is not exercised by the other tests. Here the backend query
answers "gpu" after import (kernel bodies never ask; only these launch choices do), the
occupancy query answers 132 x 2 slots, outputs are poisoned with NaN, and each case is
compared with the float64 reference (`sdpa_cases.numpy_reference`). Slow: 128
Python threads per CTA.
"""

import pytest
from sdpa_campaign import TOL_CUDA_CORE, TOL_TENSOR, error, launch
from sdpa_cases import arrays, numpy_reference

from cuda_kernels import _backend, attention, prefill
from cuda_kernels.fast import prefill_tc

COMMON = dict(
    kv_heads=1,
    cache_dtype="float16",
    query_dtype="float16",
    scale=None,
    fill=-1,
    extra_cols=1,
    blank_skipped=True,
)
CASES = {
    # four warps, the last three with no token of the short sequence: empty states merge
    "decode G=8, contexts 70 and 5": dict(
        kind="decode",
        head_dim=64,
        group=8,
        block_size=16,
        window=None,
        sinks=0,
        lens=[70, 5],
        mode="auto",
        partition_size=None,
        seed=1,
    ),
    "decode G=4, D=128, window 20 with 2 sinks, block size 7": dict(
        kind="decode",
        head_dim=128,
        group=4,
        block_size=7,
        window=20,
        sinks=2,
        lens=[100],
        mode="auto",
        partition_size=None,
        seed=2,
    ),
    "decode G=16 split into 32-token partitions": dict(
        kind="decode",
        head_dim=32,
        group=16,
        block_size=3,
        window=None,
        sinks=0,
        lens=[40, 5],  # 32 + 8 tokens (two partitions merged); 5: its second one is empty
        mode="split",
        partition_size=32,
        seed=3,
    ),
    "prefill G=4, 10 new tokens behind 60 cached": dict(
        kind="prefill",
        head_dim=64,
        group=4,
        block_size=16,
        window=None,
        sinks=0,
        prefixes=[60],
        chunks=[10],
        causal=True,
        seed=4,
    ),
    "prefill G=2, window 30 with a sink, block size 5": dict(
        kind="prefill",
        head_dim=32,
        group=2,
        block_size=5,
        window=30,
        sinks=1,
        prefixes=[90],
        chunks=[12],
        causal=True,
        seed=5,
    ),
}


@pytest.fixture
def gpu_launch_configuration(monkeypatch):
    monkeypatch.setattr(_backend, "backend", lambda: "gpu")
    monkeypatch.setattr(attention, "cta_slots", lambda *args, **kwargs: 132 * 2)
    monkeypatch.setattr(attention, "sm_count", lambda: 132)
    monkeypatch.setitem(attention.POISON, "on", True)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["tensor", "cuda_core"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gpu_launch_configuration_matches_the_float64_reference(
    name, path, gpu_launch_configuration
):
    case = dict(COMMON, **CASES[name])
    data = arrays(case)
    out, ran = launch(case, data, path)
    assert ran == path
    if case["kind"] == "decode" and path == "tensor":
        assert attention.LAST_PLAN["threads"] > 32  # the multi-warp kernel ran
    if case["kind"] == "prefill":  # the GPU's CTA shapes: a warpgroup, 128 threads
        assert prefill_tc.launch_config(case["head_dim"])[0] == 4
        assert prefill.launch_config(case["head_dim"], case["group"])[0] == 128
    tol = TOL_TENSOR if path == "tensor" else TOL_CUDA_CORE
    assert error(out, numpy_reference(case, data), data) <= tol
