"""Pre-allocation lab: on demand costs one device allocation per block, a pool costs one in all."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels.labs import prealloc

pytestmark = [pytest.mark.kernels, pytest.mark.ch3_7]


@settings(max_examples=5)
@given(st.integers(1, 40), st.integers(0, 10))
def test_on_demand_makes_one_allocation_per_block_and_the_pool_makes_one(n, spare):
    r = prealloc.compare(
        n, num_kv_heads=2, block_size=4, head_dim=8, dtype=np.float32, pool_blocks=n + spare
    )
    block_bytes = 2 * 2 * 4 * 8 * 4
    assert r["block_bytes"] == block_bytes
    assert r["on_demand"] == {"calls": n, "bytes": n * block_bytes}
    assert r["pooled"] == {"calls": 1, "bytes": (n + spare) * block_bytes}


def test_counter_counts_the_allocations_it_really_makes():
    c = prealloc.AllocCounter()
    arrays = prealloc.on_demand(3, (2, 1, 4, 8), np.float16, c)
    assert c.calls == 3 and c.bytes == 3 * 2 * 4 * 8 * 2
    assert all(a.shape == (2, 1, 4, 8) for a in arrays)


def test_bad_sizes_are_refused_by_name():
    with pytest.raises(ValueError, match="num_blocks"):
        prealloc.compare(0)
    with pytest.raises(ValueError, match="pool_blocks"):
        prealloc.compare(8, pool_blocks=4)
