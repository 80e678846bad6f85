"""Rung 8, cp.async staging: the production CUDA-core decode kernel (`fast/decode.py`).

What changed: in rung 7 a lane waits for each 16-byte load before it can use it, so a
warp has one K row and one V row in flight and the load latency (~600 cycles from
HBM) is paid every step unless many warps hide it. The production kernel copies the
next K/V tiles into a shared-memory ring with `cp.async` (Ampere's asynchronous copy,
LDGSTS: global -> shared without passing through registers) while it computes on the
current tile, waiting with `cp.async.wait_group` only for the tile it needs. It also
keeps everything rungs 1-7 added (vector loads, GQA, split-K with the same merge) and
two refinements named in `fast/decode.py`'s docstring: scores in base 2 (one MUFU.EX2 per
exp) and FlashAttention-3's lazy rescale.
Why: a memory-bound kernel is fast when enough bytes are in flight; cp.async puts them
in flight without holding registers, so one CTA overlaps its loads with its math.
What it buys: the production CUDA-core path (`paged_attention(path="cuda_core")`);
read `fast/decode.py` (the kernel), `fast/decode_geometry.py` (its shape) and
`fast/decode_loads.py` (the ring) next; its reductions are `primitives.py`'s.
This rung wraps the production kernel rather than copying it.
"""

from __future__ import annotations

import numpy as np

from ..attention import kernel_for, paged_attention
from ..layout import BLOCK_MAJOR
from .launch import REPORT_BLOCK, REPORT_GROUP, REPORT_HEAD_DIM, prepare

NAME = "cp_async"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "the production CUDA-core decode: K/V tiles staged through shared memory by cp.async"


def __getattr__(name):
    if name == "kernel":  # built on first use: the production factory at the report case
        return kernel_for(BLOCK_MAJOR, REPORT_HEAD_DIM, REPORT_GROUP, np.float16, REPORT_BLOCK)[0]
    raise AttributeError(name)


def decode(query, kv_cache, block_tables, context_lens, scale=None):
    """float32 [S, H, D]: `paged_attention(..., path="cuda_core")`."""
    return launch(prepare(query, kv_cache, block_tables, context_lens, scale))


def launch(case):
    """`paged_attention(path="cuda_core")` on a validated case (its own host checks run
    again: this rung is the production launcher, checks included)."""
    return case.result(
        paged_attention(
            case.query, case.cache, case.tables, case.lens, case.scale, path="cuda_core"
        )
    )


def ptx_spec(sig):
    from ..fast.decode import make_decode_kernel

    kern = make_decode_kernel(
        BLOCK_MAJOR, REPORT_HEAD_DIM, REPORT_GROUP, np.float16, REPORT_BLOCK, warps=4
    )
    return kern.py_func, production_sig(), 128


def production_sig():
    """The production decode kernels' argument types at the report case."""
    from numba import types as t

    f16c5 = t.Array(t.float16, 5, "C")
    f32c3 = t.Array(t.float32, 3, "C")
    return (
        f16c5,
        f16c5,
        t.Array(t.float16, 3, "C"),
        t.Array(t.int32, 2, "C"),
        t.Array(t.int32, 1, "C"),
        t.float32,
        t.int32,
        t.int32,
        t.int32,
        t.Array(t.float32, 4, "C"),
        f32c3,
        f32c3,
    )
