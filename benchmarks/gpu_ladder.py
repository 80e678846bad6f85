"""The `ladder` phase of the GPU run: every rung of `cuda_kernels.ladder`, checked against
the float64 reference, then timed on one decode batch (LADDER_CASE's K/V: 268 MB, over 5x
the L2; rungs 1-4, slow by design, on SMALL_CASE) as % of the read roofline, next to the
share cuda_kernels/README.md predicts. The time guard is checked before every sample.
"""

from __future__ import annotations  # noqa: I001 (cuda_kernels must come before numba)

import numpy as np

from cuda_kernels import reference
from cuda_kernels.ladder import RUNGS
from cuda_kernels.ladder.launch import prepare
from numba import cuda

import gpu_common as common

LADDER_CASE = dict(
    batch=16, context=2048, heads=32, kv_heads=8, head_dim=128, dtype="float16", block_size=16
)
SMALL_CASE = {**LADDER_CASE, "batch": 4, "context": 512}
SMALL_RUNGS = 4  # rungs 1..4 are timed on SMALL_CASE
DRY_CASE = dict(
    batch=2, context=24, heads=4, kv_heads=2, head_dim=16, dtype="float16", block_size=4
)
SLOW_RUNS = 3  # samples for the small-case rungs, whose single launch can take a second
TOLERANCE = {"tensor_cores": 5e-3, "production": 5e-3}  # P: float16 into the 2nd mma


def check_rung(rung, rng, dry: bool) -> bool:
    """The rung on a small fresh instance, NaN-poisoned output, against float64."""
    lens = np.array([5, 11] if dry else [37, 300, 129], np.int32)
    dim = 16 if dry else 128
    tables, num_blocks = reference.scattered_block_tables(rng, lens, 16, spare=2)
    cache = rng.standard_normal((num_blocks, 2, 2, 16, dim)).astype(np.float16)
    query = rng.standard_normal((len(lens), 4 if dry else 8, dim)).astype(np.float16)
    got = rung.decode(query, cache, tables, lens)
    want = reference.paged_attention(query, cache, tables, lens)
    return common.close(got, want, TOLERANCE.get(rung.name, 1e-3))


def batch(rng, c: dict, runs: int, timed: bool) -> dict:
    """Device buffers of one case (rotated copies of the cache), the validated cases the
    rungs launch on, and the roofline's time over the same bytes."""
    shape = (c[k] for k in ("batch", "context", "kv_heads", "head_dim", "dtype"))
    kv = common.paged_kv(rng, *shape, timed, c["block_size"])
    query = rng.standard_normal((c["batch"], c["heads"], c["head_dim"])).astype(c["dtype"])
    query = cuda.to_device(query)
    return {
        "kv_bytes": kv.kv_bytes,
        "roofline_ms": common.roofline_ms(kv.caches, runs, timed),
        "cases": [prepare(query, k, kv.table, kv.lens, None) for k in kv.caches],
    }


def rows(rng, runs: int, timed: bool, dry: bool, left=lambda: float("inf")) -> list[dict]:
    small, full = (DRY_CASE, DRY_CASE) if dry else (SMALL_CASE, LADDER_CASE)
    batches = {}
    out = []
    for i, rung in enumerate(RUNGS, 1):
        key = "small" if i <= SMALL_RUNGS else "full"
        c = small if key == "small" else full
        if key not in batches:
            batches[key] = batch(rng, c, runs, timed)
        b = batches[key]
        row = {"rung": f"rung{i}.{rung.name}", "idea": rung.idea, **c}
        row.update(kv_bytes=b["kv_bytes"], roofline_ms=b["roofline_ms"])
        if left() <= 0:
            out.append({**row, "skipped": "the ladder phase's time ran out"})
            continue
        try:
            ok = check_rung(rung, rng, dry)
            launches = [lambda case=case, r=rung: r.launch(case) for case in b["cases"]]
            samples = min(runs, SLOW_RUNS) if i <= SMALL_RUNGS else runs
            ms = common.time_ms(launches, samples, timed, left) if ok else None
        except ValueError as refused:  # a rung that cannot serve this shape says why
            refusal = {"checked_on_device": None, "median_ms": None, "refused": str(refused)}
            out.append({**row, **refusal})
            continue
        roof = b["roofline_ms"]
        pct = 100 * roof / ms if ms and roof else None
        out.append(
            {
                **row,
                "checked_on_device": ok,
                "median_ms": ms,
                "gb_per_s": b["kv_bytes"] / ms / 1e6 if ms else None,
                "pct_of_roofline": pct,
                **verdict(rung.predicted_pct, pct),
            }
        )
    return out


def verdict(predicted: tuple, pct: float | None) -> dict:
    """The README's prediction for a rung next to the measured share: held (inside the
    range), below or above it, or untimed."""
    low, high = predicted
    held = (
        None if pct is None else "held" if low <= pct <= high else "below" if pct < low else "above"
    )
    return {"predicted_pct": [low, high], "prediction": held or "untimed"}
