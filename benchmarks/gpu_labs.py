"""Measure the chapter 3.7 claims on a real GPU: layouts, alignment, allocators, pre-allocation.

    python benchmarks/gpu_labs.py --out labs.json            # on a GPU, < 5 minutes
    python benchmarks/gpu_labs.py --dry-run --out labs.json  # tiny sizes, simulator OK

layouts: the decode kernel over fused / split / nhd / vllm caches of the same numbers;
alignment: pools 0..128 bytes off a 128-B boundary; allocators: cas, atomic_add,
prefix_sum and racy (ids handed out twice) at 1k..1M requests; pre-allocation: N
device_array calls vs one pool. Median of CUDA event times.
"""

from __future__ import annotations  # noqa: I001 (cuda_kernels must come before numba)

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

import cuda_kernels  # first: it selects the CUDA backend before numba.cuda is imported
from cuda_kernels import attention
from cuda_kernels.alloc import DevicePool
from cuda_kernels.alloc import kernels as AK
from cuda_kernels.alloc import prefix as AP
from cuda_kernels.labs import alignment, layouts, prealloc
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as common  # noqa: E402

FULL = {
    "seqs": 64,
    "context": 2048,
    "kv_heads": 8,
    "group": 4,
    "dim": 128,
    "block": 16,
    "runs": 10,
    "requests": [1_000, 10_000, 100_000, 1_000_000],
    "prealloc": [256, 4096],
}
SECTION_S = {"layouts": 20, "alignment": 10, "allocators": 15, "prealloc": 5}  # GPU seconds
# context 10: three scattered blocks of 4, the last one partial
DRY = dict(
    seqs=2, context=10, kv_heads=1, group=2, dim=8, block=4, runs=1, requests=[48], prealloc=[4]
)


def _timed(launch, runs: int, timed: bool, reset=None) -> float | None:
    """Median ms of `launch()` between CUDA events after one warm-up; untimed, one launch."""
    times = []
    for i in range(runs + 1 if timed else 1):
        if reset is not None:
            reset()
        start, end = cuda.event(), cuda.event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        if i:
            times.append(start.elapsed_time(end))
    return statistics.median(times) if timed else None


def _problem(cfg, rng):
    S, L, Hkv, G, D, B = (cfg[k] for k in ("seqs", "context", "kv_heads", "group", "dim", "block"))
    per_seq = -(-L // B)
    num_blocks = S * per_seq
    tables = rng.permutation(num_blocks).astype(np.int32).reshape(S, per_seq)  # scattered blocks
    cache = rng.standard_normal((num_blocks, 2, Hkv, B, D)).astype(np.float16)  # [N, 2, H_kv, B, D]
    query = rng.standard_normal((S, Hkv * G, D)).astype(np.float16)
    return cache, query, tables, np.full(S, L, np.int32)


def _timed_decode(name, k_dev, v_dev, on_device, cfg, timed: bool, nbytes: int) -> dict:
    """{kv_bytes, median_ms, gb_per_s} of the layout's kernel, single pass, launched on
    prepared device buffers (query, tables, lens) without the launcher's host checks."""
    loaders = attention.usable_loaders(layouts.LOADERS[name], k_dev, v_dev, cfg["dim"])
    case = common.DecodeCase(loaders, k_dev, v_dev, *on_device, cfg["block"], cfg["kv_heads"])
    launch, _ = common.decode_launch(
        case, mode="single", part=cfg["context"], longest=cfg["context"]
    )
    ms = _timed(launch, cfg["runs"], timed)
    return {"kv_bytes": nbytes, "median_ms": ms, "gb_per_s": nbytes / ms / 1e6 if ms else None}


def bench_layouts(cfg, problem, timed: bool) -> list[dict]:
    cache, query, tables, lens = problem
    on_device = [cuda.to_device(a) for a in (query, tables, lens)]
    d_q = on_device[0]
    attention.POISON["on"] = True
    base = layouts.decode(
        "fused", d_q, *(2 * (cuda.to_device(cache),)), tables, lens, mode="single"
    )
    base = base.copy_to_host()
    rows = []
    for name in layouts.LAYOUTS:
        k_src, v_src = layouts.convert(name, cache)
        k_dev = cuda.to_device(k_src)
        v_dev = k_dev if name == "fused" else cuda.to_device(v_src)
        got = layouts.decode(name, d_q, k_dev, v_dev, tables, lens, mode="single").copy_to_host()
        err = float(np.max(np.abs(got - base)))
        timing = _timed_decode(name, k_dev, v_dev, on_device, cfg, timed, cache.nbytes)
        rows.append({"layout": name, "max_abs_diff_vs_fused": err, **timing})
        del k_dev, v_dev
    return rows


def bench_alignment(cfg, problem, timed: bool) -> list[dict]:
    cache, query, tables, lens = problem
    on_device = [cuda.to_device(a) for a in (query, tables, lens)]
    attention.POISON["on"] = True
    rows, base = [], None
    for offset in alignment.OFFSETS:
        pool = alignment.offset_pool(cache.shape, cache.dtype, offset)
        pool.copy_to_device(cache)
        got = attention.paged_attention(on_device[0], pool, tables, lens, mode="single")
        got = got.copy_to_host()
        base = got if base is None else base
        rows.append(
            {
                "offset": offset,
                "address_mod_128": alignment.device_address(pool) % 128,
                "max_abs_diff_vs_offset_0": float(np.max(np.abs(got - base))),
                **_timed_decode("fused", pool, pool, on_device, cfg, timed, cache.nbytes),
            }
        )
        del pool
    return rows


def _reset(pool, top0, ids0, d_table) -> None:
    pool.top.copy_to_device(top0)
    pool.free_ids.copy_to_device(ids0)
    d_table.copy_to_device(np.full(d_table.shape, -1, np.int32))


def _prefix_sum(grid, d_counts, pool, d_table, d_granted) -> None:
    offsets = AP.exclusive_scan(d_counts)
    AP.take_slices_kernel[grid, 128](
        d_counts, offsets, 0, pool.free_ids, pool.ref, d_table, d_granted
    )


def _stack(kernel, grid, d_counts, pool, d_table, d_granted) -> None:
    kernel[grid, 128](d_counts, pool.free_ids, pool.top, pool.ref, d_table, d_granted)


ALLOCATORS = {
    "cas": partial(_stack, AK.alloc_cas_kernel),
    "atomic_add": partial(_stack, AK.alloc_atomic_add_kernel),
    "prefix_sum": _prefix_sum,
    "racy": partial(_stack, AK.alloc_racy_kernel),
}


def bench_allocators(cfg, rng, timed: bool) -> list[dict]:
    rows = []
    for n in cfg["requests"]:
        counts = rng.integers(1, 5, size=n).astype(np.int32)
        total = int(counts.sum())
        for method in ALLOCATORS:
            pool = DevicePool(total)
            ids0 = pool.free_ids.copy_to_host()
            top0 = np.array([total], np.int32)
            d_counts = cuda.to_device(counts)
            d_table = cuda.device_array((n, 4), np.int32)
            d_granted = cuda.device_array(n, np.int32)
            args = (d_counts, pool, d_table, d_granted)
            launch = partial(ALLOCATORS[method], (n + 127) // 128, *args)
            ms = _timed(launch, cfg["runs"], timed, partial(_reset, pool, top0, ids0, d_table))
            table = d_table.copy_to_host()
            ids = table[table >= 0]
            rows.append(
                {
                    "method": method,
                    "requests": n,
                    "blocks": total,
                    "median_ms": ms,
                    "blocks_per_s": total / ms * 1e3 if ms else None,
                    "handed_out": int(ids.size),
                    "handed_out_twice": int(ids.size - np.unique(ids).size),
                }
            )
    return rows


def bench_prealloc(cfg, timed: bool) -> list[dict]:
    rows = []
    shape = prealloc.block_shape(cfg["kv_heads"], cfg["block"], cfg["dim"])
    for n in cfg["prealloc"]:
        for strategy in ("on_demand", "pooled"):
            counter = prealloc.AllocCounter()
            cuda.synchronize()
            t0 = time.perf_counter()
            if strategy == "on_demand":
                kept = prealloc.on_demand(n, shape, np.float16, counter)
            else:
                kept = prealloc.pooled(n, n, shape, np.float16, counter)
            cuda.synchronize()
            seconds = time.perf_counter() - t0
            rows.append(
                {
                    "strategy": strategy,
                    "blocks": n,
                    "device_allocations": counter.calls,
                    "bytes": counter.bytes,
                    "seconds": seconds if timed else None,
                    "us_per_block": seconds / n * 1e6 if timed else None,
                }
            )
            del kept
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/gpu_labs.py", description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true", help="tiny sizes; allowed under the simulator")
    p.add_argument("--out", help="write the JSON here as well as to stdout")
    args = p.parse_args(argv)
    if common.refuses("gpu_labs", args.dry_run):
        return 2
    result = run(args.dry_run)
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def run(dry_run: bool, left=None) -> dict:
    """Every 3.7 lab measurement as one JSON-ready dict (timings only on a GPU); with `left`
    (seconds left), a section that would not fit is named in result["skipped"] instead."""
    timed = cuda_kernels.backend() == "gpu"
    cfg = DRY if dry_run else FULL
    rng = np.random.default_rng(0)
    began = time.perf_counter()
    problem = _problem(cfg, rng)
    device = common.device_name() if timed else None
    result = {"backend": cuda_kernels.backend(), "dry_run": dry_run, "config": cfg}
    result.update(device=device, skipped=[])
    sections = {
        "layouts": partial(bench_layouts, cfg, problem, timed),
        "alignment": partial(bench_alignment, cfg, problem, timed),
        "allocators": partial(bench_allocators, cfg, rng, timed),
        "prealloc": partial(bench_prealloc, cfg, timed),
    }
    for name, section in sections.items():
        if left is not None and left() < SECTION_S[name]:
            result["skipped"].append(name)
        else:
            result[name] = section()
    result["wall_s"] = time.perf_counter() - began if timed else None
    return result


if __name__ == "__main__":
    sys.exit(main())
