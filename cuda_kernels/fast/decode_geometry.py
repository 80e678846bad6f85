"""The CUDA-core decode kernel's compile-time shape (`decode.py` states the mapping).

    geometry(head_dim, group_size, dtype, warps, staged) -> dict
        vec, nvec    elements per 16-byte vector, vectors per K/V row
        lpr, vpl     lanes per row (a power of two <= 32), vectors per lane
        rpw, rows    rows per warp, per CTA
        hpc, chunks  heads per CTA and CTAs per KV head (balanced: hpc * chunks >= group)
        tpr          tokens per row per step
        staged, ring_bytes   whether K/V go through the cp.async ring, and its bytes
        shared       static shared bytes: max(ring, the merge's accumulators) + m, l
    ring_bytes(warps, tokens_per_row, vpl)   STAGES x the K and V chunks of every lane

Invariants (tests/kernels/test_decode_staging.py, test_split_window_and_shapes.py):
hpc * vpl * vec <= ACC_BUDGET floats a lane (or one head's slice if larger); the merge
fits SHARED_BUDGET; the ring is planned exactly where whole vectors fit RING_BUDGET, with
two tokens per row where they fit and one otherwise.
"""

from __future__ import annotations

from ..primitives import vec_width

ACC_BUDGET = 64  # floats of q (and as many of accumulators) a lane may hold
SMALL_GROUP = 2  # up to this many heads per KV head, a lane owns two vectors per row
SHARED_BUDGET = 40 * 1024  # bytes of the rows' states merged at the end
STAGES = 2  # cp.async ring: step s + 1 in flight while step s computes
RING_BUDGET = 40 * 1024  # bytes of the ring; above it the kernel keeps K/V in registers


def ring_bytes(warps: int, tokens_per_row: int, vpl: int) -> int:
    """Shared bytes of the cp.async ring: STAGES x every lane's K and V chunks of a step."""
    return STAGES * warps * 32 * 2 * tokens_per_row * vpl * 16


def geometry(head_dim: int, group_size: int, dtype, warps: int = 4, staged: bool = True) -> dict:
    """The compile-time shape of the thread mapping (see the module docstring). `staged`:
    plan the cp.async ring where it can serve (whole 16-byte vectors, RING_BUDGET), with
    two tokens per row per step where they fit; "staged" says whether it does. The
    register path takes two tokens only with one vector a lane (16-32 bytes a lane in
    flight per operand). "shared": static shared bytes, ring and merge aliased."""
    vec = vec_width(dtype)
    nvec = -(-head_dim // vec)  # 16-byte vectors per row (the last may be partial: scalar path)
    lanes = nvec if group_size > SMALL_GROUP else -(-nvec // 2)  # small groups: 2 vectors a lane
    lpr = 1
    while lpr < min(lanes, 32):
        lpr *= 2
    vpl = -(-nvec // lpr)  # vectors per lane
    rows = warps * (32 // lpr)
    max_heads = max(
        1, min(ACC_BUDGET // (vpl * vec), SHARED_BUDGET // (4 * rows * (nvec * vec + 3)))
    )
    chunks = -(-group_size // max_heads)
    hpc = -(-group_size // chunks)  # heads per CTA, balanced over the chunks
    whole = staged and nvec * vec == head_dim
    tpr = next((t for t in (2, 1) if whole and ring_bytes(warps, t, vpl) <= RING_BUDGET), 0)
    ring = ring_bytes(warps, tpr, vpl) if tpr else 0
    tpr = tpr or (1 if vpl > 1 else 2)  # tokens per row per step
    merge = 4 * rows * hpc * nvec * vec  # the rows' accumulators, aliased onto the ring
    return dict(
        vec=vec,
        nvec=nvec,
        lpr=lpr,
        vpl=vpl,
        rpw=32 // lpr,
        warps=warps,
        rows=rows,
        hpc=hpc,
        chunks=chunks,
        tpr=tpr,
        staged=ring > 0,
        ring_bytes=ring,
        shared=max(ring, merge) + 4 * hpc * 2 * rows,
    )
