"""The pre-allocation lab: one device allocation per block on demand, or one pool up front.

Chapter 3.7 advises pre-allocating the block pool. On demand, every new block is its own
`cuda.device_array` (a cudaMalloc, and a free when dropped), wherever the allocator puts
it, so one kernel cannot reach it by `pool[block_id]`. Pooled, one [num_blocks,
*block_shape] array is made at start-up (as vLLM does after profiling memory) and a block
is an id from the host `BlockPool`: no device allocation on the serving path.

Without a GPU this counts what each strategy does (allocation calls and bytes), never a
time; `benchmarks/gpu_labs.py` times both on a GPU.

Reference: vLLM v1 gpu_model_runner.py (`initialize_kv_cache`: one tensor per layer);
CUDA C++ Best Practices Guide, "Memory Allocation" (allocation is expensive; reuse it).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import numpy as np
from numba import cuda

from pagedsim import BlockPool


@dataclass
class AllocCounter:
    """Counts device allocations made through it."""

    calls: int = 0  # cuda.device_array calls
    bytes: int = 0  # bytes requested in total

    def device_array(self, shape, dtype):
        self.calls += 1
        self.bytes += int(np.prod(shape)) * np.dtype(dtype).itemsize
        return cuda.device_array(shape, dtype)


def block_shape(num_kv_heads: int, block_size: int, head_dim: int) -> tuple[int, int, int, int]:
    return (2, num_kv_heads, block_size, head_dim)  # [2, H_kv, B, D]: one block of one layer


def on_demand(num_blocks: int, shape, dtype, counter: AllocCounter) -> list:
    """Take `num_blocks` blocks, each a fresh device allocation."""
    return [counter.device_array(shape, dtype) for _ in range(num_blocks)]


def pooled(pool_blocks: int, num_blocks: int, shape, dtype, counter: AllocCounter):
    """One allocation of pool_blocks blocks, then take `num_blocks` ids from a host BlockPool."""
    cache = counter.device_array((pool_blocks, *shape), dtype)  # [N, 2, H_kv, B, D]
    ids = BlockPool(pool_blocks, shape[2])
    return cache, [ids.allocate() for _ in range(num_blocks)]


def compare(
    num_blocks: int,
    num_kv_heads: int = 2,
    block_size: int = 16,
    head_dim: int = 64,
    dtype=np.float16,
    pool_blocks: int | None = None,
) -> dict:
    """Counts for both strategies when a workload needs `num_blocks` blocks."""
    if not isinstance(num_blocks, (int, np.integer)) or num_blocks < 1:
        raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
    pool_blocks = num_blocks if pool_blocks is None else pool_blocks
    if pool_blocks < num_blocks:
        raise ValueError(f"pool_blocks ({pool_blocks}) must be at least num_blocks ({num_blocks})")
    shape = block_shape(num_kv_heads, block_size, head_dim)
    a, b = AllocCounter(), AllocCounter()
    blocks = on_demand(num_blocks, shape, dtype, a)
    cache, ids = pooled(pool_blocks, num_blocks, shape, dtype, b)
    assert len(blocks) == len(ids) == num_blocks and len(set(ids)) == num_blocks
    return {
        "num_blocks": int(num_blocks),
        "block_bytes": int(np.prod(shape)) * np.dtype(dtype).itemsize,
        "on_demand": asdict(a),
        "pooled": asdict(b),
        "pool_blocks": int(pool_blocks),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m cuda_kernels.labs.prealloc", description=__doc__.split("\n")[0]
    )
    p.add_argument("--blocks", type=int, default=64)
    args = p.parse_args(argv)
    print(json.dumps(compare(args.blocks), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
