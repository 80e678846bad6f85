"""Lesson 3.2: inside a block -- its size in bytes, and where each number lives."""

from __future__ import annotations

import numpy as np

from course.ch03_kv_block.lessons import verdict
from pagedsim.sizing import PRESETS, ModelSpec


def demo(out_dir) -> None:
    print(f"{'model':<16} {'bytes/token':>12} {'bytes/block (16 tokens)':>24}")
    sizes = {}
    for spec in PRESETS.values():
        sizes[spec.name] = spec.bytes_per_block(16)
        print(f"{spec.name:<16} {spec.bytes_per_token():>12,} {sizes[spec.name]:>24,}")
    mla = ModelSpec("deepseek-v2-lite", num_layers=27, num_kv_heads=1, head_dim=576, latent_dim=576)
    print(
        f"{mla.name:<16} {mla.bytes_per_token():>12,} {mla.bytes_per_block(16):>24,}"
        "  (MLA: one latent of 512 + 64 per token and layer, not K and V per head)"
    )
    small, large = min(sizes, key=sizes.get), max(sizes, key=sizes.get)
    kv_memory = 40 * 2**30
    meaning = (
        f"a 16-token block costs {sizes[small] / 2**20:g} MiB ({small}) to "
        f"{sizes[large] / 2**20:g} MiB ({large}), so 40 GiB of KV cache holds only "
        f"{kv_memory // sizes[large]:,} to {kv_memory // sizes[small]:,} blocks",
        f"一个 16 token 的 Block 占 {sizes[small] / 2**20:g} MiB（{small}）到 "
        f"{sizes[large] / 2**20:g} MiB（{large}），所以 40 GiB 的 KV 缓存只能放 "
        f"{kv_memory // sizes[large]:,} 到 {kv_memory // sizes[small]:,} 个 Block",
    )
    shape = (6, 3, 2, 2, 4, 8)  # [N, L, 2, H_kv, B, D]
    pool = np.full(shape, np.nan, np.float32)
    print(f"\nkv_pool{list(shape)} element strides: {[s // 4 for s in pool.strides]}")
    import cuda_kernels  # here, not at the top: it loads Numba

    rng = np.random.default_rng(0)
    key = rng.standard_normal((3, 2, 8)).astype(np.float32)  # [T, H_kv, D]
    value = rng.standard_normal((3, 2, 8)).astype(np.float32)
    view = pool[:, 1]  # [N, 2, H_kv, B, D] layer 1, a view
    cuda_kernels.write_kv(view, key, value, np.array([5, 6, 13]))
    print(
        f"write_kv ({cuda_kernels.backend()}) wrote 3 tokens to slots 5, 6, 13 of layer 1 "
        f"through a view (shares memory with the pool: {np.shares_memory(view, pool)})"
    )
    print(
        f"  K of token 0 head 0 is now kv_pool[1, 1, 0, 0, 1, :4] = "
        f"{pool[1, 1, 0, 0, 1, :4].round(3)}"
    )
    written = int(np.isfinite(pool).sum())
    print(f"  numbers written: {written} = 3 tokens x 2 (K,V) x 2 heads x 8 dims")
    exact = written == 3 * 2 * 2 * 8
    verdict(
        meaning[0]
        + (
            "; and the kernel, writing through kv_pool[:, 1], filled exactly the 96 numbers of 3 "
            "tokens, so the view and the strides above address the pool correctly"
            if exact
            else f"; but the kernel filled {written} numbers instead of 96: the view is "
            f"not the pool"
        ),
        meaning[1]
        + (
            "；内核通过 kv_pool[:, 1] 恰好写入了 3 个 token 的 96 个数，说明视图和"
            "上面的步长正确地寻址了池"
            if exact
            else f"；但内核写了 {written} 个数而不是 96 个：视图并不是池本身"
        ),
    )
