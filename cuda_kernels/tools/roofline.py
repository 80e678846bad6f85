"""What bounds a kernel on an H200, from its steady-state loop alone (no GPU).

One trip of a warp's steady-state loop (`disasm.steady_loop`) loads `loop_kv_bytes` of
K/V from global memory, issues `loop_sass` instructions, performs `tensor_flops` on the
tensor cores and `loop_flops` floating-point operations in all. Every warp of a full GPU
runs the same loop, so the demands compare per trip, in seconds of GPU-wide capacity:

    hbm_bytes = loop_kv_bytes / reuse
    t_memory  = hbm_bytes     / HBM_BYTES_S
    t_l2      = loop_kv_bytes / L2_BYTES_S      (every loaded byte passes through L2)
    t_issue   = loop_sass     / ISSUE_S         (one warp instruction per scheduler per clock)
    t_tensor  = tensor_flops  / TENSOR_FLOPS_S  (dense fp16 mma, f32 accumulate)

    bound = the largest of the four ("tensor", "issue", "l2", "memory")
    expected_pct_of_peak = 100 x max(t_memory, t_tensor) / max(all four)
    expected_pct_of_tensor_peak = 100 x (loop_flops / TENSOR_FLOPS_S) / max(all four)
    flops_per_hbm_byte = loop_flops / hbm_bytes   (the arithmetic intensity used; the
                         ridge point is TENSOR_FLOPS_S / HBM_BYTES_S = 230 FLOP/B)

`peak` is the kernel's own roof (HBM, or the tensor cores for a kernel that computes more
than it moves). These are upper bounds: latency, occupancy, bank conflicts, tails, MUFU
and LDS pipes come on top.

`reuse` is how many CTAs read each K/V byte (HBM sees it once, L2 serves the rest).
Decode: 1. Prefill: every query tile re-reads its sequence's K/V tiles (`prefill_reuse`,
causal included), at the issue's `HEADLINE` shape with the row's own G and tiles,
credited only when the resident CTAs' K/V fits in L2. A prefill kernel
whose K/V loop only loads (`prefill.py`: its math runs in other loops) gets no bound
rather than a wrong one.

H200 (SXM) constants:
    ISSUE_S         132 SMs x 4 schedulers x 1.98 GHz = 1.045e12 warp instructions/s
    HBM_BYTES_S     4.3 TB/s achievable (4.8 TB/s nominal HBM3e), as issue 24 states it
    L2_BYTES_S      9.9 TB/s, measured: RRZE-HPC/gpu-benches, gpu-l2-cache/h200.txt (commit
                    1038c5d), the median of its rows with 4-40 MB data sets (9.5-10.6 TB/s;
                    past 50 MB it falls to DRAM's 3.9 TB/s). Not measured by this project.
    TENSOR_FLOPS_S  ~990 TFLOP/s dense fp16 (989.5 in NVIDIA's H200 datasheet)
    L2_BYTES        50 MB
So a memory-bound kernel has ISSUE_S / HBM_BYTES_S = 0.243 warp SASS per byte to spend,
and a CTA whose K/V tile is read from L2 can feed the tensor cores at most
L2_BYTES_S x (FLOPs per L2 byte): with M query rows per CTA, 4 D M FLOPs per 4 D bytes of
K and V per token, M FLOP/B, so 64 rows reach at most 9.9e12 x 64 = 634 TFLOP/s (64%).
"""

from __future__ import annotations

SMS, SCHEDULERS, CLOCK_HZ = 132, 4, 1.98e9
ISSUE_S = SMS * SCHEDULERS * CLOCK_HZ
HBM_BYTES_S = 4.3e12  # achievable: the model's memory roof
L2_BYTES_S = 9.9e12  # measured (RRZE-HPC/gpu-benches, H200): see the module docstring
TENSOR_FLOPS_S = 990e12
L2_BYTES = 50 * 10**6
SASS_PER_BYTE_BUDGET = ISSUE_S / HBM_BYTES_S  # 0.243
# the issue's headline prefill: prompts, new tokens each, cached prefix, KV heads, head_dim
HEADLINE = {"prompts": 8, "new_tokens": 1024, "cached_prefix": 1024, "kv_heads": 8, "head_dim": 128}
_ORDER = ("tensor", "issue", "l2", "memory")  # ties go to the first


def prefill_reuse(
    new_tokens: int, cached_prefix: int, q_tile: int, kv_tile: int, causal: bool = True
) -> float:
    """Mean number of query tiles (CTAs) that read each K/V tile of one (sequence, KV
    head); causal, a query tile reads the tiles up to its last token."""
    _positive(new_tokens=new_tokens, q_tile=q_tile, kv_tile=kv_tile)
    if cached_prefix < 0:
        raise ValueError(f"cached_prefix must be >= 0, got {cached_prefix}")
    context = cached_prefix + new_tokens
    tiles = -(-context // kv_tile)
    q_tiles = -(-new_tokens // q_tile)
    reads = 0
    for i in range(q_tiles):
        seen = min(context, cached_prefix + (i + 1) * q_tile) if causal else context
        reads += -(-seen // kv_tile)
    return reads / tiles


def headline_reuse(
    group: int,
    q_tile: int,
    kv_tile: int,
    ctas_per_sm: int,
    head_dim: int,
    itemsize: int,
    shape: dict | None = None,
) -> dict:
    """{'reuse', 'l2_footprint_bytes', 'reuse_case'} of a prefill kernel at `shape`
    (default HEADLINE); reuse 1 when the resident CTAs' K/V would not fit in L2."""
    s = dict(HEADLINE, **(shape or {}))
    reuse = prefill_reuse(s["new_tokens"], s["cached_prefix"], q_tile, kv_tile)
    _positive(head_dim=head_dim, itemsize=itemsize)
    # the K and V of the (sequence, KV head) pairs the resident CTAs, consecutive in launch
    # order (query tiles of one pair first), touch at once: +1, they may straddle two pairs
    pairs = -(-max(ctas_per_sm, 1) * SMS // -(-s["new_tokens"] // q_tile)) + 1
    foot = pairs * (s["cached_prefix"] + s["new_tokens"]) * head_dim * itemsize * 2
    case = (
        f"{s['prompts']} prompts x {s['new_tokens']} new tokens behind a "
        f"{s['cached_prefix']}-token prefix, GQA {s['kv_heads'] * group}/{s['kv_heads']}, "
        f"{q_tile} query tokens and {kv_tile}-token K/V tiles per CTA"
    )
    if foot > L2_BYTES:
        return {
            "reuse": 1.0,
            "l2_footprint_bytes": foot,
            "reuse_case": case + f": resident K/V {foot} B > L2, no reuse credited",
        }
    return {"reuse": round(reuse, 2), "l2_footprint_bytes": foot, "reuse_case": case}


NO_MATH_IN_LOOP = (
    "the loop that loads K/V performs no floating-point math (the math runs "
    "in other loops, which one loop's static count cannot weigh): no bound"
)
NO_REUSE = "the K/V reuse of this kernel is not known (no QT / T constants): no bound"


def model(row: dict, reuse: float | None = 1.0, expects_flops: bool = False) -> dict:
    """The module docstring's model of a report row; None values without a K/V loop, or
    (with `bound_note`) when reuse is None or `expects_flops` finds no math in the loop."""
    sass, nbytes = row.get("loop_sass"), row.get("loop_kv_bytes")
    keys = (
        "bound peak expected_pct_of_peak expected_pct_of_tensor_peak issue_budget_pct reuse "
        "hbm_bytes flops_per_hbm_byte"
    ).split()
    if reuse is None:
        return {**dict.fromkeys(keys), "bound_note": NO_REUSE}
    if not reuse >= 1:
        raise ValueError(f"reuse must be >= 1 (CTAs reading each K/V byte), got {reuse}")
    if not sass or not nbytes:
        return dict.fromkeys(keys)
    if expects_flops and not row.get("loop_flops"):
        return {**dict.fromkeys(keys), "reuse": reuse, "bound_note": NO_MATH_IN_LOOP}
    hbm = nbytes / reuse
    flops = row.get("loop_flops") or 0
    times = {
        "tensor": (row.get("tensor_flops") or 0) / TENSOR_FLOPS_S,
        "issue": sass / ISSUE_S,
        "l2": nbytes / L2_BYTES_S,
        "memory": hbm / HBM_BYTES_S,
    }
    worst = max(_ORDER, key=lambda k: times[k])  # max keeps the first of equal times
    roof = "tensor" if times["tensor"] > times["memory"] else "memory"
    return {
        "bound": worst,
        "peak": "tensor fp16" if roof == "tensor" else "HBM 4.3 TB/s",
        "expected_pct_of_peak": round(100 * times[roof] / times[worst], 1),
        "expected_pct_of_tensor_peak": round(100 * flops / TENSOR_FLOPS_S / times[worst], 2),
        "issue_budget_pct": round(100 * sass / nbytes / SASS_PER_BYTE_BUDGET, 1),
        "reuse": reuse,
        "hbm_bytes": round(hbm, 1),
        "flops_per_hbm_byte": round(flops / hbm, 2),
    }


def bound(row: dict) -> dict:
    """{'bound', 'peak', 'expected_pct_of_peak', 'issue_budget_pct'} at reuse 1 (decode)."""
    full = model(row)
    return {k: full[k] for k in ("bound", "peak", "expected_pct_of_peak", "issue_budget_pct")}


def _positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
