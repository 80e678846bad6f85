"""Rung 9, tensor cores: the production tensor-core decode kernel (`fast/decode_tc.py`).

What changed: rungs 6-8 compute a group's G scores per token with CUDA-core FMAs, one
multiply-add per K element per head. Here the G query heads of a group become the M
rows of an `mma.sync.m16n8k16` tile (FlashInfer's `use_tensor_cores` decode; vLLM v1's
FlashInfer backend makes the same choice for GQA): S = Q K^T and O += P V are each a
few HMMA instructions per 16 tokens, K/V fragments come from shared memory with
`ldmatrix`, and the scores stay in registers to be fed back as the A operand of the
P V product (FlashAttention-2's trick).
Why: at G >= 4 the CUDA cores spend more issue slots on multiply-adds than the memory
system needs to deliver the bytes; one HMMA does 4,096 FLOPs in one issue slot.
What it buys: the leanest loop per K/V byte of the ladder (`report --ladder`), so the
kernel can stay at the read roofline. Read `fast/decode_tc.py` next, then `primitives.py`'s
fragment table.
Refuses: a cache that is not float16, or head_dim not a multiple of 16 in [16, 256]
(ValueError naming kv_cache). This rung wraps the production kernel.
"""

from __future__ import annotations

from ..attention import paged_attention
from ..fast.decode_tc import tc_supported
from ..layout import BLOCK_MAJOR
from .launch import REPORT_BLOCK, REPORT_GROUP, REPORT_HEAD_DIM, prepare
from .rung8_cp_async import production_sig

NAME = "tensor_cores"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "the production tensor-core decode: the group's heads as the M rows of mma.m16n8k16"


def __getattr__(name):
    if name == "kernel":
        from ..fast.decode_tc import make_tc_decode_kernel

        return make_tc_decode_kernel(BLOCK_MAJOR, REPORT_HEAD_DIM, REPORT_GROUP, REPORT_BLOCK)
    raise AttributeError(name)


def decode(query, kv_cache, block_tables, context_lens, scale=None):
    """float32 [S, H, D]: `paged_attention(..., path="tensor")`."""
    return launch(prepare(query, kv_cache, block_tables, context_lens, scale))


def launch(case):
    """`paged_attention(path="tensor")` on a validated case, its host checks included."""
    reason = tc_supported(case.dtype, case.head_dim)
    if reason:
        raise ValueError(f"kv_cache: {reason}")
    return case.result(
        paged_attention(case.query, case.cache, case.tables, case.lens, case.scale, path="tensor")
    )


def ptx_spec(sig):
    from ..fast.decode_tc import make_tc_decode_kernel, tc_geometry

    kern = make_tc_decode_kernel(BLOCK_MAJOR, REPORT_HEAD_DIM, REPORT_GROUP, REPORT_BLOCK)
    return kern.py_func, production_sig(), 32 * tc_geometry(REPORT_HEAD_DIM, REPORT_GROUP)["warps"]
