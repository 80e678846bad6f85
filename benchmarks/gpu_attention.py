"""Benchmark the paged-attention kernels on a real GPU (issue 3, part 6).

    python benchmarks/gpu_attention.py --out results.json      # on a GPU, < 5 minutes
    python benchmarks/gpu_attention.py --dry-run --out x.json  # tiny grid, simulator OK

1. device-to-device copy bandwidth (the roofline: bytes read + bytes written / time);
2. correctness of every kernel against cuda_kernels.reference, on the device, with
   NaN-poisoned buffers (write_kv, single, split, window, copy_blocks, swap, factory);
3. single-pass vs split-K decode over (batch, context, heads, kv_heads), head_dim 128,
   float16, block_size 16: CUDA events around each launch, median of many runs, K/V
   larger than L2. Bytes moved = K/V read once + query + float32 output; reported as
   GB/s and as % of the copy bandwidth;
4. the same kernel on a contiguous layout (each sequence's blocks in order, an
   identity block table) to price the paging indirection;
5. the chapter 3.7 labs (`gpu_labs.run`: layouts, alignment offsets, allocator kernels,
   pre-allocation), unless --no-labs.
Under the simulator it refuses (exit 2) unless --dry-run: then timings are null,
because the simulator records no time. No number here is ever made up.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import cuda_kernels as ck
from cuda_kernels import attention, layout_demo, reference
from numba import cuda

GRID = [  # (batch, context, num_heads, num_kv_heads)
    (1, 32768, 32, 8), (4, 16384, 32, 8), (8, 8192, 32, 8), (32, 4096, 32, 8),
    (64, 2048, 32, 8), (128, 1024, 32, 8), (16, 4096, 32, 32), (8, 8192, 64, 8),
]
DRY_GRID = [(2, 40, 4, 2), (1, 24, 8, 1)]


def copy_bandwidth(nbytes: int, runs: int, timed: bool) -> dict:
    src = cuda.to_device(np.ones(nbytes // 4, np.float32))
    dst = cuda.device_array_like(src)
    times = []
    for _ in range(runs):
        start, end = cuda.event(), cuda.event()
        start.record()
        dst.copy_to_device(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = statistics.median(times) if timed else None
    return {"bytes": 2 * nbytes, "median_ms": ms,
            "gb_per_s": 2 * nbytes / ms / 1e6 if ms else None}


def check_correctness(rng, dim: int, dry: bool) -> dict:
    """Every launcher on device inputs, compared with the float64 reference."""
    attention.POISON["on"] = True
    bs, heads, kv_heads = 16, 8, 2
    lens = np.array([1, 20 if dry else 37, 33 if dry else 300, 16], np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, bs, spare=4)
    results = {}
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 2e-3)):
        name = np.dtype(dtype).name
        cache = np.full((num_blocks, 2, kv_heads, bs, dim), np.nan, dtype)
        slots = np.concatenate([tables[i, p // bs] * bs + p % bs for i, n in enumerate(lens)
                                for p in [np.arange(n)]])
        key = rng.standard_normal((len(slots), kv_heads, dim)).astype(dtype)
        value = rng.standard_normal((len(slots), kv_heads, dim)).astype(dtype)
        d_cache = cuda.to_device(cache)
        ck.write_kv(d_cache, cuda.to_device(key), cuda.to_device(value), cuda.to_device(slots))
        host = d_cache.copy_to_host()
        results[f"write_kv[{name}]"] = bool(np.array_equal(
            host[slots // bs, 0, :, slots % bs], key))
        query = rng.standard_normal((len(lens), heads, dim)).astype(dtype)
        want = reference.paged_attention(query, host, tables, lens)
        d_args = (cuda.to_device(query), d_cache, cuda.to_device(tables), cuda.to_device(lens))
        for mode, part in (("single", None), ("split", 64), ("split", 7)):
            out = ck.paged_attention(*d_args, mode=mode, partition_size=part).copy_to_host()
            results[f"paged_attention[{name},{mode},P={part}]"] = _ok(out, want, tol)
        win = ck.paged_attention(*d_args, window=50, sinks=4, mode="split", partition_size=32)
        results[f"paged_attention[{name},window]"] = _ok(
            win.copy_to_host(), reference.windowed_attention(query, host, tables, lens, 50, 4), tol)
        k_pool = cuda.to_device(np.ascontiguousarray(host[:, 0].transpose(0, 2, 1, 3)))
        v_pool = cuda.to_device(np.ascontiguousarray(host[:, 1].transpose(0, 2, 1, 3)))
        nhd = ck.decode_with(layout_demo.SPLIT_NHD, k_pool, v_pool, query, tables, lens,
                             num_blocks=num_blocks, num_kv_heads=kv_heads, block_size=bs,
                             head_dim=dim, mode="split", partition_size=64)
        results[f"factory[split-NHD,{name}]"] = _ok(nhd, want, tol)
        spare = sorted(set(range(num_blocks)) - set(tables.ravel().tolist()))  # unused blocks
        ck.copy_blocks(d_cache, [(int(tables[2, 0]), spare[0])])
        results[f"copy_blocks[{name}]"] = bool(np.array_equal(
            d_cache.copy_to_host()[spare[0]], host[tables[2, 0]], equal_nan=True))
        pool = np.zeros((3,) + cache.shape[1:], dtype)
        ck.swap_out(d_cache, pool, [(int(tables[2, 1]), 1)])
        ck.swap_in(pool, d_cache, [(1, spare[1])])
        results[f"swap[{name}]"] = bool(d_cache.copy_to_host()[spare[1]].tobytes()
                                        == host[tables[2, 1]].tobytes())
    attention.POISON["on"] = None
    return results


def _ok(out, want, tol) -> bool:
    out = np.asarray(out, np.float64)
    return bool(np.isfinite(out).all() and np.abs(out - want).max() <= tol * np.abs(want).max())


def decode_launcher(cache, query, tables, lens, block_size, num_kv_heads, mode, part):
    """A closure launching exactly what paged_attention launches, minus host checks."""
    num_seqs, num_heads, dim = query.shape
    kernel, threads = attention.kernel_for(ck.BLOCK_MAJOR, dim, num_heads // num_kv_heads)
    longest = int(lens.copy_to_host().max())
    part = longest if mode == "single" else part
    num_parts = -(-longest // part)
    out = cuda.device_array((num_seqs, num_heads, dim), np.float32)
    partial = (out.reshape(num_seqs, num_heads, 1, dim) if num_parts == 1 else
               cuda.device_array((num_seqs, num_heads, num_parts, dim), np.float32))
    m = cuda.device_array((num_seqs, num_heads, num_parts), np.float32)
    s = cuda.device_array((num_seqs, num_heads, num_parts), np.float32)
    scale = np.float32(1 / math.sqrt(dim))

    def launch():
        kernel[(num_kv_heads, num_seqs, num_parts), threads](
            cache, cache, query, tables, lens, np.int32(block_size), scale, np.int32(0),
            np.int32(0), np.int32(part), partial, m, s)
        if num_parts > 1:
            attention.merge_partitions[(num_heads, num_seqs), threads](partial, m, s, out)
    return launch


def time_ms(launch, runs: int, timed: bool):
    """Median over `runs` samples of the mean time of `per_sample` back-to-back launches.

    One launch is queued before the start event, so the GPU is already busy when the
    timed launches are enqueued and Python's launch overhead is not measured."""
    launch()  # compile and warm up
    cuda.synchronize()
    per_sample = 5 if timed else 1
    times = []
    for _ in range(runs):
        start, end = cuda.event(), cuda.event()
        launch()
        start.record()
        for _ in range(per_sample):
            launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per_sample)
    return statistics.median(times) if timed else None


def bench_case(rng, batch, context, heads, kv_heads, dim, runs, timed, copy_gbs) -> list[dict]:
    bs = 16
    per_seq = -(-context // bs)
    num_blocks = batch * per_seq
    cache = cuda.device_array((num_blocks, 2, kv_heads, bs, dim), np.float16)  # [N, 2, H_kv, B, D]
    chunk = min(num_blocks, max(1, (1 << 26) // (2 * kv_heads * bs * dim)))  # ~128 MiB pieces
    piece = rng.standard_normal((chunk, 2, kv_heads, bs, dim)).astype(np.float16)
    for b in range(0, num_blocks, chunk):  # values do not matter for timing: reuse one piece
        n = min(chunk, num_blocks - b)
        cache[b:b + n].copy_to_device(piece[:n])
    query = cuda.to_device(rng.standard_normal((batch, heads, dim)).astype(np.float16))
    lens = cuda.to_device(np.full(batch, context, np.int32))
    layouts = {"paged": rng.permutation(num_blocks).reshape(batch, per_seq).astype(np.int32),
               "contiguous": np.arange(num_blocks, dtype=np.int32).reshape(batch, per_seq)}
    kv_bytes = batch * context * kv_heads * dim * 2 * 2
    moved = kv_bytes + batch * heads * dim * 2 + batch * heads * dim * 4
    rows = []
    for mode in ("single", "split"):
        for name, table in layouts.items():
            launch = decode_launcher(cache, query, cuda.to_device(table), lens, bs, kv_heads,
                                     mode, attention.DEFAULT_PARTITION)
            ms = time_ms(launch, runs, timed)
            gbs = moved / ms / 1e6 if ms else None
            rows.append({"batch": batch, "context": context, "heads": heads, "kv_heads": kv_heads,
                         "head_dim": dim, "dtype": "float16", "mode": mode, "layout": name,
                         "auto_mode": ck.choose_mode(batch, kv_heads, context, attention.DEFAULT_PARTITION,
                                                     attention.sm_count()),
                         "kv_bytes": kv_bytes, "median_ms": ms, "gb_per_s": gbs,
                         "pct_of_copy": 100 * gbs / copy_gbs if gbs and copy_gbs else None})
    for mode in ("single", "split"):
        paged, flat = (r for r in rows if r["mode"] == mode)
        if paged["median_ms"] and flat["median_ms"]:
            paged["paging_overhead_pct"] = 100 * (paged["median_ms"] / flat["median_ms"] - 1)
    return rows


def _device_name() -> str:
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the JSON results here (default: stdout)")
    parser.add_argument("--dry-run", action="store_true", help="tiny grid; allowed on the simulator")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per case (default 50)")
    parser.add_argument("--no-labs", action="store_true",
                        help="skip the chapter 3.7 labs (benchmarks/gpu_labs.py), run by default")
    args = parser.parse_args(argv)
    on_gpu = ck.backend() == "gpu"
    if not on_gpu and not args.dry_run:
        print("gpu_attention: no GPU (cuda_kernels runs on the simulator); refusing to time "
              "anything. Use --dry-run to check the script itself.", file=sys.stderr)
        return 2
    began = time.perf_counter()
    rng = np.random.default_rng(0)
    runs = args.runs or (1 if args.dry_run else 50)
    grid, dim = (DRY_GRID, 16) if args.dry_run else (GRID, 128)
    report = {"backend": ck.backend(), "dry_run": args.dry_run, "timings_valid": on_gpu,
              "device": _device_name() if on_gpu else "simulator"}
    report["copy"] = copy_bandwidth(1 << 16 if args.dry_run else 1 << 30, runs, on_gpu)
    report["correctness"] = check_correctness(rng, dim, args.dry_run)
    report["cases"] = []
    for case in grid:
        report["cases"] += bench_case(rng, *case, dim, runs, on_gpu, report["copy"]["gb_per_s"])
        print(f"done {case} after {time.perf_counter() - began:.0f} s", file=sys.stderr)
    if not args.no_labs:  # the 3.7 labs run in the same command, into the same JSON
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gpu_labs

        report["labs"] = gpu_labs.run(args.dry_run)
        print(f"labs done after {time.perf_counter() - began:.0f} s", file=sys.stderr)
    report["seconds"] = time.perf_counter() - began
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    failed = [k for k, ok in report["correctness"].items() if not ok]
    if failed:
        print(f"gpu_attention: kernels disagree with the reference: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
