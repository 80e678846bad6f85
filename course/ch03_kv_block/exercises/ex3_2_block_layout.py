"""Exercise 3.2 (your file): what one KV block costs, and where each number lives in the pool.

The chapter's block holds K and V for `block_size` tokens, for every layer and head:

    bytes_per_block = block_size * num_layers * 2 * num_kv_heads * head_dim * dtype_bytes

(16 * 32 * 2 * 32 * 128 * 2 = 8,388,608 bytes = 8 MiB for the chapter's example).

The whole-model pool is one C-order array, with K and V of a block side by side:

    kv_pool [num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim]

In C order the last index moves fastest, so an element's flat offset is the sum of
index * stride, where each dimension's stride is the product of the sizes to its right.
`kv_pool[:, layer]` is then exactly the per-layer cache [num_blocks, 2, H_kv, B, D]
that the kernels take (a view, not a copy).

中文：一个 Block 存放 block_size 个 token 在每一层、每个 KV 头上的 K 和 V：
bytes_per_block = block_size × num_layers × 2 × num_kv_heads × head_dim × dtype_bytes（dtype_bytes
默认 2，即 FP16；本章的例子是 8 MiB）。整个池是一个 C 顺序数组
kv_pool[num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim]：最后一维变化最快，元素的
扁平偏移 = Σ 下标 × 步长，每一维的步长是它右边各维大小的乘积；slot = block × block_size + token。

Reference: vLLM's cache layout (csrc/cache_kernels.cu, reshape_and_cache); NumPy's
"Internal memory layout of an ndarray" (strides).
"""

from __future__ import annotations


def bytes_per_block(block_size: int, num_layers: int, num_kv_heads: int, head_dim: int,
                    dtype_bytes: int = 2) -> int:
    """Bytes of one whole-model block: K and V of `block_size` tokens in every layer."""
    # TODO(student): multiply out the block's dimensions (do not forget K *and* V).
    raise NotImplementedError("bytes_per_block")


def strides(shape: tuple) -> tuple:
    """Element strides of a C-order array of this shape (the last one is 1)."""
    # TODO(student): walk the shape from the right, keeping a running product.
    raise NotImplementedError("strides")


def flat_offset(
    shape: tuple, block: int, layer: int, kv: int, head: int, token: int, dim: int
) -> int:
    """Element offset of kv_pool[block, layer, kv, head, token, dim] for a pool of `shape`.

    shape = (num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim); kv is 0 for K, 1 for V.
    """
    # TODO(student): the sum of index * stride over the six dimensions.
    raise NotImplementedError("flat_offset")


def slot_offset(shape: tuple, slot: int, layer: int, kv: int, head: int, dim: int) -> int:
    """Element offset of one number of the token in cache slot `slot` (slot = block * B + token)."""
    # TODO(student): split the slot into (block, token), block_size = shape[4], then flat_offset.
    raise NotImplementedError("slot_offset")
