"""The attention backend on cuda_kernels: write_kv, paged_prefill, paged_attention,
copy_blocks, swap_out / swap_in, on a GPU or on Numba's CUDA simulator.

The only engine module that imports cuda_kernels (and so numba); `backend.choose`
imports it when the kernels are asked for. Caches live on the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

import cuda_kernels  # chooses GPU or simulator before numba.cuda loads
from cuda_kernels.mask import ScoreMask
from cuda_kernels.prefill import paged_prefill

if TYPE_CHECKING:  # backend.py imports this module when the kernels are chosen
    from .backend import Floats, Ints, Pairs
    from .model import Attention


class DeviceArray(Protocol):
    """A cache on the device: numba's DeviceNDArray on a GPU, the simulator's
    FakeCUDAArray otherwise; [num_blocks, 2, H_kv, B, D] float32."""

    shape: tuple[int, ...]

    def copy_to_host(self) -> Floats: ...


class KernelAttention:
    name = "kernels"

    def where(self) -> str:
        mode = cuda_kernels.backend()
        return (
            "cuda_kernels on the GPU" if mode == "gpu" else "cuda_kernels on Numba's CUDA simulator"
        )

    def new_cache(self, shape: tuple[int, ...]) -> DeviceArray:
        from numba import cuda  # configured by cuda_kernels above

        host = np.full(shape, np.nan, np.float32)  # never-written slots poison any read
        cache: DeviceArray = cuda.to_device(host)  # type: ignore[no-untyped-call]  # numba: untyped
        return cache

    def write(self, cache: DeviceArray, key: Floats, value: Floats, slots: Ints) -> None:
        cuda_kernels.write_kv(cache, key, value, slots)

    def prefill(
        self,
        query: Floats,
        cache: DeviceArray,
        tables: Ints,
        lens: Ints,
        starts: Ints,
        spec: Attention | None = None,
    ) -> Floats:
        # the launchers take NumPy or device arrays and answer in kind (arrays unannotated)
        out: Floats = paged_prefill(query, cache, tables, lens, starts, _mask(spec))
        return out

    def decode(
        self,
        query: Floats,
        cache: DeviceArray,
        tables: Ints,
        lens: Ints,
        spec: Attention | None = None,
    ) -> Floats:
        out: Floats = cuda_kernels.paged_attention(query, cache, tables, lens, _mask(spec))
        return out

    def copy_blocks(self, cache: DeviceArray, pairs: Pairs) -> None:
        cuda_kernels.copy_blocks(cache, pairs)

    def swap_out(self, cache: DeviceArray, host: Floats, pairs: Pairs) -> None:
        cuda_kernels.swap_out(cache, host, pairs)

    def swap_in(self, host: Floats, cache: DeviceArray, pairs: Pairs) -> None:
        cuda_kernels.swap_in(host, cache, pairs)


def _mask(spec: Attention | None) -> ScoreMask:
    """The layer's scale and window as the kernels' ScoreMask (causal, no sinks); the
    kernels have no soft-cap, so a model with one is refused."""
    if spec is None:
        return ScoreMask()
    if spec.logits_soft_cap is not None:
        raise ValueError(
            f"the kernels have no attention soft-cap (attn_logit_softcapping "
            f"{spec.logits_soft_cap}); use --backend numpy"
        )
    return ScoreMask(scale=spec.scale, sliding_window=spec.sliding_window)
