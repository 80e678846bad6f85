"""Chapter 3.7: many GPU threads allocate blocks at once (atomics, prefix sum, and a race).

`DevicePool` keeps the free stack and ref counts in device memory; `kernels` claims
blocks with `cuda.atomic.cas` / `cuda.atomic.sub` and frees with an atomic decrement;
`prefix` allocates a batch with an exclusive scan (no atomics); `alloc_racy` is the
plain read-modify-write that `pagedsim race` shows to be wrong.

`PTX_KERNELS` lists (name, python function, numba signature) for `cuda_kernels.report`.
"""

import cuda_kernels  # noqa: F401  (selects the GPU or the simulator before numba.cuda loads)

from . import kernels, prefix  # noqa: E402
from .pool import METHODS, DevicePool  # noqa: E402

_POOL = "int32[::1], int32[::1], int32[::1]"  # free_ids, top, ref
_OUT = "int32[:, ::1], int32[::1]"  # out table, granted
PTX_KERNELS = [
    ("alloc_cas", kernels.alloc_cas, f"void(int32[::1], {_POOL}, {_OUT})"),
    ("alloc_atomic_add", kernels.alloc_atomic_add, f"void(int32[::1], {_POOL}, {_OUT})"),
    ("alloc_racy", kernels.alloc_racy, f"void(int32[::1], {_POOL}, {_OUT})"),
    ("incref_blocks", kernels.incref_blocks, "void(int32[::1], int32[::1])"),
    ("free_blocks", kernels.free_blocks, f"void(int32[::1], {_POOL}, int32[::1])"),
    ("block_scan", prefix.block_scan, "void(int32[::1], int32[::1], int32[::1])"),
    ("add_block_offsets", prefix.add_block_offsets, "void(int32[::1], int32[::1])"),
    (
        "take_slices",
        prefix.take_slices,
        "void(int32[::1], int32[::1], int64, int32[::1], int32[::1], int32[:, ::1], int32[::1])",
    ),
]

__all__ = ["DevicePool", "METHODS", "PTX_KERNELS", "kernels", "prefix"]
