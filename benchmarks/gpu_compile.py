"""The `compile` phase of the GPU run: every kernel the timed phases launch, compiled before
any of them times anything, and the seconds it took, per phase and in total. On a GPU,
`warm` runs each phase's device checks in this process; without one, `seconds` compiles to
PTX in `report --compile-only` children; `budget_s` is the phase's budget, from
compile_measured.json, which `python benchmarks/gpu_compile.py --measure` rewrites.
benchmarks/README.md says why not in parallel processes on the GPU.
"""

from __future__ import annotations  # noqa: I001  (cuda_kernels before numba)

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import cuda_kernels  # noqa: F401  (first: it selects the CUDA backend before numba.cuda loads)
from cuda_kernels.fast.decode_tc import tc_supported
from cuda_kernels.ladder import RUNGS

import gpu_common as common
import gpu_labs
import gpu_prefill
from gpu_checks import check_config, check_correctness
from gpu_copies import copy_bandwidth, copy_rows
from gpu_ladder import check_rung

ROOT = Path(__file__).resolve().parent.parent
MEASURED = Path(__file__).with_name("compile_measured.json")  # `--measure` writes it
GPU_HOST_SPEED = 1.0  # GPU host CPU seconds per build-machine CPU second (assumed, see budget_s)
MARGIN = 1.5  # the compile phase gets the estimate times this
SLACK_S = 15  # plus this: the CUDA context, the device checks' own launches
DRY_BUDGET_S = 600  # the dry run's compile measurement stops here and names what is left
LAYOUTS = ("paged", "contiguous")

# A report kernel's name prefix -> the phase that launches it (first match wins); the
# correctness phase's kernels count with the phases that time them.
PHASE_OF = (
    ("rung", "ladder"),
    ("paged_prefill", "prefill"),
    ("paged_decode", "decode"),
    ("merge_partitions", "decode"),
    ("write_kv", "copies"),
    ("copy_blocks", "copies"),
    ("alloc.", "labs"),
    ("labs.", "labs"),
)


def phase_of(kernel: str) -> str:
    for prefix, phase in PHASE_OF:
        if kernel.startswith(prefix):
            return phase
    raise ValueError(f"gpu_compile: no phase launches kernel {kernel!r}; add it to PHASE_OF")


def by_phase(rows: list[dict]) -> dict:
    """{phase: {kernels, compile_s, compile_cpu_s}} from `report --compile-only` rows."""
    phases: dict = {}
    for row in rows:
        rec = phases.setdefault(
            phase_of(row["kernel"]), {"kernels": 0, "compile_s": 0.0, "compile_cpu_s": 0.0}
        )
        rec["kernels"] += 1
        rec["compile_s"] += row["compile_s"]
        rec["compile_cpu_s"] += row.get("compile_cpu_s", 0.0)
    return {
        name: {k: round(v, 1) if isinstance(v, float) else v for k, v in rec.items()}
        for name, rec in phases.items()
    }


def kept(rows: list[dict], phases, first_run: bool) -> list[dict]:
    """The rows of `phases`; `--first-run` leaves out float32 and contiguous kernels, labs."""
    return [
        row
        for row in rows
        if phase_of(row["kernel"]) in phases
        and not (first_run and ("float32" in row["kernel"] or "contiguous" in row["kernel"]))
        and not (first_run and phase_of(row["kernel"]) == "labs")
    ]


def estimate(rows: list[dict], phases, first_run: bool) -> float:
    """CPU seconds (PTX + ptxas) the measured rows of `phases` take here, one after the
    other (what the GPU run's single process does)."""
    return sum(
        r["compile_cpu_s"] + (r.get("ptxas_cpu_s") or 0.0) for r in kept(rows, phases, first_run)
    )


def budget_s(phases, first_run: bool, measured: Path = MEASURED) -> int:
    """The compile phase's budget on a GPU: the CPU seconds measured here (`--measure`) of
    the phases' kernels to PTX and through ptxas, x GPU_HOST_SPEED x MARGIN + SLACK_S."""
    rows = json.loads(measured.read_text())["rows"]
    cpu = estimate(rows, set(phases) - {"compile"}, first_run)
    return int(-(-(cpu * GPU_HOST_SPEED * MARGIN + SLACK_S) // 1))


def planned(phases, first_run: bool, measured: Path = MEASURED) -> dict:
    """The compile budget a GPU run of `phases` gets and the measurement it comes from."""
    data = json.loads(measured.read_text())
    chosen = set(phases) - {"compile"}
    return {
        "how": "estimate",
        "budget_s": budget_s(phases, first_run, measured),
        "cpu_s_here": round(estimate(data["rows"], chosen, first_run), 1),
        "gpu_host_speed": GPU_HOST_SPEED,
        "margin": MARGIN,
        "slack_s": SLACK_S,
        "measured": f"{measured.name}: {data['how']}",
        "phases": {
            phase: {
                "compile_s": round(estimate(data["rows"], {phase}, first_run), 1),
                "kernels": len(kept(data["rows"], {phase}, first_run)),
            }
            for phase in sorted(chosen & {p for _, p in PHASE_OF})
        },
    }


def measure(sets=("--kernels", "--ladder"), out: Path = MEASURED, workers: int = 1) -> dict:
    """Compile the report's `sets` to PTX and through ptxas for sm_90, one at a time, and
    write the rows to `out` (what budget_s reads), keeping the file's other rows."""
    planned, rows = _stream(list(sets), workers, time.perf_counter() + 7200)
    done = {r["kernel"] for r in rows}
    if out.exists():
        rows += [r for r in json.loads(out.read_text())["rows"] if r["kernel"] not in done]
    phases = {phase for _, phase in PHASE_OF}
    data = {
        "how": "report --compile-only --arch sm_90 --kernels --ladder --workers 1: CPU s of "
        "numba's compile_ptx and of ptxas per kernel",
        "kernels": len(rows),
        "complete": set(planned) <= done,
        "cpu_s": round(estimate(rows, phases, False), 1),
        "first_run_cpu_s": round(estimate(rows, phases, True), 1),
        "rows": rows,
    }
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _command(extra: list[str], workers: int) -> list[str]:
    report = [sys.executable, "-m", "cuda_kernels.report", "--compile-only", "--arch", "sm_90"]
    return [*report, "--workers", str(workers), *extra]


def _stream(extra: list[str], workers: int, deadline: float) -> tuple[list[str], list[dict]]:
    """(planned kernel names, rows done) of one `report --compile-only` child (one JSON line
    per kernel); at `deadline` (perf_counter) it is stopped, the lines printed kept."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    child = subprocess.Popen(
        _command(extra, workers),
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped with its workers
    )
    try:
        out, err = child.communicate(timeout=max(0.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:  # the deadline: keep what is done
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
    else:
        if child.returncode != 0:
            raise RuntimeError(f"report --compile-only failed: {err[-600:]}")
    items = [json.loads(line) for line in out.split("\n")[:-1]]  # whole lines only
    planned = next((item["planned"] for item in items if "planned" in item), [])
    return planned, [item for item in items if "planned" not in item]


def seconds(workers: int | None = None, budget_s: float = DRY_BUDGET_S) -> dict:
    """The kernels' and rungs' compile to PTX, two children at once, for at most budget_s."""
    workers = workers or max(1, min(os.cpu_count() or 1, 16))
    began = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        parts = list(
            pool.map(lambda extra: _stream(extra, workers, began + budget_s), ([], ["--ladder"]))
        )
    wall = time.perf_counter() - began
    planned = [name for names, _ in parts for name in names]
    rows = [row for _, done in parts for row in done]
    measured = {row["kernel"] for row in rows}
    left_out = [name for name in planned if name not in measured]
    phases = by_phase(rows)
    slowest = max(rows, key=lambda r: r["compile_s"]) if rows else None
    return {
        "how": "ptx",
        "phases": phases,
        "total_s": round(sum(p["compile_s"] for p in phases.values()), 1),
        "complete": bool(planned) and not left_out,
        "left_out": left_out,
        "budget_s": budget_s,
        "kernels": len(rows),
        "compile_s_sum": round(sum(r["compile_s"] for r in rows), 1),
        "compile_cpu_s_sum": round(sum(r.get("compile_cpu_s", 0) for r in rows), 1),
        "wall_s": round(wall, 1),
        "workers": workers,
        "slowest": slowest and {"kernel": slowest["kernel"], "compile_s": slowest["compile_s"]},
        "rows": rows,
    }


def warm_steps(rng, grid, dim: int, dry: bool, layouts=LAYOUTS) -> dict:
    """{phase: [step]}: each step runs a device check or an untimed small instance, and so
    compiles what the phase will time."""
    decode = [
        partial(check_config, rng, case, dim, mode, layout, dry, path)
        for case in grid  # (batch, context, heads, kv_heads, dtype)
        for path in ["cuda_core"] + (["tensor"] if tc_supported(case[4], dim) is None else [])
        for mode in ("single", "split")
        for layout in layouts
    ]
    _, _, _, heads, kv_heads, dtype = gpu_prefill.DRY_PREFILL if dry else gpu_prefill.PREFILL
    prefill = [
        partial(gpu_prefill.check_prefill, rng, heads, kv_heads, dim, dtype, dry, path, out)
        for path in ("auto", *gpu_prefill.PATHS)
        for out in gpu_prefill.OUT_DTYPES
    ]
    labs = {**gpu_labs.FULL, "seqs": 2, "context": 48, "runs": 1, "requests": [48], "prealloc": [4]}
    labs = gpu_labs.DRY if dry else labs  # the full run's specialisations, tiny and untimed
    problem = gpu_labs._problem(labs, rng)
    return {
        "copy": [
            partial(copy_bandwidth, 1 << 16, 1, False),
            partial(common.launch_overhead_ms, 1, False),
        ],
        "prefill": prefill,
        "decode": [
            partial(common.roofline_reads_every_byte_once, rng, True),
            *decode,
        ],
        "ladder": [partial(check_rung, rung, rng, dry) for rung in RUNGS],
        "correctness": [partial(check_correctness, rng, dim, dry)],
        "copies": [partial(copy_rows, rng, "float16", 1, False, None, True)],
        "labs": [
            partial(gpu_labs.bench_layouts, labs, problem, False),
            partial(gpu_labs.bench_alignment, labs, problem, False),
            partial(gpu_labs.bench_allocators, labs, rng, False),
        ],
    }


def warm(rng, grid, dim: int, dry: bool, phases=None, left=None, layouts=LAYOUTS) -> dict:
    """Compile in this process what the named phases (default: all) launch, by running their
    checks, until `left()` reaches 0. A step that raises is only counted (its phase reports)."""
    began, left_out = time.perf_counter(), []
    guard = common.Phases(float("inf"))

    def run_steps(name, steps, _):
        errors = 0
        for i, step in enumerate(steps):
            if left is not None and left() <= 0:
                left_out.append(f"{name}[{i}:]")
                break
            try:
                step()
            except Exception:  # noqa: BLE001  (the phase itself reports it)
                errors += 1
        return errors

    for name, steps in warm_steps(rng, grid, dim, dry, layouts).items():
        if phases is None or name in phases:
            errors = guard.run(name, 0, partial(run_steps, name, steps))
            guard.record[name].update(steps=len(steps), errors=errors)
    record = guard.record
    return {
        "how": "jit",
        "phases": record,
        "total_s": round(sum(r["compile_s"] for r in record.values()), 1),
        "compiles": sum(r["compiles"] for r in record.values()),
        "wall_s": round(time.perf_counter() - began, 1),
        "left_out": left_out,
    }


if __name__ == "__main__" and sys.argv[1:2] == ["--measure"]:  # [--kernels] [--ladder]
    done = measure(sys.argv[2:] or ("--kernels", "--ladder"))
    print(f"{done['kernels']} kernels: {done['cpu_s']} CPU s ({done['first_run_cpu_s']} first run)")
