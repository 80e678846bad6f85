"""The `ladder` phase of the GPU run: every rung of `cuda_kernels.ladder` timed on one
decode batch, as % of the read roofline (a read-only kernel over the same K/V bytes).

    rows(rng, runs, timed, dry) -> [{rung, idea, checked_on_device, median_ms,
                                     roofline_ms, pct_of_roofline, gb_per_s, ...}]

The batch (LADDER_CASE): 16 sequences x 2,048 tokens, 32 query heads over 8 KV heads
(G = 4), head_dim 128, float16, 16-token blocks in a shuffled table; K/V are 268 MB, over
5x the 50 MB L2, so every launch reads HBM. Before a rung is timed it is checked on the
device against the float64 reference on a small instance (an unchecked rung is never
timed). Each rung is timed through `Rung.launch` on a case validated once
(`ladder.launch.prepare`), so the host checks are outside the timing, except for rungs 8
and 9, which are the production launcher `paged_attention` and include its checks (as a
user pays them). Rung 1 is slow by design (one thread walks a whole context): it gets
fewer samples (SLOW_RUNS) and the phase skips a rung that would not fit what is left.
"""

from __future__ import annotations  # noqa: I001 (cuda_kernels must come before numba)

import time

import numpy as np

from cuda_kernels import reference
from cuda_kernels.ladder import RUNGS
from cuda_kernels.ladder.launch import prepare
from numba import cuda

import gpu_common as common

LADDER_CASE = {
    "batch": 16,
    "context": 2048,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype": "float16",
    "block_size": 16,
}
DRY_CASE = {
    "batch": 2,
    "context": 24,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 16,
    "dtype": "float16",
    "block_size": 4,
}
SLOW_RUNS = 3  # samples for the first rungs, whose single launch can take a second
TOLERANCE = {"tensor_cores": 5e-3}


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


def rows(rng, runs: int, timed: bool, dry: bool, left=lambda: float("inf")) -> list[dict]:
    c = DRY_CASE if dry else LADDER_CASE
    batch, context, bs, dim = c["batch"], c["context"], c["block_size"], c["head_dim"]
    per_seq = context // bs
    num_blocks = batch * per_seq
    kv_bytes = batch * context * c["kv_heads"] * dim * 2 * np.dtype(c["dtype"]).itemsize
    copies = common.rotation(kv_bytes) if timed else 1
    caches = [
        common.filled(rng, (num_blocks, 2, c["kv_heads"], bs, dim), c["dtype"])
        for _ in range(copies)
    ]
    query = cuda.to_device(rng.standard_normal((batch, c["heads"], dim)).astype(c["dtype"]))
    table = cuda.to_device(rng.permutation(num_blocks).reshape(batch, per_seq).astype(np.int32))
    lens = cuda.to_device(np.full(batch, context, np.int32))
    roof_ms = common.time_ms(
        [
            common.read_roofline_launch(
                k.reshape(k.size), 8 * 132 if timed else 2, 256 if timed else 16
            )
            for k in caches
        ],
        runs,
        timed,
    )
    cases = [prepare(query, k, table, lens, None) for k in caches]
    out, longest = [], 0.0
    for i, rung in enumerate(RUNGS, 1):
        row = {
            "rung": f"rung{i}.{rung.name}",
            "idea": rung.idea,
            **c,
            "kv_bytes": kv_bytes,
            "roofline_ms": roof_ms,
        }
        if left() < longest:
            out.append(
                {**row, "skipped": f"{left():.0f} s left, the slowest rung took {longest:.0f} s"}
            )
            continue
        began = time.perf_counter()
        try:
            ok = check_rung(rung, rng, dry)
            launches = [lambda case=case, r=rung: r.launch(case) for case in cases]
            ms = (
                common.time_ms(launches, min(runs, SLOW_RUNS) if i <= 4 else runs, timed)
                if ok
                else None
            )
        except ValueError as refused:  # a rung that cannot serve this shape says why
            out.append(
                {**row, "checked_on_device": None, "median_ms": None, "refused": str(refused)}
            )
            continue
        longest = max(longest, time.perf_counter() - began)
        out.append(
            {
                **row,
                "checked_on_device": ok,
                "median_ms": ms,
                "gb_per_s": kv_bytes / ms / 1e6 if ms else None,
                "pct_of_roofline": 100 * roof_ms / ms if ms and roof_ms else None,
            }
        )
    return out
