"""The engine's paged K/V: one cache per layer on the device, a host pool for swapping.

    caches[layer]  [num_gpu_blocks, 2, H_kv, B, D] float32 (the attention backend's arrays)
    hosts[layer]   [num_cpu_blocks, 2, H_kv, B, D] float32 NumPy (v0's CPU swap space)

Every read and write goes through the injected attention backend (`backend.py`);
this file only fans a call out over the layers and knows a block's size in bytes.
"""

from __future__ import annotations

import numpy as np


class PagedKV:
    def __init__(
        self, backend, layers, num_gpu_blocks, kv_heads, block_size, head_dim, num_cpu_blocks
    ):
        shape = (num_gpu_blocks, 2, kv_heads, block_size, head_dim)  # [N, 2, H_kv, B, D]
        self.backend = backend
        self.caches = [backend.new_cache(shape) for _ in range(layers)]
        self.hosts = [np.zeros((num_cpu_blocks,) + shape[1:], np.float32) for _ in range(layers)]
        self.block_bytes = layers * int(np.prod(shape[1:])) * 4  # one block, every layer

    @property
    def name(self) -> str:
        return self.backend.name

    def write(self, layer, key, value, slots):
        self.backend.write(self.caches[layer], key, value, slots)

    def prefill(self, layer, query, tables, lens, starts, spec=None):
        return self.backend.prefill(query, self.caches[layer], tables, lens, starts, spec)

    def decode(self, layer, query, tables, lens, spec=None):
        return self.backend.decode(query, self.caches[layer], tables, lens, spec)

    def copy(self, pairs):
        for cache in self.caches:
            self.backend.copy_blocks(cache, pairs)

    def swap_out(self, pairs):
        for cache, host in zip(self.caches, self.hosts, strict=True):
            self.backend.swap_out(cache, host, pairs)

    def swap_in(self, pairs):
        for cache, host in zip(self.caches, self.hosts, strict=True):
            self.backend.swap_in(host, cache, pairs)
