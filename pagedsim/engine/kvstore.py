"""Where the engine's K/V live and which code reads them: the kernels, or NumPy.

    KernelKV  per-layer device caches [N, 2, H_kv, B, D] float32, used through
              cuda_kernels: write_kv, paged_prefill, paged_attention, copy_blocks,
              swap_out / swap_in (a GPU, or Numba's CUDA simulator)
    NumpyKV   the same arrays and block tables, read by the float64 references
              (reference_prefill, reference.paged_attention) and copied with NumPy

Both read K/V only through block tables and slots, so blocks, copy-on-write, prefix
hits and swapping are exercised either way; NumpyKV exists because the simulator runs
every CUDA thread as a Python thread, and property tests need many runs. Equality
claims are also checked with KernelKV (tests/engine).
"""

from __future__ import annotations

import numpy as np


class NumpyKV:
    name = "numpy"

    def __init__(self, layers, num_blocks, kv_heads, block_size, head_dim, host_blocks):
        shape = (num_blocks, 2, kv_heads, block_size, head_dim)  # [N, 2, H_kv, B, D]
        self.caches = [self._new(shape) for _ in range(layers)]
        self.hosts = [np.zeros((host_blocks,) + shape[1:], np.float32) for _ in range(layers)]
        self.block_bytes = layers * int(np.prod(shape[1:])) * 4  # one block, every layer

    def _new(self, shape):
        return np.full(shape, np.nan, np.float32)  # never-written slots poison any read

    def write(self, layer, key, value, slots):
        cache, bs = self.caches[layer], self.caches[layer].shape[3]
        keep = slots >= 0
        blocks, offsets = slots[keep] // bs, slots[keep] % bs
        cache[blocks, 0, :, offsets] = key[keep]
        cache[blocks, 1, :, offsets] = value[keep]

    def prefill(self, layer, query, tables, lens, starts):
        from cuda_kernels.reference import reference_prefill
        return reference_prefill(query, self.caches[layer], tables, lens, starts).astype(np.float32)

    def decode(self, layer, query, tables, lens):
        from cuda_kernels import reference
        return reference.paged_attention(query, self.caches[layer], tables, lens).astype(np.float32)

    def copy(self, pairs):
        for cache in self.caches:
            for src, dst in pairs:
                cache[dst] = cache[src]

    def swap_out(self, pairs):
        for cache, host in zip(self.caches, self.hosts):
            for gpu, h in pairs:
                host[h] = cache[gpu]

    def swap_in(self, pairs):
        for cache, host in zip(self.caches, self.hosts):
            for h, gpu in pairs:
                cache[gpu] = host[h]


class KernelKV(NumpyKV):
    name = "kernels"

    def _new(self, shape):
        import cuda_kernels  # noqa: F401  (chooses GPU or simulator before numba.cuda loads)
        from numba import cuda
        return cuda.to_device(np.full(shape, np.nan, np.float32))

    def write(self, layer, key, value, slots):
        import cuda_kernels
        cuda_kernels.write_kv(self.caches[layer], key, value, slots)

    def prefill(self, layer, query, tables, lens, starts):
        from cuda_kernels.prefill import paged_prefill
        return paged_prefill(query, self.caches[layer], tables, lens, starts)

    def decode(self, layer, query, tables, lens):
        import cuda_kernels
        return cuda_kernels.paged_attention(query, self.caches[layer], tables, lens)

    def copy(self, pairs):
        import cuda_kernels
        for cache in self.caches:
            cuda_kernels.copy_blocks(cache, pairs)

    def swap_out(self, pairs):
        import cuda_kernels
        for cache, host in zip(self.caches, self.hosts):
            cuda_kernels.swap_out(cache, host, pairs)

    def swap_in(self, pairs):
        import cuda_kernels
        for cache, host in zip(self.caches, self.hosts):
            cuda_kernels.swap_in(host, cache, pairs)


BACKENDS = {"kernels": KernelKV, "numpy": NumpyKV}
