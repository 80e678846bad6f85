"""The paged-prefill row of the GPU benchmark (`gpu_attention.py` runs it), and its peers.

Prompts of `new` tokens behind a cached prefix of `prefix` tokens, GQA, a shuffled block
table, launched through `prefill.launcher` (no host checks); FLOPs: 4 x head_dim per (query
head, attended position). The row times path="auto" (`path_ran`: the kernel it ran);
`fp16_out` writes float16 as SDPA does; `by_path` times each fixed path. The wgmma row runs
in a child process with a timeout, so a fault or a hang cannot take the benchmark down.
"""

from __future__ import annotations  # noqa: I001 (cuda_kernels must come before numba)

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from cuda_kernels import attention, prefill, reference  # first: it selects the CUDA backend
from cuda_kernels.mask import CAUSAL, checked
from numba import cuda

import gpu_common as common
import gpu_preflight

# (prompts, new tokens each, cached prefix, num_heads, num_kv_heads, dtype)
PREFILL = (8, 1024, 1024, 32, 8, "float16")
DRY_PREFILL = (1, 6, 5, 2, 1, "float16")  # G = 2; the ragged device check covers batches
BLOCK_SIZE = 16
PATHS = ("tensor", "cuda_core")  # timed next to "auto"
OUT_DTYPES = ("float32", "float16")  # paged_prefill's out_dtype: fp16 is what SDPA writes
UNCHECKED = {"checked_on_device": None, "median_ms": None}  # a path that did not run
WGMMA_TIMEOUT_S = 75  # the wgmma child: two JIT compiles, a comparison, a check, timing


def check_prefill(rng, heads, kv_heads, dim, dtype, dry, path="auto", out_dtype="float32") -> bool:
    """The timed kernel on a small ragged batch, on the device, against the float64 reference."""
    lens = np.array([9, 4, 3] if dry else [300, 90, 41], np.int32)
    # a prompt after a cached prefix, a whole prompt, a decode
    q_lens = [5, 4, 1] if dry else [200, 90, 1]
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, BLOCK_SIZE, spare=2)
    host = rng.standard_normal((num_blocks, 2, kv_heads, BLOCK_SIZE, dim)).astype(dtype)
    query = rng.standard_normal((int(starts[-1]), heads, dim)).astype(dtype)
    want = reference.reference_prefill(query, host, tables, lens, starts)
    attention.POISON["on"] = True
    on_device = [cuda.to_device(a) for a in (query, host, tables, lens, starts)]
    out = prefill.paged_prefill(*on_device, path=path, out_dtype=out_dtype)
    attention.POISON["on"] = None
    # fp16: P is rounded to fp16 before P V on tensor cores (FlashAttention-2 does the same)
    return common.close(out.copy_to_host(), want, 1e-5 if dtype == "float32" else 4e-3)


class Problem(NamedTuple):
    """`case` on the device: K/V caches (enough rotated copies when timed), the query
    [total_q, H, D] and the batch (each sequence's `new` tokens behind its cached prefix,
    its blocks scattered over the pool), the K/V bytes and the FLOPs one launch does."""

    caches: list
    query: object
    batch: prefill.PrefillBatch
    kv_bytes: int
    flops: int


def problem(rng, case, dim: int, timed: bool) -> Problem:
    batch, new, prefix, heads, kv_heads, dtype = case
    kv = common.paged_kv(rng, batch, prefix + new, kv_heads, dim, dtype, timed, BLOCK_SIZE)
    query = common.filled(rng, (batch * new, heads, dim), dtype)
    starts = cuda.to_device(np.arange(batch + 1, dtype=np.int32) * new)
    on_device = prefill.PrefillBatch(kv.table, kv.lens, starts, np.full(batch, new, np.int64))
    attended = batch * (new * prefix + new * (new + 1) // 2)  # (query token, position) pairs
    return Problem(kv.caches, query, on_device, kv.kv_bytes, 4 * dim * heads * attended)


def launches(p: Problem, dim: int, out, path: str) -> list:
    """One causal launch of `path` per cache copy, writing `out`."""
    mask = checked(CAUSAL, dim)
    return [prefill.launcher(c, p.query, p.batch, mask=mask, out=out, path=path) for c in p.caches]


def timings(flops: int, ms) -> dict:
    return {
        "median_ms": ms,
        "tflop_per_s": common.tflops(flops, ms),
        "pct_of_tensor_peak": common.pct_of_tensor_peak(flops, ms),
    }


def prefill_rows(rng, case, dim: int, runs: int, timed: bool, dry: bool) -> list[dict]:
    batch, new, prefix, heads, kv_heads, dtype = case
    p = problem(rng, case, dim, timed)
    outs = {d: cuda.device_array((batch * new, heads, dim), d) for d in OUT_DTYPES}

    def timed_path(path: str, out_dtype: str = "float32") -> dict:
        """Check `path` on the device, then time it: {path, path_ran, checked, ms, ...}."""
        try:
            ran = prefill.choose_path(path, p.caches[0])
        except ValueError as why:  # "tensor" on a shape it cannot serve
            return {"path": path, "path_ran": None, "skipped": str(why), **UNCHECKED}
        ok = check_prefill(rng, heads, kv_heads, dim, dtype, dry, path, out_dtype)
        ms = common.time_ms(launches(p, dim, outs[out_dtype], path), runs, timed) if ok else None
        return {
            "path": path,
            "out_dtype": out_dtype,
            "path_ran": ran,
            "checked_on_device": ok,
            **timings(p.flops, ms),
        }

    auto = timed_path("auto")
    half = timed_path("auto", "float16")  # SDPA's own output dtype: the like-for-like row
    ms = auto["median_ms"]
    keys = ("batch", "new_tokens", "cached_prefix", "heads", "kv_heads")
    shape = dict(zip(keys, case[:5], strict=True))
    return [
        {
            "kernel": "paged_prefill",
            **shape,
            "group": heads // kv_heads,
            "head_dim": dim,
            "dtype": dtype,
            "block_size": BLOCK_SIZE,
            "kv_bytes": p.kv_bytes,
            "working_set_copies": len(p.caches),
            "flop": p.flops,
            "checked_on_device": auto["checked_on_device"],
            "median_ms": ms,
            "path": "auto",
            "path_ran": auto["path_ran"],
            "tokens_per_s": batch * new / ms * 1e3 if ms else None,
            "flop_per_s": p.flops / ms * 1e3 if ms else None,
            "fp16_out": half,
            "by_path": [auto, half]
            + [timed_path(path) for path in PATHS]
            + [wgmma_row(p.caches[0], case, dim, runs, timed, dry)],
        }
    ] + peer_rows(case, dim, runs, timed, p.flops)


def _peers(case, dim: int) -> dict:
    """{name: launch} of the prefill peers importable here, on contiguous K/V with the
    bottom-right causal mask of a cached prefix (query token i sees prefix + i + 1 keys)."""
    import torch
    import torch.nn.functional as F

    batch, new, prefix, heads, kv_heads, dtype = case
    ctx, tdtype = prefix + new, getattr(torch, dtype)
    q = torch.randn(batch, heads, new, dim, device="cuda", dtype=tdtype)  # [B, H, L, D]
    k, v = torch.randn(2, batch, kv_heads, ctx, dim, device="cuda", dtype=tdtype)
    peers = {}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(new, ctx)

        def sdpa():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

        peers["torch_sdpa_flash"] = sdpa
    except ImportError:
        pass
    try:
        from flash_attn import flash_attn_func  # [B, L, H, D]; causal is bottom-right (>= 2.1)

        qf, kf, vf = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        peers["flash_attn"] = lambda: flash_attn_func(qf, kf, vf, causal=True)
    except ImportError:
        pass
    try:
        import flashinfer  # one prompt at a time: [L, H, D]

        per = [[x[b].transpose(0, 1).contiguous() for x in (q, k, v)] for b in range(batch)]
        peers["flashinfer_single_prefill"] = lambda: [
            flashinfer.single_prefill_with_kv_cache(*qkv, causal=True) for qkv in per
        ]
    except ImportError:
        pass
    return peers


def peer_rows(case, dim: int, runs: int, timed: bool, flop: int) -> list[dict]:
    """Timed rows of the importable peers; a peer that fails says why in its row. None
    without a GPU or torch: absent, never made up."""
    try:
        import torch
    except ImportError:
        return []
    if not timed or not torch.cuda.is_available():
        return []
    rows = []
    for name, launch in _peers(case, dim).items():
        row = {"kernel": name, "layout": "contiguous", "peer": True, "flop": flop}
        try:
            torch.cuda.synchronize()
            row.update(timings(flop, common.time_ms(launch, runs, timed)))
        except Exception as error:  # noqa: BLE001  (a peer's failure loses only its row)
            row.update(median_ms=None, error=f"{type(error).__name__}: {error}")
        rows.append(row)
    return rows


def wgmma_row(cache, case, dim: int, runs: int, timed: bool, dry: bool) -> dict:
    """path="wgmma" in a child process (module docstring); the row it printed, or why not."""
    row = {"path": "wgmma", "path_ran": None, **UNCHECKED}
    if not gpu_preflight.wgmma_ok():  # numba-cuda < 0.24 has no sm_90a target
        return {**row, "skipped": f"numba-cuda < {gpu_preflight.WGMMA_FLOOR} (preflight)"}
    try:
        prefill.choose_path("wgmma", cache)
    except ValueError as why:  # not an sm_90 GPU, or a shape it cannot serve
        return {**row, "skipped": str(why)}
    spec = json.dumps([list(case), dim, runs, timed, dry])
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--wgmma-child", spec],
            capture_output=True,
            text=True,
            timeout=WGMMA_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {**row, "skipped": f"the wgmma child did not finish in {WGMMA_TIMEOUT_S} s"}
    for line in done.stderr.splitlines():
        if line.startswith("wgmma"):
            print(line, file=sys.stderr)
    if done.returncode:
        return {
            **row,
            "skipped": f"the wgmma child failed (exit {done.returncode}): {done.stderr[-600:]}",
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wgmma_child(case, dim: int, runs: int, timed: bool, dry: bool) -> dict:
    """In the child: compare with the tensor path, check, then time path="wgmma"."""
    rng = np.random.default_rng(24)
    batch, new, _, heads, kv_heads, dtype = case
    p = problem(rng, case, dim, timed)
    outs = {}
    for path in ("tensor", "wgmma"):  # NaN-poisoned outputs
        outs[path] = cuda.to_device(np.full((batch * new, heads, dim), np.nan, np.float32))
        launches(p, dim, outs[path], path)[0]()
    cuda.synchronize()
    want, got = outs["tensor"].copy_to_host(), outs["wgmma"].copy_to_host()
    diff = float(np.abs(got - want).max()) if np.isfinite(got).all() else float("inf")
    agree = diff <= 4e-3 * float(np.abs(want).max())
    print(
        f"wgmma vs the tensor path on {case}, D={dim}: max abs diff {diff:.3g}"
        f"{'' if agree else ' (disagrees: not timed)'}",
        file=sys.stderr,
    )
    row = {"path": "wgmma", "path_ran": "wgmma", "max_abs_diff_vs_tensor": diff}
    row.update(agrees_with_tensor=agree, median_ms=None)
    row["checked_on_device"] = agree and check_prefill(
        rng, heads, kv_heads, dim, dtype, dry, "wgmma"
    )
    if not agree:
        return {**row, "skipped": "disagrees with the tensor path"}
    if not row["checked_on_device"]:
        return {**row, "skipped": "differs from the float64 reference on the ragged check batch"}
    ms = common.time_ms(launches(p, dim, outs["wgmma"], "wgmma"), runs, timed)
    return {**row, **timings(p.flops, ms)}


if __name__ == "__main__" and sys.argv[1:2] == ["--wgmma-child"]:
    print(json.dumps(_wgmma_child(*json.loads(sys.argv[2]))))
