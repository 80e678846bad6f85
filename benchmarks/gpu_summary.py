"""The verdict of a `gpu_attention.py` run: issue 24's GPU targets (benchmarks/README.md's
"Targets": measured value, goal, PASS / FAIL or NOT MEASURED with the reason) and the
Markdown summary (targets, phases, compile, auto decode rows, prefill rows, ladder).
"""

from __future__ import annotations

from functools import partial

DECODE_CASE = {4: (64, 4096, 32, 8), 8: (32, 4096, 64, 8)}  # group: (batch, context, H, H_kv)


def _prefill_ratio(report: dict) -> tuple[float | None, str]:
    rows = report.get("prefill") or []
    ours = next((r for r in rows if r.get("kernel") == "paged_prefill"), None)
    peer = next((r for r in rows if r.get("kernel") == "torch_sdpa_flash"), None)
    if ours is None:
        return None, _absent(report, "prefill")
    if not ours.get("checked_on_device"):
        return None, "paged_prefill disagreed with the reference: not timed"
    if peer is None:
        return None, "no torch_sdpa_flash row (torch not importable, or no GPU)"
    half = ours.get("fp16_out") or {}
    if half.get("median_ms") and half.get("checked_on_device"):
        ours = {**ours, **half}  # fp16 out, as SDPA writes: like for like
    if not ours.get("median_ms") or not peer.get("median_ms"):
        return None, peer.get("error") or "untimed (no GPU)"
    return peer["median_ms"] / ours["median_ms"], (
        f"SDPA flash {peer['median_ms']:.3f} ms, "
        f"ours {ours['median_ms']:.3f} ms "
        f"(path {ours.get('path_ran')}, "
        f"{ours.get('out_dtype', 'float32')} out)"
    )


def _decode_pct(report: dict, group: int) -> tuple[float | None, str]:
    keys = ("batch", "context", "heads", "kv_heads", "mode", "layout", "dtype")
    want = (*DECODE_CASE[group], "auto", "paged", "float16")
    row = next((r for r in report.get("cases") or [] if tuple(map(r.get, keys)) == want), None)
    if row is None:
        return None, _absent(report, "decode")
    if not row.get("checked_on_device"):
        return None, "the auto decode disagreed with the reference: not timed"
    if row.get("pct_of_roofline") is None:
        return None, "untimed (no GPU)"
    return row["pct_of_roofline"], (
        f"{row['median_ms']:.3f} ms, path {row.get('path')}, "
        f"{row.get('num_partitions')} partition(s)"
    )


def _absent(report: dict, phase: str) -> str:
    record = (report.get("phases") or {}).get(phase, {})
    if "skipped" in record:
        return f"phase {phase} skipped: {record['skipped']}"
    if "error" in record:
        return f"phase {phase} failed: {record['error']}"
    return f"no such row in phase {phase} (the dry-run grid has other shapes)"


# (name, what it compares, goal, unit, how the measured value is found)
TARGETS = (
    (
        "prefill_vs_sdpa_flash",
        "prefill speed vs torch SDPA flash (8 x 1,024 behind 1,024, GQA 32/8, D=128)",
        0.8,
        "x",
        _prefill_ratio,
    ),
    (
        "decode_g4_pct_of_roofline",
        "decode G=4 auto, % of the read roofline (64 x 4,096, 32/8 heads)",
        85.0,
        "%",
        partial(_decode_pct, group=4),
    ),
    (
        "decode_g8_pct_of_roofline",
        "decode G=8 auto, % of the read roofline (32 x 4,096, 64/8 heads)",
        75.0,
        "%",
        partial(_decode_pct, group=8),
    ),
)


def targets(report: dict) -> list[dict]:
    out = []
    for name, what, goal, unit, find in TARGETS:
        value, detail = find(report)
        if value is not None and not report.get("timings_valid"):
            value, detail = None, "timings are not valid on this backend"
        verdict = "NOT MEASURED" if value is None else "PASS" if value >= goal else "FAIL"
        row = {"target": name, "what": what, "goal": goal, "unit": unit}
        row["measured"] = None if value is None else round(value, 3)
        out.append({**row, "verdict": verdict, "detail": detail})
    return out


def _cell(value, fmt: str = ".3f") -> str:
    return "-" if value is None else f"{value:{fmt}}"


ROOFLINE = (("median_ms", ".3f"), ("gb_per_s", ".0f"), ("pct_of_roofline", ".1f"))
TENSOR = (("median_ms", ".3f"), ("tflop_per_s", ".1f"), ("pct_of_tensor_peak", ".1f"))


def _cells(row: dict, spec) -> list[str]:
    """The `spec` (key, format) fields of a row, "-" where absent."""
    return [_cell(row.get(key), fmt) for key, fmt in spec]


def _row(*cells) -> str:
    """One markdown table row."""
    return "| " + " | ".join(map(str, cells)) + " |"


def _head(*columns: str) -> list[str]:
    """A blank line, then a markdown table's header row and its rule."""
    return ["", _row(*columns), "|" + " --- |" * len(columns)]


def markdown(report: dict) -> str:
    lines = [
        f"gpu_attention on {report.get('device')} ({report.get('backend')}, "
        f"dry_run={report.get('dry_run')}), {_cell(report.get('seconds'), '.0f')} s",
        *_head("target", "measured", "goal", "verdict", "detail"),
    ]
    for t in report.get("targets") or targets(report):
        measured, goal = f"{_cell(t['measured'])} {t['unit']}", f">= {t['goal']} {t['unit']}"
        lines.append(_row(t["what"], measured, goal, t["verdict"], t["detail"]))
    lines += _phase_lines(report) + _decode_lines(report) + _prefill_lines(report)
    lines += [
        "",
        f"launch overhead: {_cell(report.get('launch_overhead_ms'), '.4f')} ms per "
        f"launch (an empty kernel, back to back in one event window; rows under 3x it "
        f"are marked launch_bound)",
    ]
    lines += compile_lines(report.get("compile"))
    return "\n".join(lines + _ladder_lines(report))


def _phase_lines(report: dict) -> list[str]:
    lines = _head("phase", "seconds", "compile s", "compiles", "status")
    for name, rec in (report.get("phases") or {}).items():
        status = f"skipped: {rec['skipped']}" if "skipped" in rec else "ran"
        status = f"failed: {rec['error']}" if "error" in rec else status
        times = (_cell(rec.get(k), ".1f") for k in ("seconds", "compile_s"))
        lines.append(_row(name, *times, _cell(rec.get("compiles"), "d"), status))
    return lines


def _decode_lines(report: dict) -> list[str]:
    lines = _head("decode (auto)", "G", "dtype", "path", "ms", "GB/s", "% of roofline", "checked")
    for r in report.get("cases") or []:
        if r.get("mode") == "auto":
            shape = f"{r['batch']} x {r['context']}, {r['heads']}/{r['kv_heads']}"
            cells = (r["group"], r["dtype"], r.get("path"), *_cells(r, ROOFLINE))
            lines.append(_row(shape, *cells, r.get("checked_on_device")))
    return lines


def _prefill_lines(report: dict) -> list[str]:
    lines = _head("prefill", "path ran", "ms", "TFLOP/s", "% of tensor peak", "checked")
    for r in report.get("prefill") or []:
        for p in r.get("by_path") or [r]:
            out = f" ({p['out_dtype']} out)" if p.get("out_dtype") == "float16" else ""
            name, checked = f"{r['kernel']} {p.get('path', '')}{out}", p.get("error", "-")
            cells = (p.get("path_ran", "-"), *_cells(p, TENSOR))
            lines.append(_row(name, *cells, p.get("checked_on_device", checked)))
    return lines


def _ladder_lines(report: dict) -> list[str]:
    lines = _head(
        "ladder rung", "ms", "GB/s", "% of read roofline", "predicted %", "prediction", "checked"
    )
    for r in report.get("ladder") or []:
        note = r.get("skipped") or r.get("refused")
        low, high = r.get("predicted_pct") or (None, None)
        predicted = f"{_cell(low, 'g')}-{_cell(high, 'g')}"
        cells = (*_cells(r, ROOFLINE), predicted, r.get("prediction", "-"))
        lines.append(_row(r["rung"], *cells, note or r.get("checked_on_device")))
    return lines


def compile_lines(comp: dict | None) -> list[str]:
    """The compile phase: seconds per phase and in total, and how they were measured."""
    if not comp:
        return []
    if comp.get("how") == "jit":  # on a GPU: compiled in this process before any timing
        head = (
            f"compile, before any timing: {comp['compiles']} JIT compiles, "
            f"{comp['total_s']} s in numba's compiler, {comp['wall_s']} s with the checks"
        )
        if comp.get("left_out"):
            head += f"; left to their phases: {', '.join(comp['left_out'])}"
        unit = "compiles"
    elif comp.get("how") == "estimate":  # a first run's dry run: the budget a GPU gets
        head = (
            f"compile budget on a GPU: {comp['budget_s']} s = {comp['cpu_s_here']} CPU s "
            f"(PTX + ptxas, measured here) x {comp['gpu_host_speed']} (GPU host speed) x "
            f"{comp['margin']} + {comp['slack_s']} s ({comp['measured']})"
        )
        return ["", head, *_head("phase", "CPU s here", "kernels")] + [
            f"| {name} | {rec['compile_s']:.1f} | {rec['kernels']} |"
            for name, rec in comp["phases"].items()
        ]
    else:  # the dry run: the same kernels to PTX for sm_90, in parallel processes
        slowest = comp.get("slowest") or {"kernel": "-", "compile_s": None}
        head = (
            f"compile (to PTX for sm_90, no GPU): {comp['kernels']} kernels, total "
            f"{comp['total_s']} s one after the other ({comp.get('compile_cpu_s_sum')} CPU s), "
            f"{comp['wall_s']} s in {comp['workers']} processes; slowest "
            f"{slowest['kernel']} ({_cell(slowest['compile_s'], '.1f')} s)"
        )
        if comp.get("left_out"):
            head += (
                f"; stopped at its {comp['budget_s']} s budget, not measured: "
                f"{len(comp['left_out'])} kernels ({', '.join(comp['left_out'])})"
            )
        unit = "kernels"
    lines = ["", head, *_head("phase", "compile s", unit)]
    for name, rec in comp.get("phases", {}).items():
        lines.append(f"| {name} | {_cell(rec['compile_s'], '.1f')} | {rec[unit]} |")
    lines.append(f"| total | {_cell(comp['total_s'], '.1f')} | |")
    return lines
