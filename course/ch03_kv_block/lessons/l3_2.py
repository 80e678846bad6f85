"""Lesson 3.2: inside a block -- its size in bytes, and where each number lives."""

from __future__ import annotations

import numpy as np

from course.ch03_kv_block.lessons import verdict
from pagedsim.sizing import PRESETS, ModelSpec

TITLE = "The inside of a block"
TITLE_ZH = "Block 的内部"
FIGURES = [
    (
        "3.2-block-anatomy",
        "one block's layout (K, V, heads x tokens x head_dim, all layers) and its bytes",
    )
]
FIGURES_ZH = ["一个 Block 的布局（K、V，头 × token × head_dim，所有层）及其字节数"]
TEXT = """
One block holds the K and V vectors of block_size tokens, for every layer and every KV
head. Its size is block_size x num_layers x 2 (K and V) x num_kv_heads x head_dim x bytes
per element: for the chapter's example (16 tokens, 32 layers, 32 heads of 128, FP16) that
is 8 MiB, which is why a GPU holds only thousands of blocks, not millions. With grouped-
query attention only the KV heads count, so Llama-3-8B's blocks are 4x smaller.

The whole pool is one array, kv_pool[num_blocks, num_layers, 2, H_kv, block_size, D], so
K and V of a block sit side by side and kv_pool[:, layer] is a per-layer cache view that
the kernels use without copying. The demo prints block sizes for a few models, the
pool's strides, and writes K/V with the write_kv kernel through such a view.

A mixture-of-experts model (Mixtral, Qwen2-MoE, OLMoE, Granite-MoE) changes none of
this. Its experts replace the MLP, which runs after attention and keeps nothing between
steps; a token's K and V come from the attention projections alone, whichever experts
the router picks. So Mixtral-8x7B's block is exactly Mistral-7B's (32 layers, 8 KV heads
of 128): 47B parameters of weights, the KV cache of a 7B model. `pagedsim generate`
serves these checkpoints with the same block tables.

Multi-head latent attention (MLA: DeepSeek-V2, V3) does change the block. It caches no
per-head K and V: each token keeps, per layer, one latent vector of kv_lora_rank values
(the compressed K and V, expanded by up-projections when attention runs) and the
qk_rope_head_dim values of its one rotary key. DeepSeek-V2-Lite (27 layers, kv_lora_rank
512, qk_rope_head_dim 64) caches 576 values per token and layer where per-head K and V
would take 16 x (128 + 64 + 128) = 5,120, so its 16-token block is 16 x 27 x 576 x 2 B =
486 KiB. vLLM's MLAAttentionSpec pages it the same way, as one KV head of 576 with no V
(`pagedsim capacity --model deepseek-v2-lite` prints it; the demo's last row).
"""
TEXT_ZH = """
一个 Block 存放 block_size 个 token 在每一层、每个 KV 头上的 K 和 V。大小为 block_size ×
层数 × 2（K 和 V）× KV 头数 × head_dim × 每元素字节数：按本章的例子（16 个 token、32 层、
32 个 128 维的头、FP16）是 8 MiB，所以一块 GPU 只能放几千个 Block。使用 GQA 时只计 KV 头，
因此 Llama-3-8B 的 Block 小 4 倍。整个池是一个数组 kv_pool[块数, 层数, 2, H_kv, block_size, D]，
同一 Block 的 K 和 V 相邻，kv_pool[:, layer] 就是内核直接使用的单层视图（不拷贝）。

混合专家（MoE）模型（Mixtral、Qwen2-MoE、OLMoE、Granite-MoE）不改变上面任何一点：专家替换的是
MLP，它在注意力之后运行、步与步之间不保留任何东西；一个 token 的 K 和 V 只来自注意力投影，与路由
选中哪些专家无关。所以 Mixtral-8x7B 的 Block 与 Mistral-7B 完全相同（32 层、8 个 128 维 KV 头）：
权重是 47B 参数，KV 缓存却是 7B 模型的。`pagedsim generate` 用同样的块表服务这些检查点。

多头潜在注意力（MLA：DeepSeek-V2、V3）则改变了 Block：它不缓存每个头的 K 和 V，每个 token 在每层
只保存一个 kv_lora_rank 维的潜在向量（压缩后的 K 和 V，注意力计算时由上投影展开）和 qk_rope_head_dim
维的一个旋转键。DeepSeek-V2-Lite（27 层、kv_lora_rank 512、qk_rope_head_dim 64）每个 token 每层缓存
576 个数，而按头存 K 和 V 需要 16 ×（128 + 64 + 128）= 5,120 个，所以它 16 个 token 的 Block 是
16 × 27 × 576 × 2 B = 486 KiB。vLLM 的 MLAAttentionSpec 也这样分页：一个 576 维的 KV 头、没有 V
（`pagedsim capacity --model deepseek-v2-lite` 会打印它；即演示的最后一行）。
"""


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
