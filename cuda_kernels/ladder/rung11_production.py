"""Rung 11, production: what `fast/` adds on top of rungs 9 and 10. No new kernel here.

What changed: nothing is written in this file. Rungs 1-10 each added one idea; the
production decode (`paged_attention`, `fast/decode.py` on CUDA cores and
`fast/decode_tc.py` on tensor cores) adds several more, each small once the ladder is
read. ADDS lists them with the line that does it (a test checks every reference still
points at its line):
  * base-2 exp: q is pre-multiplied by scale * log2(e), so every exp is one MUFU.EX2
    (`fast_exp2`) instead of a multiply and the ex2;
  * lazy rescale (FlashAttention-3): the running max moves only when a score beats it by
    more than SLACK (2^8), so the acc * alpha rescale of rung 3 almost never runs; a warp
    vote says when it must;
  * swizzle: the tensor-core kernel's shared tiles put 16-byte chunk c of row r at c XOR
    (a function of r), so ldmatrix's 8 row addresses fall in 8 different banks (rung 10's
    plain tiles conflict when a row is a multiple of 128 bytes);
  * multi-warp CTAs: NW warps share a CTA, their rings and a shared-memory merge of their
    (m, l, acc) states (rung 6's merge, across the CTA's warps);
  * a reduce-scatter of the scores over a row's lanes (each lane finishes one score's exp)
    instead of rung 5's all-lanes butterfly;
  * the split plan: mode="auto" picks path (CUDA cores or tensor cores by group size) and
    partition size from the batch's lengths and the device's CTA slots (a cost model),
    instead of rung 8's fixed 512.
Why: each is worth a few percent to a few tens of percent at the roofline; none changes
what the kernel computes.
What it buys: `paged_attention(path="auto")`, timed here as the ladder's last row, is the
target the rungs are compared with. Read `fast/decode.py`'s docstring next.
"""

from __future__ import annotations

from ..attention import paged_attention
from ..mask import ScoreMask
from .launch import REPORT_BLOCK, REPORT_GROUP, REPORT_HEAD_DIM, decoder

NAME = "production"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "what fast/ adds: base-2 exp, lazy rescale, swizzle, multi-warp CTAs, the split plan"
PREDICTED_PCT = (70.0, 100.0)  # % of the read roofline at the ladder's case (README: Little's law)
# (what, file under cuda_kernels/, line, text on that line)
ADDS = (
    ("base-2 exp: log2(e)", "fast/decode.py", 69, "LOG2E = 1.4426950408889634"),
    ("base-2 exp: q * scale * log2(e)", "fast/decode.py", 514, "float32(scale * LOG2E)"),
    ("base-2 exp: one MUFU.EX2", "gpu/intrinsics.py", 122, "def fast_exp2(typingctx, x):"),
    ("lazy rescale: SLACK", "fast/decode.py", 70, "SLACK = float32(8.0)"),
    (
        "lazy rescale: the step",
        "primitives.py",
        222,
        "def softmax_rescale(m_old, tile_max, slack):",
    ),
    ("lazy rescale (tensor cores)", "fast/decode_tc.py", 240, "softmax_rescale(m[r], top, SLACK)"),
    ("swizzle: the layout", "primitives.py", 117, "def swizzled(row, chunk, stride, shift, mask):"),
    ("swizzle: the tiles", "fast/decode_tc.py", 117, "= swizzle_shape(CH)"),
    ("multi-warp CTAs: NW warps", "fast/decode.py", 97, "warps: int = 4,"),
    ("multi-warp CTAs: the merge", "fast/decode.py", 420, "every row's state is in shared memory"),
    ("multi-warp CTAs (tensor cores)", "fast/decode_tc.py", 84, "nw = warps or next("),
    ("reduce-scatter of the scores", "fast/decode.py", 252, "reduce_scatter(dots, NP, LPR, lane)"),
    ("the cp.async ring, NW warps", "fast/decode.py", 348, "cp_async_wait(1)"),
    ("the split plan: path", "attention.py", 106, "def choose_path("),
    ("the split plan: cost", "attention.py", 151, "def plan_cost("),
    ("the split plan: partition", "attention.py", 159, "def choose_partition("),
)


def __getattr__(name):
    if name == "kernel":  # the production tensor-core kernel at the report case
        from ..fast.decode_tc import make_tc_decode_kernel
        from ..layout import BLOCK_MAJOR

        return make_tc_decode_kernel(BLOCK_MAJOR, REPORT_HEAD_DIM, REPORT_GROUP, REPORT_BLOCK)
    raise AttributeError(name)


def launch(case):
    """`paged_attention` on a validated case (its own host checks run again: this is the
    production launcher, checks included)."""
    mask = ScoreMask(scale=case.scale)
    return case.result(paged_attention(case.query, case.cache, case.tables, case.lens, mask))


decode = decoder(launch)


def ptx_spec(sig):
    """The production tensor-core kernel's (python function, signature, threads)."""
    from numba import types as t

    from ..fast.decode import decode_sig
    from ..fast.decode_tc import tc_geometry

    f16c5 = t.Array(t.float16, 5, "C")
    args = decode_sig(f16c5, f16c5, t.Array(t.float16, 3, "C"))
    threads = 32 * tc_geometry(REPORT_HEAD_DIM, REPORT_GROUP)["warps"]
    return __getattr__("kernel").py_func, args, threads
