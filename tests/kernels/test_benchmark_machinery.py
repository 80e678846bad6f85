"""The GPU benchmark's shared machinery without a GPU: gpu_common imported alone picks
the backend, the per-phase time guard on a fake clock, the compile clock on a real numba
compile, the compile phase and its place in the schedule, the peak helpers, the auto
plan, and the tensor-core configurations through the benchmark's own device check."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import cuda_kernels as ck

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_attention  # noqa: E402
import gpu_common as common  # noqa: E402
import gpu_compile  # noqa: E402
import gpu_summary  # noqa: E402

# what the fresh interpreter prints: the backend cuda_kernels chose and numba's own mode
PROBE = """
import sys
sys.path.insert(0, "benchmarks")
import gpu_common
import cuda_kernels
from numba.cuda.core import config
print(cuda_kernels.backend(), "simulator" if config.ENABLE_CUDASIM else "gpu")
"""


def probe(**env):
    clean = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "PAGEDSIM_CUDA")
    }
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), clean.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", PROBE],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=1800,
    )


def test_gpu_common_imported_first_in_a_fresh_process_selects_the_backend_itself():
    done = probe(PAGEDSIM_CUDA="simulator")
    assert done.returncode == 0, done.stderr  # no "numba.cuda was already imported" warning
    assert done.stdout.split() == ["simulator", "simulator"]


@pytest.mark.skipif(ck._backend._driver_visible(), reason="an NVIDIA driver is visible here")
def test_without_a_driver_gpu_common_alone_falls_back_to_the_simulator_and_says_so():
    done = probe()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["simulator", "simulator"]
    assert "running kernels on Numba's CUDA simulator" in done.stderr


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_phase_runs_only_when_its_budget_fits_in_what_is_left_and_is_timed():
    clock = FakeClock()
    guard = common.Phases(total_s=100, clock=clock)

    def work(seconds):
        def fn(g):
            clock.now += seconds
            return seconds

        return fn

    assert guard.run("a", 30, work(40)) == 40  # a phase may overrun its own budget ...
    assert guard.run("b", 70, work(1), default="skipped") == "skipped"  # ... 60 s left < 70
    assert guard.run("c", 60, work(5)) == 5
    assert guard.record["a"]["seconds"] == 40 and guard.record["c"]["seconds"] == 5
    assert guard.record["b"] == {"skipped": "needs 70 s, 60 s left"}
    assert list(guard.record) == ["a", "b", "c"]


def test_inside_a_phase_left_is_its_budget_cut_at_the_run_deadline():
    clock = FakeClock()
    guard = common.Phases(total_s=100, clock=clock)
    seen = []

    def cases(g):
        for _ in range(5):
            seen.append(g.left())
            clock.now += 10

    guard.run("decode", 35, cases)
    assert seen == [35, 25, 15, 5, -5]  # the phase decides to stop; the guard tells it when
    clock.now = 95
    assert guard.run("late", 4, lambda g: g.left()) == 4  # 5 s left to the deadline


def test_the_compile_clock_counts_an_outermost_compiler_lock_once_however_deep():
    """A kernel's compile takes numba's compiler lock again for each device function."""
    from numba.cuda.core import event

    with common.CompileClock() as clock:
        for _ in range(2):  # two compiles, the first with a nested device-function compile
            event.start_event("numba-cuda:compiler_lock")
            event.start_event("numba-cuda:compiler_lock")
            event.end_event("numba-cuda:compiler_lock")
            event.end_event("numba-cuda:compiler_lock")
    event.start_event("numba-cuda:compiler_lock")  # after the clock is removed: not counted
    event.end_event("numba-cuda:compiler_lock")
    assert clock.count == 2 and clock.seconds >= 0


def test_tflops_and_the_tensor_peak_share_come_from_the_roofline_constants():
    assert common.tflops(2e12, 1000.0) == 2.0
    assert common.pct_of_tensor_peak(990e12 * 1e-3, 1.0) == pytest.approx(100.0)
    assert common.tflops(1.0, None) is None and common.pct_of_tensor_peak(1.0, 0) is None
    assert common.L2_BYTES == 50 * 10**6


def test_the_auto_row_times_what_paged_attention_launches_and_reads_its_plan_back():
    rng = np.random.default_rng(3)
    lens = np.array([30, 7], np.int32)
    tables, num_blocks = ck.reference.scattered_block_tables(rng, lens, 4, spare=1)
    cache = cuda.to_device(rng.standard_normal((num_blocks, 2, 1, 4, 16)).astype(np.float16))
    query = cuda.to_device(rng.standard_normal((2, 4, 16)).astype(np.float16))
    on_device = (cuda.to_device(tables), cuda.to_device(lens))
    case = common.DecodeCase(ck.BLOCK_MAJOR, cache, cache, query, *on_device, 4, 1)
    launch, out, plan = common.auto_launch(case)
    assert plan["path"] == "tensor" and plan["num_partitions"] == 1  # G = 4, float16, D = 16
    launch()
    want = ck.reference.paged_attention(query.copy_to_host(), cache.copy_to_host(), tables, lens)
    assert np.abs(out.copy_to_host() - want).max() < 4e-3 * np.abs(want).max()


@pytest.mark.parametrize("mode", ["single", "split"])
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_the_benchmarks_tensor_core_configurations_pass_its_device_check(layout, mode):
    rng = np.random.default_rng(11)
    case = (2, 24, 4, 1, "float16")  # batch, context, heads, kv_heads, dtype
    assert gpu_attention.check_config(rng, case, 16, mode, layout, dry=True, path="tensor")


def test_a_phase_that_raises_is_recorded_and_the_next_phase_still_runs():
    clock = FakeClock()
    guard = common.Phases(total_s=100, clock=clock)

    def broken(g):
        clock.now += 3
        raise ModuleNotFoundError("No module named 'flash_attn'")

    assert guard.run("peers", 10, broken, default="none") == "none"
    assert guard.run("after", 10, lambda g: "ran") == "ran"
    assert guard.record["peers"]["error"] == "ModuleNotFoundError: No module named 'flash_attn'"
    assert "raise ModuleNotFoundError" in guard.record["peers"]["traceback"]
    assert guard.record["peers"]["seconds"] == 3 and "error" not in guard.record["after"]


def test_the_run_clock_can_start_before_the_guard_is_built():
    clock = FakeClock()
    clock.now = 50
    guard = common.Phases(total_s=100, clock=clock, began=20)  # 30 s already spent
    assert guard.run("late", 71, lambda g: "ran", default="skipped") == "skipped"
    assert guard.record["late"] == {"skipped": "needs 71 s, 70 s left"}


def measured_report(prefill_ms=2.0, sdpa_ms=1.8, g4_pct=86.0, g8_pct=60.0, valid=True):
    def decode(batch, heads, pct):
        return {
            "mode": "auto",
            "layout": "paged",
            "dtype": "float16",
            "batch": batch,
            "context": 4096,
            "heads": heads,
            "kv_heads": 8,
            "group": heads // 8,
            "checked_on_device": True,
            "pct_of_roofline": pct,
            "median_ms": 0.5,
            "gb_per_s": 3900.0,
            "path": "tensor",
            "num_partitions": 1,
        }

    return {
        "timings_valid": valid,
        "device": "NVIDIA H200",
        "backend": "gpu",
        "dry_run": False,
        "prefill": [
            {
                "kernel": "paged_prefill",
                "checked_on_device": True,
                "path_ran": "tensor",
                "median_ms": prefill_ms,
                "by_path": [],
            },
            {"kernel": "torch_sdpa_flash", "peer": True, "median_ms": sdpa_ms},
        ],
        "cases": [decode(64, 32, g4_pct), decode(32, 64, g8_pct)],
        "phases": {"prefill": {"seconds": 40.0, "compile_s": 12.5, "compiles": 3}},
    }


def test_each_gpu_target_gets_its_measured_value_next_to_the_goal_and_a_verdict():
    got = {t["target"]: t for t in gpu_summary.targets(measured_report())}
    assert got["prefill_vs_sdpa_flash"]["measured"] == 0.9  # 1.8 ms / 2.0 ms
    assert got["prefill_vs_sdpa_flash"]["verdict"] == "PASS"
    assert (
        got["decode_g4_pct_of_roofline"]["goal"],
        got["decode_g4_pct_of_roofline"]["verdict"],
    ) == (85.0, "PASS")
    assert got["decode_g8_pct_of_roofline"]["verdict"] == "FAIL"  # 60 < 75
    slow = {t["target"]: t["verdict"] for t in gpu_summary.targets(measured_report(3.0))}
    assert slow["prefill_vs_sdpa_flash"] == "FAIL"  # 1.8 / 3.0 = 0.6 < 0.8


def test_a_target_without_a_valid_measurement_says_why_and_never_passes():
    untimed = gpu_summary.targets(measured_report(valid=False))
    assert {t["verdict"] for t in untimed} == {"NOT MEASURED"}
    assert all(t["measured"] is None for t in untimed)
    report = measured_report()
    report["prefill"] = report["prefill"][:1]  # torch not importable: no SDPA row
    report["cases"] = []
    report["phases"]["decode"] = {"skipped": "needs 200 s, 12 s left"}
    got = {t["target"]: t for t in gpu_summary.targets(report)}
    assert got["prefill_vs_sdpa_flash"]["verdict"] == "NOT MEASURED"
    assert "no torch_sdpa_flash row" in got["prefill_vs_sdpa_flash"]["detail"]
    assert got["decode_g4_pct_of_roofline"]["detail"] == (
        "phase decode skipped: needs 200 s, 12 s left"
    )


def test_the_markdown_summary_lists_targets_and_phases_with_compile_times():
    text = gpu_summary.markdown(measured_report())
    assert "| prefill speed vs torch SDPA flash" in text and "| 0.900 x | >= 0.8 x | PASS |" in text
    assert "| prefill | 40.0 | 12.5 | 3 | ran |" in text
    assert text.count("| FAIL |") == 1


def test_the_labs_skip_the_sections_that_do_not_fit_in_the_time_left():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_labs

    result = gpu_labs.run(True, left=lambda: 12.0)  # 12 s: alignment (10) and prealloc (5)
    assert result["skipped"] == ["layouts", "allocators"]
    assert "layouts" not in result and len(result["alignment"]) == 5 and result["prealloc"]


def test_a_kernel_that_disagrees_or_a_phase_that_fails_is_reported_and_the_run_goes_on(
    tmp_path, monkeypatch
):
    from cuda_kernels import block_copy

    launched = []  # a copy_blocks that copies nothing: its bit-for-bit device check fails
    monkeypatch.setattr(block_copy, "launch_pairs", lambda *args: launched.append(args))
    status = gpu_attention.main(["--dry-run", "--phases", "copy,copies", "--out", str(tmp_path)])
    out = tmp_path / "r.json"
    report = json.loads(out.read_text())
    assert status == 1 and list(report["phases"]) == ["copy", "copies"]
    copy_blocks, write_kv = report["copies"]
    assert copy_blocks["kernel"] == "copy_blocks" and copy_blocks["checked_on_device"] is False
    assert len(launched) == 1 and copy_blocks["median_ms"] is None  # checked, never timed
    assert write_kv["checked_on_device"] is True  # the next row still ran
    assert gpu_attention.failures(report) == ["copy_blocks"]
    monkeypatch.undo()

    def broken(*args):
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(gpu_attention, "copy_bandwidth", broken)
    status = gpu_attention.main(["--dry-run", "--phases", "copy,copies", "--out", str(tmp_path)])
    report = json.loads(out.read_text())
    assert status == 1 and report["phases"]["copy"]["error"].startswith("RuntimeError")
    assert "seconds" in report["phases"]["copies"]  # the next phase ran
    assert all(row["checked_on_device"] for row in report["copies"])
    assert {t["verdict"] for t in report["targets"]} == {"NOT MEASURED"}
    summary = out.with_suffix(".md").read_text()
    assert "| copy |" in summary and "failed: RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS" in summary


def test_an_unknown_phase_is_refused_by_name():
    with pytest.raises(SystemExit, match=r"unknown phase\(s\) \['decoder'\]"):
        gpu_attention.main(["--dry-run", "--phases", "decoder"])


def test_the_dry_runs_compile_phase_records_seconds_per_phase_and_a_total(tmp_path, monkeypatch):
    """The real compile to PTX takes tens of minutes on two cores: here the rows it would
    return are random, and the phase must add them up per phase and state them."""
    rng = np.random.default_rng()
    names = ["rung3.online_softmax", "paged_decode_tc[float16,G=4,D=128]", "merge_partitions"]
    names += ["paged_prefill_tc[float16,G=8,D=128]", "write_kv_vec[f16]", "alloc.alloc_cas"]
    rows = [
        {"kernel": n, "arch": "sm_90", "compile_s": s, "compile_cpu_s": s / 2}
        for n, s in zip(names, rng.uniform(0.5, 9.0, len(names)).round(2), strict=True)
    ]

    def stream(extra, workers, deadline):
        done = rows[3:] if extra else rows[:3]
        return [r["kernel"] for r in done], done

    monkeypatch.setattr(gpu_compile, "_stream", stream)
    assert gpu_attention.main(["--dry-run", "--phases", "compile", "--out", str(tmp_path)]) == 0
    out = tmp_path / "r.json"
    comp = json.loads(out.read_text())["compile"]
    want = {"ladder": rows[0:1], "decode": rows[1:3], "prefill": rows[3:4]}
    want |= {"copies": rows[4:5], "labs": rows[5:6]}
    assert set(comp["phases"]) == set(want)
    for phase, mine in want.items():
        got = comp["phases"][phase]
        assert got["kernels"] == len(mine)
        assert got["compile_s"] == pytest.approx(sum(r["compile_s"] for r in mine), abs=0.06)
    assert comp["total_s"] == pytest.approx(sum(r["compile_s"] for r in rows), abs=0.3)
    assert comp["complete"] and comp["left_out"] == []
    summary = out.with_suffix(".md").read_text()
    assert f"| decode | {comp['phases']['decode']['compile_s']:.1f} | 2 |" in summary
    assert f"| total | {comp['total_s']:.1f} |" in summary
    with pytest.raises(ValueError, match="no phase launches kernel 'mystery'"):
        gpu_compile.phase_of("mystery")


def test_a_first_run_compiles_first_and_every_budget_fits_nine_minutes_with_compile_counted():
    """On a GPU the compile phase runs before any timing, with the budget the measured
    compile time gives it; the other budgets exclude JIT compiles, so every phase of a
    first run taking its whole budget, plus one decode case overrunning and the startup
    (preflight, an offline install, imports), still ends inside 9 minutes."""
    assert list(gpu_attention.PHASE_S)[0] == "compile"
    args = gpu_attention._parser().parse_args(["--first-run"])
    planned = [name for name, _ in gpu_attention._phases(args, {"timings_valid": True}, 0.0)]
    assert planned == [name for name in gpu_attention.PHASE_S if name != "labs"]
    budgets = gpu_attention.budgets(planned, first_run=True)
    assert budgets["compile"] == gpu_compile.budget_s(planned, True) > gpu_compile.SLACK_S
    now = [0.0]
    guard = common.Phases(common.TOTAL_S, clock=lambda: now[0])
    for name in planned:

        def spend(_, budget=budgets[name]):
            now[0] += budget

        guard.run(name, budgets[name], spend)
    assert all("skipped" not in rec for rec in guard.record.values()), guard.record
    assert common.TOTAL_S + gpu_attention.CASE_S + gpu_attention.STARTUP_S <= 9 * 60


def test_the_compile_budget_is_the_measured_cpu_seconds_with_margin(tmp_path):
    """budget_s is the measured PTX + ptxas CPU seconds of the phases' kernels (a first run
    without float32, contiguous and labs kernels) x speed x margin + slack."""
    rng = np.random.default_rng()
    names = ["paged_decode[float16,G=4,D=128]", "paged_decode[float32,G=4,D=80]"]
    names += ["paged_decode[contiguous,float16,G=4,D=128]", "alloc.alloc_cas", "rung1.naive"]
    rows = [
        {"kernel": n, "compile_cpu_s": float(a), "ptxas_cpu_s": float(b)}
        for n, a, b in zip(names, rng.uniform(1, 9, 5), rng.uniform(0, 2, 5), strict=True)
    ]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"how": "test", "rows": rows}))
    speed, margin = gpu_compile.GPU_HOST_SPEED * gpu_compile.MARGIN, gpu_compile.SLACK_S

    def want(chosen):
        cpu = sum(r["compile_cpu_s"] + r["ptxas_cpu_s"] for r in chosen)
        return int(-(-(cpu * speed + margin) // 1))

    assert gpu_compile.budget_s(["compile", "decode"], True, path) == want(rows[:1])
    assert gpu_compile.budget_s(["decode", "labs", "ladder"], False, path) == want(rows)
    assert gpu_compile.budget_s(["ladder"], True, path) == want(rows[4:])
    assert gpu_compile.planned(["decode"], False, path)["phases"]["decode"]["kernels"] == 3


def test_warming_runs_a_phases_checks_up_front_and_leaves_the_rest_when_time_is_out():
    rng = np.random.default_rng()
    done = gpu_compile.warm(rng, gpu_attention.DRY_GRID, 16, True, phases=["copy"])
    assert list(done["phases"]) == ["copy"] and done["left_out"] == []
    assert done["phases"]["copy"]["steps"] == 2 and done["phases"]["copy"]["errors"] == 0
    assert done["how"] == "jit" and done["total_s"] == done["phases"]["copy"]["compile_s"]
    out = gpu_compile.warm(rng, gpu_attention.DRY_GRID, 16, True, ["copy", "labs"], lambda: 0.0)
    assert out["left_out"] == ["copy[0:]", "labs[0:]"]
    assert "compile, before any timing" in "\n".join(gpu_summary.compile_lines(out))


def test_the_compile_measurement_keeps_the_rows_done_by_its_deadline_and_names_the_rest(
    monkeypatch,
):
    """A child that streams one row, then hangs: at the deadline it is stopped, the row
    done is kept and the kernel not done is named."""
    seconds = round(float(np.random.default_rng().uniform(1.0, 9.0)), 2)
    script = (
        "import json, time; "
        "print(json.dumps({'planned': ['merge_partitions', 'paged_decode[x]']}), flush=True); "
        "print(json.dumps({'kernel': 'merge_partitions', 'arch': 'sm_90', "
        f"'compile_s': {seconds}}}), flush=True); time.sleep(600)"
    )
    monkeypatch.setattr(
        gpu_compile, "_command", lambda extra, workers: [sys.executable, "-c", script]
    )
    comp = gpu_compile.seconds(workers=1, budget_s=8.0)  # ample for two tiny interpreters
    assert comp["wall_s"] < 300  # stopped at the deadline, not after the child's sleep
    assert not comp["complete"] and comp["left_out"] == ["paged_decode[x]"] * 2  # both children
    (decode,) = comp["phases"].values()
    assert list(comp["phases"]) == ["decode"] and decode["kernels"] == 2
    assert decode["compile_s"] == pytest.approx(2 * seconds, abs=0.06)
    assert "not measured: 2 kernels" in "\n".join(gpu_summary.compile_lines(comp))
