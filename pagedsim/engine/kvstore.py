"""The engine's paged K/V: one cache per layer on the device, a host pool for swapping.

    caches[layer]  [num_gpu_blocks, 2, H_kv, B, D] float32 (the attention backend's arrays)
    hosts[layer]   [num_cpu_blocks, 2, H_kv, B, D] float32 NumPy (v0's CPU swap space)

Every read and write goes through the injected attention backend (`backend.py`);
this file only fans a call out over the layers and knows a block's size in bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic

import numpy as np

from .backend import AttentionBackend, Cache, Floats, Ints, Pairs

if TYPE_CHECKING:
    from .model import Attention


class PagedKV(Generic[Cache]):
    def __init__(
        self,
        backend: AttentionBackend[Cache],
        layers: int,
        num_gpu_blocks: int,
        kv_heads: int,
        block_size: int,
        head_dim: int,
        num_cpu_blocks: int,
    ):
        shape = (num_gpu_blocks, 2, kv_heads, block_size, head_dim)  # [N, 2, H_kv, B, D]
        self.backend = backend
        self.caches: list[Cache] = [backend.new_cache(shape) for _ in range(layers)]
        self.hosts = [np.zeros((num_cpu_blocks,) + shape[1:], np.float32) for _ in range(layers)]
        self.block_bytes = layers * int(np.prod(shape[1:])) * 4  # one block, every layer

    @property
    def name(self) -> str:
        return self.backend.name

    def write(self, layer: int, key: Floats, value: Floats, slots: Ints) -> None:
        self.backend.write(self.caches[layer], key, value, slots)

    def prefill(
        self,
        layer: int,
        query: Floats,
        tables: Ints,
        lens: Ints,
        starts: Ints,
        spec: Attention | None = None,
    ) -> Floats:
        return self.backend.prefill(query, self.caches[layer], tables, lens, starts, spec)

    def decode(
        self, layer: int, query: Floats, tables: Ints, lens: Ints, spec: Attention | None = None
    ) -> Floats:
        return self.backend.decode(query, self.caches[layer], tables, lens, spec)

    def copy(self, pairs: Pairs) -> None:
        for cache in self.caches:
            self.backend.copy_blocks(cache, pairs)

    def swap_out(self, pairs: Pairs) -> None:
        for cache, host in zip(self.caches, self.hosts, strict=True):
            self.backend.swap_out(cache, host, pairs)

    def swap_in(self, pairs: Pairs) -> None:
        for cache, host in zip(self.caches, self.hosts, strict=True):
            self.backend.swap_in(host, cache, pairs)
