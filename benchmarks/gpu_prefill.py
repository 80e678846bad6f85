"""The paged-prefill row of the GPU benchmark (`gpu_attention.py` runs it).

A batch of prompts, each with `new` new tokens after a cached prefix of `prefix` tokens
(a prefix-cache hit: the prefix is attended, never recomputed), GQA, block_size 16, a
shuffled block table; `cuda_kernels.prefill.paged_prefill`'s kernel, causal, launched
through `prefill.launcher` (the launch `paged_prefill` makes, without its host checks).

Correctness first: before timing, the same compiled kernel (same head_dim, group, dtype
and loaders) runs on the device on a small ragged batch (a prompt behind a cached prefix,
a chunk, a decode token) with NaN-poisoned output, against `reference_prefill`
(float64); an unchecked configuration is never timed.

Figures: tokens_per_s = new tokens / time; flop_per_s counts 4 x head_dim FLOPs per
(query head, attended position): 2 D for q.k, 2 D for p.v (the softmax is left out),
where query token i (0-based) of a prompt attends prefix + i + 1 positions; tflop_per_s
and pct_of_tensor_peak (of the ~990 TFLOP/s dense fp16 peak, `gpu_common`); then the
peers' rows (`gpu_common.prefill_peer_rows`) with the same FLOP count.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels import attention, prefill, reference  # first: it selects the CUDA backend
from cuda_kernels._checks import require_scale
from numba import cuda

import gpu_common as common

# (prompts, new tokens each, cached prefix, num_heads, num_kv_heads, dtype)
PREFILL = (8, 1024, 1024, 32, 8, "float16")
DRY_PREFILL = (2, 6, 5, 4, 2, "float16")
BLOCK_SIZE = 16


def check_prefill(rng, heads, kv_heads, dim, dtype, dry) -> bool:
    """The timed kernel on a small ragged batch, on the device, against the float64 reference."""
    lens = np.array([9, 4, 3] if dry else [300, 90, 41], np.int32)
    q_lens = [5, 4, 1] if dry else [200, 90, 1]  # a prompt after a cached prefix, a whole prompt, a decode
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, BLOCK_SIZE, spare=2)
    host = rng.standard_normal((num_blocks, 2, kv_heads, BLOCK_SIZE, dim)).astype(dtype)
    query = rng.standard_normal((int(starts[-1]), heads, dim)).astype(dtype)
    want = reference.reference_prefill(query, host, tables, lens, starts)
    attention.POISON["on"] = True
    out = prefill.paged_prefill(cuda.to_device(query), cuda.to_device(host), cuda.to_device(tables),
                                cuda.to_device(lens), cuda.to_device(starts))
    attention.POISON["on"] = None
    return common.close(out.copy_to_host(), want, 1e-5 if dtype == "float32" else 2e-3)


def prefill_rows(rng, case, dim: int, runs: int, timed: bool, dry: bool) -> list[dict]:
    batch, new, prefix, heads, kv_heads, dtype = case
    ctx = prefix + new
    per_seq = -(-ctx // BLOCK_SIZE)
    num_blocks = batch * per_seq
    item = np.dtype(dtype).itemsize
    kv_bytes = 2 * batch * ctx * kv_heads * dim * item
    ok = check_prefill(rng, heads, kv_heads, dim, dtype, dry)
    copies = common.rotation(kv_bytes) if timed else 1
    caches = [common.filled(rng, (num_blocks, 2, kv_heads, BLOCK_SIZE, dim), dtype) for _ in range(copies)]
    table = cuda.to_device(rng.permutation(num_blocks).reshape(batch, per_seq).astype(np.int32))
    query = common.filled(rng, (batch * new, heads, dim), dtype)  # [total_q, H, D]
    lens = cuda.to_device(np.full(batch, ctx, np.int32))
    q_lens = np.full(batch, new, np.int64)
    starts = cuda.to_device(np.arange(batch + 1, dtype=np.int32) * new)
    out = cuda.device_array((batch * new, heads, dim), np.float32)
    launches = [prefill.launcher(c, query, table, lens, starts, q_lens, scale=require_scale(None, dim),
                                 causal=True, window=None, sinks=0, out=out) for c in caches]
    ms = common.time_ms(launches, runs, timed) if ok else None
    attended = batch * (new * prefix + new * (new + 1) // 2)  # (query token, position) pairs
    flops = 4 * dim * heads * attended
    peers = common.prefill_peer_rows(case, dim, runs, timed, flops)
    return [{"kernel": "paged_prefill", "batch": batch, "new_tokens": new, "cached_prefix": prefix,
             "heads": heads, "kv_heads": kv_heads, "group": heads // kv_heads, "head_dim": dim,
             "dtype": dtype, "block_size": BLOCK_SIZE, "kv_bytes": kv_bytes,
             "working_set_copies": copies, "flop": flops, "checked_on_device": ok, "median_ms": ms,
             "tokens_per_s": batch * new / ms * 1e3 if ms else None,
             "flop_per_s": flops / ms * 1e3 if ms else None,
             "tflop_per_s": common.tflops(flops, ms),
             "pct_of_tensor_peak": common.pct_of_tensor_peak(flops, ms)}] + peers
