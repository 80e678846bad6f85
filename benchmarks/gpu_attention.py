"""Benchmark the paged-attention kernels on a real GPU, with numbers that can be trusted.

    python benchmarks/gpu_attention.py --first-run       # the lent GPU's one command, < 9 min
    python benchmarks/gpu_attention.py                   # every phase and variant
    python benchmarks/gpu_attention.py --dry-run         # the simulator: checks the script
    ... --phases prefill,decode --out DIR                # a subset, in run order

benchmarks/README.md is the reference (preflight, phases and budgets, timing, targets). A
configuration is timed only after its device check passed. Exit 1 when a kernel disagreed
or a phase failed; on the simulator it refuses (exit 2) unless --dry-run (null timings).
"""

from __future__ import annotations  # noqa: I001  (cuda_kernels before numba: see below)

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_preflight  # noqa: E402  (imports no numba: it must run before cuda_kernels can fail)

JSON, SUMMARY, LOG = "r.json", "r.md", "log.txt"  # the lent GPU machine returns only $OUT


def out_dir(argv: list[str]) -> Path:
    """--out DIR (or --out=DIR) from argv, else $OUT, else ./out; created."""
    folder = os.environ.get("OUT") or "out"
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            folder = argv[i + 1]
        elif arg.startswith("--out="):
            folder = arg.split("=", 1)[1]
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Tee:
    """A stream that also writes to the log, flushed at once (an os.execv loses no line)."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text):
        self.log.write(text)
        self.log.flush()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


PREFLIGHT: dict = {}
if __name__ == "__main__":  # an old numba-cuda is replaced from the carried wheels, or stops
    # here in one line, not in an ImportError; the log is appended to, so a run that starts
    # itself again after installing wheels keeps one log
    log = open(out_dir(sys.argv[1:]) / LOG, "a")  # noqa: SIM115  (open for the process's life)
    sys.stdout, sys.stderr = _Tee(sys.stdout, log), _Tee(sys.stderr, log)
    PREFLIGHT = gpu_preflight.require(install_wheels=True)

import cuda_kernels as ck  # noqa: E402, I001  (first of the numba users: it picks the backend)
from cuda_kernels import attention  # noqa: E402
from cuda_kernels.fast.decode_tc import tc_supported  # noqa: E402
from cuda_kernels.labs import contiguous  # noqa: E402
from numba import cuda  # noqa: E402

import gpu_common as common  # noqa: E402
import gpu_compile  # noqa: E402
import gpu_labs  # noqa: E402
import gpu_ladder  # noqa: E402
import gpu_prefill  # noqa: E402
import gpu_summary  # noqa: E402
from gpu_checks import check_config, check_correctness  # noqa: E402
from gpu_copies import copy_bandwidth, copy_rows  # noqa: E402

GRID = [  # (batch, context, num_heads, num_kv_heads, dtype): G = heads / kv_heads
    (64, 4096, 32, 8, "float16"),  # long-context batch decode (the 85%-of-roofline target), G=4
    (32, 4096, 64, 8, "float16"),  # G=8 (the 75% target)
    (64, 4096, 8, 8, "float16"),  # G=1 (MHA)
    (64, 4096, 32, 1, "float16"),  # G=32 (MQA-like)
    (4, 32768, 32, 8, "float16"),  # few long sequences: split-K territory
    (32, 4096, 32, 8, "float32"),
]
# the dry run's cases: each group (2, 8), dtype, path and mode once (the device checks, on a
# ragged batch, are what is compared; the timed launches only have to run)
DRY_GRID = [(1, 20, 2, 1, "float16"), (1, 20, 16, 2, "float32")]
# Seconds each phase may take on a GPU, in run order, the targets' phases first
# (`gpu_common.Phases`); a decode case starts only if the longest so far (>= CASE_S) fits.
PHASE_S = {
    "compile": None,  # from the measured compile time: gpu_compile.budget_s
    "copy": 10,
    "prefill": 75,
    "decode": 110,
    "ladder": 40,
    "correctness": 20,
    "copies": 15,
    "labs": 45,
}
CASE_S = 25
STARTUP_S = 60  # before the phases: the preflight (its NVVM child), an offline install, imports
LAYOUTS = gpu_compile.LAYOUTS  # --first-run: paged only


LAUNCH_OVERHEAD = {"ms": None}  # the copy phase's measurement (gpu_common.launch_overhead_ms)
BACKGROUND: dict = {}  # the dry run's compile measurement while the other phases run


def _row(base: dict, roof_ms, copy_gbs, mode, layout, ms, ok=True, path=None) -> dict:
    """One decode row: the case's `base` fields and its time against the read roofline and
    the copy bandwidth; launch_bound when within LAUNCH_BOUND x the per-launch overhead."""
    bps = base["bytes_moved"] / ms * 1e3 if ms else None
    over = LAUNCH_OVERHEAD["ms"]
    return {
        **base,
        "mode": mode,
        "layout": layout,
        "path": path,
        "checked_on_device": ok,
        "median_ms": ms,
        "launch_bound": None if ms is None or over is None else ms < common.LAUNCH_BOUND * over,
        "bytes_per_s": bps,
        "gb_per_s": bps / 1e9 if bps else None,
        "pct_of_roofline": 100 * roof_ms / ms if ms and roof_ms else None,
        "pct_of_copy": 100 * bps / 1e9 / copy_gbs if bps and copy_gbs else None,
    }


def bench_case(rng, case, dim, runs, timed, copy_gbs, dry, *, layouts=LAYOUTS) -> list[dict]:
    """Every row of one decode case (batch, context, heads, kv_heads, dtype): the read
    roofline, each path x mode x layout, what paged_attention's auto runs, and torch SDPA."""
    batch, context, heads, kv_heads, dtype = case
    paged, table, lens, kv_bytes = common.paged_kv(rng, batch, context, kv_heads, dim, dtype, timed)
    copies = len(paged)
    query = cuda.to_device(rng.standard_normal((batch, heads, dim)).astype(dtype))
    flat = [
        common.filled(rng, (batch, 2, kv_heads, context, dim), dtype)
        for _ in range(copies if "contiguous" in layouts else 0)
    ]
    flat_table = cuda.to_device(np.zeros((batch, 1), np.int32))  # never read (paged=False)
    roof_ms = common.roofline_ms(paged, runs, timed)
    base = dict(zip(("batch", "context", "heads", "kv_heads"), case[:4], strict=True))
    base.update(group=heads // kv_heads, head_dim=dim, dtype=dtype, kv_bytes=kv_bytes)
    moved = kv_bytes + batch * heads * dim * (np.dtype(dtype).itemsize + 4)  # + q and out
    base.update(bytes_moved=moved, working_set_copies=copies)
    row = partial(_row, base, roof_ms, copy_gbs)
    rows = [row("read-only", "roofline", roof_ms)]
    cases = {  # layout -> (loaders, caches, block table, block size)
        "paged": (ck.BLOCK_MAJOR, paged, table, 16),
        "contiguous": (contiguous.CONTIGUOUS, flat, flat_table, context),
    }
    layouts_ = [
        (name, [common.DecodeCase(how, c, c, query, t, lens, b, kv_heads) for c in caches])
        for name, (how, caches, t, b) in cases.items()
        if name in layouts
    ]
    checked: dict = {}
    for path in ["cuda_core"] + (["tensor"] if tc_supported(dtype, dim) is None else []):
        for mode in ("single", "split"):
            timed_pair = {}
            for layout, cases in layouts_:
                ok = check_config(rng, case, dim, mode, layout, dry, path)
                checked[(path, mode, layout)] = ok
                opts = dict(mode=mode, paged=layout == "paged", longest=context, path=path)
                part = attention.DEFAULT_PARTITION
                launches = [common.decode_launch(c, part=part, **opts)[0] for c in cases]
                ms = common.time_ms(launches, runs, timed) if ok else None
                timed_pair[layout] = row(mode, layout, ms, ok, path)
            p, c = timed_pair["paged"], timed_pair.get("contiguous")
            if c and p["median_ms"] and c["median_ms"]:
                p["paging_overhead_pct"] = 100 * (p["median_ms"] / c["median_ms"] - 1)
            rows += [p, c] if c else [p]
    rows.append(_auto_row(row, layouts_[0][1], checked, runs, timed))
    return rows + _sdpa_rows(row, case, dim, runs, timed)


def _auto_row(row, cases: list, checked: dict, runs, timed) -> dict:
    """What users get: paged_attention(mode="auto", path="auto"), its plan read back; timed
    when the configuration it runs passed its device check."""
    autos = [common.auto_launch(c) for c in cases]
    plan = autos[0][2]
    ok = checked[(plan["path"], "single" if plan["num_partitions"] == 1 else "split", "paged")]
    ms = common.time_ms([a[0] for a in autos], runs, timed) if ok else None
    parts = {k: plan[k] for k in ("partition_size", "num_partitions")}
    return {**row("auto", "paged", ms, ok, plan["path"]), **parts}


def _sdpa_rows(row, case, dim, runs, timed) -> list[dict]:
    """torch's scaled_dot_product_attention on contiguous K/V [B, H_kv, L, D]: a peer, so
    a torch without enable_gqa (< 2.5) only loses the row (it says why); none untimed."""
    batch, context, heads, kv_heads, dtype = case
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return []
    if not timed or not torch.cuda.is_available():
        return []
    try:
        q = torch.randn(batch, heads, 1, dim, device="cuda", dtype=getattr(torch, dtype))
        kv_bytes = 2 * batch * context * kv_heads * dim * q.element_size()
        kvs = [
            torch.randn(2, batch, kv_heads, context, dim, device="cuda", dtype=q.dtype)
            for _ in range(common.rotation(kv_bytes))
        ]
        launches = [
            lambda kv=kv: F.scaled_dot_product_attention(q, kv[0], kv[1], enable_gqa=True)
            for kv in kvs
        ]
        torch.cuda.synchronize()
        return [row("sdpa", "torch_contiguous", common.time_ms(launches, runs, timed))]
    except Exception as error:  # noqa: BLE001
        failed = {"error": f"{type(error).__name__}: {error}"}
        return [{**row("sdpa", "torch_contiguous", None), **failed}]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    flag = partial(parser.add_argument, action="store_true")
    parser.add_argument(
        "--out", help="folder for r.json, r.md, log.txt (default: $OUT, else ./out)"
    )
    flag("--dry-run", help="tiny grid; allowed on the simulator")
    parser.add_argument("--runs", type=int, help="timed samples per case (default 20; 1 dry)")
    flag("--first-run", help="what a first GPU run needs: no float32, no contiguous, no labs")
    flag("--no-labs", help="skip the chapter 3.7 labs (benchmarks/gpu_labs.py)")
    parser.add_argument(
        "--phases", help="comma-separated subset, in run order: " + ",".join(PHASE_S)
    )
    return parser


def budgets(chosen: list[str], first_run: bool) -> dict:
    """PHASE_S, the compile phase's from the measured compile time of what `chosen` launch."""
    return {**PHASE_S, "compile": gpu_compile.budget_s(chosen, first_run)}


def _chosen(args) -> list[str]:
    """The phases asked for (--phases, else all), no labs with --no-labs or --first-run."""
    chosen = args.phases.split(",") if args.phases else list(PHASE_S)
    unknown = sorted(set(chosen) - set(PHASE_S))
    if unknown:
        raise SystemExit(f"gpu_attention: unknown phase(s) {unknown}; choose from {list(PHASE_S)}")
    return [name for name in chosen if name != "labs" or not (args.no_labs or args.first_run)]


def _phases(args, report: dict, began: float) -> list:
    """(name, fn) of every phase chosen, in run order: the headline targets first."""
    chosen = _chosen(args)
    rng = np.random.default_rng(0)
    on_gpu, dry = report["timings_valid"], args.dry_run
    runs = args.runs or (1 if dry else 20)
    grid, dim, layouts = (DRY_GRID, 16, LAYOUTS) if dry else (GRID, 128, LAYOUTS)
    if args.first_run:  # what a first run needs: the float16 cases (the targets), paged K/V
        grid, layouts = [case for case in grid if case[-1] != "float32"], LAYOUTS[:1]

    def compile_phase(phase):  # every kernel, before anything is timed
        if on_gpu:
            report["compile"] = gpu_compile.warm(
                rng, grid, dim, dry, chosen, phase.left, layouts=layouts
            )
        elif args.first_run:  # rehearsing a first run: the budget, from the measurement
            report["compile"] = gpu_compile.planned(chosen, True)
        else:  # the simulator: numba's compile to PTX, beside the phases (`main` collects it)
            BACKGROUND["compile"] = ThreadPoolExecutor(1).submit(gpu_compile.seconds)

    def copy_phase(_):
        report["copy"] = copy_bandwidth(1 << 16 if dry else 1 << 30, runs, on_gpu)
        report["launch_overhead_ms"] = common.launch_overhead_ms(runs, on_gpu)
        LAUNCH_OVERHEAD["ms"] = report["launch_overhead_ms"]

    def copy_gbs():
        return (report.get("copy") or {}).get("gb_per_s")

    def prefill_phase(_):
        report["prefill"] = gpu_prefill.prefill_rows(
            rng, gpu_prefill.DRY_PREFILL if dry else gpu_prefill.PREFILL, dim, runs, on_gpu, dry
        )

    def decode_phase(phase):
        report["cases"], report["cases_left_out"] = [], []
        longest = CASE_S  # a case starts only if the longest case so far fits in what is left
        left = phase.left if on_gpu else lambda: float("inf")  # the dry run does every case
        for case in grid:
            if left() < longest:
                report["cases_left_out"].append(list(case))
                continue
            t0 = time.perf_counter()
            report["cases"] += bench_case(
                rng, case, dim, runs, on_gpu, copy_gbs(), dry, layouts=layouts
            )
            longest = max(longest, time.perf_counter() - t0)
            print(f"done {case} after {time.perf_counter() - began:.0f} s", file=sys.stderr)

    def ladder_phase(phase):
        report["ladder"] = gpu_ladder.rows(
            rng, runs, on_gpu, dry, left=phase.left if on_gpu else lambda: float("inf")
        )

    def correctness_phase(_):
        report["correctness"] = check_correctness(rng, dim, dry)
        report["roofline_check"] = common.roofline_reads_every_byte_once(rng, dry)

    def copies_phase(_):
        report["copies"] = copy_rows(rng, "float16", runs, on_gpu, copy_gbs(), dry)

    def labs_phase(phase):  # the 3.7 labs run in the same command, into the same JSON
        report["labs"] = gpu_labs.run(dry, left=phase.left)
        print(f"labs done after {time.perf_counter() - began:.0f} s", file=sys.stderr)

    phases = {
        "compile": compile_phase,
        "copy": copy_phase,
        "prefill": prefill_phase,
        "decode": decode_phase,
        "ladder": ladder_phase,
        "correctness": correctness_phase,
        "copies": copies_phase,
        "labs": labs_phase,
    }
    return [(name, phases[name]) for name in PHASE_S if name in chosen]


def failures(report: dict) -> list[str]:
    """Every kernel that disagreed with the reference, and every phase that raised."""
    failed = [k for k, ok in report.get("correctness", {}).items() if not ok]
    failed += [
        f"{c['mode']}/{c['layout']}/{c['path']}/G={c['group']}/{c['dtype']}"
        for c in report.get("cases", [])
        if not c["checked_on_device"]
    ]
    failed += [
        c["kernel"]
        for c in report.get("copies", []) + report.get("prefill", [])
        if not c.get("peer") and not c["checked_on_device"]
    ]
    failed += [r["rung"] for r in report.get("ladder", []) if r.get("checked_on_device") is False]
    failed += [] if report.get("roofline_check", True) else ["read-only roofline kernel"]
    failed += [
        f"phase {name}: {rec['error']}"
        for name, rec in report.get("phases", {}).items()
        if "error" in rec
    ]
    return failed


def _write(report: dict, out: Path) -> None:
    """out/r.json, after every phase: a run cut short keeps what it measured."""
    (out / JSON).write_text(json.dumps(report, indent=1, default=str) + "\n")


def _collect_compile(report: dict, pending) -> None:
    """The dry run's compile measurement; its wait and its error go into phases.compile."""
    t0 = time.perf_counter()
    record = report["phases"]["compile"]
    try:
        report["compile"] = pending.result()
    except Exception as error:  # noqa: BLE001  (recorded; the run still writes its summary)
        record["error"] = f"{type(error).__name__}: {error}"
    record["waited_s"] = round(time.perf_counter() - t0, 2)
    record["seconds"] = round(record["seconds"] + record["waited_s"], 2)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if common.refuses("gpu_attention", args.dry_run):
        return 2
    on_gpu = ck.backend() == "gpu"
    began = time.perf_counter()
    report = {
        "backend": ck.backend(),
        "dry_run": args.dry_run,
        "first_run": args.first_run,
        "timings_valid": on_gpu,
        "device": common.device_name() if on_gpu else "simulator",
        "sm_count": attention.sm_count(),
        "preflight": PREFLIGHT or gpu_preflight.report(),
    }
    guard = common.Phases(common.TOTAL_S if on_gpu else float("inf"), began=began)
    phases = _phases(args, report, began)  # an unknown phase stops here, nothing written
    out = out_dir(["--out", args.out] if args.out else [])
    report["out"] = str(out)
    budget = budgets([name for name, _ in phases], args.first_run)
    report["budgets_s"] = budget
    for name, fn in phases:
        guard.run(name, budget[name], fn)
        report["phases"] = guard.record
        if "error" in guard.record[name]:
            print(
                f"gpu_attention: phase {name} failed, going on: {guard.record[name]['error']}",
                file=sys.stderr,
            )
        _write(report, out)
    if "compile" in BACKGROUND:  # the dry run: the compile to PTX ran beside the phases
        _collect_compile(report, BACKGROUND.pop("compile"))
    report["seconds"] = time.perf_counter() - began
    report["targets"] = gpu_summary.targets(report)
    _write(report, out)
    summary = gpu_summary.markdown(report)
    (out / SUMMARY).write_text(summary + "\n")
    print(summary)
    failed = failures(report)
    if failed:
        print(
            f"gpu_attention: kernels disagree with the reference or phases failed: {failed}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
