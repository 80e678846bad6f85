"""Hopper warpgroup MMA (wgmma, sm_90a): the GPU's inline PTX (`gpu/wgmma_intrinsics`) or
the simulator's stand-ins (`sim/wgmma_sim`, which states the fragment, descriptor and
swizzle rules), chosen once here as `primitives` chooses its own.

    wgmma_n{N}(desc, a0, a1, a2, a3, acc, base, accumulate)   N = 8, 16, ..., 64
    wgmma_n{N}_t(...)            B MN-major (imm-trans-b 1): n contiguous in shared memory
        acc[base : base + N/2] (+)= A [64 x 16] @ B [16 x N] for the warpgroup (4 warps);
        A four f16x2 words per lane (warp w: rows 16w.., the mma.m16n8k16 A layout), B
        through the descriptor, D per warp in the m16n8 C layout repeated per 8 columns.
    mma_for(n, trans_b)          the function of that shape (for kernel factories)
    smem_desc(smem, index, lbo, sbo, swizzle) -> u64   B's descriptor (swizzle 0 none,
                                 1 128-byte, 2 64-byte, 3 32-byte)
    shared_address(smem, index) -> u32   where the element sits in the shared window
    wgmma_fence()                before the first wgmma and after CUDA cores touched acc/A
    wgmma_commit(), wgmma_wait(N)   close a group; wait until at most N are in flight
    fence_proxy_async()          after writing B with st.shared / cp.async, before the
                                 barrier that precedes the wgmma reading it

Tiles for the 128-byte swizzle (`SWIZZLE_128B`, what the prefill uses): a row of 64 fp16
(128 bytes) per token, 16-byte chunk c of row r stored at chunk c ^ (r % 8), tiles
starting on a 1024-byte boundary (`align_pad`): K rows then serve S = Q K^T K-major
(SBO = 1024, the 8-row group) and V rows serve P V MN-major (SBO = 1024 between 8-token
groups, LBO = the stride between 64-dim panels).
"""

from __future__ import annotations

from numba import cuda

from .. import _backend

SWIZZLE_128B = 1
ATOM_BYTES = 1024  # one 128-byte-swizzle atom: 8 rows of 128 bytes

if _backend.backend() == "simulator":
    from ..sim import wgmma_sim as _impl
else:
    from ..gpu import wgmma_intrinsics as _impl

SHAPES = _impl.SHAPES
smem_desc = _impl.smem_desc
shared_address = _impl.shared_address
wgmma_fence = _impl.wgmma_fence
wgmma_commit = _impl.wgmma_commit
wgmma_wait = _impl.wgmma_wait
fence_proxy_async = _impl.fence_proxy_async
globals().update({f"wgmma_n{n}{'_t' if t else ''}": f for (n, t), f in _impl.WGMMA.items()})


def mma_for(n: int, trans_b: bool):
    """wgmma_n{n}[_t]: m64nNk16 with B K-major (trans_b False) or MN-major."""
    if (n, bool(trans_b)) not in _impl.WGMMA:
        raise ValueError(f"wgmma serves N in {SHAPES}, got {n}")
    return _impl.WGMMA[(n, bool(trans_b))]


@cuda.jit(device=True)
def align_pad(array):
    """Elements (fp16) to skip so that array[pad] starts on a 1024-byte boundary."""
    return ((ATOM_BYTES - (shared_address(array, 0) & (ATOM_BYTES - 1))) & (ATOM_BYTES - 1)) >> 1
