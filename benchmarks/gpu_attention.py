"""Benchmark the paged-attention kernels on a real GPU, with numbers that can be trusted.

    python benchmarks/gpu_attention.py --out results.json      # on a GPU, < 8 minutes
    python benchmarks/gpu_attention.py --dry-run --out x.json  # tiny grid, simulator OK

1. device-to-device copy bandwidth (bytes read + bytes written / time);
2. correctness of every launcher against cuda_kernels.reference, on the device, with
   NaN-poisoned buffers (write_kv, single, split, window, copy_blocks, swap, factory);
3. decode over (batch, context, heads, kv_heads) for groups G = 1, 4, 8, 32, float16 and
   float32, block_size 16: each path ("cuda_core", and "tensor" where the shape allows:
   float16, head_dim % 16 == 0) single-pass and split-K, and "auto" (what
   paged_attention(mode="auto", path="auto") launches, with the path, partition_size and
   num_partitions it chose). Before a configuration is timed, the same kernel (same G,
   dtype, head_dim, mode, layout, path) is checked on the device against the float64
   reference on a small instance (`check_config`). Per configuration:
     paged        the paged kernel over a shuffled block table;
     contiguous   the same kernel body over each sequence's K/V stored contiguously, no
                  table (`cuda_kernels.labs.contiguous`): paging_overhead_pct compares them;
     roofline     a read-only kernel reading the same K/V bytes with 16-byte loads;
                  pct_of_roofline = roofline time / kernel time;
     torch_sdpa   torch's scaled_dot_product_attention on contiguous K/V [B, H_kv, L, D]
                  (enable_gqa), when torch is importable (else the row is absent).
   Timing: CUDA events around PER_SAMPLE back-to-back launches (launch overhead hidden
   behind queued work), median of `runs` samples; caches rotate so that every working
   set is >= 4x the 50 MB L2 (H100, H200). bytes_moved = K/V read once + query + float32
   output;
4. paged prefill (`gpu_prefill.py`): prompts behind a cached prefix, GQA, checked on the
   device against reference_prefill before it is timed; tokens/s, TFLOP/s and % of the
   dense fp16 tensor peak; peer rows (torch SDPA's flash backend, flash_attn, FlashInfer)
   on contiguous K/V when importable;
5. copy_blocks (large copies) and write_kv rows, as % of the copy bandwidth;
6. the chapter 3.7 labs (`gpu_labs.run`), unless --no-labs.
Each of these is a phase under `gpu_common.Phases`: the run stays under 8 minutes, a
phase that would not fit is skipped (and says so), and report["phases"] gives each
phase's seconds and JIT compile time (compile_s, compiles).
Under the simulator it refuses (exit 2) unless --dry-run: then timings are null,
because the simulator records no time. No number here is ever made up.
"""

from __future__ import annotations  # noqa: I001  (cuda_kernels before numba: see below)

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import cuda_kernels as ck  # first: it selects the CUDA backend before numba.cuda is imported
from cuda_kernels import attention, layout_demo, reference
from cuda_kernels.decode_tc import tc_supported
from cuda_kernels.labs import contiguous
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as common  # noqa: E402
import gpu_prefill  # noqa: E402

GRID = [  # (batch, context, num_heads, num_kv_heads, dtype): G = heads / kv_heads
    (64, 4096, 32, 8, "float16"),   # long-context batch decode (the 85%-of-roofline target), G=4
    (64, 4096, 8, 8, "float16"),    # G=1 (MHA)
    (32, 4096, 64, 8, "float16"),   # G=8
    (64, 4096, 32, 1, "float16"),   # G=32 (MQA-like)
    (4, 32768, 32, 8, "float16"),   # few long sequences: split-K territory
    (32, 4096, 32, 8, "float32"),
]
DRY_GRID = [(2, 40, 4, 2, "float16"), (1, 24, 8, 1, "float32")]
# Seconds each phase may take on a GPU (`gpu_common.Phases`: a phase that does not fit in
# what is left of the 8 minutes is skipped; a decode case starts only with CASE_S left).
PHASE_S = {"copy": 10, "correctness": 60, "decode": 230, "prefill": 60, "copies": 20,
           "labs": 90}
CASE_S = 25


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
            results[f"paged_attention[{name},{mode},P={part}]"] = common.close(out, want, tol)
        win = ck.paged_attention(*d_args, window=50, sinks=4, mode="split", partition_size=32)
        results[f"paged_attention[{name},window]"] = common.close(
            win.copy_to_host(), reference.windowed_attention(query, host, tables, lens, 50, 4), tol)
        k_pool = cuda.to_device(np.ascontiguousarray(host[:, 0].transpose(0, 2, 1, 3)))
        v_pool = cuda.to_device(np.ascontiguousarray(host[:, 1].transpose(0, 2, 1, 3)))
        nhd = ck.decode_with(layout_demo.SPLIT_NHD, k_pool, v_pool, query, tables, lens,
                             num_blocks=num_blocks, num_kv_heads=kv_heads, block_size=bs,
                             head_dim=dim, mode="split", partition_size=64)
        results[f"factory[split-NHD,{name}]"] = common.close(nhd, want, tol)
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


def check_config(rng, heads, kv_heads, dim, dtype, mode, layout, dry, context,
                 path="cuda_core") -> bool:
    """The timed kernel itself (same compiled kernel: G, dtype, head_dim, block size, and
    for the contiguous layout the same row length `context`; same launcher and mode) on a
    few short sequences, on the device, against the float64 reference."""
    bs = 16
    lens = np.array([5, 20] if dry else [37, 300, 1], np.int32)
    tables, num_blocks = reference.scattered_block_tables(rng, lens, bs, spare=2)
    host = rng.standard_normal((num_blocks, 2, kv_heads, bs, dim)).astype(dtype)
    query = rng.standard_normal((len(lens), heads, dim)).astype(dtype)
    want = reference.paged_attention(query, host, tables, lens)
    attention.POISON["on"] = True
    if layout == "contiguous":
        flat = contiguous.contiguous_cache(host, tables, lens, max(context, int(lens.max())))
        cache, table = flat, np.zeros((len(lens), 1), np.int32)
        loaders, block = contiguous.CONTIGUOUS, flat.shape[3]
    else:
        cache, table, loaders, block = host, tables, ck.BLOCK_MAJOR, bs
    d_cache = cuda.to_device(cache)
    launch, out = common.decode_launch(loaders, d_cache, d_cache, cuda.to_device(query),
                                       cuda.to_device(table), cuda.to_device(lens),
                                       block_size=block, num_kv_heads=kv_heads, mode=mode,
                                       part=16 if dry else 64, paged=layout == "paged",
                                       path=path)
    launch()
    attention.POISON["on"] = None
    return common.close(out.copy_to_host(), want, 1e-5 if dtype == "float32" else 2e-3)


def torch_sdpa_ms(batch, context, heads, kv_heads, dim, dtype, runs, timed):
    """torch's scaled_dot_product_attention on contiguous K/V [B, H_kv, L, D], or None."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not timed or not torch.cuda.is_available():
        return None
    tdtype = getattr(torch, dtype)
    q = torch.randn(batch, heads, 1, dim, device="cuda", dtype=tdtype)
    kv_bytes = 2 * batch * context * kv_heads * dim * q.element_size()
    kvs = [(torch.randn(batch, kv_heads, context, dim, device="cuda", dtype=tdtype),
            torch.randn(batch, kv_heads, context, dim, device="cuda", dtype=tdtype))
           for _ in range(common.rotation(kv_bytes))]
    launches = [lambda k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                for k, v in kvs]
    torch.cuda.synchronize()
    return common.time_ms(launches, runs, timed)


def bench_case(rng, batch, context, heads, kv_heads, dtype, dim, runs, timed, copy_gbs,
               dry) -> list[dict]:
    bs = 16
    item = np.dtype(dtype).itemsize
    per_seq = -(-context // bs)
    num_blocks = batch * per_seq
    kv_bytes = batch * context * kv_heads * dim * item * 2
    copies = common.rotation(kv_bytes) if timed else 1
    query = cuda.to_device(rng.standard_normal((batch, heads, dim)).astype(dtype))
    lens = cuda.to_device(np.full(batch, context, np.int32))
    paged = [common.filled(rng, (num_blocks, 2, kv_heads, bs, dim), dtype) for _ in range(copies)]
    table = cuda.to_device(rng.permutation(num_blocks).reshape(batch, per_seq).astype(np.int32))
    flat = [common.filled(rng, (batch, 2, kv_heads, context, dim), dtype) for _ in range(copies)]
    flat_table = cuda.to_device(np.zeros((batch, 1), np.int32))  # never read (paged=False)
    blocks = 8 * attention.sm_count() if timed else 2
    roof_ms = common.time_ms([common.read_roofline_launch(c.reshape(c.size), blocks,
                                                          256 if timed else 16)
                              for c in paged], runs, timed)
    moved = kv_bytes + batch * heads * dim * item + batch * heads * dim * 4
    base = {"batch": batch, "context": context, "heads": heads, "kv_heads": kv_heads,
            "group": heads // kv_heads, "head_dim": dim, "dtype": dtype, "kv_bytes": kv_bytes,
            "bytes_moved": moved, "working_set_copies": copies}

    def row(mode, layout, ms, ok=True, path=None):
        bps = moved / ms * 1e3 if ms else None
        return {**base, "mode": mode, "layout": layout, "path": path, "checked_on_device": ok,
                "median_ms": ms,
                "bytes_per_s": bps, "gb_per_s": bps / 1e9 if bps else None,
                "pct_of_roofline": 100 * roof_ms / ms if ms and roof_ms else None,
                "pct_of_copy": 100 * bps / 1e9 / copy_gbs if bps and copy_gbs else None}

    rows = [row("read-only", "roofline", roof_ms)]
    paths = ["cuda_core"] + (["tensor"] if tc_supported(dtype, dim) is None else [])
    checked = {}
    for path in paths:
        for mode in ("single", "split"):
            timed_pair = {}
            for layout, caches, tab, loaders, block in (
                    ("paged", paged, table, ck.BLOCK_MAJOR, bs),
                    ("contiguous", flat, flat_table, contiguous.CONTIGUOUS, context)):
                ok = check_config(rng, heads, kv_heads, dim, dtype, mode, layout, dry, context,
                                  path)
                checked[(path, mode, layout)] = ok
                launches = [common.decode_launch(loaders, c, c, query, tab, lens,
                                                 block_size=block, num_kv_heads=kv_heads,
                                                 mode=mode, part=attention.DEFAULT_PARTITION,
                                                 paged=layout == "paged", longest=context,
                                                 path=path)[0] for c in caches]
                ms = common.time_ms(launches, runs, timed) if ok else None
                timed_pair[layout] = row(mode, layout, ms, ok, path)
            p, c = timed_pair["paged"], timed_pair["contiguous"]
            if p["median_ms"] and c["median_ms"]:
                p["paging_overhead_pct"] = 100 * (p["median_ms"] / c["median_ms"] - 1)
            rows += [p, c]
    # what users get: paged_attention(mode="auto", path="auto"), its plan read back
    autos = [common.auto_launch(ck.BLOCK_MAJOR, c, c, query, table, lens, block_size=bs,
                                num_kv_heads=kv_heads) for c in paged]
    plan = autos[0][2]
    ok = checked[(plan["path"], "single" if plan["num_partitions"] == 1 else "split", "paged")]
    auto = row("auto", "paged", common.time_ms([a[0] for a in autos], runs, timed) if ok else None,
               ok, plan["path"])
    rows.append({**auto, "partition_size": plan["partition_size"],
                 "num_partitions": plan["num_partitions"]})
    try:  # a peer, not a kernel of ours: a torch without enable_gqa (< 2.5) only loses the row
        torch_ms = torch_sdpa_ms(batch, context, heads, kv_heads, dim, dtype, runs, timed)
    except Exception as error:  # noqa: BLE001
        rows.append({**base, "mode": "sdpa", "layout": "torch_contiguous",
                     "checked_on_device": True,
                     "median_ms": None, "error": f"{type(error).__name__}: {error}"})
        torch_ms = None
    if torch_ms is not None:
        rows.append(row("sdpa", "torch_contiguous", torch_ms))
    return rows


def copy_rows(rng, dtype, runs, timed, copy_gbs, dry) -> list[dict]:
    """copy_blocks over many large block pairs, and write_kv of a big batch of tokens."""
    from cuda_kernels import block_copy
    from cuda_kernels.write_kv import write_kv_vec
    heads, bs, dim = (2, 4, 16) if dry else (8, 16, 128)
    num_blocks = 8 if dry else 8192  # fp16: 8192 x 64 KiB = 512 MiB
    cache = common.filled(rng, (num_blocks, 2, heads, bs, dim), dtype)
    half = num_blocks // 2
    pairs = cuda.to_device(np.stack([np.arange(half), np.arange(half) + half], 1).astype(np.int32))
    threads = 128 if timed else 16
    copy = lambda: block_copy.launch_pairs(cache, cache, pairs, half, heads)  # noqa: E731
    copy()  # checked before it is timed: the second half is now the first, bit for bit
    host = cache.copy_to_host()
    copy_ok = host[half:].tobytes() == host[:half].tobytes()
    copy_ms = common.time_ms(copy, runs, timed) if copy_ok else None
    copied = 2 * half * cache.nbytes // num_blocks  # read + write
    tokens = 16 if dry else 65536
    key = common.filled(rng, (tokens, heads, dim), dtype)
    value = common.filled(rng, (tokens, heads, dim), dtype)
    slots_host = rng.permutation(num_blocks * bs)[:tokens].astype(np.int64)
    slots = cuda.to_device(slots_host)
    write = lambda: write_kv_vec[tokens, threads](cache, key, value, slots)  # noqa: E731
    write()
    host, want_k = cache.copy_to_host(), key.copy_to_host()
    write_ok = bool(np.array_equal(host[slots_host // bs, 0, :, slots_host % bs], want_k))
    write_ms = common.time_ms(write, runs, timed) if write_ok else None
    written = 2 * 2 * key.nbytes  # K and V, read + write
    return [{"kernel": name, "dtype": dtype, "checked_on_device": ok, "bytes_moved": n,
             "median_ms": ms,
             "gb_per_s": n / ms / 1e6 if ms else None,
             "pct_of_copy": 100 * n / ms / 1e6 / copy_gbs if ms and copy_gbs else None}
            for name, n, ms, ok in (("copy_blocks", copied, copy_ms, copy_ok),
                                    ("write_kv", written, write_ms, write_ok))]


def _device_name() -> str:
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the JSON results here (default: stdout)")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny grid; allowed on the simulator")
    parser.add_argument("--runs", type=int, default=None,
                        help="timed samples per case (default 20; 1 with --dry-run)")
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
    runs = args.runs or (1 if args.dry_run else 20)
    grid, dim = (DRY_GRID, 16) if args.dry_run else (GRID, 128)
    report = {"backend": ck.backend(), "dry_run": args.dry_run, "timings_valid": on_gpu,
              "device": _device_name() if on_gpu else "simulator"}
    guard = common.Phases(common.TOTAL_S if on_gpu else float("inf"))
    copy_gbs = None

    def copy_phase(_):
        nonlocal copy_gbs
        report["copy"] = copy_bandwidth(1 << 16 if args.dry_run else 1 << 30, runs, on_gpu)
        copy_gbs = report["copy"]["gb_per_s"]

    def correctness_phase(_):
        report["correctness"] = check_correctness(rng, dim, args.dry_run)
        report["roofline_check"] = common.roofline_reads_every_byte_once(
            rng, (1 << 12) + 48 if args.dry_run else (1 << 24) + 48,
            2 if args.dry_run else 1056, 16 if args.dry_run else 256)

    def decode_phase(phase):
        report["cases"], report["cases_left_out"] = [], []
        for case in grid:
            if phase.left() < CASE_S:  # skip the rest rather than overrun the phase
                report["cases_left_out"].append(list(case))
                continue
            report["cases"] += bench_case(rng, *case, dim, runs, on_gpu, copy_gbs, args.dry_run)
            print(f"done {case} after {time.perf_counter() - began:.0f} s", file=sys.stderr)

    def prefill_phase(_):
        report["prefill"] = gpu_prefill.prefill_rows(
            rng, gpu_prefill.DRY_PREFILL if args.dry_run else gpu_prefill.PREFILL, dim, runs,
            on_gpu, args.dry_run)

    def copies_phase(_):
        report["copies"] = copy_rows(rng, "float16", runs, on_gpu, copy_gbs, args.dry_run)

    def labs_phase(_):  # the 3.7 labs run in the same command, into the same JSON
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gpu_labs

        report["labs"] = gpu_labs.run(args.dry_run)
        print(f"labs done after {time.perf_counter() - began:.0f} s", file=sys.stderr)

    phases = [("copy", copy_phase), ("correctness", correctness_phase),
              ("decode", decode_phase), ("prefill", prefill_phase), ("copies", copies_phase)]
    phases += [] if args.no_labs else [("labs", labs_phase)]
    for name, fn in phases:
        guard.run(name, PHASE_S[name], fn)
    report["phases"] = guard.record
    report["seconds"] = time.perf_counter() - began
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    failed = [k for k, ok in report.get("correctness", {}).items() if not ok]
    failed += [f"{c['mode']}/{c['layout']}/{c['path']}/G={c['group']}/{c['dtype']}"
               for c in report.get("cases", []) if not c["checked_on_device"]]
    failed += [c["kernel"] for c in report.get("copies", []) + report.get("prefill", [])
               if not c.get("peer") and not c["checked_on_device"]]
    failed += [] if report.get("roofline_check", True) else ["read-only roofline kernel"]
    if failed:
        print(f"gpu_attention: kernels disagree with the reference: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
