"""The attention backend on cuda_kernels: write_kv, paged_prefill, paged_attention,
copy_blocks, swap_out / swap_in, on a GPU or on Numba's CUDA simulator.

The only engine module that imports cuda_kernels (and so numba); `backend.choose`
imports it when the kernels are asked for. Caches live on the device.
"""

from __future__ import annotations

import numpy as np

import cuda_kernels  # chooses GPU or simulator before numba.cuda loads
from cuda_kernels.prefill import paged_prefill


class KernelAttention:
    name = "kernels"

    def where(self) -> str:
        mode = cuda_kernels.backend()
        return (
            "cuda_kernels on the GPU" if mode == "gpu" else "cuda_kernels on Numba's CUDA simulator"
        )

    def new_cache(self, shape):
        from numba import cuda  # configured by cuda_kernels above

        return cuda.to_device(np.full(shape, np.nan, np.float32))

    def write(self, cache, key, value, slots):
        cuda_kernels.write_kv(cache, key, value, slots)

    def prefill(self, query, cache, tables, lens, starts, spec=None):
        scale, window = _plain(spec)
        return paged_prefill(query, cache, tables, lens, starts, scale, window=window or 0)

    def decode(self, query, cache, tables, lens, spec=None):
        scale, window = _plain(spec)
        return cuda_kernels.paged_attention(query, cache, tables, lens, scale, window=window)

    def copy_blocks(self, cache, pairs):
        cuda_kernels.copy_blocks(cache, pairs)

    def swap_out(self, cache, host, pairs):
        cuda_kernels.swap_out(cache, host, pairs)

    def swap_in(self, host, cache, pairs):
        cuda_kernels.swap_in(host, cache, pairs)


def _plain(spec) -> tuple:
    """(scale, window) for the kernels; they have no soft-cap, so a model with one is refused."""
    if spec is None:
        return None, None
    if spec.softcap is not None:
        raise ValueError(
            f"the kernels have no attention soft-cap (attn_logit_softcapping "
            f"{spec.softcap}); use --backend numpy"
        )
    return spec.scale, spec.window
