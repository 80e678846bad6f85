"""What bounds a kernel on an H200, from its steady-state loop alone (no GPU).

One trip of a warp's steady-state loop (`disasm.steady_loop`) moves `loop_kv_bytes`
from global memory, issues `loop_sass` instructions and performs `tensor_flops` on the
tensor cores. Every warp of a full GPU runs the same loop, so the three demands compare
per trip, in seconds per unit of GPU-wide work:

    t_memory = loop_kv_bytes / HBM_BYTES_S
    t_issue  = loop_sass     / ISSUE_S         (one warp instruction per scheduler per clock)
    t_tensor = tensor_flops  / TENSOR_FLOPS_S  (dense fp16 mma, f32 accumulate)

    bound = the largest of the three ("memory", "issue", "tensor")
    expected_pct_of_peak = 100 x max(t_memory, t_tensor) / max(t_memory, t_issue, t_tensor)

so expected_pct_of_peak is the fraction of the kernel's own roofline (HBM bandwidth for a
kernel that moves more bytes than it computes, tensor FLOP/s otherwise: `peak`) that it
can reach at perfect overlap; an issue-bound kernel falls short by the ratio. It is an
upper bound: latency, occupancy, bank conflicts and tails come on top. Two more
simplifications, both in the kernel's favour on memory: global-load bytes are all taken
as HBM bytes (no L2 reuse; H200's L2 is 50 MB), and MUFU/LDS pipes are not modelled.

H200 (SXM) constants, as the issue states them:
    132 SMs x 4 schedulers x 1.98 GHz        ISSUE_S = 1.045e12 warp instructions/s
    4.8 TB/s HBM3e nominal; 4.3 TB/s achievable is used here (HBM_BYTES_S)
    ~990 TFLOP/s dense fp16 tensor peak      TENSOR_FLOPS_S
So a memory-bound kernel has ISSUE_S / HBM_BYTES_S = 0.243 warp SASS per byte to spend.
"""

from __future__ import annotations

SMS, SCHEDULERS, CLOCK_HZ = 132, 4, 1.98e9
ISSUE_S = SMS * SCHEDULERS * CLOCK_HZ
HBM_NOMINAL_BYTES_S = 4.8e12
HBM_BYTES_S = 4.3e12  # achievable: the model's memory roof
TENSOR_FLOPS_S = 990e12
L2_BYTES = 50 * 10**6
SASS_PER_BYTE_BUDGET = ISSUE_S / HBM_BYTES_S  # 0.243


def bound(row: dict) -> dict:
    """{'bound', 'peak', 'expected_pct_of_peak', 'issue_budget_pct'} for a report row
    carrying the steady-loop figures; None values when it has no K/V loop."""
    sass, nbytes = row.get("loop_sass"), row.get("loop_kv_bytes")
    if not sass or not nbytes:
        return {"bound": None, "peak": None, "expected_pct_of_peak": None,
                "issue_budget_pct": None}
    times = {"memory": nbytes / HBM_BYTES_S, "issue": sass / ISSUE_S,
             "tensor": (row.get("tensor_flops") or 0) / TENSOR_FLOPS_S}
    worst = max(times, key=times.get)
    roof = "tensor" if times["tensor"] > times["memory"] else "memory"
    return {"bound": worst, "peak": "tensor fp16" if roof == "tensor" else "HBM 4.3 TB/s",
            "expected_pct_of_peak": round(100 * times[roof] / times[worst], 1),
            "issue_budget_pct": round(100 * sass / nbytes / SASS_PER_BYTE_BUDGET, 1)}
