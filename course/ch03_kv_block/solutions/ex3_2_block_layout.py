"""Exercise 3.2: what one KV block costs, and where each number lives in the pool.

Solved; the spec is the docstring of exercises/ex3_2_block_layout.py.
"""

from __future__ import annotations


def bytes_per_block(block_size: int, num_layers: int, num_kv_heads: int, head_dim: int,
                    dtype_bytes: int = 2) -> int:
    """Bytes of one whole-model block: K and V of `block_size` tokens in every layer."""
    return block_size * num_layers * 2 * num_kv_heads * head_dim * dtype_bytes


def strides(shape: tuple) -> tuple:
    """Element strides of a C-order array of this shape (the last one is 1)."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return tuple(reversed(out))


def flat_offset(
    shape: tuple, block: int, layer: int, kv: int, head: int, token: int, dim: int
) -> int:
    """Element offset of kv_pool[block, layer, kv, head, token, dim] for a pool of `shape`.

    shape = (num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim); kv is 0 for K, 1 for V.
    """
    index = (block, layer, kv, head, token, dim)
    return sum(i * s for i, s in zip(index, strides(shape)))  # noqa: B905 (solution kept as is)


def slot_offset(shape: tuple, slot: int, layer: int, kv: int, head: int, dim: int) -> int:
    """Element offset of one number of the token in cache slot `slot` (slot = block * B + token)."""
    block, token = divmod(slot, shape[4])
    return flat_offset(shape, block, layer, kv, head, token, dim)
