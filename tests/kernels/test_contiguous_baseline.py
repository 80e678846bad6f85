"""The paging-overhead baseline (each sequence's K/V stored contiguously, no table) is
checked against the float64 reference like the paged kernel, through the GPU benchmark's
own device check (NaN-poisoned output), so the baseline it times is known to be right."""

import sys
from pathlib import Path

import numpy as np
import pytest

import cuda_kernels  # noqa: F401  (selects the backend before the benchmark imports numba.cuda)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_attention  # noqa: E402

pytestmark = pytest.mark.kernels


@pytest.mark.parametrize("dtype, mode", [("float32", "single"), ("float16", "split")])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_the_timed_kernels_match_the_float64_reference(layout, dtype, mode):
    rng = np.random.default_rng(7)
    case = (2, 24, 2, 1, dtype)  # batch, context, heads, kv_heads, dtype
    assert gpu_attention.check_config(rng, case, 8, mode, layout, dry=True)
