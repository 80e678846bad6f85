"""The engine's paged K/V: one cache per layer on the device, a host pool for swapping.

    caches[layer]  [num_gpu_blocks, 2, H_kv, B, D] float32 (the attention backend's arrays)
    hosts[layer]   [num_cpu_blocks, 2, H_kv, B, D] float32 NumPy (v0's CPU swap space)

The engine reads and writes a layer's cache through the injected attention backend
(`backend.py`); this file fans the block moves out over the layers and knows a block's
size in bytes.
"""

from __future__ import annotations

from typing import Generic

import numpy as np

from .backend import AttentionBackend, Cache, Pairs


class PagedKV(Generic[Cache]):
    def __init__(
        self,
        backend: AttentionBackend[Cache],
        layers: int,
        shape: tuple[int, ...],  # one layer's cache: [num_gpu_blocks, 2, H_kv, B, D]
        num_cpu_blocks: int,
    ):
        self.backend = backend
        self.caches: list[Cache] = [backend.new_cache(shape) for _ in range(layers)]
        self.hosts = [np.zeros((num_cpu_blocks,) + shape[1:], np.float32) for _ in range(layers)]
        self.block_bytes = layers * int(np.prod(shape[1:])) * 4  # one block, every layer

    def copy(self, pairs: Pairs) -> None:
        for cache in self.caches:
            self.backend.copy_blocks(cache, pairs)

    def swap_out(self, pairs: Pairs) -> None:
        for cache, host in zip(self.caches, self.hosts, strict=True):
            self.backend.swap_out(cache, host, pairs)

    def swap_in(self, pairs: Pairs) -> None:
        for cache, host in zip(self.caches, self.hosts, strict=True):
            self.backend.swap_in(host, cache, pairs)
